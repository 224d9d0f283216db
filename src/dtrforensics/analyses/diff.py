"""Diff two executions of one trace: where they part, why, and what follows.

`diff(control, test)` compares two recordings (`a` = control, `b` = test) and
returns a `DiffReport`; it computes, it does not draw (`cli/diff_cmd.py`
renders). The questions are the shipped queries under `queries/diff/` and
`queries/oom/`; this module strings their answers together:

- the eviction streams (pressure victims and dead frees in order) and their
  first divergence (`first_divergence`): each run's entry there, the
  allocation check both runs were at, each entry's rank in both runs
  (`candidate_rank`), and a one-line cause;
- the first divergent choice (`first_divergent_choice`): the first decision
  index whose victims differ, which can come later than the stream divergence;
- the aftermath per op window (`aftermath`) and where the histories
  re-converge (`aftermath_reconvergence`);
- for a run that failed, the storages its failing operator needed that it had
  evicted while the other run kept them resident (`needed_storages`).

Causes (`Divergence.cause`):
  timing_shift           the same victim is taken by the other run at another op
  different_shortfall    one run had to free memory (or more of it) where the
                         other did not: it needed one more eviction
  different_pool         at the decision, one run's victim was not a candidate
                         in the other run's pool
  different_score_order  both victims were candidates in both pools, ranked
                         differently
  forced                 an intervention imposed one of the victims
  run_ended              one stream ended (the run finished or failed) first
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..concepts import OOM
from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from ..trace.program import op_label
from .runs import RunIdentity, open_together, same_trace

TIMING_WINDOW = 16      # stream entries searched for the same victim in the other run
DIVERGENT_ENTRIES = 5   # stream entries per run shown with their modules after the divergence
DEFAULT_WINDOWS = 20    # aftermath windows when no window size is given

CAUSES = ("timing_shift", "different_shortfall", "different_pool", "different_score_order",
          "forced", "run_ended")


# --- results ------------------------------------------------------------------------

@dataclass(frozen=True)
class RunRef(RunIdentity):
    """One of the two runs."""
    label: str               # 'a' (control) or 'b' (test)
    path: str
    evictions: int
    dead_frees: int
    stream_entries: int
    scores: str              # 'all' when candidate ranks are exact


@dataclass(frozen=True)
class Rank:
    """Where a storage stood at one decision of one run."""
    run: str                 # 'a' or 'b'
    decision: int | None     # the decision looked at (null: the run made none there)
    in_pool: bool | None     # scored at that decision (null: unknown without scores=all)
    rank: int | None         # 1 = the policy's choice
    score: float | None
    candidates: int | None   # storages scored at that decision
    source: str | None       # 'candidates' (exact) or 'decisions' (victim/runner-up only)


@dataclass(frozen=True)
class Side:
    """One run's entry at a divergence (all entry fields null when its stream ended)."""
    kind: str | None                 # 'pressure' or 'dead'
    victim: int | None               # the storage freed
    tensor: str | None               # its owning tensor
    bytes: int | None
    op_id: int | None
    paper_op: int | None
    op_name: str | None
    clock: int | None
    depth: int | None
    decision: int | None             # pressure only
    score: float | None              # pressure only
    runner_up: int | None
    runner_up_score: float | None
    stream_position: int | None
    forced: bool
    # the state: for first_divergence, at the allocation check both runs were at
    # when they parted; for first_divergent_choice, at this run's own choice
    alloc_tensor_id: int | None
    alloc_tensor: str | None
    request: int | None
    memory: int | None
    budget: int
    shortfall: int | None            # memory + request - budget (> 0: had to free)
    pool_size: int | None
    pool_bytes: int | None
    rank_in_a: Rank | None = None    # this entry's storage at run a's active decision
    rank_in_b: Rank | None = None
    module: str | None = None        # where the victim's maker ran (the log's where-file)
    phase: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class DivergentEntry:
    """A stream entry from the first divergence on, with where its storage's maker
    ran (`diff/modules_at_divergence`)."""
    run: str                         # 'a' or 'b'
    position: int
    kind: str                        # 'pressure' or 'dead'
    storage: int
    bytes: int
    tensor: str
    op_name: str
    module: str | None
    phase: str | None
    source: str | None


