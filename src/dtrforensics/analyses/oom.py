"""Explain an OOM: the pinned frontier at the failed allocation.

`explain_oom(recording)` returns an `OomReport`: the chain of in-progress
materializations from the root op's tensor down to the failing allocation,
each level with the bytes it holds locked (from run.json's `frontier`, written
by the recorder from `engine.frontier.Frontier.to_json()`), the failing
request against budget and memory, proof that the pool was empty (the `oom`
event's pool), and -- reported separately, as the papers do -- the depth at
peak pinned memory and the maximum nesting depth (`queries/oom/pinned_peak`).
The chain is also rebuilt from the events (`queries/oom/frontier_stack`) and
the two must agree (`chain_from_events`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import OptionError
from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from .runs import open_together


class NotAnOomError(OptionError):
    """The run did not end out of memory."""


@dataclass(frozen=True)
class Level:
    depth: int                       # 1 = the root: the top-level op's tensor
    tensor: str
    tensor_id: int
    op_id: int                       # the op producing this level's tensor
    paper_op: int
    op_name: str
    remat: bool
    locked_bytes: int                # bytes of the storages this level holds locked
    new_locked_bytes: int            # of which not already locked by an outer level
    cumulative_bytes: int            # locked by this level and every outer one
    locked_storages: tuple[int, ...]


@dataclass(frozen=True)
class OomReport:
    run_id: str
    path: str
    trace: str
    policy: str
    ratio: float | None
    budget: int
    op_id: int                       # the top-level op that failed
    paper_op: int
    op_name: str
    tensor: str                      # the tensor whose allocation failed
    tensor_id: int
    tensor_op_id: int
    tensor_op: str
    request: int
    memory: int
    pinned: int                      # memory - pool bytes at the failure
    shortfall: int                   # memory + request - budget
    pool_size: int
    pool_bytes: int
    pool_empty: bool                 # the proof: nothing was left to evict
    depth: int                       # levels of the frontier (nesting depth at the failure)
    root_tensor: str
    frontier: tuple[Level, ...]      # outermost first
    locked_total: int                # bytes locked by the whole chain
    pinned_storage_bytes: int        # bytes pinned for good (constants, outputs)
    peak_pinned: int | None          # most pinned bytes at a check that had to free
    depth_at_peak_pinned: int | None
    peak_pinned_op_id: int | None
    max_depth: int                   # deepest nesting anywhere in the run
    max_depth_op_id: int | None
    chain_from_events: bool          # the events rebuild the same chain

    def to_json(self) -> dict:
        return json_safe(asdict(self))


def explain_oom(rec: Recording) -> OomReport:
    """The OOM of a recording; raises NotAnOomError for any other outcome."""
    if rec.outcome != "oom" or not rec.run.get("frontier"):
        raise NotAnOomError(f"{rec.run_id} did not run out of memory (outcome {rec.outcome})")
    front = rec.run["frontier"]
    con, (run_id,) = open_together([rec])
    try:
        (fa,) = fetch_dicts(con, "SELECT f.*, e.pool_size FROM failing_allocation f "
                                 "JOIN events e ON e.run_id = f.run_id AND e.seq = f.seq "
                                 "WHERE f.run_id = ?", [run_id])
        (peak,) = fetch_dicts(con, "SELECT * FROM pinned_peak WHERE run_id = ?", [run_id])
        stack = fetch_dicts(con, "SELECT depth, tensor_id FROM frontier_stack_oom "
                                 "WHERE run_id = ? ORDER BY depth", [run_id])
        op_name = con.execute("SELECT name FROM ops WHERE run_id = ? AND op_id = ?",
                              [run_id, fa["op_id"]]).fetchone()[0]
    finally:
        con.close()
    levels = tuple(Level(
        depth=lv["depth"], tensor=lv["tensor"], tensor_id=lv["tensor_id"], op_id=lv["op_id"],
        paper_op=lv["op_id"] + 1, op_name=lv["op_name"], remat=lv["remat"],
        locked_bytes=lv["locked_bytes"], new_locked_bytes=lv["new_locked_bytes"],
        cumulative_bytes=lv["cumulative_bytes"], locked_storages=tuple(lv["locked_storages"]))
        for lv in front["frontier"])
    from_events = [(r["depth"], r["tensor_id"]) for r in stack]
    return OomReport(
        run_id=run_id, path=str(rec.path), trace=rec.run["trace"]["name"],
        policy=rec.run["policy"], ratio=rec.run.get("ratio"), budget=front["budget"],
        op_id=fa["op_id"], paper_op=fa["paper_op"], op_name=op_name, tensor=fa["tensor"],
        tensor_id=fa["tensor_id"], tensor_op_id=fa["tensor_op_id"], tensor_op=fa["tensor_op"],
        request=front["request"], memory=front["memory"], pinned=front["pinned"],
        shortfall=front["shortfall"], pool_size=front["pool_size"],
        pool_bytes=front["pool_bytes"],
        pool_empty=front["pool_size"] == 0 and front["pool_bytes"] == 0 and fa["pool_size"] == 0,
        depth=len(levels), root_tensor=levels[0].tensor if levels else fa["tensor"],
        frontier=levels, locked_total=levels[-1].cumulative_bytes if levels else 0,
        pinned_storage_bytes=front.get("pinned_storage_bytes", 0),
        peak_pinned=peak["peak_pinned"], depth_at_peak_pinned=peak["peak_depth"],
        peak_pinned_op_id=peak["peak_op_id"], max_depth=peak["max_depth"],
        max_depth_op_id=peak["max_depth_op_id"],
        chain_from_events=from_events == [(lv.depth, lv.tensor_id) for lv in levels])
