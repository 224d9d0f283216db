"""Reading the maps: what a stored (possibly partial) map or grid answers.

Every map is read through the sweep store (`sweep.holes.analyze`,
`SweepStore`), so a folder of another format is refused as anywhere else;
switches, holes and fringes are counted as `concepts` defines them.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path

from ... import concepts as K
from .. import claims as C
from .plan import STUDY_RUN_LIMIT, MapSpec


@dataclass
class Fringe:
    """Failure regions packed closer than the studies' resolution: outcomes alternate."""

    lo: int
    hi: int
    regions: int

    @property
    def switches(self) -> int:
        return 2 * self.regions


@dataclass(frozen=True)
class Remaining:
    """A rough extrapolation, not a certificate: the uncertified budgets of a map
    hold about `executions` distinct executions, taking about `run_seconds` of
    replay from op 0, if the budgets of each gap behave like the studies' grid
    points inside it (or the nearest one): executions as wide, runs as slow.
    `unknown_bytes` are those standing with grid points that timed out."""

    executions: int
    run_seconds: float
    unknown_bytes: int


@dataclass
class MapFindings:
    """One map's answers."""

    spec: MapSpec
    peak: int
    range_bytes: tuple[int, int]
    coverage: float
    executions: int
    complete: bool
    seconds: float              # wall time spent on it, all invocations together
    regions: list               # sweep.holes.ExactRegion, in budget order
    fringes: list[Fringe]
    regime_switches: list[tuple[int, float, float]]   # budget where it jumps, overhead below, above
    feasibility_switches: int
    gaps: list                  # sweep.holes.ExactGap
    partition: list             # sweep.holes.ExactInterval
    slowest_run: float
    remaining: Remaining | None = None   # what the gaps may still hold (maps with a grid)

    @property
    def holes(self) -> list:
        return [r for r in self.regions if r.hole]

    def micro_holes(self) -> list:
        return [h for h in self.holes if K.is_micro(h.hi - h.lo + 1, self.peak)]

    def outcome_at(self, budget: int) -> str | None:
        """The certified outcome at `budget` (None: not certified yet)."""
        i = bisect.bisect_right([p.lo for p in self.partition], budget) - 1
        if i >= 0 and self.partition[i].lo <= budget <= self.partition[i].hi:
            return self.partition[i].outcome
        return None

    def grid(self, step: float, lo: float | None = None, hi: float | None = None
             ) -> list[tuple[float, int, str | None]]:
        """(ratio, budget, outcome) at every multiple of `step` in the range."""
        lo = self.spec.ratio_from if lo is None else lo
        hi = self.spec.ratio_to if hi is None else hi
        out = []
        for k in range(round((hi - lo) / step) + 1):
            r = round(lo + k * step, 6)
            b = math.floor(r * self.peak)
            out.append((r, b, self.outcome_at(b)))
        return out


@dataclass
class GridFindings:
    """A sampled grid (the studies' protocol): every point's outcome and run time."""

    spec: MapSpec
    peak: int
    points: list[dict]          # runs-table rows in budget order
    seconds: float
    run_limit: float | None = STUDY_RUN_LIMIT   # what it was run with (a stored grid keeps its own)

    @property
    def planned(self) -> int:
        return self.spec.planned

    @property
    def unresolved(self) -> int:
        """Grid points without an outcome: timed out, or not run yet."""
        return self.planned - sum(p["status"] != K.STATUS_UNRESOLVED for p in self.points)

    @property
    def slowest(self) -> float:
        return max((p["wall_seconds"] for p in self.points), default=0.0)

    def as_grid(self) -> list[tuple[float, int, str | None]]:
        return [(p["ratio"], p["budget"],
                 None if p["status"] == K.STATUS_UNRESOLVED else p["outcome"])
                for p in self.points]

    @property
    def hole(self) -> bool:
        return bool(K.holes([o for _, _, o in self.as_grid()]))


@dataclass
class KnobWindow:
    """A DTR hole and the same window of budgets under another policy."""

    trace: str
    hole: object                  # the DTR ExactRegion
    policy: str
    map: MapFindings

    @property
    def survives(self) -> bool | None:
        """Does a failing budget with a completing budget below it remain? (None: the
        window is not fully certified and shows no hole yet)."""
        if self.map.holes:
            return True
        return False if self.map.complete else None


