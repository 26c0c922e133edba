#!/usr/bin/env python3
"""TorchRec's sharding planner against towerrec's planners, rated by towerrec.

For each case (a config's tables on a topology): profile the config's training data
(`towerrec profile`), plan with towerrec's strategies (table-wise, row-wise, greedy,
OPER at 0% and 1% extra memory) and with TorchRec's EmbeddingShardingPlanner
(torchrec_plan.py, in the virtual environment setup.sh makes), time each planner, then
rate every plan two ways:

- OPER's cost model (`towerrec plan --rate PLAN --profile P --hardware HW`): the slowest
  rank's modelled seconds, the degree of balance, bytes per iteration;
- the simulator (`towerrec simulate --plans ... --profile P --hardware HW --json`): a
  training step priced rank by rank from the rows each rank serves and the bytes it
  exchanges; the step is the slowest rank's.

Writes a Markdown table per case to stdout (progress on stderr) and the raw outputs
under --work. Run from the repository root after `cargo build --release`:

    bash bench/torchrec/setup.sh
    python3 bench/torchrec/compare.py > /tmp/planners.md
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TOWERREC = ROOT / "target" / "release" / "towerrec"

# (name, config, hosts, ranks per host, global batch, hardware, profiled samples)
CASES = [
    ("kaggle-dim128 1x8", "bench/torchrec/kaggle-dim128.toml", 1, 8, 4096, "dgx-a100", 500_000),
    ("kaggle-dim128 8x8", "bench/torchrec/kaggle-dim128.toml", 8, 8, 32768, "dgx-a100", 500_000),
    ("criteo-sample 1x8", "examples/criteo.toml", 1, 8, 4096, "dgx-a100", None),
    ("criteo-sample 2x2", "examples/criteo.toml", 2, 2, 4096, "bench/dmt/cal-emu.toml", None),
]

STRATEGIES = [
    ("table-wise", ["--strategy", "table-wise"]),
    ("row-wise", ["--strategy", "row-wise"]),
    ("greedy", ["--strategy", "greedy"]),
    ("oper 0%", ["--strategy", "oper", "--extra-memory", "0%"]),
    ("oper 1%", ["--strategy", "oper", "--extra-memory", "1%"]),
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(str(c) for c in cmd))
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"failed ({p.returncode}): {' '.join(str(c) for c in cmd)}")
    return p


def slug(s):
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def torchrec_python(venv):
    py = Path(venv) / "bin" / "python"
    if not py.exists():
        raise SystemExit(f"no virtual environment at {venv}: run bash bench/torchrec/setup.sh first")
    return py


def rate_model(config, sets, plan, profile, hardware, hosts, rpl):
    """OPER's model through `towerrec plan --rate`: its summary line on stderr."""
    p = run([TOWERREC, "plan", "--config", config, *sets, "--hosts", hosts, "--ranks-per-host", rpl,
             "--rate", plan, "--profile", profile, "--hardware", hardware,
             "--heatmap", str(plan).replace(".json", ".comm.svg")])
    m = re.search(r"embedding traffic ([\d.]+) MB per iteration \(([\d.]+) MB across hosts.*"
                  r"slowest rank ([\d.]+) ms; degree of balance ([\d.]+)%; extra memory ([\d.]+)%",
                  p.stderr)
    if not m:
        raise SystemExit(f"could not read the rating of {plan}:\n{p.stderr}")
    mb, cross, ms, bal, extra = (float(x) for x in m.groups())
    c = re.search(r"read in an iteration: ([\d.]+) MB per iteration", p.stderr)
    return {"model_mb": mb, "model_cross_mb": cross, "model_ms": ms, "model_balance": bal,
            "extra_memory": extra, "copy_mb": float(c.group(1)) if c else float("nan")}


def case(name, config, hosts, rpl, batch, hardware, samples, work, py):
    d = work / slug(name)
    d.mkdir(parents=True, exist_ok=True)
    sets = ["--set", f"train.batch_size={batch}"]
    prof = d / "train.profile"
    cmd = [TOWERREC, "profile", "--config", config, *sets, "--quiet", "--out", prof]
    if samples:
        cmd += ["--max-samples", samples]
    run(cmd)
    rows = []
    tables = d / "tables.json"
    for label, args in STRATEGIES:
        out = d / f"{slug(label)}.json"
        extra = ["--profile", prof] if "oper" in args else []
        t0 = time.perf_counter()
        run([TOWERREC, "plan", "--config", config, *sets, "--hosts", hosts, "--ranks-per-host", rpl,
             *args, *extra, "--hardware", hardware, "--output", out, "--tables-out", tables])
        rows.append({"plan": f"towerrec {label}", "file": out,
                     "planning_s": time.perf_counter() - t0, "planning_what": "whole command"})
    out = d / "torchrec.json"
    p = run([py, HERE / "torchrec_plan.py", "--tables", tables, "--out", out])
    info = json.loads(p.stdout.strip().splitlines()[-1])
    rows.append({"plan": "TorchRec " + info.get("torchrec_version", "?"), "file": out,
                 "planning_s": info["planning_seconds"], "planning_what": "planner.plan()",
                 "types": info.get("sharding_types")})
    for r in rows:
        r.update(rate_model(config, sets, r["file"], prof, hardware, hosts, rpl))
    p = run([TOWERREC, "simulate", "--config", config, "--batch", batch, "--hardware", hardware,
             "--profile", prof, "--plans", ",".join(str(r["file"]) for r in rows), "--json"])
    sims = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    for r, s in zip(rows, sims):
        r["sim_step_ms"] = 1e3 * s["step_seconds"]
        r["sim_balance"] = 100.0 * s["balance"]
        r["sim_samples_s"] = s["samples_per_sec"]
        r["sim_copy_ms"] = 1e3 * s["copy_sync_seconds"]
    (d / "results.json").write_text(json.dumps(rows, default=str, indent=1))
    return rows


def table(name, hardware, batch, rows):
    print(f"\n**{name}** (hardware `{hardware}`, global batch {batch})\n")
    print("| plan | planning s | model: slowest rank ms | model balance | MB/iter (cross-host) "
          "| copies' gradients MB/iter | extra memory | simulate: step ms (of it copies' sync) "
          "| simulate balance | samples/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['plan']} | {r['planning_s']:.2f} | {r['model_ms']:.4f} | {r['model_balance']:.1f}% "
              f"| {r['model_mb']:.2f} ({r['model_cross_mb']:.2f}) | {r['copy_mb']:.2f} | {r['extra_memory']:.2f}% "
              f"| {r['sim_step_ms']:.3f} ({r['sim_copy_ms']:.3f}) | {r['sim_balance']:.1f}% "
              f"| {r['sim_samples_s']:,.0f} |")
    tr = [r for r in rows if r["plan"].startswith("TorchRec")]
    if tr and tr[0].get("types"):
        print(f"\nTorchRec's sharding types: {tr[0]['types']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/towerrec-planners", help="where plans and raw outputs go")
    ap.add_argument("--venv", default=os.environ.get("TORCHREC_VENV", "/tmp/torchrec-venv"))
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    a = ap.parse_args()
    if not TOWERREC.exists():
        raise SystemExit("build towerrec first: cargo build --release")
    py = torchrec_python(a.venv)
    work = Path(a.work)
    pick = [c.strip() for c in a.cases.split(",") if c.strip()]
    for c in CASES:
        if pick and c[0] not in pick:
            continue
        rows = case(*c, work, py)
        table(c[0], c[5], c[4], rows)


if __name__ == "__main__":
    main()
