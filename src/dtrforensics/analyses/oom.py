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

from ..concepts import OOM
from ..errors import OptionError
from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from .runs import RunIdentity, open_together


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
    module: str | None = None        # where that op ran in the model (the log's where-file)
    source: str | None = None        # its file:line


@dataclass(frozen=True)
class ModuleBytes:
    """Storages resident at the failure that one module made (`oom/pinned_by_module`)."""
    module: str | None               # None: none, or a log without a where-file
    storages: int
    bytes: int
    constant_bytes: int              # of which constants (parameters, buffers, inputs)
    largest_storage: int
    largest_bytes: int


@dataclass(frozen=True)
class PinnedStorage:
    """One storage resident at the failure, with where its maker ran."""
    storage_id: int
    tensor: str
    size: int
    op_id: int
    op_name: str
    constant: bool
    module: str | None
    phase: str | None
    source: str | None


@dataclass(frozen=True)
class OomReport(RunIdentity):
    path: str
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
    final_pins: bool | None = None       # failed pinning (§2.3, a PIN line); None: not recorded
    # where in the model (null, and empty, for logs without a where-file):
    tensor_module: str | None = None     # the module of the failing allocation's op
    tensor_phase: str | None = None
    tensor_source: str | None = None
    op_module: str | None = None         # the top-level op's module (final pins: the root's)
    by_module: tuple[ModuleBytes, ...] = ()          # resident bytes by module, largest first
    largest_storages: tuple[PinnedStorage, ...] = ()  # the largest resident storages

    @property
    def has_where(self) -> bool:
        """Whether the log said where its ops ran (a where-file)."""
        return any(m.module is not None for m in self.by_module) or \
            self.tensor_module is not None

    def to_json(self) -> dict:
        return json_safe(asdict(self))


def explain_oom(rec: Recording) -> OomReport:
    """The OOM of a recording; raises NotAnOomError for any other outcome."""
    if rec.outcome != OOM or not rec.run.get("frontier"):
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
        where = _where(con, run_id, fa["op_id"], fa["tensor_op_id"])
    finally:
        con.close()
    modules = where.pop("level_where")
    levels = tuple(Level(
        depth=lv["depth"], tensor=lv["tensor"], tensor_id=lv["tensor_id"], op_id=lv["op_id"],
        paper_op=lv["op_id"] + 1, op_name=lv["op_name"], remat=lv["remat"],
        locked_bytes=lv["locked_bytes"], new_locked_bytes=lv["new_locked_bytes"],
        cumulative_bytes=lv["cumulative_bytes"], locked_storages=tuple(lv["locked_storages"]),
        **modules.get(lv["op_id"], {}))
        for lv in front["frontier"])
    from_events = [(r["depth"], r["tensor_id"]) for r in stack]
    final_pins = (rec.run.get("summary", {}).get("oom") or {}).get("final_pins")
    if final_pins and levels:
        where["op_module"] = levels[0].module
    return OomReport(
        **RunIdentity.of(rec, run_id), path=str(rec.path),
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
        chain_from_events=from_events == [(lv.depth, lv.tensor_id) for lv in levels],
        final_pins=final_pins, **where)


LARGEST = 5       # the largest resident storages reported


def _where(con, run_id: str, op_id: int, tensor_op_id: int) -> dict:
    """Where in the model the failure sits: the failing and top-level ops' modules,
    each op's (module, source) by id for the levels, the resident bytes by module
    and the largest resident storages. All None or empty without a where-file."""
    ops = {r["op_id"]: r for r in fetch_dicts(
        con, "SELECT op_id, module, phase, source FROM ops WHERE run_id = ?", [run_id])}
    rows = fetch_dicts(con, "SELECT * FROM pinned_by_module WHERE run_id = ? "
                            "ORDER BY bytes DESC, module NULLS LAST", [run_id])
    largest = fetch_dicts(con, "SELECT * FROM pinned_by_module_storages WHERE run_id = ? "
                               "ORDER BY size DESC, storage_id LIMIT ?", [run_id, LARGEST])
    failing, top = ops.get(tensor_op_id, {}), ops.get(op_id, {})
    return {
        "tensor_module": failing.get("module"), "tensor_phase": failing.get("phase"),
        "tensor_source": failing.get("source"), "op_module": top.get("module"),
        "by_module": tuple(ModuleBytes(**{k: r[k] for k in ModuleBytes.__dataclass_fields__})
                           for r in rows),
        "largest_storages": tuple(
            PinnedStorage(**{k: r[k] for k in PinnedStorage.__dataclass_fields__})
            for r in largest),
        "level_where": {i: {"module": r["module"], "source": r["source"]}
                        for i, r in ops.items() if r["module"] or r["source"]},
    }
