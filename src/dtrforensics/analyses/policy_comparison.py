"""Several eviction policies over one budget range: holes, first success,
overheads, regime switches, and which policy is best where (`dtrf compare-policies`).

The policies are swept together (one sweep folder, resumable; exact or
sampled), the sweep's own analysis gives each one's holes and switches, and
the points give the overheads and the dominance map: at every budget where
all policies have an answer, the best is the one that completes with the
least overhead (a completion beats any failure).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..concepts import STATUS_FAIL, STATUS_OK, STATUS_UNRESOLVED
from ..sweep.holes import (
    HolesReport,
    PolicyHoles,
    analyze,
    connect,
    load_points,
    open_sweep,
)
from ..sweep.runner import SweepObserver, run_sweep
from ..sweep.store import SweepParams

TIE = 1e-12     # overheads this close (relative) are a tie


@dataclass(frozen=True)
class PolicyStanding:
    """One policy's map over the range."""
    policy: str
    points: int                     # sampled budgets, or distinct executions when exact
    completed: int
    failed: int
    unresolved: int
    first_success: int | None       # bytes: the lowest certified to complete; None: none is
    first_success_ratio: float | None
    first_success_exact: bool       # every budget below it in the range certified to fail
    uncertified_below_bytes: int    # uncertified budgets below it (all of them when None)
    first_success_lowest_possible: int | None   # the first success lies in [this, first_success]
    first_success_below_range: bool  # the range's lowest budget completes
    holes: int                      # failure regions above the first success
    hole_bytes: int                 # their total width (exact: certified bytes)
    holes_exact: bool               # widths certified to the byte, not sampled
    holes_complete: bool            # every budget of the range certified: no other hole
    uncertified_bytes: int          # in the whole range
    overhead_p50: float | None
    overhead_p90: float | None
    overhead_max: float | None
    regime_switches: int


@dataclass(frozen=True)
class DominanceSpan:
    """Budgets [lo, hi] over which the same policies are best: every byte of
    it when the sweep is exact, else from the first to the last sampled budget."""
    lo: int
    hi: int
    lo_ratio: float
    hi_ratio: float
    best: tuple[str, ...]           # empty: no policy completes here
    overhead_min: float | None      # the best policies' overhead over the span
    overhead_max: float | None


@dataclass(frozen=True)
class PolicyComparison:
    trace: str
    peak: int
    range_bytes: tuple[int, int]
    exact: bool
    sweep: Path
    policies: list[PolicyStanding]
    dominance: list[DominanceSpan]
    report: HolesReport             # the sweep's own analysis (for figures)
    points: dict[str, list[dict]]


def compare_policies(trace, policies: tuple[str, ...], *, ratio_from: float, ratio_to: float,
                     step: float | None = None, exact: bool = False,
                     out: str | os.PathLike, jobs: int | None = None,
                     timeout: float | None = None, max_runs: int = 2000,
                     observer: SweepObserver | None = None, engine: str | None = None,
                     scheduler: str | None = None, estimate_samples: int = 0
                     ) -> PolicyComparison:
    """Sweep `policies` over [ratio_from, ratio_to] into `out` (resumed if there)
    and compare them; `engine` and `scheduler` say where the runs go (`run_sweep`)."""
    params = SweepParams(ratio_from=ratio_from, ratio_to=ratio_to, step=step,
                         policies=tuple(policies), exact=exact, timeout=timeout,
                         max_runs=max_runs)
    params.validate()
    run_sweep(trace, params, out, jobs=jobs, observer=observer, engine=engine,
              scheduler=scheduler, estimate_samples=estimate_samples)
    return comparison_of(out)


def comparison_of(sweep: str | os.PathLike) -> PolicyComparison:
    """The comparison of the policies of an existing sweep folder: its holes
    and its points asked of one connection (the sweep's questions installed once)."""
    con = connect(open_sweep(sweep))
    try:
        report = analyze(sweep, con=con)
        points = load_points(sweep, con=con)
    finally:
        con.close()
    peak = report.trace.peak
    standings = [_standing(p, points.get(p.policy, []), report) for p in report.policies]
    return PolicyComparison(report.trace.name, peak, report.range_bytes, report.params.exact,
                            Path(sweep), standings,
                            dominance(points, report.params.policies, peak,
                                      report.params.exact, report.range_bytes),
                            report, points)


