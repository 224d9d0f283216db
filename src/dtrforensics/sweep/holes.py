"""Feasibility holes and regime switches of a sweep: SQL in, typed results out.

Every question is one file of `queries/sweep/` (a DuckDB table macro over the
sweep's part files); this module runs them and turns rows into dataclasses.
Rendering (terminal tables, JSON, figures) lives elsewhere.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

from .. import validate
from ..concepts import COMPLETE, INTERRUPTED, KILLED, RUNNING, STOPPED, completes
from ..rows import fetch_dicts
from .store import SweepParams, SweepStore, TraceInfo

SWEEP_QUERIES = (
    "sample_points", "first_success", "failures_above_first_success", "failure_regions",
    "edge_brackets", "unresolved_points", "regime_switches", "repeat_disagreements",
    "exact_partition", "exact_merged", "exact_failure_regions", "exact_certificates",
    "exact_coverage",
    "exact_gaps", "exact_overlaps",
)


@dataclass(frozen=True)
class SampledBudget:
    """A budget the sweep ran, as a report shows it (its outcome; overhead when ok)."""
    budget: int
    ratio: float
    outcome: str
    overhead: float | None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FirstSuccess:
    sample: SampledBudget | None
    samples: int
    failing_below: int
    unresolved: int


@dataclass(frozen=True)
class FailureRegion:
    """A maximal run of failing samples with a completing sample just below and above."""
    lo: SampledBudget
    hi: SampledBudget
    failing: int
    outcomes: str
    below: SampledBudget
    above: SampledBudget
    timeouts_inside: int


@dataclass(frozen=True)
class EdgeBracket:
    direction: str          # 'ok->fail' | 'fail->ok' (in increasing budget)
    ok: SampledBudget
    fail: SampledBudget
    width_bytes: int
    timeouts_between: int


@dataclass(frozen=True)
class RegimeSwitch:
    lo: SampledBudget
    hi: SampledBudget
    factor: float
    direction: str


@dataclass(frozen=True)
class Unresolved:
    budget: int
    ratio: float
    rep: int
    stage: str
    wall_seconds: float


@dataclass(frozen=True)
class Disagreement:
    budget: int
    ratio: float
    rep: int
    differing: tuple[str, ...]
    outcome_run: str
    outcome_rerun: str


@dataclass(frozen=True)
class ExactInterval:
    lo: int
    hi: int
    outcome: str
    overhead: float | None
    intervals: int = 1      # distinct executions (merged rows)


@dataclass(frozen=True)
class ExactRegion:
    lo: int
    hi: int
    intervals: int
    outcomes: str
    gap_bytes: int
    below_status: str | None
    above_status: str | None
    lo_exact: bool
    hi_exact: bool
    hole: bool
    range_lo: int | None = None     # the swept range, to tell a range end from an open edge
    range_hi: int | None = None

    @property
    def lo_edge(self) -> str:
        """exact (lo - 1 certified to complete), range-start, or open (uncertified below)."""
        return "exact" if self.lo_exact else "range-start" if self.lo == self.range_lo else "open"

    @property
    def hi_edge(self) -> str:
        """exact (hi + 1 certified to complete), range-end, or open (uncertified above)."""
        return "exact" if self.hi_exact else "range-end" if self.hi == self.range_hi else "open"

    def to_json(self) -> dict:
        out = asdict(self)
        out.update(lo_edge=self.lo_edge, hi_edge=self.hi_edge, lo_certified=self.lo_exact,
                   hi_certified=self.hi_exact)
        return out


@dataclass(frozen=True)
class ExactGap:
    lo: int
    hi: int
    timeouts: int
    reason: str

    @property
    def width(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True)
class ExactView:
    """The certificate partition of the swept range for one policy."""
    coverage: float
    certified_bytes: int
    range_bytes: int
    partition: list[ExactInterval]
    merged: list[ExactInterval]
    failure_regions: list[ExactRegion]
    gaps: list[ExactGap]
    overlaps: list[dict]

    @property
    def holes(self) -> list[ExactRegion]:
        return [r for r in self.failure_regions if r.hole]

    def first_success(self, range_lo: int) -> int | None:
        """The lowest budget of the range certified to complete (None: none is)."""
        done = [max(i.lo, range_lo) for i in self.partition if completes(i.outcome)]
        return min(done) if done else None


@dataclass(frozen=True)
class FirstSuccessClaim:
    """What the certificates say of the lowest completing budget of the range.

    `budget` is the lowest byte certified to complete (None: none is). It is the
    first success (`exact`) only when every budget below it in the range is
    certified to fail and it is not the range's own lowest budget; otherwise the
    first success lies in [`lowest_possible`, budget], with
    `uncertified_below_bytes` of it uncertified (`below_range`: the range's
    lowest budget completes, so the first success may lie below the range).
    With no certified success, `exact` says that nothing completes anywhere in
    the range (every byte certified to fail).
    """
    budget: int | None
    ratio: float | None
    overhead: float | None
    exact: bool
    uncertified_below_bytes: int
    lowest_possible: int | None
    below_range: bool

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Certainty:
    """How much of the range the certificates settle, for one policy."""
    first_success: FirstSuccessClaim
    uncertified_bytes: int                  # in the whole range
    uncertified_above_bytes: int            # above the lowest certified success (holes hide there)
    gaps: list[ExactGap]
    holes: int = 0                          # failure regions between certified successes

    @property
    def complete(self) -> bool:
        """Every byte of the range certified: the holes found are all there are."""
        return self.uncertified_bytes == 0

    def to_json(self) -> dict:
        return {"first_success": self.first_success.to_json(),
                "uncertified_bytes": self.uncertified_bytes,
                "uncertified_above_first_success_bytes": self.uncertified_above_bytes,
                "holes": self.holes, "complete": self.complete}


def certainty(partition: list["ExactInterval"], gaps: list[ExactGap],
              rng: tuple[int, int], peak: int, holes: int = 0) -> Certainty:
    """The certified claims of a partition (clipped intervals), its gaps and the
    number of holes its failure regions show."""
    lo, _ = rng
    done = sorted((i for i in partition if completes(i.outcome)), key=lambda i: i.lo)
    total = sum(g.width for g in gaps)
    if not done:
        first = FirstSuccessClaim(None, None, None, total == 0, total,
                                  gaps[0].lo if gaps else None, False)
        return Certainty(first, total, 0, gaps, holes)
    f = done[0]
    below = sum(max(0, min(g.hi, f.lo - 1) - g.lo + 1) for g in gaps)
    at_start = f.lo == lo
    lowest = next((g.lo for g in gaps if g.lo < f.lo), f.lo)
    first = FirstSuccessClaim(f.lo, f.lo / peak, f.overhead, below == 0 and not at_start,
                              below, lowest, at_start)
    return Certainty(first, total, total - below, gaps, holes)


@dataclass(frozen=True)
class PolicyHoles:
    policy: str
    first_success: FirstSuccess
    failures_above: list[SampledBudget]
    failure_regions: list[FailureRegion]
    edge_brackets: list[EdgeBracket]
    unresolved: list[Unresolved]
    regime_switches: list[RegimeSwitch]
    reruns: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)
    exact: ExactView | None = None
    certain: Certainty | None = None


# What ended a sweep (`HolesReport.ended`); `render/sweep.py` says each in words.
# The last three are the sweep's status (`concepts.sweep_status`, as every view
# of the sweep says it).
ENDINGS = ("range-certified", "run-limit", "time-limit", "samples-run", "gaps-open",
           INTERRUPTED, KILLED, RUNNING)


@dataclass(frozen=True)
class HolesReport:
    path: Path
    trace: TraceInfo
    params: SweepParams
    range_bytes: tuple[int, int]
    threshold: float
    status: str             # concepts.sweep_status: "killed" when its writer is gone
    policies: list[PolicyHoles]

    def policy(self, name: str) -> PolicyHoles:
        for p in self.policies:
            if p.policy == name:
                return p
        raise KeyError(name)

    @property
    def ended(self) -> str:
        """What ended the sweep, as far as its folder tells: one of `ENDINGS`. A
        sweep that ran to its end is `range-certified` only when every policy's
        certificates cover the whole range."""
        if self.status != COMPLETE:
            return {STOPPED: "time-limit"}.get(self.status, self.status)
        open_ = [p.certain for p in self.policies if p.certain is not None
                 and not p.certain.complete]
        if not open_:
            return "range-certified"
        if not self.params.exact:
            return "samples-run"
        if any(g.reason == "run-limit" for c in open_ for g in c.gaps):
            return "run-limit"
        return "gaps-open"

    def to_json(self) -> dict:
        return {
            "sweep": str(self.path), "status": self.status, "ended": self.ended,
            "trace": asdict(self.trace), "params": self.params.to_json(),
            "range": {"ratio": [self.params.ratio_from, self.params.ratio_to],
                      "bytes": list(self.range_bytes)},
            "threshold": self.threshold,
            "policies": {p.policy: _policy_json(p) for p in self.policies},
        }


def _policy_json(p: PolicyHoles) -> dict:
    fs = p.first_success
    out = {
        "first_success": p.certain.first_success.to_json() if p.certain else None,
        "certainty": p.certain.to_json() if p.certain else None,
        "first_sampled_success": fs.sample.to_json() if fs.sample else None,
        "samples": fs.samples,
        "failing_below_first_success": fs.failing_below,
        "failures_above_first_success": [s.to_json() for s in p.failures_above],
        "failure_regions": [[r.lo.ratio, r.hi.ratio] for r in p.failure_regions],
        "failure_regions_detail": [
            {"lo": r.lo.to_json(), "hi": r.hi.to_json(), "failing": r.failing,
             "outcomes": r.outcomes, "below": r.below.to_json(), "above": r.above.to_json(),
             "timeouts_inside": r.timeouts_inside} for r in p.failure_regions],
        "edge_brackets": [
            {"direction": e.direction, "ok": e.ok.to_json(), "fail": e.fail.to_json(),
             "width_bytes": e.width_bytes, "timeouts_between": e.timeouts_between}
            for e in p.edge_brackets],
        "unresolved": [asdict(u) for u in p.unresolved],
        "regime_switches": [
            {"lo": s.lo.to_json(), "hi": s.hi.to_json(), "factor": s.factor,
             "direction": s.direction} for s in p.regime_switches],
        "repeats": {"reruns": p.reruns, "disagreements": [asdict(d) for d in p.disagreements]},
    }
    if p.exact is not None:
        x = p.exact
        out.update({
            "coverage": x.coverage,
            "certified_bytes": x.certified_bytes,
            "range_bytes": x.range_bytes,
            "intervals": len(x.partition),
            "failure_regions_bytes": [[r.lo, r.hi] for r in x.holes],
            "failure_regions_bytes_detail": [r.to_json() for r in x.failure_regions],
            "partition_merged": [[m.lo, m.hi, m.outcome, m.intervals] for m in x.merged],
            "partition": [[i.lo, i.hi, i.outcome, i.overhead] for i in x.partition],
            "gaps": [[g.lo, g.hi, g.reason] for g in x.gaps],
            "overlaps": x.overlaps,
        })
    return out


# --- running the queries --------------------------------------------------------------

def connect(store: SweepStore) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with every sweep question installed."""
    from .. import db
    con = duckdb.connect()
    for name in SWEEP_QUERIES:
        con.execute(db.load_query(f"sweep/{name}"))
    return con


