"""The run summary: the outcome of one replay and its headline figures.

JSON keys are a contract (`dtrf run --json`): they reuse the reference files'
names for the same quantities.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class MaxPinned:
    """Most pinned bytes at an allocation check that had to free memory
    ((0, 0, -1) when no check had to; the first maximum is kept)."""
    bytes: int
    depth: int
    op_id: int


@dataclass(frozen=True)
class OomInfo:
    op_id: int
    tensor: str
    tensor_id: int
    request: int
    memory: int
    pinned: int
    depth: int
    budget: int
    root_tensor: str
    final_pins: bool = False    # failed pinning, after op_id: the final pins (§2.3) or a PIN line


@dataclass(frozen=True)
class RunSummary:
    trace: str
    trace_sha256: str
    policy: str
    ratio: float | None
    budget: int
    peak: int
    model_compute: int
    outcome: str
    clock: int
    remat_compute: int
    overhead: float | None
    evictions: int
    dead_frees: int
    distinct_evicted: int
    stream_distinct: int
    remats: int
    collateral_remats: int
    max_depth: int
    max_pinned: MaxPinned
    oom: OomInfo | None
    victims_sha256: str
    budget_interval: tuple[int, int | None]
    ops_done: int
    peak_memory: int
    score_evals: int
    wall_seconds: float
    interventions: dict = field(default_factory=dict)
    error: str | None = None
    anomalies: int = 0          # broken invariants (semantics.md §13); 0 in a correct run
    exclusion_checks: int = 0   # intervention exclusion checks made (semantics.md §14)
    frontier_misses: int = 0    # absorbs the reference would have refused (semantics.md §8.3)
    note: str | None = None     # an OOM that is the policy's filters' doing, not the budget's

    @property
    def budget_interval_ratio(self) -> tuple[float, float | None]:
        lo, hi = self.budget_interval
        return lo / self.peak, (None if hi is None else hi / self.peak)

    def to_json(self) -> dict:
        out = asdict(self)
        out["budget_interval"] = list(self.budget_interval)
        out["budget_interval_ratio"] = list(self.budget_interval_ratio)
        return out


def victims_sha256(victims) -> str:
    """SHA-256 of "[" + ", ".join(victim storage ids) + "]", as the reference computes it."""
    return hashlib.sha256(b"[" + decimal_list(victims) + b"]").hexdigest()


NUMPY_TEXT_MIN = 1000   # fewer values: Python's join is quicker than numpy's set-up


def decimal_list(values) -> bytes:
    """", ".join of the non-negative ints' decimal texts, made in numpy: the
    text of a run's tens of thousands of victims through Python ints and str
    cost more than a small replay's kernel work."""
    v = np.asarray(values, dtype=np.int64).ravel()
    if len(v) < NUMPY_TEXT_MIN or v.min() < 0:
        return ", ".join(map(str, v.tolist())).encode()
    width = len(str(int(v.max())))
    text = np.empty((len(v), width + 2), dtype=np.uint8)
    rest = v.copy()
    for col in range(width - 1, -1, -1):   # right-aligned digits, leading zeros
        text[:, col] = ord("0") + rest % 10
        rest //= 10
    text[:, width], text[:, width + 1] = ord(","), ord(" ")
    digits = np.ones(len(v), dtype=np.int64)
    rest = v // 10
    while rest.any():
        digits += rest > 0
        rest //= 10
    keep = np.arange(width + 2) >= (width - digits)[:, None]   # leading zeros dropped
    return text[keep].tobytes()[:-2]


def distinct_count(values: np.ndarray) -> int:
    """How many distinct values (storage ids, >= 0): marked in a boolean array and
    counted (a Python set of tens of thousands of ids costs milliseconds a
    replay, sorting them a third more than marking; np.unique's first call
    imports numpy.ma, 12 ms)."""
    if len(values) == 0:
        return 0
    seen = np.zeros(int(values.max()) + 1, dtype=bool)
    seen[values] = True
    return int(np.count_nonzero(seen))
