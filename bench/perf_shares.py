#!/usr/bin/env python3
"""Where a towerrec run's CPU time goes, by kind of work, from a `perf record -a` file.

    python3 bench/perf_shares.py PERF.DATA [--window 10%-75%] [--comm towerrec-mpi]
        [--step-ms MS]

Runs `perf report --sort sym --time WINDOW` on the processes named COMM and sorts
every symbol's samples into kinds by its name: waiting (MPI's yield and poll loops,
the scheduler), the kernel's network stack, page faults, memmove/memset, the dense
layers, the synthetic reader, the embedding stages, and the rest (`--show KIND` lists
the symbols put into the kinds whose name starts with KIND). Prints a Markdown
table of each kind's share of the sampled CPU time. With --step-ms (the run's step
time) it adds each kind's milliseconds per step on one CPU: on the emulated cluster,
where each host has one CPU of this two-CPU machine (`--cpus per-host`), that is the
host's time per step. The kinds are sorted by name patterns, so a symbol they do not
name falls into "other"; choose WINDOW to cover the training steps only (`perf report
--time A%-B%` on slices shows where the evaluation and the checkpoint begin).
Standard library only; needs `perf`.
"""

import argparse
import signal
import subprocess
import sys

KINDS = [
    ("waiting (MPI yield and poll, scheduler)", [
        "finish_task_switch", "sched_yield", "poll", "fdget", "fput", "rseq", "schedule",
        "opal_progress", "event_base", "epoll", "exit_to_user", "syscall", "evutil",
        "pthread_mutex", "__get_user", "__put_user", "_raw_spin_unlock_irqrestore",
        "ompi_sync", "ompi_request", "mca_pml", "eventfd", "clock_gettime", "rcu_read"]),
    ("kernel network stack", [
        "copy_to_iter", "copy_from_iter", "copy_from_user", "softirq", "tcp_", "skb", "ip_",
        "net_", "__dev", "veth", "sch_", "tbf", "sock_", "inet", "copy_folio",
        "check_object_size"]),
    ("page faults", [
        "page_fault", "clear_page", "handle_mm", "alloc_pages", "folio", "do_anonymous",
        "zap", "unmap", "mmap", "rmqueue", "lru", "follow_page"]),
    ("memmove, memset", ["memmove", "memset", "memcpy"]),
    ("dense layers", [
        "gemm", "Interaction", "interaction::", "dots", "dot_f32", "mlp", "relu", "sigmoid", "Mlp"]),
    ("synthetic reader", [
        "__ieee754_pow", "pow@", "log1p", "chacha", "floor", "SyntheticGenerator", "rand::",
        "rand_distr", "exp_fma"]),
    ("embedding stages", [
        "towerrec_core::embedding", "ShardedEmbeddings", "sharded::", "Router", "JaggedView",
        "towerrec_plan", "update_rows", "pool_samples", "EmbeddingBag", "lookup", "sort",
        "all_to_all_v_during", "malloc", "free"]),
]


def samples_by_symbol(data, window, comm):
    """(samples, symbol) of every symbol perf reports for `comm` within `window`."""
    out = subprocess.run(
        ["perf", "report", "-i", data, "--comm", comm, "--sort", "sym", "--time", window,
         "--stdio", "-n"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[1].isdigit():
            rows.append((int(parts[1]), parts[3]))
    return rows


def kind_of(symbol):
    for name, patterns in KINDS:
        if any(p in symbol for p in patterns):
            return name
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--window", default="0%-100%")
    ap.add_argument("--comm", default="towerrec-mpi")
    ap.add_argument("--step-ms", type=float)
    ap.add_argument("--show", metavar="KIND", help="list the symbols of this kind instead")
    args = ap.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly, into `head`
    rows = samples_by_symbol(args.data, args.window, args.comm)
    total = sum(n for n, _ in rows)
    if total == 0:
        sys.exit(f"perf_shares: no samples of '{args.comm}' in {args.data} within {args.window}")
    if args.show:
        for n, symbol in rows:
            if kind_of(symbol).startswith(args.show):
                print(f"{n:7d}  {symbol}")
        return
    by_kind = {name: 0 for name, _ in KINDS}
    by_kind["other"] = 0
    for n, symbol in rows:
        by_kind[kind_of(symbol)] += n
    step = args.step_ms
    print("| kind | share of CPU time |" + (" ms per step on one CPU |" if step else ""))
    print("|---|---:|" + ("---:|" if step else ""))
    for name, n in by_kind.items():
        share = n / total
        print(f"| {name} | {100 * share:.1f}% |" + (f" {share * step:.1f} |" if step else ""))
    work = 1 - by_kind[KINDS[0][0]] / total
    print(f"| work (all but waiting) | {100 * work:.1f}% |" + (f" {work * step:.1f} |" if step else ""))
    print(f"{total} samples in {args.window}")


if __name__ == "__main__":
    main()
