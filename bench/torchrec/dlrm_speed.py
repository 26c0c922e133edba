#!/usr/bin/env python3
"""TorchRec's own DLRM, timed the way `towerrec bench model` and bench/torch_dlrm.py
time theirs, so that bench/compare.py can put the three side by side (issue 40: the
baselines users run).

    python3 bench/torchrec/dlrm_speed.py --config kaggle --mode train --threads 2 [--bf16]

The model is `torchrec.models.dlrm.DLRM` (dense arch, dot interaction, over arch) on the
shapes of bench/<config>.toml, read by bench/torch_dlrm.py's reader:

- training: the tables in a `FusedEmbeddingBagCollection` whose optimizer is SGD at the
  config's sparse learning rate (FBGEMM's fused backward and update), the dense layers
  under `torch.optim.SGD` at the dense learning rate, BCE-with-logits loss;
- inference: a plain `EmbeddingBagCollection`, under `torch.inference_mode()`;
- `--bf16`: forward and loss under `torch.autocast("cpu", dtype=torch.bfloat16)`
  (PyTorch's reduced precision on CPU, through oneDNN), the backward outside it, as
  PyTorch's autocast documentation prescribes; the tables stay fp32.

Data as bench/torch_dlrm.py makes it (ids uniform over each table's rows, a fixed
pooling factor, dense log1p of exponential variates, labels Bernoulli(0.25)), as a
`KeyedJaggedTensor` per batch. Prints one JSON line with the keys towerrec's `--json`
output has, plus the versions. Runs in the virtual environment bench/torchrec/setup.sh
makes; with any other python it re-runs itself there.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("TORCHREC_VENV", "/tmp/torchrec-venv")


def reexec_in_venv():
    try:
        import torchrec  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(VENV)
    if not os.path.exists(py) or in_venv:
        sys.exit(f"torchrec is not importable and there is no venv at {VENV}: "
                 "run bash bench/torchrec/setup.sh (or set TORCHREC_VENV)")
    os.execv(py, [py] + sys.argv)


def main():
    reexec_in_venv()
    import torch
    from importlib.metadata import version
    from torch import nn
    from torchrec.models.dlrm import DLRM
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.modules.fused_embedding_modules import FusedEmbeddingBagCollection
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    sys.path.insert(0, os.path.dirname(HERE))
    from torch_dlrm import load_config, make_batches, parser, set_threads, timed

    ap = parser(__doc__)
    ap.add_argument("--bf16", action="store_true",
                    help="forward and loss under torch.autocast(cpu, bfloat16)")
    a = ap.parse_args()

    set_threads(torch, a)
    torch.manual_seed(a.seed)
    c = load_config(a.config)
    if a.batch > 0:
        c["batch"] = a.batch
    if c["bottom"][-1] != c["dim"]:
        sys.exit("the bottom MLP must end at the embedding dimension")
    names = [f"t{i}" for i in range(c["tables"])]
    tables = [
        EmbeddingBagConfig(name=n, embedding_dim=c["dim"], num_embeddings=c["rows"],
                           feature_names=[n], pooling=PoolingType.SUM)
        for n in names
    ]
    cpu = torch.device("cpu")
    if a.mode == "train":
        ebc = FusedEmbeddingBagCollection(
            tables=tables, optimizer_type=torch.optim.SGD,
            optimizer_kwargs={"lr": c["sparse_lr"]}, device=cpu)
    else:
        ebc = EmbeddingBagCollection(tables=tables, device=cpu)
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=c["num_dense"],
                 dense_arch_layer_sizes=c["bottom"], over_arch_layer_sizes=c["top"],
                 dense_device=cpu)

    batches = []
    for dense, ids, _, labels in make_batches(
            c, max(1, a.batches), torch.Generator().manual_seed(a.seed + 1)):
        lengths = torch.full((c["tables"] * c["batch"],), c["pooling"], dtype=torch.int64)
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=names, values=torch.cat(ids), lengths=lengths)
        batches.append((dense, kjt, labels))

    loss_fn = nn.BCEWithLogitsLoss()
    dense_params = [p for n, p in model.named_parameters()
                    if not n.startswith("sparse_arch.")]
    opt = torch.optim.SGD(dense_params, lr=c["dense_lr"])

    def autocast():
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=a.bf16)

    def train_step(i):
        dense, kjt, labels = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = model(dense, kjt).squeeze(1)
            loss = loss_fn(logits.float(), labels)
        loss.backward()
        opt.step()

    def infer_step(i):
        dense, kjt, _ = batches[i % len(batches)]
        with autocast():
            model(dense, kjt)

    if a.mode == "train":
        model.train()
        step, ctx = train_step, torch.enable_grad
    else:
        model.eval()
        step, ctx = infer_step, torch.inference_mode

    print(json.dumps(timed(
        step, ctx, a, c["batch"],
        impl="torchrec-bf16-autocast" if a.bf16 else "torchrec",
        torch_version=torch.__version__, torchrec_version=version("torchrec"),
        fbgemm_version=version("fbgemm-gpu-cpu"), threads=torch.get_num_threads())))

if __name__ == "__main__":
    main()
