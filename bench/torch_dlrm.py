#!/usr/bin/env python3
"""PyTorch twin of `towerrec bench model`: the same DLRM, the same batch shapes, the
same timing loop, so the two can be compared side by side (see bench/compare.py).

    python3 bench/torch_dlrm.py --config kaggle --mode train --threads 2

The model is read from bench/<config>.toml (the file towerrec reads), so both sides
always time the same shapes:

- one nn.EmbeddingBag(mode="sum", sparse=True) per table, fed in the offsets form
  (1-D ids + offsets), as the public DLRM reference does;
- bottom MLP with a ReLU after every layer; top MLP with a ReLU between layers and a
  linear last layer;
- dot interaction: torch.bmm of the (B, 1 + tables, d) stack with its transpose, the
  strict lower triangle (i > j) gathered by index and concatenated after the bottom
  output: [bottom_out, dots];
- BCE-with-logits loss, plain SGD (sparse gradients for the tables, dense for the MLPs).

Data is synthetic and made in memory: ids uniform in [0, rows), dense features
log1p of exponential variates, labels Bernoulli(0.25); a few distinct batches are
cycled. Prints one JSON line with the keys towerrec's `--json` output has.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))

# Fallbacks equal to bench/kaggle.toml and bench/multihot.toml, used only where the
# interpreter has no tomllib (Python < 3.11).
BUILTIN = {
    "kaggle": dict(dim=16, bottom=[512, 256, 64, 16], top=[512, 256, 1], batch=2048,
                   num_dense=13, rows=100_000, pooling=1, tables=26,
                   dense_lr=0.01, sparse_lr=0.01),
    "multihot": dict(dim=64, bottom=[512, 256, 64], top=[512, 256, 1], batch=1024,
                     num_dense=13, rows=100_000, pooling=20, tables=26,
                     dense_lr=0.01, sparse_lr=0.01),
}


def load_config(name):
    path = os.path.join(HERE, f"{name}.toml")
    try:
        import tomllib
    except ImportError:
        return dict(BUILTIN[name])
    with open(path, "rb") as f:
        t = tomllib.load(f)
    m, d, o = t["model"], t["data"], t.get("optimizer", {})
    if m.get("kind", "dlrm") != "dlrm":
        sys.exit(f"{path}: only DLRM configs are supported")
    specs = d["tables"]
    if len({(s["rows"], s.get("pooling", 1)) for s in specs}) != 1:
        sys.exit(f"{path}: tables of differing shapes are not supported")
    pooling = specs[0].get("pooling", 1)
    if not isinstance(pooling, int):
        sys.exit(f"{path}: only a fixed pooling factor is supported")
    for k in ("dense", "sparse"):
        kind = o.get(k, {"kind": "sgd"}).get("kind", "sgd")
        if kind != "sgd":
            sys.exit(f"{path}: only SGD is supported, {k} optimizer is {kind}")
    return dict(
        dim=m["embedding_dim"], bottom=list(m["bottom_mlp"]), top=list(m["top_mlp"]),
        batch=t["train"]["batch_size"], num_dense=d["num_dense"],
        rows=specs[0]["rows"], pooling=pooling,
        tables=sum(s.get("count", 1) for s in specs),
        dense_lr=o.get("dense_lr", 0.01), sparse_lr=o.get("sparse_lr", 0.01),
    )


def mlp(sizes, relu_last):
    layers = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        # The DLRM reference's initialization.
        nn.init.normal_(lin.weight, 0.0, (2.0 / (sizes[i] + sizes[i + 1])) ** 0.5)
        nn.init.normal_(lin.bias, 0.0, (1.0 / sizes[i + 1]) ** 0.5)
        layers.append(lin)
        if relu_last or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, n = c["dim"], c["tables"]
        if c["bottom"][-1] != d:
            sys.exit("the bottom MLP must end at the embedding dimension")
        self.bottom = mlp([c["num_dense"]] + c["bottom"], relu_last=True)
        self.tables = nn.ModuleList()
        for _ in range(n):
            e = nn.EmbeddingBag(c["rows"], d, mode="sum", sparse=True)
            bound = (1.0 / c["rows"]) ** 0.5
            nn.init.uniform_(e.weight, -bound, bound)
            self.tables.append(e)
        f = n + 1
        li, lj = torch.tril_indices(f, f, offset=-1)
        # Flat index into the (f, f) product matrix: pairs (i, j) with i > j, row-major.
        self.register_buffer("tril", li * f + lj, persistent=False)
        self.top = mlp([d + f * (f - 1) // 2] + c["top"], relu_last=False)

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)
        embs = [t(i, offsets) for t, i in zip(self.tables, ids)]
        t = torch.stack([x] + embs, dim=1)  # (B, f, d)
        z = torch.bmm(t, t.transpose(1, 2))  # (B, f, f)
        dots = z.flatten(1)[:, self.tril]  # (B, f(f-1)/2)
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def make_batches(c, count, gen):
    b, p = c["batch"], c["pooling"]
    offsets = torch.arange(0, b * p, p, dtype=torch.int64)
    batches = []
    for _ in range(count):
        dense = torch.log1p(torch.empty(b, c["num_dense"]).exponential_(1.0, generator=gen))
        ids = [torch.randint(0, c["rows"], (b * p,), dtype=torch.int64, generator=gen)
               for _ in range(c["tables"])]
        labels = torch.bernoulli(torch.full((b,), 0.25), generator=gen)
        batches.append((dense, ids, offsets, labels))
    return batches


def timed(step, ctx, a, batch, **extra):
    """Runs `step(i)` under `ctx()`: `a.warmup` untimed steps, then `a.reps` timed
    repetitions of `a.steps` steps; the JSON record towerrec's `--json` output has
    (one rate per repetition), with `extra` keys after it. Shared with
    bench/torchrec/dlrm_speed.py."""
    steps, reps = max(1, a.steps), max(1, a.reps)
    rates = []
    with ctx():
        i = 0
        for _ in range(a.warmup):
            step(i)
            i += 1
        for _ in range(reps):
            start = time.perf_counter()
            for _ in range(steps):
                step(i)
                i += 1
            rates.append(steps * batch / max(time.perf_counter() - start, 1e-9))
    return dict(mode=a.mode, batch_size=batch, steps_per_rep=steps, samples_per_sec=rates,
                median_samples_per_sec=statistics.median(rates), **extra)


def parser(doc):
    """The command line every DLRM timing script here takes (this one,
    torchrec/dlrm_speed.py, dlrm_ref/dlrm_ref_speed.py): shape, mode, threads and the
    timing loop's counts; a script adds its own options before parsing."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(BUILTIN), default="kaggle")
    ap.add_argument("--mode", choices=["train", "infer"], default="train")
    ap.add_argument("--threads", type=int, default=0,
                    help="intra- and inter-op threads (default: torch's own choice)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=10, help="steps per timed repetition")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions")
    ap.add_argument("--batches", type=int, default=8, help="distinct batches cycled over")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0,
                    help="samples per batch (default: the config's)")
    return ap


