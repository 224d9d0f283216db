"""Judging the holes study's open claims (`claims.OPEN_CLAIMS`) from the maps read.

A claim whose grid points or maps are not all computed yet is `incomplete`:
neither a match nor a difference (claims.VERDICTS judge complete answers only).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from ... import concepts as K
from .. import claims as C
from .plan import CONFIRMATORY, STUDY_RUN_LIMIT, WINDOW_STEP
from .read import Findings, MapFindings

INCOMPLETE = "incomplete"

Grid = list[tuple[float, int, "str | None"]]        # (ratio, budget, outcome) in budget order


def open_claims(f: Findings) -> list[C.Claim]:
    """The InceptionV4 window and the grid-study claims, read off the maps."""
    out = _window_claims(f) + _grid_claims(f) + _fine_grid_claims(f)
    return [c if complete else replace(c, verdict=INCOMPLETE) for c, complete in out]


def _claim(id: str, ours: str, **notes) -> C.Claim:
    p = C.OPEN_CLAIMS[id]
    return C.claim(p.id, p.study, p.text, p.published, ours, **notes)


def _ratio_span(points: Grid) -> str:
    return (f"{points[0][0]:.4f}" if len(points) == 1
            else f"{points[0][0]:.4f}-{points[-1][0]:.4f}")


def _failing_runs(grid: Grid) -> list[Grid]:
    """The grid points of each maximal run of failing points (`concepts.failure_runs`)."""
    return [[p for p in grid[a:b + 1] if K.known(p[2])]
            for a, b in K.failure_runs([o for _, _, o in grid])]


def _failing_counts(runs: list[Grid]) -> str:
    """`290 failing grid points in 15 runs (oom 280, thrashed 10)`: what the switch
    count stands on, thrashed runs (overhead above 60x) counted as failing."""
    if not runs:
        return ""
    outcomes = Counter(p[2] for r in runs for p in r)
    return (f"{sum(outcomes.values())} failing grid points in {len(runs)} runs ("
            + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items())) + ")")


def _limits(grids) -> str:
    """The run limits the grids had, in words."""
    limits = sorted({g.run_limit for g in grids}, key=lambda t: math.inf if t is None else t)
    words = ["no limit" if t is None else f"{t:g} s" for t in limits]
    own = " (the studies' own)" if limits == [STUDY_RUN_LIMIT] else ""
    return "a limit of " + " or ".join(words) + own


def _coverage_note(m: MapFindings) -> str:
    return "" if m.complete else f"map certified at {m.coverage:.1%} so far (rerun to fill it)"


def _window_claims(f: Findings) -> list[tuple[C.Claim, bool]]:
    """The claims are the grid's (what the study sampled); the byte-exact map
    sharpens them where it has certified the budgets."""
    w, sampled = f.window, f.window_grid
    if sampled is None and w is None:
        return []
    if sampled is not None:
        grid, grid_done = sampled.as_grid(), sampled.unresolved == 0
        grid_note = "" if grid_done else (f"{sampled.unresolved} of {sampled.planned} "
                                          "grid points without an outcome so far")
    else:
        grid, grid_done, grid_note = w.grid(WINDOW_STEP), w.complete, _coverage_note(w)
    exact_done = w is not None and w.complete
    exact_note = "" if w is None or exact_done else \
        f"the byte-exact map is certified at {w.coverage:.1%} so far"
    region_id = "inceptionv4.failure_region_0.2526"
    lo, hi = C.ratio_span(C.OPEN_CLAIMS[region_id].published)
    failing = _failing_runs(grid)
    near = [r for r in failing if r[0][0] <= hi and r[-1][0] >= lo]
    exact = [] if w is None else [
        r for r in w.regions
        if r.lo <= math.floor(hi * w.peak) + w.peak // round(1 / WINDOW_STEP)
        and r.hi >= math.floor(lo * w.peak)]
    known = [o for _, _, o in grid if K.known(o)]
    switches = sum(map(K.is_feasibility_switch, known, known[1:]))
    return [
        (_claim(region_id, _ratio_span(near[0]) if near else "no failing grid point there",
                sharper_note="; ".join(f"certified failing budgets {r.lo:,}-{r.hi:,} B "
                                       f"({r.hi - r.lo + 1:,} B)" for r in exact),
                note="; ".join(x for x in (grid_note, exact_note) if x)), grid_done),
        (_claim("inceptionv4.switches_0.209_0.26", str(switches),
                sharper_note=f"byte-exact: {w.feasibility_switches} switches, "
                             f"{len(w.regions)} failure regions" if exact_done else "",
                note="; ".join(x for x in (grid_note, exact_note, _failing_counts(failing))
                               if x)), grid_done)]


def _grid_claims(f: Findings) -> list[tuple[C.Claim, bool]]:
    grids = {t: f.grids[t] for t in CONFIRMATORY if t in f.grids}
    if len(grids) != len(CONFIRMATORY):
        return []
    with_hole = [t for t, g in grids.items() if g.hole]
    left = {t: g.unresolved for t, g in grids.items() if g.unresolved}
    no_hole = _claim(
        "grid_0.01.no_hole", f"{len(with_hole)} of {len(grids)}",
        note="; ".join(x for x in (", ".join(with_hole), "; ".join(
            f"{t}: {n} grid points without an outcome" for t, n in left.items())) if x))
    points = sum(g.planned for g in grids.values())
    slowest = max(g.slowest for g in grids.values())
    p = C.OPEN_CLAIMS["grid_0.01.timeouts"]
    timeouts = C.Claim(
        p.id, p.study, p.text, p.published,
        f"{sum(left.values())} of {points}; slowest grid run {slowest:.1f} s",
        C.DIFFERS if left else C.SHARPER,
        f"grid points still without an outcome after {_limits(grids.values())} per run "
        "(or not run yet): rerun to fill them" if left else
        "every grid point of the six traces has its outcome")
    return [(no_hole, not left), (timeouts, not left)]


def _fine_grid_claims(f: Findings) -> list[tuple[C.Claim, bool]]:
    maps = {t: f.public[t] for t in CONFIRMATORY if t in f.public}
    if len(maps) != len(CONFIRMATORY):
        return []
    fine_holes = [t for t, m in maps.items()
                  if K.holes([o for _, _, o in m.grid(K.RESOLUTION)])]
    exact_holes = ", ".join(f"{t} {len(m.holes)}" for t, m in maps.items() if m.holes) or "none"
    partial = [t for t, m in maps.items() if not m.complete]
    return [(_claim(
        "grid_0.001.holes", f"{len(fine_holes)} of {len(maps)}",
        sharper_note="" if partial else (f"0.001 grid: {', '.join(fine_holes) or 'none'}; "
                                         f"certified (any width): {exact_holes}"),
        note=f"maps still partial, holes so far: {exact_holes} (partial: {', '.join(partial)})"
        if partial else ""), not partial)]
