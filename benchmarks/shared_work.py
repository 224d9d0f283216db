"""Work shared by `explain` and `compare-policies`, against the same work unshared, in one run.

    python benchmarks/shared_work.py [--long] [--repeats 3]

1. `explain` at a public OOM point (ResNet-32 0.104, the docs' search: 32
   attempts; with `--long` also InceptionV4 0.235, 6 attempts), unrecorded, in
   one process: with its runs resumed from the failing run's snapshots and the
   control made once (`share=True`), and from op 0 (`share=False`), alternating,
   best of `--repeats`. Both must give the same result.
2. `compare-policies` (the four default policies, ResNet-32 0.10-0.60, step
   0.05): the preparations per trace counted in the sweep (once each, for all
   policies), and the comparison of the stored sweep with its questions asked
   of one connection against the two it opened before (`analyze` then
   `load_points`), best of 5.

Times are CPU seconds of this process (the machine is shared: CPU time moves
less with the other load than wall time), with the wall seconds beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dtrforensics.analyses.explain import explain  # noqa: E402
from dtrforensics.analyses.policy_comparison import compare_policies, comparison_of  # noqa: E402
from dtrforensics.engine import replay as replay_module  # noqa: E402
from dtrforensics.sweep.holes import analyze, load_points  # noqa: E402
from dtrforensics.trace import load_trace  # noqa: E402

EXPLAIN_POINTS = [("resnet32", 0.104, 32)]
LONG_POINTS = [("inceptionv4", 0.235, 6)]
POLICIES = ("dtr", "no-staleness", "no-size", "compute-only")


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def comparable(result) -> tuple:
    doc = json.loads(json.dumps(result.to_json()))
    doc["baseline"].pop("wall_seconds")
    return doc, [{k: v for k, v in a.summary.items() if k != "wall_seconds"}
                 for a in result.attempts]


def bench_explain(name: str, ratio: float, attempts: int, repeats: int) -> None:
    program = load_trace(name)
    run = {share: (lambda share=share: explain(program, ratio=ratio, record_root=None, jobs=1,
                                               max_attempts=attempts, share=share))
           for share in (False, True)}
    results = {share: comparable(run[share]()) for share in (False, True)}  # warm: imports
    cpu: dict[bool, list[float]] = {False: [], True: []}
    wall: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for share in (False, True):
            result, c, w = timed(run[share])
            assert comparable(result) == results[share]
            cpu[share].append(c)
            wall[share].append(w)
    same = results[True] == results[False]
    before, after = min(cpu[False]), min(cpu[True])
    print(f"explain {name} {ratio} ({attempts} attempts): from op 0 {before:6.2f} s CPU "
          f"({min(wall[False]):.2f} s wall), shared {after:6.2f} s CPU "
          f"({min(wall[True]):.2f} s wall): {before / after:.2f}x; same result: {same}")
    if not same:
        raise SystemExit("explain with shared work differs from explain from op 0")


def count_preparations(fn) -> Counter:
    """Kernel graphs and baselines computed while `fn` runs."""
    made: Counter = Counter()
    saved = {n: getattr(replay_module, n) for n in ("kernel_graph", "baseline")}
    for n, real in saved.items():
        setattr(replay_module, n, lambda p, _n=n, _real=real: made.update([_n]) or _real(p))
    try:
        fn()
    finally:
        for n, real in saved.items():
            setattr(replay_module, n, real)
    return made


def bench_compare_policies(repeats: int) -> None:
    program = load_trace("resnet32")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        fresh = load_trace(str(program.source))     # not prepared yet: its preparations count
        made = count_preparations(lambda: compare_policies(
            fresh, POLICIES, ratio_from=0.1, ratio_to=0.6, step=0.05, out=out, jobs=1))
        print(f"compare-policies resnet32, {len(POLICIES)} policies: kernel graph "
              f"{made['kernel_graph']}x, baseline {made['baseline']}x for all policies")
        two, one = [], []
        for _ in range(repeats):
            two.append(timed(lambda: (analyze(out), load_points(out)))[1])
            one.append(timed(lambda: comparison_of(out))[1])
        print(f"compare-policies comparison: two connections {min(two):.3f} s CPU, one "
              f"{min(one):.3f} s CPU (and the standings): {min(two) / min(one):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long", action="store_true", help="also InceptionV4 0.235")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for name, ratio, attempts in EXPLAIN_POINTS + (LONG_POINTS if args.long else []):
        bench_explain(name, ratio, attempts, args.repeats)
    bench_compare_policies(max(5, args.repeats))


if __name__ == "__main__":
    main()
