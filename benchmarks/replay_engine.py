"""Time one engine on points of benchmarks/replay.py, in its own process.

Run by `replay.py --before REV` with PYTHONPATH naming another checkout's
`src/` (an older revision of this engine), so that both engines are timed in
the same run on the same machine. It imports `dtrforensics` from the path it
is given, never this checkout's (it does not import `common`). It reads a JSON
request on stdin, `{"traces": {NAME: LOG}, "points": [[trace, policy, ratio],
...], "repeats": N}`, loads the kernel on a first replay outside the timings,
then prints one JSON line per point: the CPU seconds of the best of N replays,
the outcome, the clock and the SHA-256 of the victims.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from dtrforensics.engine.replay import replay
    from dtrforensics.trace import parse_file

    request = json.loads(sys.stdin.read())
    programs = {name: parse_file(path) for name, path in request["traces"].items()}
    for program in programs.values():
        replay(program, ratio=1.0)   # the kernel loaded (or compiled), the trace prepared
    for trace, policy, ratio in request["points"]:
        best, summary = float("inf"), None
        for _ in range(request["repeats"]):
            start = time.process_time()
            summary = replay(programs[trace], ratio=ratio, policy=policy).summary
            best = min(best, time.process_time() - start)
        print(json.dumps({"secs": best, "outcome": summary.outcome, "clock": summary.clock,
                          "victims_sha256": summary.victims_sha256}), flush=True)


if __name__ == "__main__":
    main()
