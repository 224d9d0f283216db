"""Edges of a sweep: both sides of every change of outcome or regime, diffed.

An edge is a pair of neighbouring budgets of a sweep whose executions differ
in outcome (one completes, the other fails) or in regime (both complete, one
with an overhead more than `threshold` above the other): in an exact sweep,
two adjacent certified intervals (the edge is then byte-exact: the last budget
of one and the first of the next); in a sampled sweep, two adjacent samples.

For each edge, `edges(sweep)` records the run at both budgets (reused from
the cache folder) and compares them: the decisive comparison (the first
memory + request > budget comparison the two runs decide differently, and by
how many bytes one run is short where the other fits:
`queries/diff/decisive_check`) and the first divergent victim (`analyses.diff`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..concepts import completes, is_regime_switch
from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from .diff import first_divergence_of
from .runs import DEFAULT_CACHE, RunSpec, open_together, record_spec

MAX_EDGES = 20


@dataclass(frozen=True)
class EdgeSide:
    budget: int
    ratio: float
    outcome: str
    overhead: float | None
    recording: str


@dataclass(frozen=True)
class DecisiveCheck:
    """The first budget comparison (memory + request > budget) the two runs decide
    differently (`queries/diff/decisive_check`)."""
    op_id: int
    paper_op: int
    tensor: str
    depth: int
    request: int
    memory: int
    below_shortfall: int             # memory + request - budget: > 0 short, <= 0 fits
    above_shortfall: int
    same_state: bool                 # false: the runs had parted before (not a budget edge)
    text: str


@dataclass(frozen=True)
class FirstDivergentVictim:
    position: int                    # in the eviction streams
    below: str                       # each run's entry there
    above: str
    op_id: int | None
    cause: str
    below_module: str | None = None  # where each entry's storage was made (a where-file)
    above_module: str | None = None


@dataclass(frozen=True)
class Edge:
    kind: str                        # 'outcome' or 'regime'
    exact: bool                      # adjacent certified intervals: byte-exact
    below: EdgeSide
    above: EdgeSide
    gap_bytes: int                   # budgets strictly between the two sides (0: adjacent)
    decisive: DecisiveCheck | None   # null: identical eviction streams
    first_divergent_victim: FirstDivergentVictim | None


@dataclass(frozen=True)
class EdgesReport:
    sweep: str
    trace: str
    policy: str
    threshold: float
    edges: tuple[Edge, ...]
    found: int                       # edges found; the first `max_edges` are diffed
    unlocated: int = 0               # certified neighbours across an uncertified gap that
                                     # differ: an edge lies in the gap, not yet located
    uncertified_bytes: int = 0       # of the range (exact sweeps; 0 when fully certified)

    def to_json(self) -> dict:
        out = json_safe(asdict(self))
        for e in out["edges"]:
            e["below_outcome"], e["above_outcome"] = e["below"]["outcome"], e["above"]["outcome"]
        return out


def unlocated_edges(points: list[tuple[int, int, float, str, float | None]],
                    threshold: float) -> int:
    """Neighbouring certified intervals (in budget order) with uncertified budgets
    between them that differ in outcome or regime: each hides at least one edge."""
    return sum(a[1] + 1 != b[0] and _differ(a, b, threshold) is not None
               for a, b in zip(points, points[1:]))


def _differ(a: tuple, b: tuple, threshold: float) -> str | None:
    if a[3] != b[3]:
        return "outcome"
    if completes(a[3]) and is_regime_switch(a[4], b[4], threshold):
        return "regime"
    return None


def find_edges(points: list[tuple[int, int, float, str, float | None]], threshold: float,
               exact: bool) -> list[tuple[str, tuple, tuple]]:
    """Neighbouring (lo, hi, ratio, outcome, overhead) pieces, in budget order, that
    differ in outcome or (both ok) in regime: [(kind, below, above)]. In exact mode
    only adjacent intervals (below.hi + 1 == above.lo) are edges."""
    out = []
    for a, b in zip(points, points[1:]):
        if exact and a[1] + 1 != b[0]:
            continue
        kind = _differ(a, b, threshold)
        if kind is not None:
            out.append((kind, a, b))
    return out


def _side(rec: Recording, peak: int) -> EdgeSide:
    ok = completes(rec.outcome)
    return EdgeSide(budget=rec.run["budget"], ratio=rec.run["budget"] / peak, outcome=rec.outcome,
                    overhead=rec.summary.get("overhead") if ok else None, recording=str(rec.path))


def _fits(shortfall: int) -> str:
    return f"{shortfall:,} B short" if shortfall > 0 else f"fits, {-shortfall:,} B to spare"


def _decisive(con, ids: list[str], program) -> DecisiveCheck | None:
    rows = fetch_dicts(con, "SELECT * FROM decisive_check(?, ?)", ids)
    if not rows:
        return None
    r = rows[0]
    text = (f"op {r['op_id']} allocating {program.tensor_name(r['tensor_id'])} "
            f"({r['request']:,} B) with {r['memory']:,} B resident: "
            f"{r['a_budget']:,} B is {_fits(r['a_shortfall'])}; "
            f"{r['b_budget']:,} B {_fits(r['b_shortfall'])}")
    return DecisiveCheck(op_id=r["op_id"], paper_op=r["paper_op"],
                         tensor=program.tensor_name(r["tensor_id"]), depth=r["depth"],
                         request=r["request"], memory=r["memory"],
                         below_shortfall=r["a_shortfall"], above_shortfall=r["b_shortfall"],
                         same_state=bool(r["same_state"]), text=text)


def edges(sweep: str | os.PathLike, *, policy: str | None = None, threshold: float | None = None,
          max_edges: int = MAX_EDGES, cache: str | os.PathLike = DEFAULT_CACHE,
          on_edge=None) -> EdgesReport:
    """Diff both sides of every edge of the sweep at `sweep` (the first `max_edges`)."""
    from ..sweep.holes import analyze, load_points
    from ..trace import load_trace
    report = analyze(sweep, threshold=threshold)
    pol = report.policy(policy or report.params.policies[0])
    exact = pol.exact is not None and bool(pol.exact.partition)
    if exact:
        pieces = [(iv.lo, iv.hi, iv.lo / report.trace.peak, iv.outcome, iv.overhead)
                  for iv in sorted(pol.exact.partition, key=lambda iv: iv.lo)]
    else:
        pieces = [(p["budget"], p["budget"], p["ratio"], p["outcome"], p["overhead"])
                  for p in load_points(sweep).get(pol.policy, [])]
    found = find_edges(pieces, report.threshold, exact)
    unlocated = unlocated_edges(pieces, report.threshold) if exact else 0
    source = str(report.trace.source)
    program = load_trace(source)
    out = []
    for i, (kind, a, b) in enumerate(found[:max_edges]):
        if on_edge:
            on_edge(i + 1, min(len(found), max_edges))
        below, above = (record_spec(RunSpec(source, None, pol.policy, budget), cache=cache)
                        for budget in (a[1], b[0]))
        con, ids = open_together([below, above])
        try:
            decisive = _decisive(con, ids, program)
            first = first_divergence_of(con, below, above, *ids)
        finally:
            con.close()
        victim = None if first is None else FirstDivergentVictim(
            position=first.position, below=_entry(first.a), above=_entry(first.b),
            op_id=first.op_id, cause=first.cause, below_module=first.a.module,
            above_module=first.b.module)
        out.append(Edge(kind=kind, exact=exact, below=_side(below, report.trace.peak),
                        above=_side(above, report.trace.peak),
                        gap_bytes=b[0] - a[1] - 1, decisive=decisive,
                        first_divergent_victim=victim))
    return EdgesReport(sweep=str(sweep), trace=report.trace.name, policy=pol.policy,
                       threshold=report.threshold, edges=tuple(out), found=len(found),
                       unlocated=unlocated,
                       uncertified_bytes=pol.certain.uncertified_bytes if exact else 0)


def _entry(side) -> str:
    if side.kind is None:
        return "stream ended"
    what = "pressure victim" if side.kind == "pressure" else "dead free"
    made = f" of {side.module}" if side.module else ""
    return f"{what} {side.victim}{made} at op {side.op_id}"
