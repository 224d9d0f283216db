"""An exact map of a thrashing trace on a Dask cluster of 1, 2 and 4 worker processes.

    python benchmarks/cluster.py [--trace lstm] [--from 0.25] [--to 0.28]
                                 [--max-runs 16] [--workers 1,2,4]

For each worker count, starts a loopback cluster the way Dask users start one
(`dask scheduler`, then `dask worker --nthreads 1` processes), runs the same
exact map into a fresh folder with `--engine dask`, and stops the cluster. The
walk probes the same budgets whatever the workers (`--max-runs` bounds it to
the same runs), so every configuration does the same work and stores the same
rows (checked). Prints wall time per configuration and the speed-up over one
worker, measured in this one run. The walk keeps at most 4 runs per policy in
flight, and on a machine with fewer cores than workers the extra workers only
share them: say how many cores there are when quoting the numbers.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from common import range_options
from dask_cluster import loopback_cluster

from dtrforensics.sweep.runner import run_sweep
from dtrforensics.sweep.store import EXECUTION_COLUMNS, SweepParams, SweepStore
from dtrforensics.trace import load_trace


def rows(path: Path) -> list[tuple]:
    return sorted(tuple(r[c] for c in ("policy", "budget", "rep", *EXECUTION_COLUMNS))
                  for r in SweepStore(path).read_runs().to_pylist())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    range_options(ap, "lstm", 0.25, 0.28)
    ap.add_argument("--max-runs", type=int, default=16)
    ap.add_argument("--workers", default="1,2,4")
    args = ap.parse_args()
    try:
        program = load_trace(args.trace)
    except Exception as exc:  # noqa: BLE001 - a public trace missing: nothing to measure
        print(f"skipped: {exc}")
        return 0
    params = SweepParams(args.ratio_from, args.ratio_to, exact=True, max_runs=args.max_runs)
    counts = [int(n) for n in args.workers.split(",")]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{program.name} {args.ratio_from}-{args.ratio_to} exact, {args.max_runs} walk runs; "
          f"{cores} cores on this machine")
    seconds, stored = {}, {}
    with tempfile.TemporaryDirectory(prefix="dtrf-bench-cluster-") as tmp:
        for n in counts:
            with loopback_cluster(Path(tmp) / f"cluster-{n}", workers=n) as cluster:
                run_sweep(program, SweepParams(args.ratio_from, args.ratio_from + 1e-6,
                                               exact=True, max_runs=1),
                          Path(tmp) / f"warm-{n}", engine="dask", scheduler=cluster.address)
                start = time.perf_counter()
                result = run_sweep(program, params, Path(tmp) / f"map-{n}", engine="dask",
                                   scheduler=cluster.address)
                seconds[n] = time.perf_counter() - start
            stored[n] = rows(Path(tmp) / f"map-{n}")
            print(f"{n} worker{'s' * (n > 1)}: {result.ran} runs in {seconds[n]:.1f} s, "
                  f"{seconds[counts[0]] / seconds[n]:.2f}x over {counts[0]}", flush=True)
    same = all(stored[n] == stored[counts[0]] for n in counts)
    print("rows equal across worker counts: " + ("yes" if same else "NO"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
