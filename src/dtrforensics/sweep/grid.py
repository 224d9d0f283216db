"""Which budgets a sampling sweep runs: grid, interior samples, refinement, repeats.

Every function here is pure: points are planned from the parameters and from
results already known, so a resumed sweep plans exactly the points the
interrupted one did and skips those already stored.

Ratios are the float64 values of their decimal text (`0.097`, never
`0.095 + 2 * 0.001`), as a user types them and as the reference computed its
budgets: budget = floor(ratio x peak) bytes (`budget_for_ratio`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from ..concepts import is_regime_switch
from ..engine.baseline import budget_for_ratio
from .store import STATUS_OK, STATUS_UNRESOLVED, Point, SweepParams

REPEAT_CAP = 12   # confirmation points per policy


@dataclass(frozen=True)
class Sample:
    """A finished run, as planning sees it."""

    budget: int
    ratio: float
    status: str
    outcome: str
    overhead: float | None


def _dec(x: float) -> Decimal:
    return Decimal(repr(float(x)))


def decimal_grid(lo: float, hi: float, step: float) -> list[float]:
    """lo, lo + step, ... up to hi (hi itself included, on the grid or not)."""
    d_lo, d_hi, d_step = _dec(lo), _dec(hi), _dec(step)
    n = int((d_hi - d_lo) / d_step)
    ratios = [float(d_lo + i * d_step) for i in range(n + 1)]
    if ratios[-1] < hi:
        ratios.append(float(hi))
    return ratios


def planned_points(params: SweepParams) -> int:
    """An upper bound on the runs a sweep may make, counted without planning them:
    grid ratios, interior samples, refinement down to `min_step` and the exact
    walk's `max_runs`, under every policy (repeats rerun some of these)."""
    width = _dec(params.ratio_to) - _dec(params.ratio_from)
    per_policy = 0
    if params.step is not None:
        intervals = int(width / _dec(params.step)) + 1
        per_policy += intervals + 1 + intervals * params.interior
        if params.refine:
            per_policy += int(width / _dec(params.min_step)) + 1
    if params.exact:
        per_policy += params.max_runs
    return per_policy * len(params.policies) * (1 + params.repeats)


def range_bytes(params: SweepParams, peak: int) -> tuple[int, int]:
    """The swept budget range [floor(from x peak), floor(to x peak)] in bytes."""
    return budget_for_ratio(params.ratio_from, peak), budget_for_ratio(params.ratio_to, peak)


def plan_grid(params: SweepParams, peak: int) -> list[Point]:
    """Stage A: every grid ratio under every policy."""
    if params.step is None:
        return []
    ratios = decimal_grid(params.ratio_from, params.ratio_to, params.step)
    return _dedup([Point(pol, budget_for_ratio(r, peak), 0, r, "grid")
                   for pol in params.policies for r in ratios])


def plan_interior(params: SweepParams, peak: int) -> list[Point]:
    """`interior` seeded uniform budgets strictly inside every grid interval.

    Interval i draws from its own generator seeded (seed, i), so the points do
    not depend on the range's other intervals, and all policies share them.
    """
    if params.step is None or params.interior <= 0:
        return []
    budgets = [budget_for_ratio(r, peak)
               for r in decimal_grid(params.ratio_from, params.ratio_to, params.step)]
    chosen: list[int] = []
    for i, (a, b) in enumerate(zip(budgets, budgets[1:])):
        if b - a < 2:
            continue
        rng = np.random.default_rng([params.seed, i])
        draws = rng.integers(a + 1, b, size=params.interior, endpoint=False)
        chosen.extend(sorted(set(int(x) for x in draws)))
    return _dedup([Point(pol, b, 0, b / peak, "interior")
                   for pol in params.policies for b in chosen])


def differs(a: Sample, b: Sample, overhead_jump: float) -> bool:
    """Whether neighbouring samples call for a closer look: other outcome, or
    both complete and their overheads differ by more than `overhead_jump`."""
    if a.outcome != b.outcome:
        return True
    return a.status == STATUS_OK and is_regime_switch(a.overhead, b.overhead, overhead_jump)


def sub_step(width: Decimal, step: Decimal, min_step: Decimal) -> Decimal:
    """step / 10^k for the smallest k >= 1 below `width`, but not under min_step."""
    s = step / 10
    while s >= width and s > min_step:
        s /= 10
    return max(s, min_step)


def plan_refinement(samples: dict[str, list[Sample]], params: SweepParams,
                    peak: int) -> list[Point]:
    """One refinement round: decimal points at a finer step inside every interval
    between neighbouring samples (timeouts set aside) that `differs`, wider
    than `min_step`. Callers iterate rounds until a round plans nothing new."""
    if not params.refine or params.step is None:
        return []
    step, min_step = _dec(params.step), _dec(params.min_step)
    points = []
    for policy in params.policies:
        seq = sorted((s for s in samples.get(policy, ()) if s.status != STATUS_UNRESOLVED),
                     key=lambda s: s.budget)
        known = {s.budget for s in samples.get(policy, ())}
        for a, b in zip(seq, seq[1:]):
            if not differs(a, b, params.overhead_jump):
                continue
            lo, hi = _dec(a.ratio), _dec(b.ratio)
            width = hi - lo
            if width <= min_step:
                continue
            s = sub_step(width, step, min_step)
            k = (lo / s).to_integral_value(rounding="ROUND_FLOOR") + 1
            while k * s < hi:
                r = float(k * s)
                budget = budget_for_ratio(r, peak)
                if a.budget < budget < b.budget and budget not in known:
                    known.add(budget)
                    points.append(Point(policy, budget, 0, r, "refine"))
                k += 1
    return points


def select_repeats(samples: dict[str, list[Sample]], params: SweepParams) -> list[tuple[str, int]]:
    """(policy, budget) of the points worth confirming: the first success, both
    sides of every outcome change, both ends of every overhead jump; at most
    REPEAT_CAP per policy (a seeded choice when there are more)."""
    chosen = []
    for policy in params.policies:
        seq = sorted((s for s in samples.get(policy, ()) if s.status != STATUS_UNRESOLVED),
                     key=lambda s: s.budget)
        picks: set[int] = set()
        ok = [s for s in seq if s.status == STATUS_OK]
        if ok:
            picks.add(ok[0].budget)
        for a, b in zip(seq, seq[1:]):
            if differs(a, b, params.overhead_jump):
                picks.update((a.budget, b.budget))
        picks_sorted = sorted(picks)
        if len(picks_sorted) > REPEAT_CAP:
            rng = np.random.default_rng([params.seed, 0x5EED])
            picks_sorted = sorted(int(x) for x in rng.choice(picks_sorted, REPEAT_CAP,
                                                              replace=False))
        chosen.extend((policy, b) for b in picks_sorted)
    return chosen


def samples_from_rows(rows: list[dict]) -> dict[str, list[Sample]]:
    """rep-0 runs-table rows -> per-policy samples (sorted by budget)."""
    out: dict[str, list[Sample]] = {}
    for r in rows:
        if r["rep"] != 0:
            continue
        out.setdefault(r["policy"], []).append(
            Sample(r["budget"], r["ratio"], r["status"], r["outcome"], r["overhead"]))
    for seq in out.values():
        seq.sort(key=lambda s: s.budget)
    return out


def _dedup(points: list[Point]) -> list[Point]:
    """Keep the first point of each key (two ratios can floor to one budget)."""
    seen, out = set(), []
    for p in points:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out