@contextlib.contextmanager
def _connection(store: SweepStore, given: duckdb.DuckDBPyConnection | None):
    """`given`, or a connection from `connect` closed after use (its database's
    threads end with it, not whenever the collector frees it)."""
    if given is not None:
        yield given
        return
    own = connect(store)
    try:
        yield own
    finally:
        own.close()


def _files(store: SweepStore) -> list[str]:
    return [os.fspath(p) for p in store.part_files()]


def open_sweep(path: str | os.PathLike) -> SweepStore:
    store = SweepStore(path)
    store.read_doc()
    return store


def load_points(path: str | os.PathLike,
                con: duckdb.DuckDBPyConnection | None = None) -> dict[str, list[dict]]:
    """Every sampled point (sample_points), per policy, in budget order; `con`:
    a connection from `connect` to reuse."""
    store = open_sweep(path)
    files = _files(store)
    out: dict[str, list[dict]] = {p: [] for p in store.params.policies}
    if not files:
        return out
    with _connection(store, con) as c:
        for r in fetch_dicts(c, "SELECT * FROM sample_points(?)", [files]):
            out.setdefault(r["policy"], []).append(r)
    return out


def analyze(path: str | os.PathLike, *, threshold: float | None = None,
            policies: list[str] | None = None,
            con: duckdb.DuckDBPyConnection | None = None) -> HolesReport:
    """Holes, edges, timeouts and regime switches of the sweep at `path`.

    threshold: relative overhead jump for a regime switch (default: the
    sweep's --overhead-jump); con: a connection from `connect` to reuse.
    """
    store = open_sweep(path)
    params = store.params
    threshold = params.overhead_jump if threshold is None else validate.positive(
        threshold, "--threshold")
    wanted = list(policies or params.policies)
    unknown = set(wanted) - set(params.policies)
    if unknown:
        raise ValueError(f"the sweep has no policy {', '.join(sorted(unknown))}; "
                         f"it has {', '.join(params.policies)}")
    lo, hi = store.range_bytes
    files = _files(store)
    res = None
    if files:
        with _connection(store, con) as c:
            res = _run_all(c, files, (lo, hi), params, threshold)
    results = [_policy(res, policy, params, (lo, hi), store.trace.peak) for policy in wanted]
    return HolesReport(store.path, store.trace, params, (lo, hi), threshold,
                       store.status, results)


