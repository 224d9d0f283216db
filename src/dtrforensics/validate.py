"""Checks of option values where they enter: each returns the value or raises
`OptionError` naming the option and what is wrong with it.

The bounds keep every quantity the engine derives inside int64: a budget
(bytes) and the remat limit ((thrash limit - 1) x model compute, ns) stay
below `MAX_BYTES`, with room left for the sums the engine forms from them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from .errors import OptionError

MAX_BYTES = 1 << 62          # budgets and derived limits: far beyond any device, inside int64
MAX_SEED = (1 << 63) - 1


def finite(value: float, what: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise OptionError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(value):
        raise OptionError(f"{what} must be a finite number, got {value}")
    return value


def ratio(value: float, what: str = "--ratio", peak: int | None = None) -> float:
    """A budget ratio: finite, > 0, and (given the trace's peak) a budget below MAX_BYTES."""
    value = finite(value, what)
    if not value > 0:
        raise OptionError(f"{what} must be > 0 (a fraction of peak memory), got {value!r}")
    if peak is not None and value * peak >= MAX_BYTES:
        raise OptionError(f"{what} {value!r} asks for {value * peak:.3g} bytes, more than the "
                          f"{MAX_BYTES:,} bytes a budget may be")
    return value


def budget(value: int, what: str = "--budget") -> int:
    """A budget in bytes: an integer in [0, MAX_BYTES]."""
    if isinstance(value, float):
        if not value.is_integer():
            raise OptionError(f"{what} must be a whole number of bytes, got {value!r}")
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise OptionError(f"{what} must be a whole number of bytes, got {value!r}")
    if not 0 <= value <= MAX_BYTES:
        raise OptionError(f"{what} must be between 0 and {MAX_BYTES:,} bytes, got {value:,}")
    return value


def timeout(value: float | None, what: str = "--timeout", zero_ok: bool = False) -> float | None:
    """A wall-clock limit in seconds: None (no limit) or finite and > 0 (a library
    caller may ask for 0: stop at the first check)."""
    if value is None:
        return None
    value = finite(value, what)
    if not (value >= 0 if zero_ok else value > 0):
        raise OptionError(f"{what} must be > 0 seconds, got {value!r}")
    return value


def thrash_limit(value: float, model_compute: int | None = None,
                 what: str = "--thrash-limit") -> float:
    """An overhead factor >= 1 (1: any rematerialization thrashes) whose remat
    limit ((value - 1) x model compute) fits the engine's clock."""
    value = finite(value, what)
    if not value >= 1:
        raise OptionError(f"{what} is an overhead factor and must be >= 1, got {value!r}")
    if model_compute is not None and (value - 1) * model_compute >= MAX_BYTES:
        raise OptionError(f"{what} {value!r} is beyond the engine's clock range "
                          f"(at most {1 + MAX_BYTES / max(model_compute, 1):.3g} for this trace)")
    return value


def seed(value: int, what: str = "--seed") -> int:
    if not 0 <= int(value) <= MAX_SEED:
        raise OptionError(f"{what} must be between 0 and {MAX_SEED}, got {value}")
    return int(value)


def at_least(value: int, minimum: int, what: str) -> int:
    """An integer count that must be >= minimum (e.g. --jobs 1, --limit 0)."""
    if value < minimum:
        raise OptionError(f"{what} must be >= {minimum}, got {value}")
    return value


def jobs(value: int, what: str = "--jobs") -> int:
    """Worker processes: at least 1 and at most 8 per core (each worker holds a trace
    and a kernel; thousands of them would take the machine down, not go faster)."""
    limit = 8 * (os.cpu_count() or 1)
    at_least(value, 1, what)
    if value > limit:
        raise OptionError(f"{what} {value:,} is more than {limit} worker processes "
                          f"(8 per core on this machine)")
    return value


def positive(value: float, what: str) -> float:
    value = finite(value, what)
    if not value > 0:
        raise OptionError(f"{what} must be > 0, got {value!r}")
    return value


def choice(value: str, known: Iterable[str], what: str) -> str:
    known = list(known)
    if value not in known:
        raise OptionError(f"unknown {what} {value!r}; known: {', '.join(known)}")
    return value


def op_window(window: tuple[int, int], n_ops: int | None, what: str) -> tuple[int, int]:
    """An inclusive window A..B of top-level op ids, A <= B, inside the trace's
    ops 0..n_ops-1 (when n_ops is known)."""
    lo, hi = window
    if lo > hi:
        raise OptionError(f"{what} {lo}..{hi} is reversed: write the smaller op id first "
                          f"({hi}..{lo})")
    if n_ops is not None and (lo < 0 or hi >= n_ops):
        raise OptionError(f"{what} {lo}..{hi} is outside the trace's ops 0..{n_ops - 1}")
    return window
