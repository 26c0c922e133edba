#!/usr/bin/env python3
"""Side-by-side speed of towerrec and the DLRMs users run (bench/README.md).

    python3 bench/compare.py [--threads 2] [--rounds 5] [--configs kaggle,multihot]
                             [--modes train,infer,infer-serial] [--batch N] [--quick]
                             [--baselines pytorch|torchrec,torchrec-bf16,dlrm-ref,pytorch]

Builds towerrec in release mode, then for each config and mode alternates towerrec with
each baseline (towerrec, baseline 1, baseline 2, ..., towerrec, ...), each run a separate
process timing a few repetitions with the same thread count. The baselines:

- `pytorch`: bench/torch_dlrm.py, the same DLRM written in PyTorch in this repository
  (pip-installs torch into this interpreter if it lacks it);
- `torchrec`: TorchRec's own `torchrec.models.dlrm.DLRM` (bench/torchrec/dlrm_speed.py,
  in the venv bench/torchrec/setup.sh makes: fused SGD tables for training);
- `torchrec-bf16`: the same under `torch.autocast("cpu", dtype=torch.bfloat16)`;
- `dlrm-ref`: the DLRM reference implementation (facebookresearch/dlrm's
  `dlrm_s_pytorch.py`, unmodified, read from DLRM_REF, default /tmp/dlrm-ref, cloned
  if absent; bench/dlrm_ref/dlrm_ref_speed.py, in the same venv).

It prints the CPU model, the versions, and a table of the medians over all repetitions;
its last lines are one per comparison, against the faster baseline of that shape and
mode:

    ratio <config> <train|infer> <towerrec samples/s ÷ fastest baseline's samples/s>

Standard library only; progress goes to stderr.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ("kaggle", "multihot")
MODES = ("train", "infer", "infer-serial")
# towerrec's `infer` scores a stream with consecutive batches overlapped;
# `infer-serial` finishes each batch before the next. PyTorch runs its one way for both.
TORCH_MODE = {"train": "train", "infer": "infer", "infer-serial": "infer"}
DEFAULT_MODES = ["train", "infer"]
BASELINES = ("pytorch", "torchrec", "torchrec-bf16", "dlrm-ref")


def baseline_cmd(name):
    """The command line of a baseline (before its per-run arguments)."""
    if name == "pytorch":
        return [sys.executable, os.path.join(HERE, "torch_dlrm.py")]
    if name == "dlrm-ref":
        return [sys.executable, os.path.join(HERE, "dlrm_ref", "dlrm_ref_speed.py")]
    script = [os.path.join(HERE, "torchrec", "dlrm_speed.py")]
    return [sys.executable] + script + (["--bf16"] if name == "torchrec-bf16" else [])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ensure_torch():
    probe = [sys.executable, "-c", "import torch"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return
    log(f"torch is not installed for {sys.executable}: running pip install torch")
    print("installing torch (pip install torch)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "torch"], check=True)
    if subprocess.run(probe).returncode != 0:
        sys.exit("torch still cannot be imported after pip install torch")


def build(features=""):
    cmd = ["cargo", "build", "--release"] + (["--features", features] if features else [])
    log("building towerrec: " + " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    exe = os.path.join(target, "release", "towerrec")
    if not os.path.exists(exe):
        sys.exit(f"no binary at {exe} after cargo build --release")
    return exe


def run_json(cmd, env=None):
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}")
    for line in reversed(r.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"no JSON line in the output of: {' '.join(cmd)}\n{r.stdout}")


def csv_list(allowed):
    def parse(s):
        items = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(allowed)}, got {s!r}")
        return items
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="alternating runs of each per comparison (default 5; 1 with --quick)")
    ap.add_argument("--configs", type=csv_list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--modes", type=csv_list(MODES), default=DEFAULT_MODES,
                    help="train, infer (a stream, batches overlapped), infer-serial "
                         "(one batch at a time); default train,infer")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps per run (default 3)")
    ap.add_argument("--steps", type=int, default=None, help="steps per repetition (default 10)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per run (default 3)")
    ap.add_argument("--batch", type=int, default=None,
                    help="samples per batch for both (default: each config's)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 1 round, 1 warm-up step, 2 steps, 1 repetition")
    ap.add_argument("--no-build", action="store_true", help="use the existing release binary")
    ap.add_argument("--features", default="",
                    help="cargo features of the towerrec build (onednn: bf16 dense layers "
                         "through oneDNN)")
    ap.add_argument("--towerrec-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every towerrec run (e.g. "
                         "'model.dense_precision=\"bf16\"'); repeatable, printed")
    ap.add_argument("--baselines", type=csv_list(BASELINES), default=["pytorch"],
                    help="what towerrec is timed against: pytorch (default), torchrec, "
                         "torchrec-bf16, dlrm-ref (the last three need bench/torchrec/setup.sh's "
                         "venv)")
    a = ap.parse_args()

    q = a.quick
    rounds = a.rounds if a.rounds is not None else (1 if q else 5)
    warmup = a.warmup if a.warmup is not None else (1 if q else 3)
    steps = a.steps if a.steps is not None else (2 if q else 10)
    reps = a.reps if a.reps is not None else (1 if q else 3)
    if min(rounds, steps, reps, a.threads) < 1 or warmup < 0:
        sys.exit("--rounds, --steps, --reps and --threads must be at least 1")
    timing = ["--warmup", str(warmup), "--steps", str(steps), "--reps", str(reps),
              "--threads", str(a.threads)]
    tr_batch = ["--set", f"train.batch_size={a.batch}"] if a.batch else []
    for kv in a.towerrec_set:
        log(f"towerrec runs with --set {kv}")
        tr_batch += ["--set", kv]
    pt_batch = ["--batch", str(a.batch)] if a.batch else []

    if "pytorch" in a.baselines:
        ensure_torch()
    if a.no_build:
        exe = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                           "release", "towerrec")
    else:
        exe = build(a.features)
    # Keep PyTorch's OpenMP/MKL pools at the same size as its intra-op setting.
    torch_env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    versions = {}

    results = []
    for config in a.configs:
        for mode in a.modes:
            rates = {name: [] for name in ["towerrec"] + a.baselines}
            batch = None
            for r in range(1, rounds + 1):
                log(f"[{config} {mode}] round {r}/{rounds}: towerrec")
                out = run_json([exe, "bench", "model", "--config", f"bench/{config}.toml",
                                "--mode", mode, "--json"] + timing + tr_batch)
                rates["towerrec"] += out["samples_per_sec"]
                batch = out["batch_size"]
                log(f"  towerrec median {out['median_samples_per_sec']:.0f} samples/s")
                for name in a.baselines:
                    log(f"[{config} {mode}] round {r}/{rounds}: {name}")
                    out = run_json(baseline_cmd(name) + ["--config", config, "--mode",
                                   TORCH_MODE[mode]] + timing + pt_batch, env=torch_env)
                    rates[name] += out["samples_per_sec"]
                    if out["batch_size"] != batch:
                        sys.exit(f"batch sizes differ: towerrec {batch}, {name} {out['batch_size']}")
                    for k in ("torch_version", "torchrec_version", "fbgemm_version",
                              "dlrm_ref_commit"):
                        if k in out:
                            versions.setdefault(f"{name}: {k.rsplit('_', 1)[0]}", out[k])
                    log(f"  {name} median {out['median_samples_per_sec']:.0f} samples/s")
            med = {k: statistics.median(v) for k, v in rates.items()}
            best = max(a.baselines, key=lambda k: med[k])
            results.append((config, mode, batch, rates, med, best))

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; {a.threads} threads, "
          f"{rounds} rounds × {reps} reps × {steps} steps (samples/s; median [min–max] "
          f"over all reps)")
    if versions:
        print("versions: " + "; ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    head = ["config", "mode", "batch"]
    for name in ["towerrec"] + a.baselines:
        head += [name, "range"]
    head += ["fastest baseline", "ratio"]
    rows = []
    for c, m, b, rates, med, best in results:
        row = [c, m, str(b)]
        for name in ["towerrec"] + a.baselines:
            row += [f"{med[name]:.0f}", f"{min(rates[name]):.0f}–{max(rates[name]):.0f}"]
        row += [best, f"{med['towerrec'] / med[best]:.3f}"]
        rows.append(row)
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    for row in [head] + rows:
        print("  ".join(x.rjust(w) if i >= 2 else x.ljust(w)
                        for i, (x, w) in enumerate(zip(row, widths))).rstrip())
    for c, m, _, _, med, best in results:
        for name in a.baselines:
            print(f"vs {name} {c} {m} {med['towerrec'] / med[name]:.3f}")
    for c, m, _, _, med, best in results:
        print(f"ratio {c} {m} {med['towerrec'] / med[best]:.3f}")


if __name__ == "__main__":
    main()