def _run_all(con, files: list[str], rng: tuple[int, int], params: SweepParams,
             threshold: float) -> dict[str, dict[str, list[dict]]]:
    """Each question once, over all policies: {question: {policy: rows}}."""
    lo, hi = rng
    calls = {
        "first_success": [], "failures_above_first_success": [], "failure_regions": [],
        "edge_brackets": [], "unresolved_points": [], "regime_switches": [threshold],
        "repeat_disagreements": [], "repeat_disagreements_checked": [],
    }
    # every run carries a certificate, sampled or walked: what they settle is
    # asked of every sweep
    calls.update({"exact_coverage": [lo, hi], "exact_partition": [lo, hi],
                  "exact_merged": [lo, hi], "exact_failure_regions": [lo, hi],
                  "exact_gaps": [lo, hi, params.resolution], "exact_overlaps": []})
    out: dict[str, dict[str, list[dict]]] = {}
    for name, extra in calls.items():
        marks = ", ".join("?" * (1 + len(extra)))
        grouped: dict[str, list[dict]] = {}
        for r in fetch_dicts(con, f"SELECT * FROM {name}({marks})", [files, *extra]):
            grouped.setdefault(r["policy"], []).append(r)
        out[name] = grouped
    return out


def _sample(r: dict, prefix: str = "") -> SampledBudget:
    return SampledBudget(r[f"{prefix}budget"], r[f"{prefix}ratio"], r.get(f"{prefix}outcome", "ok"),
                  r.get(f"{prefix}overhead"))


