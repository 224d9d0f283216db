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
MAX_INT = (1 << 63) - 1     # any other whole number an option takes: inside int64
MAX_DIM = (1 << 31) - 1     # a tensor size given on the command line (--batch, --seq, --image-size)
MAX_SECONDS = 365 * 24 * 3600.0     # a timeout or time limit: a year (threads and clocks take it)
# A ratio step or range, an overhead factor or jump: beyond this no budget (a ratio of
# a peak of at least one byte) and no overhead the engine's clock holds can reach.
MAX_FACTOR = float(MAX_BYTES)
# the names `dtrf torch` options take (checked where they are parsed, and again by the
# torch layer that runs them), here so that a command checks them without importing torch
COST_MODELS = ("flops", "measured")     # a recorded log's op costs (torch/costs.py)
INNER_COMPILERS = ("aot_eager", "inductor")     # the compiler of dtr_backend's lowered graphs


def finite(value: float, what: str) -> float:
    try:
        value = float(value)
    except OverflowError:       # an int beyond any float
        raise OptionError(f"{what} must be a finite number, got {value}") from None
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
    if peak is None and value >= MAX_BYTES:     # a peak is at least one byte
        raise OptionError(f"{what} {value!r} asks for more than the {MAX_BYTES:,} bytes a "
                          "budget may be, whatever the peak")
    return value


def budget(value: int, what: str = "--budget", minimum: int = 1) -> int:
    """A budget in bytes: an integer in [1, MAX_BYTES]. The one rule for every budget
    a user gives (options, run specs, library calls): a budget of 0 bytes is refused,
    not run as an OOM at op 0. The engine alone passes minimum=0, as a ratio's floor
    (or a sweep's grid point) of a tiny peak can be 0 bytes."""
    if isinstance(value, float):
        if not value.is_integer():
            raise OptionError(f"{what} must be a whole number of bytes, got {value!r}")
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise OptionError(f"{what} must be a whole number of bytes, got {value!r}")
    if not minimum <= value <= MAX_BYTES:
        raise OptionError(f"{what} must be between {minimum} and {MAX_BYTES:,} bytes "
                          f"(a budget must be > 0), got {value:,}")
    return value


OPTIONS = "--ratio or --budget"             # how the command line names the two
ARGUMENTS = "budget (bytes) or ratio"       # how the Python API names them


def budget_or_ratio(budget: int | None, ratio: float | None, names: str = OPTIONS) -> None:
    """Exactly one of a budget and a ratio is given: the one check of every run a
    user asks for (commands, `replay`, `execute`); `names` as the caller spells them."""
    if (budget is None) == (ratio is None):
        raise OptionError(f"give exactly one of {names}")


def budget_or_ratio_arguments(given_budget: int | None, given_ratio: float | None
                              ) -> tuple[int | None, float | None]:
    """A library call's budget or ratio: exactly one given (`budget_or_ratio`), and
    that one checked (`budget`, `ratio`); returned as checked."""
    budget_or_ratio(given_budget, given_ratio, ARGUMENTS)
    if given_budget is not None:
        return budget(given_budget, "budget"), None
    return None, ratio(given_ratio, "ratio")


def timeout(value: float | None, what: str = "--timeout", zero_ok: bool = False) -> float | None:
    """A wall-clock limit in seconds: None (no limit) or finite, > 0 (a library
    caller may ask for 0: stop at the first check) and at most MAX_SECONDS (a year:
    no limit is written as none, not as 1e308)."""
    if value is None:
        return None
    value = finite(value, what)
    if not (value >= 0 if zero_ok else value > 0):
        raise OptionError(f"{what} must be > 0 seconds, got {value!r}")
    return seconds_at_most_a_year(value, what)


def seconds_at_most_a_year(value: float, what: str) -> float:
    if value > MAX_SECONDS:
        raise OptionError(f"{what} must be at most {MAX_SECONDS:,.0f} seconds (a year; leave "
                          f"it out for no limit), got {value:.6g}")
    return value


def thrash_limit(value: float, model_compute: int | None = None,
                 what: str = "--thrash-limit") -> float:
    """An overhead factor >= 1 (1: any rematerialization thrashes) whose remat
    limit ((value - 1) x model compute) fits the engine's clock."""
    value = finite(value, what)
    if not value >= 1:
        raise OptionError(f"{what} is an overhead factor and must be >= 1, got {value!r}")
    if value - 1 >= MAX_FACTOR:     # model compute is at least 1 ns: beyond any trace
        raise OptionError(f"{what} {value!r} is beyond the engine's clock range "
                          f"(at most {1 + MAX_FACTOR:.3g}, whatever the trace)")
    if model_compute is not None and (value - 1) * model_compute >= MAX_BYTES:
        raise OptionError(f"{what} {value!r} is beyond the engine's clock range "
                          f"(at most {1 + MAX_BYTES / max(model_compute, 1):.3g} for this trace)")
    return value


def seed(value: int, what: str = "--seed") -> int:
    value = whole(value, what)
    if not 0 <= value <= MAX_SEED:
        raise OptionError(f"{what} must be between 0 and {MAX_SEED}, got {value}")
    return int(value)


def whole(value: int, what: str) -> int:
    """A whole number (an integral float too); a bool or a fraction is refused."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise OptionError(f"{what} must be a whole number, got {value!r}")
    return value


def at_least(value: int, minimum: int, what: str, maximum: int = MAX_INT) -> int:
    """An integer count that must be >= minimum (e.g. --jobs 1, --limit 0) and at most
    `maximum` (by default the int64 range every count ends up in)."""
    value = whole(value, what)
    if value < minimum:
        raise OptionError(f"{what} must be >= {minimum}, got {value}")
    if value > maximum:
        raise OptionError(f"{what} must be <= {maximum:,}, got {value:,}")
    return value


def index(value: int, what: str) -> int:
    """A storage id, op id or decision index given by the user: 0 to MAX_INT (the
    engine holds every one in an int64)."""
    value = whole(value, what)
    if not 0 <= value <= MAX_INT:
        raise OptionError(f"{what} must be between 0 and {MAX_INT:,}, got {value:,}")
    return value


def number(value: float, what: str, minimum: float = 0.0, maximum: float = math.inf,
           above: bool = False) -> float:
    """A finite number in [minimum, maximum] ((minimum, maximum] with `above`)."""
    value = finite(value, what)
    if value < minimum or (above and value == minimum):
        raise OptionError(f"{what} must be {'>' if above else '>='} {minimum:g}, got {value!r}")
    if value > maximum:
        raise OptionError(f"{what} must be <= {maximum:.6g}, got {value!r}")
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
