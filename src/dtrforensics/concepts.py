"""The words of a budget map, defined once: statuses, regime switch, hole, fringe.

Sweep planning (`sweep/grid.py`), the findings and the reproduction count
with these functions; the SQL questions of `queries/sweep/` say the same in
SQL (`regime_switches.sql` takes the jump as its parameter,
`failure_regions.sql` and `exact_failure_regions.sql` mark holes) and
tests/test_concepts.py checks that both agree.
"""

from __future__ import annotations

from collections.abc import Sequence

# --- statuses ---------------------------------------------------------------------------

# How a run ends (engine/replay.py): it completes, or fails (oom, thrashed,
# error), or says nothing about its budget (timeout).
OK, OOM, THRASHED, ERROR, TIMEOUT = "ok", "oom", "thrashed", "error", "timeout"
OUTCOMES = (OK, OOM, THRASHED, ERROR, TIMEOUT)

# What a sweep row's `status` says of its budget (docs/sweep-format.md).
STATUS_OK, STATUS_FAIL, STATUS_UNRESOLVED = "ok", "fail", "unresolved"


def status_of(outcome: str) -> str:
    """The status of a run's outcome: ok, unresolved (timeout), else fail."""
    if outcome == OK:
        return STATUS_OK
    if outcome == TIMEOUT:
        return STATUS_UNRESOLVED
    return STATUS_FAIL


# What a sweep's `status` says (docs/sweep-format.md): its writer runs, or was
# killed (stored "running", its writer gone), or it ran to its end, stopped at a
# deadline, or was interrupted.
RUNNING, KILLED, COMPLETE, STOPPED, INTERRUPTED = (
    "running", "killed", "complete", "stopped", "interrupted")


def sweep_status(stored: str, writer_alive: bool) -> str:
    """A sweep's status, the same in every view of it: the status its folder
    stores, except that a "running" sweep whose writer is gone is "killed"."""
    return KILLED if stored == RUNNING and not writer_alive else stored


def completes(outcome: str | None) -> bool:
    """An outcome (or status) that completes the run."""
    return outcome == OK


def known(outcome: str | None) -> bool:
    """An outcome (or status) that certifies its budget: not unknown (None), not a
    timeout, not unresolved."""
    return outcome is not None and outcome not in (TIMEOUT, STATUS_UNRESOLVED)


# --- switches ---------------------------------------------------------------------------

REGIME_JUMP = 0.25      # the default relative jump of a regime switch (sweep --overhead-jump)
# The regime study's switch: the overhead more than doubles between neighbours.
DOUBLING = 1.0


def overhead_factor(a: float, b: float) -> float:
    """max / min of two overheads: how far apart two regimes are."""
    return max(a, b) / min(a, b)


def is_regime_switch(a: float | None, b: float | None, jump: float) -> bool:
    """Two neighbouring completing runs (overheads `a`, `b`) in different regimes:
    their overheads differ by more than a factor 1 + `jump`."""
    return bool(a) and bool(b) and overhead_factor(a, b) > 1 + jump


def is_feasibility_switch(a: str | None, b: str | None) -> bool:
    """Two neighbouring certified outcomes of which exactly one completes."""
    return known(a) and known(b) and completes(a) != completes(b)


# --- failure runs and holes -------------------------------------------------------------

def failure_runs(outcomes: Sequence[str | None]) -> list[tuple[int, int]]:
    """(first, last) index of each maximal run of failing entries, in order.
    Unknown entries (None, timeouts) neither break nor extend a run."""
    runs: list[tuple[int, int]] = []
    start = last = None
    for i, o in enumerate(outcomes):
        if not known(o):
            continue
        if completes(o):
            if start is not None:
                runs.append((start, last))
            start = None
        else:
            start = i if start is None else start
            last = i
    if start is not None:
        runs.append((start, last))
    return runs


def holes(outcomes: Sequence[str | None]) -> list[tuple[int, int]]:
    """The failure runs (see `failure_runs`) that are feasibility holes: the certified
    budgets next to them, below and above, both complete (failures below the first
    success are not holes)."""
    certified = [i for i, o in enumerate(outcomes) if known(o)]
    first, last = (certified[0], certified[-1]) if certified else (0, -1)
    # a maximal run has a completing certified entry on each side unless it ends the sequence
    return [(a, b) for a, b in failure_runs(outcomes) if a != first and b != last]


# --- micro structure and fringes --------------------------------------------------------

RESOLUTION = 0.001      # of peak: the studies' finest grid; narrower structure is micro


def is_micro(width: int, peak: int, resolution: float = RESOLUTION) -> bool:
    """A stretch of `width` bytes narrower than the studies' finest grid."""
    return width < resolution * peak


def fringes(regions: Sequence[tuple[int, int]], peak: int,
            resolution: float = RESOLUTION) -> list[tuple[int, int]]:
    """(first, last) index of each fringe among failure regions (lo, hi) in budget
    order: two or more regions whose completing stretches between them are all
    micro, so outcomes alternate below the studies' resolution."""
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(regions) + 1):
        if i < len(regions) and is_micro(regions[i][0] - regions[i - 1][1] - 1, peak, resolution):
            continue
        if i - 1 > start:
            out.append((start, i - 1))
        start = i
    return out