@dataclass
class Findings:
    grids: dict[str, GridFindings] = field(default_factory=dict)         # trace -> 0.01 grid
    public: dict[str, MapFindings] = field(default_factory=dict)         # trace -> dtr map
    ablations: dict[tuple[str, str], MapFindings] = field(default_factory=dict)
    window: MapFindings | None = None                                    # InceptionV4
    window_grid: GridFindings | None = None                              # its 0.0001 grid
    knobs: list[KnobWindow] = field(default_factory=list)
    zoo: dict[tuple[str, str], MapFindings] = field(default_factory=dict)
    zoo_errors: dict[str, str] = field(default_factory=dict)
    claims: list[C.Claim] = field(default_factory=list)
    settings: dict[str, object] = field(default_factory=dict)
    out_of_time: bool = False     # the deadline came before every map had its share

    def maps(self) -> list[MapFindings]:
        return (list(self.public.values()) + ([self.window] if self.window else [])
                + list(self.zoo.values()) + [k.map for k in self.knobs]
                + list(self.ablations.values()))


# --- counting along a map ---------------------------------------------------------------

def fringes(regions, peak: int) -> list[Fringe]:
    """The fringes (`concepts.fringes`) among failure regions in budget order."""
    return [Fringe(regions[a].lo, regions[b].hi, b - a + 1)
            for a, b in K.fringes([(r.lo, r.hi) for r in regions], peak)]


def switches(partition, jump: float = K.DOUBLING) -> tuple[list[tuple[int, float, float]], int]:
    """Regime switches (the regime study's: the overhead more than doubles) and
    feasibility switches between touching certified intervals of a partition."""
    regime, feasible = [], 0
    for a, b in zip(partition, partition[1:]):
        if a.hi + 1 != b.lo:
            continue
        if K.is_feasibility_switch(a.outcome, b.outcome):
            feasible += 1
        elif K.completes(a.outcome) and K.is_regime_switch(a.overhead, b.overhead, jump):
            regime.append((b.lo, a.overhead, b.overhead))
    return regime, feasible


# --- reading a folder -------------------------------------------------------------------

def _rows(store, policy: str) -> list[dict]:
    rows = [r for r in store.read_runs().to_pylist() if r["policy"] == policy and r["rep"] == 0]
    return sorted(rows, key=lambda r: r["budget"])


def read_map(spec: MapSpec, folder: Path, seconds: float) -> MapFindings:
    """The findings of the (possibly partial) map stored in `folder`."""
    from ...sweep.holes import analyze, open_sweep
    report = analyze(folder)
    view = report.policy(spec.policy).exact
    regime, feasible = switches(view.partition)
    regions = sorted(view.failure_regions, key=lambda r: r.lo)
    points = _rows(open_sweep(folder), spec.policy)
    return MapFindings(
        spec=spec, peak=report.trace.peak, range_bytes=report.range_bytes,
        coverage=view.coverage, executions=len(view.partition),
        complete=view.certified_bytes == view.range_bytes, seconds=seconds,
        regions=regions, fringes=fringes(regions, report.trace.peak),
        regime_switches=regime, feasibility_switches=feasible, gaps=view.gaps,
        partition=view.partition,
        slowest_run=max((p.get("wall_seconds") or 0.0 for p in points), default=0.0))


def read_grid(spec: MapSpec, folder: Path, seconds: float) -> GridFindings:
    from ...sweep.holes import open_sweep
    store = open_sweep(folder)
    return GridFindings(spec, store.trace.peak, _rows(store, spec.policy), seconds,
                        store.params.timeout)


def not_started(spec: MapSpec, peak: int) -> MapFindings:
    """A map the time ran out before: its whole range one gap."""
    from ...sweep.grid import range_bytes
    from ...sweep.holes import ExactGap
    rng = range_bytes(spec.params(None), peak)
    return MapFindings(spec, peak, rng, 0.0, 0, False, 0.0, [], [], [], 0,
                       [ExactGap(*rng, 0, "run-limit")], [], 0.0)


def remaining(m: MapFindings, grid: GridFindings) -> Remaining | None:
    """What the gaps of `m` may hold, read off the grid over the same range: each
    gap's bytes shared evenly among the grid points inside it (or given to the
    nearest one when it has none); None for a complete map or an empty grid."""
    if m.complete or not grid.points:
        return None
    executions, seconds, unknown = 0.0, 0.0, 0.0
    for g in m.gaps:
        inside = [p for p in grid.points if g.lo <= p["budget"] <= g.hi] or [min(
            grid.points, key=lambda p: min(abs(p["budget"] - g.lo), abs(p["budget"] - g.hi)))]
        share = g.width / len(inside)
        for p in inside:
            if p["status"] == K.STATUS_UNRESOLVED:
                unknown += share
                continue
            top = g.hi if p["interval_hi"] is None else p["interval_hi"]   # None: unbounded
            n = share / max(1, top - p["interval_lo"] + 1)
            executions += n
            seconds += n * (p["wall_seconds"] or 0.0)
    return Remaining(math.ceil(executions), seconds, round(unknown))
