"""The certificate walk: partition a budget range into exact intervals.

A replay at budget b reports its budget-interval certificate [lo, hi]: every
budget in it yields the identical execution (engine/summary.py). The intervals
of all budgets partition the budget axis. The walk runs at the high end of an
uncertified gap, learns [lo, hi], continues at lo - 1, and so on; any finished
run (a grid sample, a refinement point) certifies its whole interval too, so
the walk only fills what the samples left uncertified.

The walk goes down from the top of the range, the gaps above the lowest
certified success first: the question a sweep asks first is where the lowest
success is and which failures lie above it, and that is answered (every budget
above the lowest certified success is certified) before runs go to the
failures below it, often the most numerous intervals (an OOM at every op of a
long prefix).

Parallel workers walk different parts of the range at once: a free worker takes
the top of an unclaimed gap, or else splits the widest gap ahead of (below) a
busy walker at its midpoint (a run there certifies backwards as well as forwards,
so the two walkers meet). A split can land in an interval another walker is
about to certify: that run is wasted but harmless (its key is new, its
interval a duplicate).

The walk goes in rounds (`WalkRounds`): each round takes `WALK_ROUND`
budgets per policy from the results of all earlier rounds, and the next round
starts when every run of this one has finished. Which budgets are probed is
then a function of the parameters alone, never of which worker finished
first or how many there are: a repeated or resumed sweep probes the same
budgets, row for row (a resumed sweep replays the rounds, taking stored runs
instead of running them).

Bounds: at most `max_runs` walk runs (runs already stored count); with
`resolution` R > 1 the walker steps to lo - R instead of lo - 1 and leaves
gaps narrower than R uncertified. A timed-out run certifies nothing: its budget
blocks the walk at that point (only splits enter the gap behind it), so a
region of timeouts costs runs, bounded by `max_runs`, never a false certificate.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable

from .store import STATUS_OK, STATUS_UNRESOLVED, Point

WALK_ROUND = 4  # budgets per policy and round; fixed, so the probes do not depend on jobs


@dataclass(frozen=True)
class Gap:
    """Uncertified budgets [lo, hi] and why they are left."""

    lo: int
    hi: int
    reason: str  # "below-resolution" | "run-limit" | "timeout"

    @property
    def width(self) -> int:
        return self.hi - self.lo + 1


class ExactWalk:
    """The walk over [lo, hi] bytes for one policy. Feed it every finished run
    of that policy (`absorb`); ask it for budgets to run next (`take`)."""

    def __init__(self, lo: int, hi: int, *, max_runs: int, resolution: int = 1):
        if lo > hi:
            raise ValueError(f"empty budget range [{lo}, {hi}]")
        self.lo, self.hi = lo, hi
        self.max_runs = max_runs
        self.resolution = max(1, resolution)
        self.runs = 0                        # walk runs made or stored
        self._covered: list[list[int]] = []  # disjoint, sorted, merged certified ranges (clipped)
        self._inflight: set[int] = set()
        self._timeouts: set[int] = set()
        self._widths: list[int] = []         # certified interval widths (for the split rule)
        self._first_ok: int | None = None    # lowest budget certified to complete

    # --- feeding results ---------------------------------------------------------
    def absorb(self, budget: int, status: str, interval: tuple[int | None, int | None],
               *, walk_run: bool) -> None:
        """A finished run at `budget` (`walk_run`: it was asked for by a walk)."""
        self._inflight.discard(budget)
        if walk_run:
            self.runs += 1
        lo, hi = interval
        if status == STATUS_UNRESOLVED or lo is None:
            self._timeouts.add(budget)
            return
        hi = self.hi if hi is None else hi
        self._widths.append(hi - lo + 1)
        lo, hi = max(lo, self.lo), min(hi, self.hi)
        if lo <= hi:
            self._cover(lo, hi)
            if status == STATUS_OK and (self._first_ok is None or lo < self._first_ok):
                self._first_ok = lo

    def _cover(self, lo: int, hi: int) -> None:
        cov = self._covered
        i = bisect.bisect_left(cov, [lo, lo])
        if i > 0 and cov[i - 1][1] >= lo - 1:
            i -= 1
        j = i
        while j < len(cov) and cov[j][0] <= hi + 1:
            lo, hi = min(lo, cov[j][0]), max(hi, cov[j][1])
            j += 1
        cov[i:j] = [[lo, hi]]

    # --- state -------------------------------------------------------------------
    def covered_bytes(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self._covered)

    def coverage(self) -> float:
        return self.covered_bytes() / (self.hi - self.lo + 1)

    def gaps(self) -> list[tuple[int, int]]:
        """Uncertified ranges inside [lo, hi], in order."""
        out, at = [], self.lo
        for lo, hi in self._covered:
            if lo > at:
                out.append((at, lo - 1))
            at = hi + 1
        if at <= self.hi:
            out.append((at, self.hi))
        return out

    def classified_gaps(self) -> list[Gap]:
        """Gaps with the reason they are still there (after the walk stopped)."""
        out = []
        for lo, hi in self.gaps():
            if any(lo <= t <= hi for t in self._timeouts):
                reason = "timeout"
            elif hi - lo + 1 < self.resolution:
                reason = "below-resolution"
            else:
                reason = "run-limit"
            out.append(Gap(lo, hi, reason))
        return out

    # --- choosing budgets --------------------------------------------------------
    def take(self, n: int) -> list[int]:
        """Up to n budgets to run now."""
        out = []
        while len(out) < n:
            b = self._next()
            if b is None:
                break
            self._inflight.add(b)
            out.append(b)
        return out

    def _next(self) -> int | None:
        """Budgets above the lowest certified success first, then those below it;
        in each, the highest first: a free walker starts at the top of the highest
        unclaimed gap and walks down, and only when every top is claimed does a
        split go into the widest segment below a walker. So the holes above the
        first success are certified, and the first success moves down, before a
        run goes to certifying the failures below it."""
        if self.runs + len(self._inflight) >= self.max_runs:
            return None
        markers = sorted(self._inflight | self._timeouts)
        first = self._first_ok
        gaps = self.gaps()[::-1]
        above = [g for g in gaps if first is None or g[0] > first]
        below = [g for g in gaps if first is not None and g[0] < first]
        for part in (above, below):
            budget = self._pick(part, markers)
            if budget is not None:
                return budget
        return None

    def _pick(self, gaps: list[tuple[int, int]], markers: list[int]) -> int | None:
        """The top of the first unclaimed gap of `gaps`, else the midpoint of the
        widest segment below a walker (or a timed-out budget)."""
        best, best_width = None, 0
        for g0, g1 in gaps:
            if g1 - g0 + 1 < self.resolution:
                continue
            inside = markers[bisect.bisect_left(markers, g0):bisect.bisect_right(markers, g1)]
            free_start = inside[-1] + 1 if inside else g0
            if g1 - free_start + 1 >= self.resolution:
                # unclaimed top: walk it (below a certified interval, step by the resolution)
                return max(g1 - self.resolution + 1, free_start) if g1 < self.hi else g1
            for below, m in zip([g0 - 1] + inside[:-1], inside):
                width = m - below - 1
                if width > best_width:
                    best, best_width = (below + 1, m - 1), width
        if best is None or best_width < max(2, 2 * self.resolution, self._split_floor()):
            return None
        return (best[0] + best[1]) // 2

    def _split_floor(self) -> int:
        """Splitting a segment narrower than a typical interval mostly duplicates
        work its walker is about to do: the median certified width so far."""
        if not self._widths:
            return 0
        widths = sorted(self._widths)
        return widths[len(widths) // 2]


class WalkRounds:
    """The walks of all policies as a point source for the sweep scheduler.

    `stored` maps (policy, budget) to the runs-table row of an exact run made
    by an earlier sweep in this folder: replaying the rounds takes those rows
    instead of running them. A probe at a budget no stored row was run at, but
    inside a stored row's certificate (a sweep extended to a wider range, or
    one made by an earlier walk order), takes that certificate: a run there
    would yield the identical execution. `on_absorb` hears of every result
    absorbed.
    """

    queue_per_worker = 2

    def __init__(self, walks: dict[str, ExactWalk], peak: int, stored: dict[tuple, dict],
                 on_absorb: Callable[[], None] = lambda: None):
        self.walks, self.peak, self.stored = walks, peak, stored
        self.on_absorb = on_absorb
        self._ready: list[Point] = []
        self._outstanding = 0
        self._certified: dict[str, list[tuple[int, float, dict]]] = {}
        for (policy, _), row in stored.items():
            if row["interval_lo"] is not None:
                hi = float("inf") if row["interval_hi"] is None else row["interval_hi"]
                self._certified.setdefault(policy, []).append((row["interval_lo"], hi, row))
        for rows in self._certified.values():
            rows.sort(key=lambda t: (t[0], t[1]))

    def _stored_answer(self, policy: str, budget: int) -> dict | None:
        row = self.stored.get((policy, budget))
        if row is not None:
            return row
        rows = self._certified.get(policy, [])
        i = bisect.bisect_right(rows, budget, key=lambda t: t[0]) - 1
        return rows[i][2] if i >= 0 and budget <= rows[i][1] else None

    def take(self, n: int) -> list[Point]:
        """Up to n points of the current round (none while it is still running)."""
        while not self._ready and not self._outstanding:
            if not self._plan_round():
                break
        out, self._ready = self._ready[:n], self._ready[n:]
        self._outstanding += len(out)
        return out

    def _plan_round(self) -> bool:
        """Plan the next round; False when every walk is done."""
        planned = [(policy, b) for policy, walk in self.walks.items()
                   for b in walk.take(WALK_ROUND)]
        for policy, b in planned:
            row = self._stored_answer(policy, b)
            if row is None:
                self._ready.append(Point(policy, b, 0, b / self.peak, "exact"))
            else:
                self._absorb_row(policy, b, row)
        return bool(planned)

    def absorb(self, point: Point, row: dict) -> None:
        self._outstanding -= 1
        self._absorb_row(point.policy, point.budget, row)

    def _absorb_row(self, policy: str, budget: int, row: dict) -> None:
        self.walks[policy].absorb(budget, row["status"], (row["interval_lo"], row["interval_hi"]),
                                  walk_run=True)
        self.on_absorb()
