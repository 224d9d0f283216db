"""Replay a recording allocation by allocation.

Each step is one allocation check (`queries/replay/allocation_steps`): the
request, memory, budget, pinned and pool bytes, and the victims evicted to make
room, each with its score and runner-up (`queries/replay/step_victims`).
`replay_window` gives the steps of an op window for printing; `ReplaySource`
serves the interactive view (`dtrf replay --tui`): every step up front, and
per step on demand its victims, the top candidates of a decision
(`queries/decisions/top_candidates`, exact with scores=all, else victim and
runner-up) and the stack of in-progress materializations
(`queries/oom/frontier_stack`). No UI code here.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import asdict, dataclass

from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from .runs import RunIdentity, open_together

ALL_OPS = (0, 2**62)

_STEP_COLUMNS = ("step", "seq", "op_id", "paper_op", "clock", "depth", "tensor_id", "tensor",
                 "tensor_op_id", "op_name", "request", "memory", "budget", "pinned_bytes",
                 "pool_bytes", "pool_size", "shortfall", "must_free", "evictions",
                 "first_decision", "remat", "oom")


@dataclass(frozen=True)
class Victim:
    decision: int
    victim: int
    tensor: str
    bytes: int
    score: float
    runner_up: int | None
    runner_up_tensor: str | None
    runner_up_score: float | None
    margin: float | None
    memory: int              # before this eviction
    shortfall: int           # before this eviction (> 0)
    pool_size: int
    module: str | None = None  # where the victim's maker ran (the log's where-file)


@dataclass(frozen=True)
class Step:
    step: int                # 0-based among all the run's allocation checks
    seq: int
    op_id: int
    paper_op: int
    clock: int
    depth: int
    tensor_id: int
    tensor: str
    tensor_op_id: int
    op_name: str             # the op producing the tensor
    request: int
    memory: int
    budget: int
    pinned_bytes: int
    pool_bytes: int
    pool_size: int
    shortfall: int           # memory + request - budget
    must_free: bool
    evictions: int
    first_decision: int | None
    remat: bool | None       # None: never computed (the failing allocation)
    oom: bool
    victims: tuple[Victim, ...] = ()
    module: str | None = None    # where the allocating op ran (the log's where-file)


@dataclass(frozen=True)
class Candidate:
    rank: int
    storage: int
    tensor: str | None
    score: float | None
    size: int | None
    staleness: int | None
    chosen: bool
    source: str              # 'candidates' (every candidate recorded) or 'decisions'


@dataclass(frozen=True)
class StackLevel:
    depth: int
    tensor: str
    tensor_id: int
    op_id: int
    paper_op: int
    op_name: str
    remat: bool


@dataclass(frozen=True)
class ReplayWindow(RunIdentity):
    scores: str
    lo_op: int
    hi_op: int | None
    matched: int             # steps in the window (before `limit`)
    steps: tuple[Step, ...]

    def to_json(self) -> dict:
        """Strict JSON: +inf scores become the string "inf"."""
        return json_safe(asdict(self))


def _step(row: dict, victims=(), module: str | None = None) -> Step:
    return Step(**{k: row[k] for k in _STEP_COLUMNS}, victims=tuple(victims), module=module)


def _victim(r: dict, module: str | None = None) -> Victim:
    return Victim(decision=r["decision"], victim=r["victim"], tensor=r["victim_tensor"],
                  bytes=r["victim_bytes"], score=r["score"], runner_up=r["runner_up"],
                  runner_up_tensor=r["runner_up_tensor"], runner_up_score=r["runner_up_score"],
                  margin=r["margin"], memory=r["memory"], shortfall=r["shortfall"],
                  pool_size=r["pool_size"], module=module)


def _modules(con, run_id: str, table: str, key: str) -> dict[int, str]:
    """`key` -> module of the rows of `table` (ops or storages) that have one."""
    return dict(con.execute(f"SELECT {key}, module FROM {table} WHERE run_id = ? "
                            "AND module IS NOT NULL", [run_id]).fetchall())


def replay_window(rec: Recording, ops: tuple[int, int] | None = None, *,
                  limit: int | None = None, only_evicting: bool = False) -> ReplayWindow:
    """The allocation steps of ops `ops` (inclusive; None: the whole run), with victims.

    only_evicting keeps the steps that evicted something or failed; limit keeps the
    first `limit` steps (`matched` still counts them all)."""
    lo, hi = ops if ops is not None else ALL_OPS
    con, (run_id,) = open_together([rec])
    try:
        cur = con
        where = " WHERE evictions > 0 OR oom" if only_evicting else ""
        steps = fetch_dicts(cur, f"SELECT * FROM allocation_steps(?, ?, ?){where} ORDER BY step",
                      [run_id, lo, hi])
        matched = len(steps)
        steps = steps[:limit] if limit is not None else steps
        victims: dict[int, list[Victim]] = {}
        op_modules = _modules(cur, run_id, "ops", "op_id")
        storage_modules = _modules(cur, run_id, "storages", "storage_id") if op_modules else {}
        if steps:
            for r in fetch_dicts(cur, "SELECT * FROM step_victims(?, ?, ?) WHERE step BETWEEN ? AND ?",
                           [run_id, lo, hi, steps[0]["step"], steps[-1]["step"]]):
                victims.setdefault(r["step"], []).append(
                    _victim(r, storage_modules.get(r["victim"])))
    finally:
        con.close()
    return ReplayWindow(
        **RunIdentity.of(rec, run_id),
        scores=rec.run.get("scores", ""), lo_op=lo, hi_op=None if ops is None else hi,
        matched=matched, steps=tuple(_step(s, victims.get(s["step"], ()),
                                           op_modules.get(s["tensor_op_id"])) for s in steps))


class ReplaySource:
    """Steps of one recording for the interactive view; per-step details on demand.

    Safe to call from worker threads: queries take turns on one connection (the
    recording views are registered on it, so cursors cannot share them).
    """

    NAVIGATION = ("eviction", "remat", "oom")

    def __init__(self, rec: Recording, ops: tuple[int, int] | None = None):
        self.rec = rec
        self.lo, self.hi = ops if ops is not None else ALL_OPS
        self.con, (self.run_id,) = open_together([rec])
        self._lock = threading.Lock()
        op_modules = _modules(self.con, self.run_id, "ops", "op_id")
        self._storage_modules = _modules(self.con, self.run_id, "storages", "storage_id") \
            if op_modules else {}
        self.steps: list[Step] = [_step(r, (), op_modules.get(r["tensor_op_id"]))
                                  for r in fetch_dicts(
            self.con, "SELECT * FROM allocation_steps(?, ?, ?) ORDER BY step",
            [self.run_id, self.lo, self.hi])]
        self.has_candidates = rec.run.get("scores") == "all"

    def close(self) -> None:
        with self._lock:
            self.con.close()

    def _query(self, sql: str, params) -> list[dict]:
        with self._lock:
            return fetch_dicts(self.con, sql, params)

    def __len__(self) -> int:
        return len(self.steps)

    # -- navigation (indexes into self.steps)

    def _matches(self, step: Step, what: str) -> bool:
        if what == "eviction":
            return step.evictions > 0
        if what == "remat":
            return bool(step.remat)
        if what == "oom":
            return step.oom
        raise ValueError(f"unknown step kind {what!r}; known: {', '.join(self.NAVIGATION)}")

    def next_index(self, index: int, what: str) -> int | None:
        """The next step after `index` that evicts / rematerializes / fails (None: none)."""
        for i in range(index + 1, len(self.steps)):
            if self._matches(self.steps[i], what):
                return i
        return None

    def prev_index(self, index: int, what: str) -> int | None:
        for i in range(index - 1, -1, -1):
            if self._matches(self.steps[i], what):
                return i
        return None

    def op_index(self, op_id: int) -> int | None:
        """The first step of top-level op `op_id` or, if it makes no allocation
        check, of the next op that does (None: none in view)."""
        i = bisect.bisect_left([s.op_id for s in self.steps], op_id)
        return i if i < len(self.steps) else None

    def storage_index(self, index: int, storage: int) -> tuple[int, str] | None:
        """The next step after `index` that evicts or rematerializes `storage`
        (`queries/replay/storage_steps`), and which of the two (None: none in view)."""
        if not self.steps:
            return None
        rows = self._query("SELECT step, kind FROM storage_steps(?, ?) WHERE step > ? "
                           "AND step <= ? ORDER BY step, kind LIMIT 1",
                           [self.run_id, storage, self.steps[index].step, self.steps[-1].step])
        if not rows:
            return None
        numbers = [s.step for s in self.steps]
        return bisect.bisect_left(numbers, rows[0]["step"]), rows[0]["kind"]

    # -- details

    def victims(self, index: int) -> list[Victim]:
        step = self.steps[index]
        if step.evictions == 0:
            return []
        rows = self._query("SELECT * FROM step_victims(?, ?, ?) WHERE step = ? "
                                     "ORDER BY decision",
                     [self.run_id, step.op_id, step.op_id, step.step])
        return [_victim(r, self._storage_modules.get(r["victim"])) for r in rows]

    def candidates(self, decision: int, k: int = 10) -> list[Candidate]:
        """The k best-ranked candidates of a decision (victim and runner-up only
        when the recording has no candidate scores)."""
        if self.has_candidates:
            rows = self._query("SELECT * FROM top_candidates(?, ?, ?)", [self.run_id, decision, k])
            return [Candidate(rank=r["rank"], storage=r["storage_id"], tensor=r["tensor"],
                              score=r["score"], size=r["size"], staleness=r["staleness"],
                              chosen=bool(r["chosen"]), source="candidates") for r in rows]
        rows = self._query("SELECT d.victim, d.score, d.victim_bytes, d.staleness, d.runner_up, "
                          "d.runner_up_score, v.tensor AS vt, r.tensor AS rt, r.size AS rs "
                          "FROM decisions d "
                          "LEFT JOIN storages v ON v.run_id = d.run_id AND v.storage_id = d.victim "
                          "LEFT JOIN storages r ON r.run_id = d.run_id "
                          "AND r.storage_id = d.runner_up "
                          "WHERE d.run_id = ? AND d.decision = ?", [self.run_id, decision])
        out = []
        for r in rows:
            out.append(Candidate(1, r["victim"], r["vt"], r["score"], r["victim_bytes"],
                                 r["staleness"], True, "decisions"))
            if r["runner_up"] is not None and k > 1:
                out.append(Candidate(2, r["runner_up"], r["rt"], r["runner_up_score"], r["rs"],
                                     None, False, "decisions"))
        return out

    def stack(self, index: int) -> list[StackLevel]:
        """The in-progress materializations at a step, outermost first."""
        rows = self._query("SELECT * FROM frontier_stack(?, ?)",
                     [self.run_id, self.steps[index].seq])
        return [StackLevel(depth=r["depth"], tensor=r["tensor"], tensor_id=r["tensor_id"],
                           op_id=r["op_id"], paper_op=r["paper_op"], op_name=r["op_name"],
                           remat=bool(r["remat"])) for r in rows]
