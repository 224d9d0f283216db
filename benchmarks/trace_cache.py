"""Parse time vs cached load time for every public trace found.

    python benchmarks/trace_cache.py [--repeat N]

Uses a fresh temporary cache directory, so the numbers do not depend on what
earlier runs left behind. Each time is the best of N runs in this process
(imports and one-time initialisation excluded: the first cached load is
reported separately as "first hit").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import common  # noqa: F401  (this checkout's src/ first on the path)

from dtrforensics.trace import registry
from dtrforensics.trace.cache import CACHE_HIT, CACHE_MISS, load_program_with_status
from dtrforensics.trace.parser import parse_file


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per measurement (best is kept)")
    args = ap.parse_args()

    entries = [e for e in registry.available_traces() if e.public]
    if not entries:
        print("no public traces found: set DTRF_TRACES, or run `dtrf traces import PATH`",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="dtrf-bench-cache-") as tmp:
        os.environ["DTRF_CACHE"] = tmp
        print(f"{'trace':<16}{'size':>10}{'parse':>11}{'write':>11}{'first hit':>11}"
              f"{'cached':>11}{'speedup':>10}")
        for entry in entries:
            path = entry.path
            parse_s = best_of(args.repeat, lambda path=path: parse_file(path))
            start = time.perf_counter()
            _, status = load_program_with_status(path)
            write_s = time.perf_counter() - start
            assert status == CACHE_MISS, status
            start = time.perf_counter()
            _, status = load_program_with_status(path)
            first_s = time.perf_counter() - start
            assert status == CACHE_HIT, status
            cached_s = best_of(args.repeat, lambda path=path: load_program_with_status(path))
            print(f"{entry.name:<16}{path.stat().st_size / 1e6:>8.2f}MB"
                  f"{parse_s * 1e3:>9.1f}ms{write_s * 1e3:>9.1f}ms{first_s * 1e3:>9.1f}ms"
                  f"{cached_s * 1e3:>9.1f}ms{parse_s / cached_s:>9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