def set_threads(torch, a):
    """Torch's intra- and inter-op threads as `--threads` says (0: torch's choice)."""
    if a.threads > 0:
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(a.threads)


def main():
    a = parser(__doc__).parse_args()
    set_threads(torch, a)
    torch.manual_seed(a.seed)
    c = load_config(a.config)
    if a.batch > 0:
        c["batch"] = a.batch
    model = DLRM(c)
    batches = make_batches(c, max(1, a.batches), torch.Generator().manual_seed(a.seed + 1))
    loss_fn = nn.BCEWithLogitsLoss()
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
    opt = torch.optim.SGD([
        {"params": dense_params, "lr": c["dense_lr"]},
        {"params": list(model.tables.parameters()), "lr": c["sparse_lr"]},
    ], lr=c["dense_lr"])

    def train_step(i):
        dense, ids, offsets, labels = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(dense, ids, offsets), labels)
        loss.backward()
        opt.step()

    def infer_step(i):
        dense, ids, offsets, _ = batches[i % len(batches)]
        model(dense, ids, offsets)

    if a.mode == "train":
        model.train()
        step = train_step
        ctx = torch.enable_grad
    else:
        model.eval()
        step = infer_step
        ctx = torch.inference_mode

    print(json.dumps(timed(step, ctx, a, c["batch"], impl="pytorch",
                           torch_version=torch.__version__,
                           threads=torch.get_num_threads())))

if __name__ == "__main__":
    main()
