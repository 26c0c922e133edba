#!/usr/bin/env python3
"""Run TorchRec's sharding planner on a towerrec tables file; write a towerrec plan.

    torchrec_plan.py --tables TABLES.json --out PLAN.json [--hbm-gib 32]
                     [--compute-device cuda|cpu] [--sharding-types a,b,...]
                     [--compute-kernels k,...] [--verbose]
    torchrec_plan.py --tables TABLES.json --check PLAN.json

The tables file is what `towerrec plan --tables-out F` writes (format
"towerrec-tables-v1"). The planner is
torchrec.distributed.planner.EmbeddingShardingPlanner with its default
enumerator, proposers, partitioner and storage reservation; the model is an
EmbeddingBagCollection on the meta device (nothing is allocated, no GPU is
needed). Only `planner.plan(...)` is timed.

Stdout gets one JSON line (planner, versions, world size, planning seconds,
sharding-type counts, output path); everything else goes to stderr.
`--check PLAN.json` plans nothing: it validates an existing towerrec plan
against the tables file (the same check every written plan passes first).
See README.md beside this file.
"""

import argparse
import json
import os
import sys
import time

FORMAT = "towerrec-tables-v1"
DEFAULT_VENV = "/tmp/torchrec-venv"
HERE = os.path.dirname(os.path.abspath(__file__))

# TorchRec sharding type -> towerrec sharding. Types not listed here (grid_shard,
# anything newer) cannot be expressed in a towerrec plan and are never allowed.
TORCHREC_TO_TOWERREC = {
    "table_wise": "table_wise",
    "row_wise": "row_wise",
    "column_wise": "column_wise",
    "table_row_wise": "table_row_wise",
    "table_column_wise": "column_wise",
    "data_parallel": "data_parallel",
}
TOWERREC_SHARDINGS = ("table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel")


def log(msg):
    print(f"torchrec_plan: {msg}", file=sys.stderr, flush=True)


