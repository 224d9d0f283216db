"""A full ResNet-32 budget sweep: parallel `run_sweep` vs a serial in-process loop.

    python benchmarks/sweep.py [--trace resnet32] [--from 0.05] [--to 0.60]
                               [--step 0.001] [--jobs N] [--policy dtr]

Measures, in one process:

1. the sweep as `dtrf sweep` runs it (process pool, all cores unless --jobs;
   results flushed to Parquet as they finish) into a fresh temporary folder,
   wall time from the call to the last flushed run, pool start included;
2. a serial baseline: the same budgets replayed one after the other in this
   process with the kernel already loaded (no pool, no storage).

Prints wall time and runs per second of each, the speed-up, and checks that both
gave the same outcome and overhead at every point. Target on a 2-core machine:
the 551-run sweep in under 60 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import range_options

from dtrforensics.engine.replay import prepared, replay
from dtrforensics.sweep import grid
from dtrforensics.sweep.runner import default_jobs, run_sweep
from dtrforensics.sweep.store import SweepParams, SweepStore
from dtrforensics.trace import load_trace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    range_options(ap, "resnet32", 0.05, 0.60)
    ap.add_argument("--step", type=float, default=0.001)
    ap.add_argument("--policy", default="dtr")
    ap.add_argument("--jobs", type=int, default=None, help="workers (default: all cores)")
    ap.add_argument("--skip-serial", action="store_true")
    args = ap.parse_args()

    program = load_trace(args.trace)
    prepared(program)
    replay(program, budget=0)                   # load the compiled kernel before timing
    params = SweepParams(args.ratio_from, args.ratio_to, args.step, policies=(args.policy,))
    points = grid.plan_grid(params, prepared(program)[1].peak)
    jobs = args.jobs or default_jobs()
    print(f"{program.name}: {len(points)} runs, ratio {args.ratio_from}..{args.ratio_to} "
          f"step {args.step}, policy {args.policy}, {jobs} workers")

    with tempfile.TemporaryDirectory(prefix="dtrf-bench-sweep-") as tmp:
        start = time.perf_counter()
        result = run_sweep(program, params, Path(tmp) / "sweep", jobs=jobs)
        par = time.perf_counter() - start
        rows = {r["budget"]: r for r in SweepStore(Path(tmp) / "sweep").read_runs().to_pylist()}
    assert result.ran == len(points), (result.ran, len(points))
    print(f"sweep   : {par:7.2f} s  {len(points) / par:6.1f} runs/s  "
          f"(replay time summed over workers {sum(r['wall_seconds'] for r in rows.values()):.1f} s)")
    if args.skip_serial:
        return 0 if par < 60 else 1

    start = time.perf_counter()
    mismatches = 0
    for p in points:
        s = replay(program, budget=p.budget, policy=p.policy).summary
        r = rows[p.budget]
        mismatches += (s.outcome, s.overhead, s.victims_sha256) != (
            r["outcome"], r["overhead"], r["victims_sha256"])
    ser = time.perf_counter() - start
    print(f"serial  : {ser:7.2f} s  {len(points) / ser:6.1f} runs/s  (in-process loop)")
    print(f"speed-up: {ser / par:.2f}x with {jobs} workers; target < 60 s: "
          f"{'met' if par < 60 else 'MISSED'}")
    if mismatches:
        print(f"error: {mismatches} points differ between the sweep and the serial loop")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