def _standing(p: PolicyHoles, pts: list[dict], report: HolesReport) -> PolicyStanding:
    """One policy's standing; its first success as far as its certificates (of
    samples and walk alike) settle it, never a sample taken for it."""
    claim = p.certain.first_success
    first = claim.budget
    if p.exact is not None:
        regions = [r for r in p.exact.failure_regions if r.hole]
        hole_bytes = sum(r.hi - r.lo + 1 for r in regions)
        holes_exact = all(r.lo_exact and r.hi_exact for r in regions)
    else:
        regions = p.failure_regions
        hole_bytes = sum(r.hi.budget - r.lo.budget + 1 for r in regions)
        holes_exact = False
    overheads = np.array([r["overhead"] for r in pts if r["status"] == STATUS_OK], dtype=float)
    q = (np.quantile(overheads, [0.5, 0.9]).tolist() + [float(overheads.max())]
         if len(overheads) else [None, None, None])
    return PolicyStanding(
        policy=p.policy, points=len(pts),
        completed=sum(r["status"] == STATUS_OK for r in pts),
        failed=sum(r["status"] == STATUS_FAIL for r in pts),
        unresolved=sum(r["status"] == STATUS_UNRESOLVED for r in pts),
        first_success=first,
        first_success_ratio=first / report.trace.peak if first is not None else None,
        first_success_exact=claim.exact, uncertified_below_bytes=claim.uncertified_below_bytes,
        first_success_lowest_possible=claim.lowest_possible,
        first_success_below_range=claim.below_range,
        holes=len(regions), hole_bytes=hole_bytes, holes_exact=holes_exact,
        holes_complete=p.certain.complete, uncertified_bytes=p.certain.uncertified_bytes,
        overhead_p50=q[0], overhead_p90=q[1], overhead_max=q[2],
        regime_switches=len(p.regime_switches))


def dominance(points: dict[str, list[dict]], policies: tuple[str, ...], peak: int,
              exact: bool, range_bytes: tuple[int, int]) -> list[DominanceSpan]:
    """Spans of budgets with the same best policies. Sampled sweeps compare at
    the budgets every policy sampled; exact sweeps at every interval start of
    any policy, each policy answering with the interval that certifies it."""
    range_lo, range_hi = range_bytes
    if exact:
        # where any policy's answer may change: an interval's first byte, and the
        # byte after its last (there the next interval, or an uncertified gap, begins)
        starts = {r["interval_lo"] for pts in points.values() for r in pts
                  if r["interval_lo"] is not None}
        starts |= {r["interval_hi"] + 1 for pts in points.values() for r in pts
                   if r["interval_lo"] is not None and r["interval_hi"] is not None}
        budgets = sorted({max(b, range_lo) for b in starts if b <= range_hi} | {range_lo})
        answer = {p: _certified_lookup(points.get(p, [])) for p in policies}
    else:
        shared = set.intersection(*(set(r["budget"] for r in points.get(p, []))
                                    for p in policies)) if policies else set()
        budgets = sorted(shared)
        answer = {p: {r["budget"]: r for r in points.get(p, [])}.get for p in policies}
    spans: list[DominanceSpan] = []
    for i, b in enumerate(budgets):
        rows = {p: answer[p](b) for p in policies}
        if any(r is None for r in rows.values()):
            continue
        best, overhead = _best(rows)
        end = (budgets[i + 1] - 1 if i + 1 < len(budgets) else range_hi) if exact else b
        last = spans[-1] if spans else None
        if last is not None and last.best == best and (not exact or last.hi + 1 == b):
            spans[-1] = DominanceSpan(last.lo, end, last.lo_ratio, end / peak, best,
                                      _pick(min, last.overhead_min, overhead),
                                      _pick(max, last.overhead_max, overhead))
        else:
            spans.append(DominanceSpan(b, end, b / peak, end / peak, best, overhead, overhead))
    return spans


def _certified_lookup(pts: list[dict]):
    """budget -> the point whose certificate interval contains it (or None)."""
    ordered = sorted((r for r in pts if r["interval_lo"] is not None),
                     key=lambda r: r["interval_lo"])
    starts = [r["interval_lo"] for r in ordered]

    def lookup(b: int):
        i = int(np.searchsorted(starts, b, side="right")) - 1
        if i < 0:
            return None
        r = ordered[i]
        return r if r["interval_hi"] is None or b <= r["interval_hi"] else None
    return lookup


def _best(rows: dict[str, dict]) -> tuple[tuple[str, ...], float | None]:
    done = {p: r["overhead"] for p, r in rows.items() if r["status"] == STATUS_OK}
    if not done:
        return (), None
    low = min(done.values())
    return tuple(p for p, o in done.items() if o <= low * (1 + TIE)), low


def _pick(f, a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else f(a, b)