@dataclass(frozen=True)
class Divergence:
    position: int            # 1-based: stream position, or decision index + 1
    decision: int | None     # first_divergent_choice: the 0-based decision index K
    op_id: int | None        # the earlier of the two entries' ops
    paper_op: int | None
    op_name: str | None
    a: Side
    b: Side
    cause: str
    explanation: str


@dataclass(frozen=True)
class PrefixShift:
    """The first common-prefix entry (same storage, same kind) at different ops."""
    position: int
    kind: str
    storage: int
    a_op_id: int
    b_op_id: int


@dataclass(frozen=True)
class WindowStats:
    ops: int
    evictions: int | None
    dead_frees: int | None
    remats: int | None
    pinned_max: int | None
    memory_max: int | None
    depth_max: int | None


@dataclass(frozen=True)
class AftermathWindow:
    first_op: int
    last_op: int
    a: WindowStats
    b: WindowStats
    same_stream: bool


@dataclass(frozen=True)
class Aftermath:
    from_op: int
    window_ops: int
    windows: tuple[AftermathWindow, ...]
    last_difference: int | None
    reconverge_op: int | None        # null: the histories never agree again


@dataclass(frozen=True)
class NeededStorage:
    storage: int
    tensor: str
    bytes: int
    produced_by_op: int
    level: int                       # shallowest frontier level needing it
    role: str                        # 'argument' or 'frontier'
    evicted_op: int
    evicted_kind: str                # 'pressure' or 'dead'
    evicted_decision: int | None
    evictions_before: int
    other_resident: bool
    other_from_op: int | None
    other_to_op: int | None


@dataclass(frozen=True)
class Culprit:
    """The earliest evicted storage the failing operator needed, kept by the other run."""
    storage: NeededStorage
    score: float | None              # at its eviction in the failing run
    runner_up: int | None
    runner_up_score: float | None
    alloc_tensor: str | None         # the allocation it made room for
    other_victim: int | None         # the other run's victim at the same decision index
    other_victim_op: int | None
    other_victim_alloc: str | None   # the allocation that victim made room for
    other_evictions_at_op: int       # evictions the other run made at the same op


@dataclass(frozen=True)
class Failure:
    run: str                         # 'a' or 'b'
    op_id: int
    paper_op: int
    op_name: str
    tensor: str
    request: int
    pinned: int
    depth: int
    budget: int
    shortfall: int
    needed_missing: int              # needed storages not resident when the op began
    kept_by_other: tuple[NeededStorage, ...]
    culprit: Culprit | None