def _policy(res, policy: str, params: SweepParams, rng: tuple[int, int],
            peak: int) -> PolicyHoles:
    if res is None:
        empty = FirstSuccess(None, 0, 0, 0)
        x = _empty_exact(rng)
        return PolicyHoles(policy, empty, [], [], [], [], [],
                           exact=x if params.exact else None,
                           certain=certainty(x.partition, x.gaps, rng, peak))

    def q(name):
        return res[name].get(policy, [])

    fs_rows = q("first_success")
    if fs_rows and fs_rows[0]["first_budget"] is not None:
        f = fs_rows[0]
        first = FirstSuccess(SampledBudget(f["first_budget"], f["first_ratio"], "ok", f["first_overhead"]),
                             f["samples"], f["failing_below"], f["unresolved"])
    else:
        n = fs_rows[0] if fs_rows else {"samples": 0, "failing_below": 0, "unresolved": 0}
        first = FirstSuccess(None, n["samples"], n["failing_below"], n["unresolved"])
    above = [_sample(r) for r in q("failures_above_first_success")]
    regions = [FailureRegion(
        lo=SampledBudget(r["lo_budget"], r["lo_ratio"], "fail", None),
        hi=SampledBudget(r["hi_budget"], r["hi_ratio"], "fail", None),
        failing=r["failing"], outcomes=r["outcomes"],
        below=SampledBudget(r["below_budget"], r["below_ratio"], "ok", r["below_overhead"]),
        above=SampledBudget(r["above_budget"], r["above_ratio"], "ok", r["above_overhead"]),
        timeouts_inside=r["timeouts_inside"]) for r in q("failure_regions")]
    edges = [EdgeBracket(
        r["direction"], SampledBudget(r["ok_budget"], r["ok_ratio"], "ok", r["ok_overhead"]),
        SampledBudget(r["fail_budget"], r["fail_ratio"], r["fail_outcome"], None),
        r["width_bytes"], r["timeouts_between"]) for r in q("edge_brackets")]
    unresolved = [Unresolved(r["budget"], r["ratio"], r["rep"], r["stage"], r["wall_seconds"])
                  for r in q("unresolved_points")]
    switches = [RegimeSwitch(
        SampledBudget(r["lo_budget"], r["lo_ratio"], "ok", r["lo_overhead"]),
        SampledBudget(r["hi_budget"], r["hi_ratio"], "ok", r["hi_overhead"]), r["factor"], r["direction"])
        for r in q("regime_switches")]
    checked = q("repeat_disagreements_checked")
    disagreements = [Disagreement(r["budget"], r["ratio"], r["rep"], tuple(r["differing"]),
                                  r["outcome_run"], r["outcome_rerun"])
                     for r in q("repeat_disagreements")]
    x = _exact(q, rng) if fs_rows else _empty_exact(rng)
    return PolicyHoles(policy, first, above, regions, edges, unresolved, switches,
                       checked[0]["reruns"] if checked else 0, disagreements,
                       x if params.exact else None,
                       certainty(x.partition, x.gaps, rng, peak, len(x.holes)))


