"""What a policy from a file costs against the built-in it copies, in one run.

    python benchmarks/policy_cost.py [--repeats 3]

For every point below (each public trace once, both LSTM regimes, OOM and
completing points), replays the built-in `dtr` and its twin written through
the policy API (examples/policies/reference.py:dtr), checks that they make the
same decisions, and prints the best-of-N seconds of each and their ratio; then
the same for a policy that reads a history feature (the re-eviction penalty),
against the built-in. Compile time of the policy is reported apart.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import ROOT

from dtrforensics.engine.policies import get_policy
from dtrforensics.engine.replay import prepared, replay
from dtrforensics.trace import load_trace

POINTS = (("resnet32", 0.104), ("resnet32", 0.107), ("tv_densenet121", 0.4),
          ("inceptionv4", 0.5), ("transformer", 0.4), ("unet", 0.44), ("treelstm", 0.7),
          ("lstm", 0.265), ("lstm", 0.3), ("unroll_gan", 0.9))
TWIN = f"{ROOT}/examples/policies/reference.py:dtr"
PENALTY = f"{ROOT}/examples/policies/reevict_penalty.py:dtr_reevict_penalty"


def best_of(n: int, program, ratio: float, policy: str):
    times, summary = [], None
    for _ in range(n):
        summary = replay(program, ratio=ratio, policy=policy).summary
        times.append(summary.wall_seconds)
    return min(times), summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    started = time.perf_counter()
    get_policy(TWIN)
    get_policy(PENALTY)
    print(f"compiling two policy files: {time.perf_counter() - started:.2f} s (once per process)")
    print(f"{'point':<22} {'built-in s':>10} {'file s':>8} {'ratio':>6}  {'penalty s':>9}")
    ratios = []
    for trace, ratio in POINTS:
        try:
            program = load_trace(trace)
        except Exception as exc:  # public traces absent
            print(f"{trace}: skipped ({exc})")
            continue
        prepared(program)
        replay(program, ratio=ratio, policy="dtr")      # kernel loaded, caches warm
        builtin, a = best_of(args.repeats, program, ratio, "dtr")
        twin, b = best_of(args.repeats, program, ratio, TWIN)
        penalty, _ = best_of(1, program, ratio, PENALTY)
        same = (a.victims_sha256, a.clock, a.outcome) == (b.victims_sha256, b.clock, b.outcome)
        if not same:
            raise SystemExit(f"{trace}@{ratio}: the twin made other decisions than dtr")
        ratios.append(twin / builtin)
        print(f"{trace + '@' + str(ratio):<22} {builtin:>10.3f} {twin:>8.3f} "
              f"{twin / builtin:>5.2f}x  {penalty:>9.3f}")
    if ratios:
        print(f"policy file / built-in: median {statistics.median(ratios):.2f}x, "
              f"max {max(ratios):.2f}x over {len(ratios)} points (same decisions everywhere)")


if __name__ == "__main__":
    main()