def die(msg, code=1):
    print(f"torchrec_plan: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


# ----------------------------------------------------------------------------
# input


def load_tables(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        die(f"cannot read tables file {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        die(f"tables file {path} is not JSON: {e}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        die(f"tables file {path}: expected \"format\": \"{FORMAT}\" "
            f"(written by `towerrec plan --tables-out F`)")
    topo = doc.get("topology")
    if not isinstance(topo, dict):
        die(f"tables file {path}: missing \"topology\"")
    hosts, rph = topo.get("hosts"), topo.get("ranks_per_host")
    for key, v in (("hosts", hosts), ("ranks_per_host", rph)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            die(f"tables file {path}: topology.{key} must be an integer >= 1, got {v!r}")
    batch = doc.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        die(f"tables file {path}: batch_size must be an integer >= 1, got {batch!r}")
    tables = doc.get("tables")
    if not isinstance(tables, list) or not tables:
        die(f"tables file {path}: \"tables\" must be a non-empty list")
    seen = set()
    out = []
    for i, t in enumerate(tables):
        if not isinstance(t, dict):
            die(f"tables file {path}: tables[{i}] is not an object")
        name = t.get("name")
        if not isinstance(name, str) or not name:
            die(f"tables file {path}: tables[{i}] has no name")
        if name in seen:
            die(f"tables file {path}: table {name!r} listed twice")
        seen.add(name)
        for key in ("rows", "dim", "bytes_per_row"):
            v = t.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                die(f"tables file {path}: table {name!r}: {key} must be an integer >= 1, got {v!r}")
        pf = t.get("pooling_factor", 1.0)
        if isinstance(pf, bool) or not isinstance(pf, (int, float)) or not pf >= 0:
            die(f"tables file {path}: table {name!r}: pooling_factor must be a number >= 0, got {pf!r}")
        out.append({"name": name, "rows": t["rows"], "dim": t["dim"],
                    "bytes_per_row": t["bytes_per_row"], "pooling_factor": float(pf)})
    return {"hosts": hosts, "ranks_per_host": rph, "batch_size": batch, "tables": out}


# ----------------------------------------------------------------------------
# the towerrec plan check (the rules of docs/PLANS.md that a converted plan can break)


def tiles(ranges, total):
    """Whether half-open ranges, in the order given, cover [0, total) exactly."""
    pos = 0
    for start, end in ranges:
        if start != pos:
            return False
        pos = end
    return pos == total


def check_plan(plan, spec):
    """Return a list of problems (empty when the plan is valid for spec)."""
    errs = []
    hosts, rph = spec["hosts"], spec["ranks_per_host"]
    world = hosts * rph
    if plan.get("topology") != {"hosts": hosts, "ranks_per_host": rph}:
        errs.append(f"topology {plan.get('topology')} is not the tables file's "
                    f"{{hosts: {hosts}, ranks_per_host: {rph}}}")
    extra = set(plan) - {"topology", "tables"}
    if extra:
        errs.append(f"unknown top-level keys {sorted(extra)}")
    by_name = {t["name"]: t for t in spec["tables"]}
    listed = set()
    for i, e in enumerate(plan.get("tables", [])):
        name = e.get("table")
        where = f"table entry {i} ({name!r})"
        if name not in by_name:
            errs.append(f"{where}: no such table in the tables file")
            continue
        if name in listed:
            errs.append(f"{where}: table listed twice")
        listed.add(name)
        extra = set(e) - {"table", "sharding", "shards"}
        if extra:
            errs.append(f"{where}: unknown keys {sorted(extra)}")
        t = by_name[name]
        rows, dim = t["rows"], t["dim"]
        kind = e.get("sharding")
        shards = e.get("shards", [])
        if kind not in TOWERREC_SHARDINGS:
            errs.append(f"{where}: unknown sharding {kind!r}")
            continue
        if kind == "data_parallel":
            if shards:
                errs.append(f"{where}: data_parallel with shards")
            continue
        if not shards:
            errs.append(f"{where}: {kind} without shards")
            continue
        ok = True
        for s in shards:
            r, (r0, r1), (c0, c1) = s.get("rank"), s.get("rows", (0, 0)), s.get("columns", (0, 0))
            if set(s) - {"rank", "rows", "columns"}:
                errs.append(f"{where}: unknown shard keys {sorted(set(s) - {'rank', 'rows', 'columns'})}")
            if not isinstance(r, int) or not 0 <= r < world:
                errs.append(f"{where}: shard on rank {r!r}, outside 0..{world}")
                ok = False
            if not (0 <= r0 < r1 <= rows):
                errs.append(f"{where}: row range [{r0}, {r1}) empty or outside [0, {rows})")
                ok = False
            if not (0 <= c0 < c1 <= dim):
                errs.append(f"{where}: column range [{c0}, {c1}) empty or outside [0, {dim})")
                ok = False
        if not ok:
            continue
        ranks = [s["rank"] for s in shards]
        if kind == "table_wise":
            if len(shards) != 1 or tuple(shards[0]["rows"]) != (0, rows) or tuple(shards[0]["columns"]) != (0, dim):
                errs.append(f"{where}: table_wise needs exactly one shard of rows [0, {rows}) columns [0, {dim})")
            continue
        if len(set(ranks)) != len(ranks):
            errs.append(f"{where}: two shards on one rank")
        if kind in ("row_wise", "table_row_wise"):
            if any(tuple(s["columns"]) != (0, dim) for s in shards):
                errs.append(f"{where}: a {kind} shard does not hold all columns [0, {dim})")
            if not tiles([s["rows"] for s in shards], rows):
                errs.append(f"{where}: row splits do not add up to [0, {rows})")
            if kind == "table_row_wise" and len({r // rph for r in ranks}) > 1:
                errs.append(f"{where}: table_row_wise shards on more than one host")
        else:  # column_wise
            if any(tuple(s["rows"]) != (0, rows) for s in shards):
                errs.append(f"{where}: a column_wise shard does not hold all rows [0, {rows})")
            if not tiles([s["columns"] for s in shards], dim):
                errs.append(f"{where}: column splits do not add up to [0, {dim})")
    for name in by_name:
        if name not in listed:
            errs.append(f"table {name!r} has no entry")
    return errs


def rank_bytes(plan, spec):
    world = spec["hosts"] * spec["ranks_per_host"]
    by_name = {t["name"]: t for t in spec["tables"]}
    out = [0] * world
    for e in plan["tables"]:
        t = by_name[e["table"]]
        if e["sharding"] == "data_parallel":
            for r in range(world):
                out[r] += t["rows"] * t["bytes_per_row"]
            continue
        for s in e["shards"]:
            nr = s["rows"][1] - s["rows"][0]
            nc = s["columns"][1] - s["columns"][0]
            out[s["rank"]] += nr * t["bytes_per_row"] * nc // t["dim"]
    return out


def format_plan(plan):
    """The plan as JSON, laid out like docs/PLANS.md (one line per shard)."""
    topo = plan["topology"]
    lines = ["{",
             f'  "topology": {{ "hosts": {topo["hosts"]}, "ranks_per_host": {topo["ranks_per_host"]} }},',
             '  "tables": [']
    entries = []
    for e in plan["tables"]:
        head = f'    {{ "table": {json.dumps(e["table"])}, "sharding": "{e["sharding"]}"'
        if e["sharding"] == "data_parallel":
            entries.append(head + " }")
            continue
        shards = ",\n".join(
            f'      {{ "rank": {s["rank"]}, "rows": [{s["rows"][0]}, {s["rows"][1]}], '
            f'"columns": [{s["columns"][0]}, {s["columns"][1]}] }}' for s in e["shards"])
        entries.append(head + ', "shards": [\n' + shards + "\n    ] }")
    lines.append(",\n".join(entries))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------
# torch / torchrec


def import_torchrec():
    """Import torch and torchrec; re-run this script under the venv's python if needed."""
    try:
        import torch  # noqa: F401
        import torchrec  # noqa: F401
        return
    except ImportError as e:
        first_error = e
    venv = os.environ.get("TORCHREC_VENV", DEFAULT_VENV)
    py = os.path.join(venv, "bin", "python")
    here_venv = os.path.realpath(sys.prefix) == os.path.realpath(venv)
    if os.path.exists(py) and not here_venv and not os.environ.get("TORCHREC_PLAN_REEXEC"):
        os.environ["TORCHREC_PLAN_REEXEC"] = "1"
        os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])
    die(f"cannot import torch/torchrec ({first_error}); no usable virtual environment at "
        f"{venv}: run `bash {os.path.join(HERE, 'setup.sh')}` first "
        f"(or set TORCHREC_VENV to the one it made)")


def optimizer_for(table):
    """The optimizer that makes TorchRec's storage estimate match bytes_per_row.

    TorchRec counts fp32 weights (4*dim bytes a row) plus optimizer state read from
    the parameter's `_optimizer_classes`: none/SGD +0, RowWiseAdagrad +4 a row
    (1/dim of the weights), Adam +8*dim, anything else +4*dim.
    """
    import torch
    from torchrec import optim as trec_optim
    dim, b = table["dim"], table["bytes_per_row"]
    if b == 4 * dim:
        return "sgd", None
    if b == 4 * dim + 4:
        return "row_wise_adagrad", trec_optim.RowWiseAdagrad
    if b == 12 * dim:
        return "adam", torch.optim.Adam
    if b == 8 * dim:
        return "adagrad", torch.optim.Adagrad
    return None, None


def run_planner(spec, args, compute_device):
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import (
        EmbeddingShardingPlanner, ParameterConstraints, Topology)

    world = spec["hosts"] * spec["ranks_per_host"]
    configs = [EmbeddingBagConfig(name=t["name"], embedding_dim=t["dim"],
                                  num_embeddings=t["rows"], feature_names=[t["name"]])
               for t in spec["tables"]]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    notes = []
    optimizers = {}
    for t in spec["tables"]:
        opt_name, opt_cls = optimizer_for(t)
        if opt_name is None:
            notes.append(f"table {t['name']}: bytes_per_row {t['bytes_per_row']} matches no "
                         f"optimizer TorchRec models (4*dim SGD, 4*dim+4 row-wise Adagrad, "
                         f"8*dim Adagrad, 12*dim Adam); planned as SGD (4*dim)")
            opt_name = "sgd"
        optimizers[opt_name] = optimizers.get(opt_name, 0) + 1
        if opt_cls is not None:
            ebc.embedding_bags[t["name"]].weight._optimizer_classes = [opt_cls]

    constraints = {
        t["name"]: ParameterConstraints(
            sharding_types=list(args.sharding_types),
            compute_kernels=list(args.compute_kernels) if args.compute_kernels else None,
            pooling_factors=[t["pooling_factor"]],
        )
        for t in spec["tables"]
    }
    per_rank_batch = spec["batch_size"] // world
    if per_rank_batch < 1 or spec["batch_size"] % world:
        per_rank_batch = max(1, per_rank_batch)
        notes.append(f"batch_size {spec['batch_size']} is not a multiple of the world size "
                     f"{world}; per-rank batch {per_rank_batch}")
    topology = Topology(world_size=world, local_world_size=spec["ranks_per_host"],
                        compute_device=compute_device,
                        hbm_cap=int(args.hbm_gib * (1 << 30)))
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=per_rank_batch,
                                       constraints=constraints)
    sharders = [EmbeddingBagCollectionSharder()]
    t0 = time.perf_counter()
    plan = planner.plan(ebc, sharders)
    secs = time.perf_counter() - t0
    return plan, secs, per_rank_batch, notes, optimizers


def find_parameter_sharding(plan, name):
    for module_plan in plan.plan.values():
        for key in (name, f"embedding_bags.{name}.weight", f"{name}.weight"):
            if key in module_plan:
                return module_plan[key]
    return None


def spread(pieces, total):
    """Lay out (rank, width, first_offset) pieces contiguously over [0, total).

    Used when TorchRec puts two blocks of one table on one rank: towerrec wants
    one block per rank, so the rank's blocks become one block of their summed
    width (same bytes and lookups per rank, columns/rows relabelled).
    """
    by_rank = {}
    for rank, start, end in pieces:
        w, first = by_rank.get(rank, (0, start))
        by_rank[rank] = (w + end - start, min(first, start))
    pos, out = 0, []
    for rank, (w, _) in sorted(by_rank.items(), key=lambda kv: (kv[1][1], kv[0])):
        out.append((rank, pos, pos + w))
        pos += w
    assert pos == total, (pos, total)
    return out


def convert(plan, spec):
    """TorchRec ShardingPlan -> (towerrec plan dict, torchrec type counts, kernel counts, notes)."""
    world = spec["hosts"] * spec["ranks_per_host"]
    rph = spec["ranks_per_host"]
    entries, types, kernels, notes = [], {}, {}, []
    for t in spec["tables"]:
        name, rows, dim = t["name"], t["rows"], t["dim"]
        ps = find_parameter_sharding(plan, name)
        if ps is None:
            die(f"TorchRec's plan has no entry for table {name!r}")
        st = str(getattr(ps.sharding_type, "value", ps.sharding_type))
        types[st] = types.get(st, 0) + 1
        kernels[ps.compute_kernel] = kernels.get(ps.compute_kernel, 0) + 1
        kind = TORCHREC_TO_TOWERREC.get(st)
        if kind is None:
            die(f"table {name!r}: TorchRec chose sharding {st!r}, which towerrec cannot express")
        if kind == "data_parallel":
            entries.append({"table": name, "sharding": kind})
            continue
        if ps.sharding_spec is None:
            die(f"table {name!r}: {st} sharding without a sharding spec")
        blocks = []
        for i, sm in enumerate(ps.sharding_spec.shards):
            rank = sm.placement.rank() if sm.placement is not None else ps.ranks[i]
            (ro, co), (rs, cs) = sm.shard_offsets, sm.shard_sizes
            r0, r1 = min(ro, rows), min(ro + rs, rows)   # clip TorchRec's padded last shard
            c0, c1 = min(co, dim), min(co + cs, dim)
            if r1 > r0 and c1 > c0:
                blocks.append((rank, r0, r1, c0, c1))
        if not blocks:
            die(f"table {name!r}: TorchRec's {st} plan has no non-empty shard")
        if kind == "table_wise":
            if len(blocks) != 1:
                die(f"table {name!r}: table_wise with {len(blocks)} shards")
            rank = blocks[0][0]
            shards = [{"rank": rank, "rows": [0, rows], "columns": [0, dim]}]
        elif kind in ("row_wise", "table_row_wise"):
            if any((c0, c1) != (0, dim) for _, _, _, c0, c1 in blocks):
                die(f"table {name!r}: {st} shard without all columns")
            blocks.sort(key=lambda b: (b[1], b[0]))
            if len({b[0] for b in blocks}) != len(blocks):
                notes.append(f"table {name!r}: {st} put two row blocks on one rank; merged")
                laid = spread([(b[0], b[1], b[2]) for b in blocks], rows)
            else:
                laid = [(b[0], b[1], b[2]) for b in blocks]
            shards = [{"rank": r, "rows": [a, b], "columns": [0, dim]} for r, a, b in laid]
            if kind == "table_row_wise" and len({s["rank"] // rph for s in shards}) > 1:
                notes.append(f"table {name!r}: table_row_wise shards span hosts; written as row_wise")
                kind = "row_wise"
        else:  # column_wise, table_column_wise
            if any((r0, r1) != (0, rows) for _, r0, r1, _, _ in blocks):
                die(f"table {name!r}: {st} shard without all rows")
            blocks.sort(key=lambda b: (b[3], b[0]))
            if len({b[0] for b in blocks}) != len(blocks):
                notes.append(f"table {name!r}: {st} put several column blocks on one rank; "
                             f"each rank's blocks written as one block of their total width")
                laid = spread([(b[0], b[3], b[4]) for b in blocks], dim)
            else:
                laid = [(b[0], b[3], b[4]) for b in blocks]
            shards = [{"rank": r, "rows": [0, rows], "columns": [a, b]} for r, a, b in laid]
        for s in shards:
            if not 0 <= s["rank"] < world:
                die(f"table {name!r}: shard on rank {s['rank']} outside 0..{world}")
        entries.append({"table": name, "sharding": kind, "shards": shards})
    towerrec = {"topology": {"hosts": spec["hosts"], "ranks_per_host": rph}, "tables": entries}
    return towerrec, types, kernels, notes


# ----------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Plan towerrec tables with TorchRec's EmbeddingShardingPlanner.")
    p.add_argument("--tables", required=True, help="tables file (towerrec-tables-v1)")
    p.add_argument("--out", help="where to write the towerrec plan JSON")
    p.add_argument("--check", metavar="PLAN", help="validate an existing towerrec plan "
                   "against --tables and exit (no planning)")
    p.add_argument("--hbm-gib", type=float, default=32.0,
                   help="device memory per rank, GiB (default 32)")
    p.add_argument("--compute-device", default="cuda", choices=["cuda", "cpu"],
                   help="device TorchRec's cost model assumes (default cuda; only planned, never used)")
    p.add_argument("--sharding-types", default=",".join(TORCHREC_TO_TOWERREC),
                   help="comma list of TorchRec sharding types the planner may use "
                        f"(default: all towerrec can express: {','.join(TORCHREC_TO_TOWERREC)})")
    p.add_argument("--compute-kernels", default="",
                   help="comma list of TorchRec compute kernels to allow (e.g. fused,dense "
                        "for device memory only; default: TorchRec's choice)")
    p.add_argument("--verbose", action="store_true",
                   help="show TorchRec's own log (its planner stats table) on stderr")
    args = p.parse_args(argv)
    if not args.check and not args.out:
        p.error("--out is required (or --check PLAN)")
    types = [s.strip() for s in args.sharding_types.split(",") if s.strip()]
    bad = [s for s in types if s not in TORCHREC_TO_TOWERREC]
    if bad or not types:
        p.error(f"--sharding-types: {bad or 'none given'}: allowed are "
                f"{', '.join(TORCHREC_TO_TOWERREC)} (towerrec cannot express the others)")
    args.sharding_types = types
    args.compute_kernels = [s.strip() for s in args.compute_kernels.split(",") if s.strip()]
    if not args.hbm_gib > 0:
        p.error("--hbm-gib must be > 0")
    return args


def main(argv):
    args = parse_args(argv)
    spec = load_tables(args.tables)
    world = spec["hosts"] * spec["ranks_per_host"]

    if args.check:
        try:
            with open(args.check) as f:
                plan = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            die(f"cannot read plan {args.check}: {e}")
        errs = check_plan(plan, spec)
        for e in errs:
            print(f"torchrec_plan: check: {e}", file=sys.stderr)
        print(json.dumps({"check": args.check, "ok": not errs, "problems": len(errs)}))
        return 0 if not errs else 1

    import_torchrec()
    import logging
    import warnings
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        stream=sys.stderr, format="%(levelname)s:%(name)s: %(message)s",
                        force=True)
    if not args.verbose:
        warnings.filterwarnings("ignore")
    import torch
    import torchrec
    try:
        from importlib.metadata import version as dist_version
        torchrec_version = dist_version("torchrec")
    except Exception:
        torchrec_version = getattr(torchrec, "__version__", "unknown")

    log(f"{len(spec['tables'])} tables, {spec['hosts']} hosts x {spec['ranks_per_host']} ranks "
        f"= {world}, global batch {spec['batch_size']}, {args.hbm_gib:g} GiB per rank, "
        f"compute device {args.compute_device}; torch {torch.__version__}, torchrec {torchrec_version}")

    from torchrec.distributed.planner.types import PlannerError
    device = args.compute_device
    fallback = None
    try:
        plan, secs, per_rank_batch, notes, optimizers = run_planner(spec, args, device)
    except PlannerError as e:
        die(f"TorchRec's planner found no plan: {e}")
    except (AssertionError, RuntimeError, ValueError) as e:
        if device != "cuda":
            raise
        fallback = f"planning for cuda failed ({type(e).__name__}: {e}); planned for cpu"
        log(fallback)
        device = "cpu"
        try:
            plan, secs, per_rank_batch, notes, optimizers = run_planner(spec, args, device)
        except PlannerError as e2:
            die(f"TorchRec's planner found no plan (cpu fallback): {e2}")

    towerrec_plan, types, kernels, conv_notes = convert(plan, spec)
    notes += conv_notes
    for n in notes:
        log(n)
    errs = check_plan(towerrec_plan, spec)
    if errs:
        for e in errs:
            print(f"torchrec_plan: check: {e}", file=sys.stderr)
        die(f"the converted plan fails the towerrec check ({len(errs)} problems); not written")
    per_rank = rank_bytes(towerrec_plan, spec)
    try:
        with open(args.out, "w") as f:
            f.write(format_plan(towerrec_plan))
    except OSError as e:
        die(f"cannot write {args.out}: {e.strerror}")
    towerrec_types = {}
    for e in towerrec_plan["tables"]:
        towerrec_types[e["sharding"]] = towerrec_types.get(e["sharding"], 0) + 1
    log(f"planned in {secs:.3f} s; wrote {args.out}; fullest rank {max(per_rank) / 2**20:.1f} MiB")
    result = {
        "planner": "torchrec",
        "torchrec_version": torchrec_version,
        "torch_version": torch.__version__,
        "world_size": world,
        "planning_seconds": round(secs, 6),
        "sharding_types": dict(sorted(types.items())),
        "out": args.out,
        "hosts": spec["hosts"],
        "ranks_per_host": spec["ranks_per_host"],
        "tables": len(spec["tables"]),
        "batch_size_per_rank": per_rank_batch,
        "hbm_gib": args.hbm_gib,
        "compute_device": device,
        "compute_kernels": dict(sorted(kernels.items())),
        "optimizers_assumed": dict(sorted(optimizers.items())),
        "towerrec_sharding": dict(sorted(towerrec_types.items())),
        "max_rank_bytes": max(per_rank),
        "min_rank_bytes": min(per_rank),
    }
    if fallback:
        result["compute_device_fallback"] = fallback
    if notes:
        result["notes"] = notes
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