@dataclass(frozen=True)
class DiffReport:
    a: RunRef
    b: RunRef
    common_prefix: int
    prefix_shift: PrefixShift | None
    first_divergence: Divergence | None
    common_choices: int
    first_divergent_choice: Divergence | None
    aftermath: Aftermath | None
    failures: tuple[Failure, ...] = field(default_factory=tuple)
    # each run's first entries from the first divergence on, with their modules;
    # empty when the streams are the same or the log has no where-file
    divergent_entries: tuple[DivergentEntry, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return json_safe(asdict(self))


# --- the analysis -----------------------------------------------------------------------

def diff(control: Recording, test: Recording, *, window_ops: int | None = None) -> DiffReport:
    """Compare two recordings of the same trace; `control` is run a, `test` run b."""
    same_trace([control, test])
    con, (ida, idb) = open_together([control, test])
    try:
        return _Diff(con, control, test, ida, idb).report(window_ops)
    finally:
        con.close()


def first_divergence_of(con, control: Recording, test: Recording, ida: str, idb: str
                        ) -> Divergence | None:
    """`diff(control, test).first_divergence`, on a connection over both
    (`open_together`, run ids `ida` and `idb`), without the rest of the report's
    queries (`dtrf edges` reports only this of each edge)."""
    d = _Diff(con, control, test, ida, idb)
    d.shift = d.prefix_shift()
    return d.first_divergence()[1]


class _Diff:
    def __init__(self, con, rec_a: Recording, rec_b: Recording, ida: str, idb: str):
        self.con = con
        self.recs = {"a": rec_a, "b": rec_b}
        self.ids = {"a": ida, "b": idb}
        self.streams = {k: fetch_dicts(con, "SELECT position, kind, storage_id, op_id, decision "
                                            "FROM eviction_stream(?) ORDER BY position", [v])
                        for k, v in self.ids.items()}
        self.forced = {k: {(int(s), int(d)) for s, d in
                           (rec.run.get("interventions") or {}).get("force") or []}
                       for k, rec in self.recs.items()}
        self.op_names = {r["op_id"]: r["name"] for r in fetch_dicts(
            con, "SELECT op_id, name FROM ops WHERE run_id = ?", [ida])}

    # -- assembly

    def report(self, window_ops: int | None) -> DiffReport:
        self.shift = self.prefix_shift()
        first = self.first_divergence()
        choice = self.first_divergent_choice()
        divergence_op = first[1].op_id if first[1] is not None else None
        aftermath = self.aftermath(divergence_op, window_ops) if divergence_op is not None else None
        failures = tuple(f for f in (self.failure("a"), self.failure("b")) if f is not None)
        return DiffReport(a=self.run_ref("a"), b=self.run_ref("b"), common_prefix=first[0],
                          prefix_shift=self.shift, first_divergence=first[1], common_choices=choice[0],
                          first_divergent_choice=choice[1], aftermath=aftermath,
                          failures=failures, divergent_entries=self.divergent_entries())

    def divergent_entries(self, n: int = DIVERGENT_ENTRIES) -> tuple[DivergentEntry, ...]:
        """Each run's first `n` stream entries from the divergence on, with their
        modules; none without a where-file (nothing to say beyond the divergence)."""
        rows = fetch_dicts(self.con, "SELECT * FROM modules_at_divergence(?, ?, ?)",
                           [self.ids["a"], self.ids["b"], n])
        if not any(r["module"] or r["source"] for r in rows):
            return ()
        return tuple(DivergentEntry(
            run=r["side"], position=r["position"], kind=r["kind"], storage=r["storage_id"],
            bytes=r["bytes"], tensor=r["tensor"], op_name=r["op_name"], module=r["module"],
            phase=r["phase"], source=r["source"]) for r in rows)

    def run_ref(self, label: str) -> RunRef:
        rec = self.recs[label]
        s = rec.summary
        return RunRef(**RunIdentity.of(rec, self.ids[label]), label=label, path=str(rec.path),
                      evictions=s["evictions"], dead_frees=s["dead_frees"],
                      stream_entries=len(self.streams[label]), scores=rec.run.get("scores", ""))

    # -- first divergence of the streams

    def prefix_shift(self) -> PrefixShift | None:
        rows = fetch_dicts(self.con, "SELECT * FROM first_divergence_prefix_shift(?, ?)",
                           [self.ids["a"], self.ids["b"]])
        if not rows:
            return None
        r = rows[0]
        return PrefixShift(position=r["position"], kind=r["kind"], storage=r["storage_id"],
                           a_op_id=r["a_op_id"], b_op_id=r["b_op_id"])

    def first_divergence(self) -> tuple[int, Divergence | None]:
        rows = {r["side"]: r for r in fetch_dicts(
            self.con, "SELECT * FROM first_divergence(?, ?)", [self.ids["a"], self.ids["b"]])}
        prefix = int(rows["a"]["common_prefix"])
        if rows["a"]["position"] is None:
            return prefix, None
        position = int(rows["a"]["position"])
        sides = {}
        for label, r in rows.items():
            sides[label] = self._side(
                label, r, stream_position=position if r["kind"] else None,
                state={"alloc_tensor_id": r["check_tensor_id"], "request": r["request"],
                       "memory": r["check_memory"], "budget": r["budget"],
                       "shortfall": r["check_shortfall"], "pool_size": r["check_pool_size"],
                       "pool_bytes": r["check_pool_bytes"]})
        active = {label: self._active_decision(label, position, sides[label])
                  for label in sides}
        sides = {label: self._with_ranks(side, active) for label, side in sides.items()}
        same_check = (rows["a"]["check_seq"] is not None and rows["b"]["check_seq"] is not None)
        cause, text = self._cause(sides["a"], sides["b"], position, same_check,
                                  _same_allocation(rows["a"], rows["b"]))
        return prefix, self._divergence(position, None, sides, cause, text)

    # -- first divergent choice

    def first_divergent_choice(self) -> tuple[int, Divergence | None]:
        rows = {r["side"]: r for r in fetch_dicts(
            self.con, "SELECT * FROM first_divergent_choice(?, ?)", [self.ids["a"], self.ids["b"]])}
        common = int(rows["a"]["common_choices"])
        if rows["a"]["decision"] is None:
            return common, None
        k = int(rows["a"]["decision"])
        sides = {label: self._side(
            label, r, stream_position=r["stream_position"],
            state={"alloc_tensor_id": r["tensor_id"], "request": r["request"],
                   "memory": r["memory"],
                   "budget": r["budget"] if r["budget"] is not None
                   else self.recs[label].run["budget"],
                   "shortfall": r["shortfall"], "pool_size": r["pool_size"],
                   "pool_bytes": r["pool_bytes"]})
            for label, r in rows.items()}
        active = {label: (k if sides[label].kind else None) for label in sides}
        sides = {label: self._with_ranks(side, active) for label, side in sides.items()}
        positions = [s.stream_position for s in sides.values() if s.stream_position]
        start = min(positions) if positions else 1
        cause, text = self._cause(sides["a"], sides["b"], start, False,
                                  _same_allocation(rows["a"], rows["b"]), counting="decisions")
        return common, self._divergence(k + 1, k, sides, cause, text)

    # -- pieces

    def _side(self, label: str, r: dict, *, stream_position, state: dict) -> Side:
        decision = r["decision"] if r["kind"] == "pressure" else None
        forced = (decision is not None and r["storage_id"] is not None
                  and (int(r["storage_id"]), int(decision)) in self.forced[label])
        alloc = state["alloc_tensor_id"]
        where = self._where(r["storage_id"])
        return Side(**where,
            kind=r["kind"], victim=r["storage_id"], tensor=r["tensor"], bytes=r["bytes"],
            op_id=r["op_id"], paper_op=r["paper_op"], op_name=r["op_name"], clock=r["clock"],
            depth=r["depth"], decision=decision, score=r["score"], runner_up=r["runner_up"],
            runner_up_score=r["runner_up_score"], stream_position=stream_position,
            forced=forced, alloc_tensor_id=alloc,
            alloc_tensor=self._tensor_name(alloc) if alloc is not None else None,
            request=state["request"], memory=state["memory"], budget=state["budget"],
            shortfall=state["shortfall"], pool_size=state["pool_size"],
            pool_bytes=state["pool_bytes"])

    def _where(self, storage: int | None) -> dict:
        """module, phase, source of the op that made `storage` (None without)."""
        if storage is None:
            return {}
        rows = fetch_dicts(self.con, "SELECT module, phase, source FROM storages "
                                     "WHERE run_id = ? AND storage_id = ?",
                           [self.ids["a"], storage])
        return rows[0] if rows else {}

    def _tensor_name(self, tensor_id: int) -> str | None:
        rows = self.con.execute("SELECT name FROM tensors WHERE run_id = ? AND tensor_id = ?",
                                [self.ids["a"], tensor_id]).fetchall()
        return rows[0][0] if rows else None

    def _active_decision(self, label: str, position: int, side: Side) -> int | None:
        """The decision in force for `label` at a stream position: its own entry's
        decision if that is a pressure victim, else the run's next decision."""
        if side.kind == "pressure":
            return side.decision
        for entry in self.streams[label][position - 1:]:
            if entry["kind"] == "pressure":
                return int(entry["decision"])
        return None

    def _rank(self, label: str, decision: int | None, storage: int | None) -> Rank | None:
        if storage is None:
            return None
        if decision is None:
            return Rank(label, None, None, None, None, None, None)
        (r,) = fetch_dicts(self.con, "SELECT * FROM candidate_rank(?, ?, ?)",
                           [self.ids[label], decision, storage])
        return Rank(label, decision, r["in_pool"], r["rank"], r["score"], r["candidates"],
                    r["source"])

    def _with_ranks(self, side: Side, active: dict) -> Side:
        from dataclasses import replace
        return replace(side, rank_in_a=self._rank("a", active["a"], side.victim),
                       rank_in_b=self._rank("b", active["b"], side.victim))

    def _divergence(self, position, decision, sides, cause, text) -> Divergence:
        ops = [s.op_id for s in sides.values() if s.op_id is not None]
        op = min(ops) if ops else None
        return Divergence(position=position, decision=decision, op_id=op,
                          paper_op=None if op is None else op + 1,
                          op_name=self.op_names.get(op), a=sides["a"], b=sides["b"],
                          cause=cause, explanation=text)

    # -- cause

    def _elsewhere(self, label: str, side: Side, start: int) -> dict | None:
        """The same storage freed the same way by run `label`, within TIMING_WINDOW
        entries from stream position `start`."""
        for entry in self.streams[label][start - 1:start - 1 + TIMING_WINDOW]:
            if entry["storage_id"] == side.victim and entry["kind"] == side.kind:
                return entry
        return None

    def _cause(self, a: Side, b: Side, start: int, same_check: bool, same_alloc: bool,
               counting: str = "stream") -> tuple[str, str]:
        """One cause code and a one-line explanation (module doc: the codes).

        same_check: both sides have a check of the allocation where the runs part
        (first_divergence), so shortfalls compare like for like. same_alloc: both
        entries are pressure victims chosen for the same allocation."""
        sides = {"a": a, "b": b}
        for label, side in sides.items():
            if side.kind is None:
                other = "b" if label == "a" else "a"
                rec = self.recs[label]
                if counting == "decisions":
                    n = sum(e["kind"] == "pressure" for e in self.streams[label])
                    ended = (f"run {label} made only {n:,} pressure decision"
                             + ("" if n == 1 else "s"))
                else:
                    ended = (f"run {label}'s eviction stream ends after "
                             f"{len(self.streams[label]):,} entries")
                return "run_ended", (f"{ended} (outcome {rec.outcome}) while run {other} "
                                     f"goes on ({_entry(sides[other])})")
        for label, side in sides.items():
            if side.forced:
                return "forced", (f"an intervention forced storage {side.victim} at decision "
                                  f"{side.decision} of run {label}")
        if same_alloc:
            return self._pool_or_order(a, b)
        for label, other in (("a", "b"), ("b", "a")):
            side = sides[label]
            hit = self._elsewhere(other, side, start)
            if hit is not None and hit["op_id"] != side.op_id:
                gap = hit["op_id"] - side.op_id
                when = f"{abs(gap)} op{'s' if abs(gap) != 1 else ''} {'later' if gap > 0 else 'earlier'}"
                what = "evicts" if side.kind == "pressure" else "frees dead"
                text = (f"timing shift: run {label} {what} {side.victim} at {op_label(side.op_id)}, "
                        f"run {other} {what} it {when}, at {op_label(hit['op_id'])}")
                if same_check and side.kind == "pressure" and sides[other].shortfall is not None:
                    text += (f" (at the allocation of {side.alloc_tensor}, {side.request:,} bytes: "
                             f"run {label} short by {side.shortfall:,} bytes, run {other} "
                             + _headroom(sides[other].shortfall) + ")")
                return "timing_shift", text
        if self.shift is not None and self.shift.position < start:
            s = self.shift
            what = "pressure victim" if s.kind == "pressure" else "dead free"
            return "timing_shift", (
                f"timing shift: the runs had already drifted apart in time; stream entry "
                f"{s.position} ({what} {s.storage}) is at {op_label(s.a_op_id)} in run a and at "
                f"{op_label(s.b_op_id)} in run b, so the same storages are freed at different ops")
        if a.kind == b.kind == "pressure" and not same_check:
            return self._pool_or_order(a, b)
        evicting = [label for label, s in sides.items() if s.kind == "pressure"]
        label = evicting[0] if evicting else "a"
        other = "b" if label == "a" else "a"
        side, oside = sides[label], sides[other]
        text = (f"different shortfall: run {label} needed one more eviction "
                f"({_entry(side)})")
        if side.shortfall is not None and oside.shortfall is not None:
            text += (f"; at the allocation of {side.alloc_tensor} run {label} was short by "
                     f"{side.shortfall:,} bytes, run {other} {_headroom(oside.shortfall)}")
        return "different_shortfall", text

    def _pool_or_order(self, a: Side, b: Side) -> tuple[str, str]:
        a_in_b, b_in_a = a.rank_in_b, b.rank_in_a
        if (a_in_b and a_in_b.in_pool is False) or (b_in_a and b_in_a.in_pool is False):
            missing = [f"{s.victim} was not a candidate in run {o}'s decision {r.decision}"
                       for s, o, r in ((a, "b", a_in_b), (b, "a", b_in_a))
                       if r and r.in_pool is False]
            return "different_pool", "different pool: " + "; ".join(missing)
        if a_in_b and b_in_a and a_in_b.in_pool and b_in_a.in_pool:
            return "different_score_order", (
                f"different score order: both victims were candidates in both runs; run a's "
                f"{a.victim} ranked {a_in_b.rank} in run b, run b's {b.victim} ranked "
                f"{b_in_a.rank} in run a")
        if a.pool_size != b.pool_size:
            return "different_pool", (f"different pool: {a.pool_size} candidates in run a, "
                                      f"{b.pool_size} in run b")
        return "different_score_order", (
            "different score order (unverified: record with scores=all to see every "
            "candidate's rank)")

    # -- aftermath

    def aftermath(self, from_op: int, window_ops: int | None) -> Aftermath:
        ida, idb = self.ids["a"], self.ids["b"]
        (rc,) = fetch_dicts(self.con, "SELECT * FROM aftermath_reconvergence(?, ?, ?)",
                            [ida, idb, from_op])
        last = max(x for x in (rc["a_last_op"], rc["b_last_op"], from_op) if x is not None)
        if window_ops is None:
            window_ops = max(1, math.ceil((last - from_op + 1) / DEFAULT_WINDOWS))
        if window_ops < 1:
            raise ValueError("the aftermath window must be at least 1 op")
        windows = []
        for r in fetch_dicts(self.con, "SELECT * FROM aftermath(?, ?, ?, ?)",
                             [ida, idb, from_op, window_ops]):
            stats = {side: WindowStats(
                ops=int(r[f"{side}_ops"]), evictions=_int(r[f"{side}_evictions"]),
                dead_frees=_int(r[f"{side}_dead_frees"]), remats=_int(r[f"{side}_remats"]),
                pinned_max=_int(r[f"{side}_pinned_max"]), memory_max=_int(r[f"{side}_memory_max"]),
                depth_max=_int(r[f"{side}_depth_max"])) for side in ("a", "b")}
            windows.append(AftermathWindow(first_op=int(r["first_op"]), last_op=int(r["last_op"]),
                                           a=stats["a"], b=stats["b"],
                                           same_stream=bool(r["same_stream"])))
        return Aftermath(from_op=from_op, window_ops=window_ops, windows=tuple(windows),
                         last_difference=rc["last_difference"], reconverge_op=rc["reconverge_op"])

    # -- failure

    def failure(self, label: str) -> Failure | None:
        rec = self.recs[label]
        if rec.outcome != OOM:
            return None
        other = "b" if label == "a" else "a"
        fid, oid = self.ids[label], self.ids[other]
        fa = fetch_dicts(self.con, "SELECT * FROM failing_allocation WHERE run_id = ?", [fid])
        if not fa:
            return None
        fa = fa[0]
        rows = fetch_dicts(self.con, "SELECT * FROM needed_storages(?, ?)", [fid, oid])
        needed = [NeededStorage(
            storage=r["storage_id"], tensor=r["tensor"], bytes=r["bytes"],
            produced_by_op=r["produced_by_op"], level=r["level"],
            role=r["role"], evicted_op=r["evicted_op"], evicted_kind=r["evicted_kind"],
            evicted_decision=r["evicted_decision"], evictions_before=r["evictions_before"],
            other_resident=bool(r["other_resident"]), other_from_op=r["other_from_op"],
            other_to_op=r["other_to_op"]) for r in rows]
        kept = tuple(n for n in needed if n.other_resident)
        culprit = self._culprit(label, other, kept[0]) if kept else None
        return Failure(run=label, op_id=fa["op_id"], paper_op=fa["paper_op"],
                       op_name=self.op_names.get(fa["op_id"], ""), tensor=fa["tensor"],
                       request=fa["request"], pinned=fa["pinned_bytes"], depth=fa["depth"],
                       budget=fa["budget"], shortfall=fa["shortfall"],
                       needed_missing=len(needed), kept_by_other=kept, culprit=culprit)

    def _culprit(self, label: str, other: str, need: NeededStorage) -> Culprit:
        score = runner = runner_score = alloc = other_victim = other_op = other_alloc = None
        if need.evicted_decision is not None:
            d = fetch_dicts(self.con, "SELECT d.score, d.runner_up, d.runner_up_score, t.name "
                                      "FROM decisions d JOIN tensors t ON t.run_id = d.run_id "
                                      "AND t.tensor_id = d.tensor_id "
                                      "WHERE d.run_id = ? AND d.decision = ?",
                            [self.ids[label], need.evicted_decision])
            if d:
                score, runner, runner_score, alloc = (d[0]["score"], d[0]["runner_up"],
                                                      d[0]["runner_up_score"], d[0]["name"])
            o = fetch_dicts(self.con, "SELECT d.victim, d.op_id, t.name FROM decisions d "
                                      "JOIN tensors t ON t.run_id = d.run_id "
                                      "AND t.tensor_id = d.tensor_id "
                                      "WHERE d.run_id = ? AND d.decision = ?",
                            [self.ids[other], need.evicted_decision])
            if o:
                other_victim, other_op, other_alloc = o[0]["victim"], o[0]["op_id"], o[0]["name"]
        (n,) = self.con.execute("SELECT count(*) FROM decisions WHERE run_id = ? AND op_id = ?",
                                [self.ids[other], need.evicted_op]).fetchone()
        return Culprit(storage=need, score=score, runner_up=runner, runner_up_score=runner_score,
                       alloc_tensor=alloc, other_victim=other_victim, other_victim_op=other_op,
                       other_victim_alloc=other_alloc,
                       other_evictions_at_op=int(n))


# --- helpers ------------------------------------------------------------------------------

def _same_allocation(ra: dict, rb: dict) -> bool:
    """Both rows are pressure victims taken for the same allocation (op, tensor, depth)."""
    return (ra["kind"] == rb["kind"] == "pressure"
            and (ra["op_id"], ra["tensor_id"], ra["depth"]) == (rb["op_id"], rb["tensor_id"],
                                                               rb["depth"]))


def _int(value) -> int | None:
    return None if value is None else int(value)


def _headroom(shortfall: int) -> str:
    if shortfall > 0:
        return f"short by {shortfall:,} bytes"
    return f"fitting with {-shortfall:,} bytes to spare"


def _entry(side: Side) -> str:
    if side.kind is None:
        return "no entry"
    what = "pressure victim" if side.kind == "pressure" else "dead free"
    return f"{what} {side.victim} at {op_label(side.op_id)}"
