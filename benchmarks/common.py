"""What every benchmark starts with: this checkout's `src/` (and the helpers of
`tests/`) importable ahead of any installed copy, so that a benchmark measures
the code beside it; and the options and clocks several of them share."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _folder in ("tests", "src"):        # src/ ends up first
    if str(ROOT / _folder) not in sys.path:
        sys.path.insert(0, str(ROOT / _folder))


def range_options(ap: argparse.ArgumentParser, trace: str, ratio_from: float,
                  ratio_to: float, option: str = "--trace") -> None:
    """--trace (or `option`), --from and --to: the budget range, as fractions
    of the trace's peak."""
    ap.add_argument(option, default=trace)
    ap.add_argument("--from", dest="ratio_from", type=float, default=ratio_from)
    ap.add_argument("--to", dest="ratio_to", type=float, default=ratio_to)


def timed(fn):
    """`fn()`, its CPU seconds in this process and its wall seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
