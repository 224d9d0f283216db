"""Work shared by `explain` and `compare-policies`, against the same work unshared, in one run.

    python benchmarks/shared_work.py [--long] [--repeats 3]

1. `explain` at a public OOM point (ResNet-32 0.104, the docs' search: 32
   attempts; with `--long` also InceptionV4 0.235, 6 attempts), unrecorded,
   one process (`jobs=1`): with its runs resumed from the failing run's
   snapshots and the control made once (`share=True`), and from op 0
   (`share=False`). Both sides are measured alike, twice: each search in a
   fresh process (what one `dtrf explain` pays: imports, and for the shared
   side the compiled digests' first load), and in one warm process
   (alternating; each search starts from nothing the one before made). Best
   of `--repeats`; both must give the same result.
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
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import timed

from dtrforensics.analyses.explain import explain
from dtrforensics.analyses.policy_comparison import compare_policies, comparison_of
from dtrforensics.engine import replay as replay_module
from dtrforensics.sweep.holes import analyze, load_points
from dtrforensics.trace import load_trace

EXPLAIN_POINTS = [("resnet32", 0.104, 32)]
LONG_POINTS = [("inceptionv4", 0.235, 6)]
POLICIES = ("dtr", "no-staleness", "no-size", "compute-only")


def comparable(result) -> tuple:
    doc = json.loads(json.dumps(result.to_json()))
    doc["baseline"].pop("wall_seconds")
    return doc, [{k: v for k, v in a.summary.items() if k != "wall_seconds"}
                 for a in result.attempts]


def search(program, ratio: float, attempts: int, share: bool):
    return explain(program, ratio=ratio, record_root=None, jobs=1, max_attempts=attempts,
                   share=share)


def fresh(name: str, ratio: float, attempts: int, share: bool) -> tuple[list, float, float]:
    """One search in a new process: its result, its CPU seconds (imports
    included) and the wall seconds from launch to exit."""
    wall = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--one", name, str(ratio), str(attempts),
                           str(int(share))], capture_output=True, text=True, check=True)
    doc = json.loads(done.stdout)
    return doc["result"], doc["cpu"], time.perf_counter() - wall


def one(name: str, ratio: float, attempts: int, share: bool) -> None:
    """The child's side of `fresh`."""
    result = comparable(search(load_trace(name), ratio, attempts, share))
    print(json.dumps({"result": result, "cpu": time.process_time()}))


def bench_explain(name: str, ratio: float, attempts: int, repeats: int) -> None:
    cpu: dict[tuple[str, bool], list[float]] = {}
    wall: dict[tuple[str, bool], list[float]] = {}
    results = {}

    def keep(where: str, share: bool, result, c: float, w: float) -> None:
        assert results.setdefault(share, result) == result   # the same every time
        cpu.setdefault((where, share), []).append(c)
        wall.setdefault((where, share), []).append(w)

    program = load_trace(name)
    for share in (False, True):
        search(program, ratio, attempts, share)            # warm: imports, digests
    for _ in range(repeats):
        for share in (False, True):
            keep("fresh process", share, *fresh(name, ratio, attempts, share))
            result, c, w = timed(lambda share=share: search(program, ratio, attempts, share))
            keep("warm process", share, json.loads(json.dumps(comparable(result))), c, w)
    same = results[True] == results[False]
    for where in ("fresh process", "warm process"):
        before, after = min(cpu[where, False]), min(cpu[where, True])
        print(f"explain {name} {ratio} ({attempts} attempts), {where}: from op 0 "
              f"{before:6.2f} s CPU ({min(wall[where, False]):.2f} s wall), shared "
              f"{after:6.2f} s CPU ({min(wall[where, True]):.2f} s wall): "
              f"{before / after:.2f}x; same result: {same}")
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
    ap.add_argument("--one", nargs=4, metavar=("TRACE", "RATIO", "ATTEMPTS", "SHARE"),
                    help=argparse.SUPPRESS)   # one search, in the child of `fresh`
    args = ap.parse_args()
    if args.one:
        name, ratio, attempts, share = args.one
        return one(name, float(ratio), int(attempts), share == "1")
    for name, ratio, attempts in EXPLAIN_POINTS + (LONG_POINTS if args.long else []):
        bench_explain(name, ratio, attempts, args.repeats)
    bench_compare_policies(max(5, args.repeats))


if __name__ == "__main__":
    main()
