"""Exact budget maps with shared prefixes vs the same walk from op 0, in one run.

    python benchmarks/sweep_share.py [--traces resnet32,lstm,...|all]
                                     [--from 0.05] [--to 0.60] [--jobs 2]
                                     [--limit-seconds 600] [--compare-runs 200]
                                     [--run-timeout SECONDS]

For each trace:

1. a comparison on identical work: the exact walk's first `--compare-runs`
   runs (the walk's rounds make the probed budgets the same in both modes),
   once with workers sharing prefixes and once replaying every run from op 0;
   prints both times and the ratio, and checks that both stored identical rows;
2. the whole exact map over the range with sharing, stopped after
   `--limit-seconds`: distinct executions, certified fraction, wall time and
   CPU time (this process and its workers: on a shared machine the wall time
   depends on the other load, the CPU time much less), and when the map is not
   complete, the time extrapolated from the certified fraction (a rough
   figure: executions are not spread evenly over the budget axis).

Peak RSS of this process and of its worker processes is printed at the end.
Goal (issue 12): the ResNet-32 map over 0.05-0.60, 100% certified, in at
most 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from common import range_options

from dtrforensics.engine.replay import prepared, replay
from dtrforensics.sweep import backends, runner
from dtrforensics.sweep.holes import analyze
from dtrforensics.sweep.store import SweepParams, SweepStore
from dtrforensics.trace import load_trace

PUBLIC = ("resnet32", "tv_densenet121", "inceptionv4", "transformer", "unet", "treelstm", "lstm",
          "unroll_gan")
VOLATILE = ("wall_seconds", "worker", "finished_at")
MAX_RUNS = 100_000


def rows(path: Path) -> list[dict]:
    out = [{k: v for k, v in r.items() if k not in VOLATILE}
           for r in SweepStore(path).read_runs().to_pylist()]
    return sorted(out, key=lambda r: (r["policy"], r["budget"], r["rep"]))


def cpu_seconds() -> float:
    """CPU time of this process and of its finished (joined) worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_sweep(program, params: SweepParams, out: Path, jobs: int, share: bool):
    saved = backends._PREFIXES
    if not share:
        backends._PREFIXES = None        # workers fork from here: every run starts at op 0
    try:
        start, cpu = time.perf_counter(), cpu_seconds()
        result = runner.run_sweep(program, params, out, jobs=jobs)
        return result, time.perf_counter() - start, cpu_seconds() - cpu
    finally:
        backends._PREFIXES = saved


def compare(program, lo: float, hi: float, jobs: int, n_runs: int, tmp: Path) -> None:
    params = SweepParams(lo, hi, exact=True, max_runs=n_runs)
    shared, t_shared, c_shared = timed_sweep(program, params, tmp / "shared", jobs, True)
    scratch, t_scratch, c_scratch = timed_sweep(program, params, tmp / "scratch", jobs, False)
    same = rows(tmp / "shared") == rows(tmp / "scratch")
    print(f"  same {shared.ran} walk runs: from op 0 {t_scratch:7.2f} s ({c_scratch:.1f} s CPU), "
          f"shared {t_shared:7.2f} s ({c_shared:.1f} s CPU), speedup {t_scratch / t_shared:5.2f}x "
          f"wall, {c_scratch / c_shared:5.2f}x CPU, rows identical: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(f"{program.name}: shared and from-scratch sweeps differ")


class TimeLimit(Exception):
    pass


class Watch(runner.SweepObserver):
    """Keeps the certified fraction; stops the sweep at the time limit."""

    def __init__(self, limit: float):
        self.deadline = time.perf_counter() + limit
        self.certified = 0.0

    def coverage(self, fractions: dict[str, float]) -> None:
        self.certified = fractions["dtr"]

    def finished(self, row: dict) -> None:
        if time.perf_counter() > self.deadline:
            raise TimeLimit


def full_map(program, lo: float, hi: float, jobs: int, limit: float, run_timeout: float | None,
             tmp: Path) -> None:
    out = tmp / "map"
    watch = Watch(limit)
    start, cpu = time.perf_counter(), cpu_seconds()
    params = SweepParams(lo, hi, exact=True, max_runs=MAX_RUNS, timeout=run_timeout)
    try:
        runner.run_sweep(program, params, out, jobs=jobs, observer=watch, max_points=MAX_RUNS)
    except TimeLimit:
        pass
    spent, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    n = len(SweepStore(out).read_runs())
    executions = len(analyze(out).policy("dtr").exact.partition)
    line = (f"  map {lo}-{hi}: {executions} distinct executions ({n} runs), "
            f"{watch.certified:.2%} certified in {spent:7.1f} s wall, {cpu:.1f} s CPU "
            f"({n / spent:5.1f} runs/s; load average {os.getloadavg()[0]:.1f})")
    if watch.certified < 1.0:
        line += (f"; stopped at the time limit, extrapolated "
                 f"{spent / max(watch.certified, 1e-9):9.0f} s")
    elif program.name.startswith("resnet32"):
        line += f"; goal <= 60 s: {'met' if spent <= 60 else 'MISSED'}"
    print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    range_options(ap, "resnet32", 0.05, 0.60, option="--traces")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit-seconds", type=float, default=600.0)
    ap.add_argument("--compare-runs", type=int, default=200)
    ap.add_argument("--run-timeout", type=float, default=None,
                    help="wall-clock limit per run of the map (a run in flight when the "
                         "time limit comes is waited for)")
    args = ap.parse_args()
    names = PUBLIC if args.traces == "all" else tuple(args.traces.split(","))
    for name in names:
        program = load_trace(name)
        prepared(program)
        replay(program, budget=0)          # load the compiled kernel before timing
        print(f"{program.name}: exact map {args.ratio_from}-{args.ratio_to}, {args.jobs} workers")
        with tempfile.TemporaryDirectory(prefix="dtrf-bench-share-") as tmp:
            compare(program, args.ratio_from, args.ratio_to, args.jobs, args.compare_runs,
                    Path(tmp))
            full_map(program, args.ratio_from, args.ratio_to, args.jobs, args.limit_seconds,
                     args.run_timeout, Path(tmp))
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: this process {me:.0f} MB, largest worker {kids:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
