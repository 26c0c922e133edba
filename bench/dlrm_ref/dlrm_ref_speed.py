#!/usr/bin/env python3
"""The DLRM reference implementation (github.com/facebookresearch/dlrm,
`dlrm_s_pytorch.py`), timed on the shapes of bench/<config>.toml, so that
bench/compare.py can put it beside towerrec and TorchRec (issue 40: the baselines
users run).

    python3 bench/dlrm_ref/dlrm_ref_speed.py --config kaggle --mode train --threads 2

The reference is not part of this repository: it is read from DLRM_REF (default
/tmp/dlrm-ref), cloned there with git if absent, and run unmodified:

- training: the script itself (`--data-generation=random`, the config's tables,
  MLPs, batch and learning rate, one id or a fixed number of ids per bag,
  `--loss-function=bce`, SGD), with `--print-time --print-freq=STEPS`; each line
  "Finished training it N/M ..., X ms/it" is one repetition of STEPS steps
  (X averages them; the script's clock excludes its random data generation). The
  first ceil(WARMUP / STEPS) lines are warm-up and dropped.
- inference: the script prints no timing there, so its model (`DLRM_Net`, built with
  the arguments its `run()` gives it) runs its forward under `torch.no_grad()` on
  batches made as bench/torch_dlrm.py makes them, timed by the same loop as the
  other baselines.

Newer torch releases refuse the `use_cuda` argument the script passes to
`torch.autograd.profiler.profile`; the argument is translated to `use_device` by a
shim around that function, not by editing the script. Prints one JSON line with the
keys towerrec's `--json` output has, plus the versions and the reference's commit.
Runs in the virtual environment bench/torchrec/setup.sh makes (torch, scikit-learn
and tensorboard, which the script imports); with any other python it re-runs itself
there.
"""

import contextlib
import io
import json
import math
import os
import re
import runpy
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.environ.get("TORCHREC_VENV", "/tmp/torchrec-venv")
REF = os.environ.get("DLRM_REF", "/tmp/dlrm-ref")
REPO = "https://github.com/facebookresearch/dlrm"


def reexec_in_venv():
    try:
        import torch  # noqa: F401
        import sklearn  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py) or os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        sys.exit(f"torch or scikit-learn is not importable and there is no venv at {VENV}: "
                 "run bash bench/torchrec/setup.sh (or set TORCHREC_VENV)")
    os.execv(py, [py] + sys.argv)


def reference():
    """The reference's directory (cloned if absent) and its commit, if known."""
    script = os.path.join(REF, "dlrm_s_pytorch.py")
    if not os.path.exists(script):
        print(f"no DLRM reference at {REF}: git clone {REPO} {REF}", file=sys.stderr)
        r = subprocess.run(["git", "clone", "--depth", "1", REPO, REF])
        if r.returncode != 0 or not os.path.exists(script):
            sys.exit(f"cannot get the DLRM reference: clone {REPO} into {REF} "
                     "(or set DLRM_REF to a checkout)")
    commit = subprocess.run(["git", "-C", REF, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    if not commit and os.path.exists(os.path.join(REF, "SOURCE.txt")):
        m = re.search(r"dlrm_s_pytorch\.py\s+([0-9a-f]{40})", open(os.path.join(REF, "SOURCE.txt")).read())
        commit = m.group(1) if m else ""
    return script, commit or "unknown"


def shim_profiler(torch):
    """Lets the script's `profile(enabled, use_cuda=..., ...)` call run on a torch
    that only takes `use_device`."""
    original = torch.autograd.profiler.profile

    def profile(*args, use_cuda=None, **kw):
        if use_cuda is not None and "use_device" not in kw:
            kw["use_device"] = "cuda" if use_cuda else None
        return original(*args, **kw)

    torch.autograd.profiler.profile = profile


def arch_args(c, batch):
    bottom = "-".join(str(x) for x in [c["num_dense"]] + c["bottom"])
    top = "-".join(str(x) for x in c["top"])
    return [
        f"--arch-sparse-feature-size={c['dim']}",
        f"--arch-mlp-bot={bottom}",
        f"--arch-mlp-top={top}",
        "--arch-embedding-size=" + "-".join([str(c["rows"])] * c["tables"]),
        f"--mini-batch-size={batch}",
        f"--num-indices-per-lookup={c['pooling']}",
        "--num-indices-per-lookup-fixed=True",
    ]


def train(a, c, batch, script, torch):
    warm = math.ceil(a.warmup / a.steps) if a.warmup > 0 else 0
    argv = [script] + arch_args(c, batch) + [
        "--data-generation=random", "--loss-function=bce",
        f"--learning-rate={c['dense_lr']}",
        f"--num-batches={(warm + a.reps) * a.steps}", f"--print-freq={a.steps}",
        "--print-time", "--nepochs=1", "--num-workers=0",
    ]
    shim_profiler(torch)
    out = io.StringIO()
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv, sys.path = argv, [REF] + sys.path
    cwd = os.getcwd()
    try:
        os.chdir(REF)
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
    finally:
        os.chdir(cwd)
        sys.argv, sys.path = old_argv, old_path
    ms = [float(x) for x in re.findall(r"Finished training it \d+/\d+ of epoch \d+, ([0-9.]+) ms/it", out.getvalue())]
    if len(ms) != warm + a.reps or any(x <= 0 for x in ms):
        sys.stderr.write(out.getvalue())
        sys.exit(f"expected {warm + a.reps} timing lines from the reference, got {ms}")
    return [batch * 1000.0 / x for x in ms[warm:]]


def infer(a, c, batch, script, torch):
    import numpy as np
    sys.path.insert(0, REF)
    sys.path.insert(0, os.path.dirname(HERE))
    from torch_dlrm import make_batches
    ref = runpy.run_path(script, run_name="dlrm_ref")
    ln_bot = np.array([c["num_dense"]] + c["bottom"])
    n_int = c["tables"] + 1
    ln_top = np.array([c["dim"] + n_int * (n_int - 1) // 2] + c["top"])
    model = ref["DLRM_Net"](c["dim"], np.array([c["rows"]] * c["tables"]), ln_bot, ln_top,
                            arch_interaction_op="dot", arch_interaction_itself=False,
                            sigmoid_bot=-1, sigmoid_top=ln_top.size - 2, ndevices=-1,
                            loss_function="bce")
    model.eval()
    gen = torch.Generator().manual_seed(a.seed)
    cfg = dict(c, batch=batch)
    batches = [(d, [off] * len(ids), ids) for d, ids, off, _ in make_batches(cfg, a.batches, gen)]
    from torch_dlrm import timed

    def step(i):
        x, lS_o, lS_i = batches[i % len(batches)]
        model(x, lS_o, lS_i)

    return timed(step, torch.no_grad, a, batch)["samples_per_sec"]


def main():
    reexec_in_venv()
    import statistics
    import torch

    sys.path.insert(0, os.path.dirname(HERE))
    from torch_dlrm import load_config, parser, set_threads

    a = parser(__doc__).parse_args()
    a.steps, a.reps = max(1, a.steps), max(1, a.reps)
    set_threads(torch, a)
    c = load_config(a.config)
    batch = a.batch or c["batch"]
    script, commit = reference()
    rates = (train if a.mode == "train" else infer)(a, c, batch, script, torch)
    print(json.dumps(dict(mode=a.mode, batch_size=batch, steps_per_rep=a.steps,
                          samples_per_sec=rates,
                          median_samples_per_sec=statistics.median(rates),
                          torch_version=torch.__version__, dlrm_ref_commit=commit)))


if __name__ == "__main__":
    main()
