"""Time the reference simulator (simrd) on points of one trace, in its own process.

Run by `replay.py` when `DTRF_SIMRD` names an unpacked dtr-prototype `simrd`
folder (commit eff53cc4). It reads a JSON request on stdin,
`{"log": PATH, "points": [[policy, budget], ...], "repeats": N}`, parses the
log once (untimed, as the reference's own evaluation does), measures the
unconstrained baseline, then prints one JSON line per point: outcome, clock
and the CPU seconds spent inside the simulation alone, the best of N runs (process time: the machine may be
shared, and wall time then measures the neighbours too).

The runtime is `RuntimeV2EagerOptimized` with the thrash limit of
docs/semantics.md (rematerialization compute above 59 x the model compute).
simrd recurses once per nesting level, so the work runs in a thread with a
large stack and a raised recursion limit.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time

# simrd heuristic class for each of our reference-compatible policy names.
HEURISTICS = {
    "dtr": "DTR",
    "no-staleness": "AbESize",
    "no-size": "AbEStale",
    "compute-only": "AbE",
    "lru": "LRU",
    "size": "LargestStorage",
    "msps": "MSPS",
}


def simulate(request: dict) -> None:
    import simrd.heuristic as heuristics
    import simrd.heuristic.ablation as ablations
    from simrd.parse import parse_file
    from simrd.runtime import RematExceededError, RuntimeV1, RuntimeV2EagerOptimized

    with open(request["log"]) as log:
        callback = parse_file(log, start=True).get_closure()
    baseline = RuntimeV1(math.inf, heuristics.Heuristic(), stats=False, trace=False)
    callback(baseline)
    model_compute = baseline.telemetry.summary["model_compute"]
    for policy, budget in request["points"]:
        runs = []
        for _ in range(request.get("repeats", 1)):
            heuristic = getattr(ablations, HEURISTICS[policy])()
            runtime = RuntimeV2EagerOptimized(budget, heuristic, remat_limit=59 * model_compute,
                                              trace=False, stats=False)
            start = time.process_time()
            try:
                callback(runtime)
                outcome = "ok"
            except MemoryError:
                outcome = "oom"
            except RematExceededError:
                outcome = "thrashed"
            runs.append((time.process_time() - start, outcome, runtime.clock))
        if len({(o, c) for _, o, c in runs}) != 1:
            raise AssertionError(f"{policy} at {budget}: repeated runs differ: {runs}")
        secs, outcome, clock = min(runs)
        print(json.dumps({"policy": policy, "budget": budget, "outcome": outcome,
                          "clock": clock, "secs": secs}), flush=True)


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    sys.setrecursionlimit(1_000_000)
    threading.stack_size(1 << 29)
    request = json.load(sys.stdin)
    failures = []

    def work() -> None:
        try:
            simulate(request)
        except BaseException as exc:  # reported by the parent as a failed comparison
            failures.append(exc)
            raise

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