def _exact(q, rng: tuple[int, int]) -> ExactView:
    cov = q("exact_coverage")
    partition = [ExactInterval(r["lo"], r["hi"], r["outcome"], r["overhead"])
                 for r in q("exact_partition")]
    merged = [ExactInterval(r["lo"], r["hi"], r["outcome"], r["min_overhead"], r["intervals"])
              for r in q("exact_merged")]
    regions = [ExactRegion(r["lo"], r["hi"], r["intervals"], r["outcomes"], int(r["gap_bytes"]),
                           r["below_status"], r["above_status"], r["lo_exact"], r["hi_exact"],
                           r["hole"], *rng)
               for r in q("exact_failure_regions")]
    gaps = [ExactGap(r["lo"], r["hi"], r["timeouts"], r["reason"])
            for r in q("exact_gaps")]
    overlaps = [{k: v for k, v in r.items() if k != "policy"}
                for r in q("exact_overlaps")]
    c = cov[0] if cov else {"coverage": 0.0, "certified_bytes": 0,
                            "range_bytes": rng[1] - rng[0] + 1}
    return ExactView(float(c["coverage"]), int(c["certified_bytes"]), int(c["range_bytes"]),
                     partition, merged, regions, gaps, overlaps)


def _empty_exact(rng: tuple[int, int]) -> ExactView:
    lo, hi = rng
    return ExactView(0.0, 0, hi - lo + 1, [], [], [], [ExactGap(lo, hi, 0, "run-limit")], [])
