"""A recording as a Chrome trace-event JSON file, for Perfetto and chrome://tracing.

`export_perfetto(recording, out)` streams the events table row group by row
group and writes the JSON incrementally (memory stays proportional to the
trace's static tables and the nesting depth, not to the run's length). Open
the file at ui.perfetto.dev, in chrome://tracing, or query it with Perfetto's
trace processor.

Time: the simulated replay clock (ns). Trace-event `ts`/`dur` are in
microseconds by definition, so they are written as clock / 1000 with exactly
the three decimals needed (`310480.916`); Perfetto reads them back to whole
nanoseconds. `displayTimeUnit` is deliberately not set: Perfetto versions
disagree on whether it rescales `ts` or only the display.

One process (pid 1, named after the run) with four threads and counters:

* tid 1 `model operators`: one complete ("X") slice per top-level
  materialization: name = op name, category `op` (category `remat` for the
  final pins that had to rematerialize an evicted output), args `op_id`
  (0-based), `paper_op` (the papers' 1-based number), `tensor`, `storage`,
  `outputs` and `inputs` (tensor names), `cost`, `backward`, `remat`, `line`
  (of the log). Consecutive zero-cost ops at one timestamp (the hundreds of
  constants at the start) are one zero-length slice (`constant x190`, args
  `ops`, `op_ids`, `paper_ops`, `tensors`, `outputs`): Perfetto would stack
  them on top of each other, past its nesting limit.
* tid 2 `rematerializations`: one B/E slice per nested materialization
  (depth >= 2), opened at its `materialize` event and closed at its `compute`
  event, so the slices nest exactly as the materializations did: the stack
  under a top-level op is `depth - 1` slices tall. Args as above plus `depth`,
  `for_op` (the top-level op being served) and, on the end, `collateral`
  (sibling outputs recomputed along).
* tid 3 `evictions`: an instant per pressure eviction, named `evict <tensor>`,
  category `evict`, args: decision index, victim storage and tensor, bytes,
  score, runner-up (storage, tensor, score), margin, the tensor whose
  allocation needed the room, request, memory and pinned bytes.
* tid 4 `dead frees`: an instant per eager free of a released storage
  (category `free_dead`).
* tid 5 `modules`, only for a log with a where-file (docs/torch.md, "Where
  each op ran"): the model's scopes as nested B/E slices (category
  `module`), outermost the phase (`forward`, `backward`, ...), then each
  module of the top-level op's chain (`blocks.0`, `blocks.0.attn`, ...): a
  scope opens at the first top-level op inside it and closes where the next
  op outside it begins (or at the run's end). Constants change no scope.
* counters ("C"): `memory`, `pinned`, `pool` (each with one series `bytes`,
  so Perfetto names the tracks `memory bytes`, ...): the recording's columns,
  written whenever they change (so the maximum of `memory bytes` is the run's
  peak), and `budget` (constant, written at the first and last timestamp).
* flows: an arrow (flow events "s"/"f", category `remat`, id = the seq of the
  eviction event) from each eviction of a storage, pressure or dead (a
  released storage can still be rematerialized as a parent of another
  rematerialization), bound to its instant, to the materialization that
  brought the storage back, bound to that slice (a storage recomputed as a
  sibling output ends at its sibling's slice). Evictions never followed by a
  rematerialization have no arrow.
* the OOM: a process-scoped instant `OOM allocating <tensor>` (category
  `oom`) whose args hold the failing allocation (`oom`) and the whole pinned
  frontier from run.json (`frontier`). Slices still open at the OOM (the
  chain of materializations that failed) are closed there with the arg
  `oom: true`; a run that stopped otherwise (thrashed, timeout) closes them
  with `unfinished: <outcome>`.

Non-finite scores (+inf) are written as the strings "inf"/"-inf" (JSON has no
infinity). Slices are emitted in event order, so per thread `ts` never
decreases in the file and every B has its E. Perfetto's trace processor keeps
at most 512 nested slices per track (SliceTracker::kMaxDepth; past it, ends
would close the wrong slices), so the rematerializations track shows at most
`max_nesting` (500) levels:
deeper materializations are left out of it (their evictions, counters and
dead frees are not), and the deepest slice shown says how many levels were
below it (`hidden_levels`); flows ending in hidden levels are left out too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import IO, Any, Iterator, NamedTuple

from ..jsonsafe import finite, json_safe
from ..recorder.reader import Recording
from .plumbing import (
    BATCH_ROWS,
    ExportError,
    Static,
    as_recording,
    check_depth,
    iter_rows,
    open_output,
    output_name,
    pop_frame,
)

PID = 1
TID_OPS, TID_REMAT, TID_EVICT, TID_FREE, TID_MODULES = 1, 2, 3, 4, 5
THREADS = ((TID_OPS, "model operators"), (TID_REMAT, "rematerializations"),
           (TID_EVICT, "evictions"), (TID_FREE, "dead frees"))
FLOW_CAT, FLOW_NAME = "remat", "evicted -> rematerialized"
MAX_NESTING = 500       # Perfetto's trace processor keeps at most 512 nested slices a track

EVENT_COLUMNS = ("seq", "kind", "op_id", "clock", "depth", "tensor_id", "storage_id", "bytes",
                 "memory", "pinned_bytes", "pool_bytes", "request", "decision", "remat",
                 "collateral", "cost")
DECISION_COLUMNS = ("decision", "seq", "victim", "victim_bytes", "score", "runner_up",
                    "runner_up_score", "margin", "tensor_id", "request", "memory",
                    "pinned_bytes")


@dataclass(frozen=True)
class PerfettoExport:
    """What `export_perfetto` wrote."""

    path: str
    trace_events: int
    op_slices: int
    remat_slices: int
    hidden_slices: int
    evictions: int
    dead_frees: int
    flows: int
    counter_samples: int
    max_depth: int
    outcome: str

    def to_json(self) -> dict:
        return {"format": "perfetto", **self.__dict__}


def ts_us(clock_ns: int) -> float:
    """Trace-event microseconds for a clock in ns, exact to the nanosecond in decimal."""
    return clock_ns / 1000


# --- the flow plan: which eviction ends at which materialization ------------------------

class _Open(NamedTuple):
    seq: int
    tensor: int
    depth: int


def flow_plan(rec: Recording, batch_rows: int = BATCH_ROWS,
              max_depth: int | None = None) -> dict[int, list[int]]:
    """First pass: {seq of a `materialize` event: [flow ids ending at it]}.

    A flow starts at an eviction, pressure or dead (id = the eviction event's
    seq), and ends at the materialization whose computation made the storage
    resident again: the storage's own materialization, or for a sibling output
    the materialization of the tensor whose op recomputed it. Evictions never
    undone, or undone by a materialization deeper than `max_depth`, are absent."""
    pending: dict[int, int] = {}           # storage -> flow id of its last eviction
    stack: list[_Open] = []                # open materializations
    ends: dict[int, list[int]] = {}
    last = None                            # materialization of the last primary compute
    for seq, kind, depth, tensor, storage, decision, remat, collateral in iter_rows(
            rec, "events", ("seq", "kind", "depth", "tensor_id", "storage_id", "decision",
                            "remat", "collateral"), batch_rows):
        if kind == "materialize":
            stack.append(_Open(seq, tensor, depth))
            check_depth(rec, seq, len(stack), depth)
        elif kind == "compute":
            if not collateral:
                last = pop_frame(rec, stack, seq, tensor, depth)
            if remat and storage in pending:
                flow = pending.pop(storage)
                if max_depth is None or last.depth <= max_depth:
                    ends.setdefault(last.seq, []).append(flow)
        elif kind in ("evict", "free_dead"):
            pending[storage] = seq
    return ends


# --- the exporter ---------------------------------------------------------------------

@dataclass
class _Frame:
    """A materialization in progress (then finished: `end` set)."""

    tensor: int
    op: int
    depth: int
    begin: int                  # clock
    remat: bool
    flows: list[int]            # flow ids ending at it
    end: int = 0
    collateral: list[str] | None = None
    hidden: int = 0             # levels below it left out (it is the deepest shown)


class _Writer:
    """Writes trace events one per line inside {"traceEvents": [...]}, counting them."""

    def __init__(self, fh: IO[str]):
        self.fh = fh
        self.count = 0
        fh.write('{"traceEvents":[\n')

    def emit(self, event: dict) -> None:
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        self.fh.write((",\n" if self.count else "") + text)
        self.count += 1

    def close(self, other: dict) -> None:
        self.fh.write('\n],\n"otherData":')
        self.fh.write(json.dumps(other, separators=(",", ":"), ensure_ascii=False,
                                 allow_nan=False, default=str))
        self.fh.write("}\n")


class _PerfettoExporter:
    def __init__(self, rec: Recording, fh: IO[str], batch_rows: int, max_nesting: int):
        self.rec = rec
        self.batch_rows = batch_rows
        self.max_depth = 1 + max(1, max_nesting)      # deepest materialization shown
        self.static = Static.load(rec)
        self.w = _Writer(fh)
        self.stack: list[_Frame] = []
        self.closing: _Frame | None = None
        self.zeros: list[tuple[_Frame, dict]] = []     # zero-length op slices to group
        self.op_done = bytearray(len(self.static.op_name))
        self.counters: dict[str, int | None] = {"memory": None, "pinned": None, "pool": None}
        self.n = dict(op_slices=0, remat_slices=0, hidden_slices=0, evictions=0, dead_frees=0,
                      flows=0, counter_samples=0, max_depth=0)
        self.last_clock = 1
        self.ends: dict[int, list[int]] = {}
        self.flow_ids: set[int] = set()
        self.decisions: Iterator[tuple] = iter(())
        self.scopes = _Scopes(self, rec)

    # events ----------------------------------------------------------------------
    def ev(self, ph: str, tid: int, clock: int, **fields) -> None:
        self.w.emit({"ph": ph, "pid": PID, "tid": tid, "ts": ts_us(clock), **fields})

    def counter(self, name: str, clock: int, value: int) -> None:
        self.w.emit({"ph": "C", "pid": PID, "name": name, "ts": ts_us(clock),
                     "args": {"bytes": value}})
        self.n["counter_samples"] += 1

    def run(self) -> PerfettoExport:
        run = self.rec.run
        self.metadata()
        self.ends = flow_plan(self.rec, self.batch_rows, self.max_depth)
        self.flow_ids = {flow for flows in self.ends.values() for flow in flows}
        self.decisions = iter_rows(self.rec, "decisions", DECISION_COLUMNS, self.batch_rows)
        for i, row in enumerate(iter_rows(self.rec, "events", EVENT_COLUMNS, self.batch_rows)):
            if i == 0:
                self.counter("budget", row[3], run["budget"])
            self.event(*row)
        if self.closing is not None:
            self.close(self.closing)
        outcome = run["outcome"]
        while self.stack:           # thrashed or timeout: stopped mid-materialization
            frame = self.stack.pop()
            frame.end = self.last_clock
            self.close(frame, {"unfinished": outcome})
        self.flush_zeros()
        self.scopes.finish()
        self.counter("budget", self.last_clock, run["budget"])
        if self.ends:
            raise ExportError(f"{self.rec.path}: flows planned at events that never came")
        self.w.close(json_safe({"dtrforensics": {
            "run_id": self.rec.run_id, "trace": run["trace"], "policy": run["policy"],
            "budget": run["budget"], "ratio": run.get("ratio"), "outcome": outcome,
            "format_version": run["format_version"],
            "time": "ts/dur are the simulated replay clock in ns / 1000 (microseconds)",
            "summary": run["summary"]}}))
        return PerfettoExport(path="", trace_events=self.w.count, outcome=outcome, **self.n)

    def event(self, seq, kind, op_id, clock, depth, tensor, storage, nbytes, memory, pinned,
              pool, request, decision, remat, collateral, cost) -> None:
        self.last_clock = clock
        if self.closing is not None and not (kind == "compute" and collateral):
            self.close(self.closing)
            self.closing = None
        for name, value in (("memory", memory), ("pinned", pinned), ("pool", pool)):
            if value is not None and self.counters[name] != value:
                self.counters[name] = value
                self.counter(name, clock, value)
        if kind == "materialize":
            self.materialize(seq, clock, depth, tensor, self.ends.pop(seq, []))
        elif kind == "compute":
            if not collateral:
                self.compute(seq, clock, depth, tensor, bool(remat))
            elif self.closing is None:
                raise ExportError(f"{self.rec.path}: collateral compute {seq} follows no "
                                  "primary compute")
            elif remat:
                self.closing.collateral.append(self.static.tensor_name[tensor])
        elif kind == "evict":
            self.evict(seq, clock, depth, storage, decision, next(self.decisions, None))
        elif kind == "free_dead":
            self.free_dead(seq, clock, op_id, tensor, storage, nbytes)
        elif kind == "oom":
            self.oom(clock, tensor, request, memory, pinned, depth)

    def metadata(self) -> None:
        run = self.rec.run
        amount = f"ratio {run['ratio']:g}" if run.get("ratio") is not None \
            else f"{run['budget']} B"
        self.w.emit({"ph": "M", "pid": PID, "name": "process_name", "args": {
            "name": f"dtrf {run['trace']['name']} {run['policy']} {amount} ({run['outcome']})"}})
        for tid, name in THREADS:
            self.w.emit({"ph": "M", "pid": PID, "tid": tid, "name": "thread_name",
                         "args": {"name": name}})
            self.w.emit({"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index",
                         "args": {"sort_index": tid}})
        if self.scopes.chains:
            self.w.emit({"ph": "M", "pid": PID, "tid": TID_MODULES, "name": "thread_name",
                         "args": {"name": "modules"}})
            self.w.emit({"ph": "M", "pid": PID, "tid": TID_MODULES, "name": "thread_sort_index",
                         "args": {"sort_index": 0}})

    # slices ------------------------------------------------------------------------
    def slice_args(self, frame: _Frame) -> dict[str, Any]:
        s, op = self.static, frame.op
        args = {"op_id": op, "paper_op": op + 1, "tensor": s.tensor_name[frame.tensor],
                "storage": s.tensor_storage[frame.tensor], "depth": frame.depth,
                "remat": frame.remat, "outputs": s.op_outputs[op],
                "inputs": [s.tensor_name[a] for a in s.op_args[op]], "cost": s.op_cost[op],
                "backward": s.op_backward[op], "line": s.op_line[op]}
        if self.stack and frame.depth > 1:
            args["for_op"] = self.stack[0].op
        return args

    def materialize(self, seq, clock, depth, tensor, flows) -> None:
        op = self.static.tensor_op[tensor]
        frame = _Frame(tensor, op, depth, clock, remat=depth > 1 or bool(self.op_done[op]),
                       flows=flows)
        args = self.slice_args(frame) if 1 < depth <= self.max_depth else None
        self.stack.append(frame)
        check_depth(self.rec, seq, len(self.stack), depth)
        self.n["max_depth"] = max(self.n["max_depth"], depth)
        if depth > self.max_depth:
            shown = self.stack[self.max_depth - 1]
            shown.hidden = max(shown.hidden, depth - self.max_depth)
            self.n["hidden_slices"] += 1
        elif depth > 1:
            self.ev("B", TID_REMAT, clock, cat="remat", name=self.static.op_name[op], args=args)
            self.n["remat_slices"] += 1
            self.flow_ends(TID_REMAT, clock, flows)
        else:
            self.n["op_slices"] += 1

    def flow_ends(self, tid: int, clock: int, flows: list[int]) -> None:
        for flow in flows:
            self.ev("f", tid, clock, bp="e", id=flow, cat=FLOW_CAT, name=FLOW_NAME)
            self.n["flows"] += 1

    def compute(self, seq, clock, depth, tensor, remat) -> None:
        frame = pop_frame(self.rec, self.stack, seq, tensor, depth)
        frame.end, frame.collateral = clock, []
        if frame.remat != remat:
            raise ExportError(f"{self.rec.path}: compute {seq} remat={remat}, expected "
                              f"{frame.remat} from its materialization")
        if not remat:
            self.op_done[frame.op] = 1
        self.closing = frame

    def close(self, frame: _Frame, extra: dict | None = None) -> None:
        """Write the end of a finished (or interrupted) materialization."""
        end_args = {"collateral": frame.collateral or [], **(extra or {})}
        if frame.hidden:
            end_args["hidden_levels"] = frame.hidden
        if frame.depth > self.max_depth:
            return
        if frame.depth > 1:
            self.ev("E", TID_REMAT, frame.end, args=end_args)
            return
        args = self.slice_args(frame)
        args.update(end_args)
        if frame.end == frame.begin and not extra:
            if self.zeros and (self.zeros[0][0].begin, self.zeros[0][0].remat) != \
                    (frame.begin, frame.remat):
                self.flush_zeros()
            self.zeros.append((frame, args))
            return
        self.flush_zeros()
        self.op_slice(frame.begin, frame.end, frame.remat, self.static.op_name[frame.op], args,
                      frame.flows)

    def op_slice(self, begin, end, remat, name, args, flows) -> None:
        self.w.emit({"ph": "X", "pid": PID, "tid": TID_OPS, "ts": ts_us(begin),
                     "dur": ts_us(end - begin), "cat": "remat" if remat else "op",
                     "name": name, "args": args})
        self.flow_ends(TID_OPS, begin, flows)
        if "op_id" in args:
            self.scopes.at(begin, end, args["op_id"])

    def flush_zeros(self) -> None:
        """Consecutive zero-cost top-level ops at one timestamp become one slice:
        Perfetto stacks zero-length slices of one timestamp on top of each other
        (hundreds of constants would exceed its nesting limit)."""
        zeros, self.zeros = self.zeros, []
        if len(zeros) == 1:
            frame, args = zeros[0]
            self.op_slice(frame.begin, frame.end, frame.remat, self.static.op_name[frame.op],
                          args, frame.flows)
        elif zeros:
            first = zeros[0][0]
            names = {self.static.op_name[f.op] for f, _ in zeros}
            name = f"{names.pop()} x{len(zeros)}" if len(names) == 1 \
                else f"{len(zeros)} zero-cost ops"
            args = {"ops": len(zeros), "op_ids": [f.op for f, _ in zeros],
                    "paper_ops": [f.op + 1 for f, _ in zeros],
                    "tensors": [a["tensor"] for _, a in zeros],
                    "outputs": [o for _, a in zeros for o in a["outputs"]],
                    "depth": 1, "remat": first.remat, "cost": 0,
                    "collateral": [c for _, a in zeros for c in a["collateral"]]}
            self.op_slice(first.begin, first.end, first.remat, name, args,
                          [flow for f, _ in zeros for flow in f.flows])

    # instants ------------------------------------------------------------------------
    def evict(self, seq, clock, depth, storage, decision, d) -> None:
        s = self.static
        if d is None or d[0] != decision or d[1] != seq or d[2] != storage:
            raise ExportError(f"{self.rec.path}: evict event {seq} does not match decision "
                              f"{decision} of decisions.parquet")
        (_, _, victim, victim_bytes, score, runner, runner_score, margin, for_tensor,
         request, memory, pinned) = d
        victim_name = s.storage_tensor.get(victim, str(victim))
        flow = seq
        self.ev("i", TID_EVICT, clock, s="t", cat="evict", name=f"evict {victim_name}", args={
            "decision": decision, "storage": victim, "tensor": victim_name,
            "bytes": victim_bytes, "score": finite(score), "runner_up": runner,
            "runner_up_tensor": None if runner is None else s.storage_tensor.get(runner),
            "runner_up_score": finite(runner_score), "margin": finite(margin),
            "for_tensor": s.tensor_name[for_tensor], "request": request, "memory": memory,
            "pinned": pinned, "depth": depth,
            "flow": flow if flow in self.flow_ids else None})
        self.n["evictions"] += 1
        self.flow_start(TID_EVICT, clock, flow)

    def free_dead(self, seq, clock, op_id, tensor, storage, nbytes) -> None:
        self.ev("i", TID_FREE, clock, s="t", cat="free_dead",
                name=f"free {self.static.storage_tensor.get(storage, storage)}",
                args={"storage": storage, "tensor": self.static.tensor_name[tensor],
                      "bytes": nbytes, "op_id": op_id, "paper_op": op_id + 1,
                      "flow": seq if seq in self.flow_ids else None})
        self.n["dead_frees"] += 1
        self.flow_start(TID_FREE, clock, seq)

    def flow_start(self, tid: int, clock: int, flow: int) -> None:
        """Right after its instant, so that the flow binds to it."""
        if flow in self.flow_ids:
            self.ev("s", tid, clock, id=flow, cat=FLOW_CAT, name=FLOW_NAME)

    def oom(self, clock, tensor, request, memory, pinned, depth) -> None:
        while self.stack:    # the failing chain, innermost first
            frame = self.stack.pop()
            frame.end = clock
            self.close(frame, {"oom": True})
        self.flush_zeros()
        self.ev("i", TID_OPS, clock, s="p", cat="oom",
                name=f"OOM allocating {self.static.tensor_name[tensor]}",
                args=json_safe({"oom": self.rec.summary.get("oom"), "request": request,
                                "memory": memory, "pinned": pinned, "depth": depth,
                                "frontier": self.rec.run.get("frontier")}))


class _Scopes:
    """The model's module scopes (phase, then the module chain) as nested slices on
    their own track, following the top-level ops in time."""

    def __init__(self, exporter: _PerfettoExporter, rec: Recording):
        self.exporter = exporter
        self.open: list[str] = []
        self.last_end = 0
        self.chains: dict[int, list[str]] = {}
        ops = rec.table("ops")
        if "phase" not in ops.column_names:
            return
        columns = ops.select(["op_id", "phase", "module_chain"]).to_pydict()
        for op, phase, chain in zip(columns["op_id"], columns["phase"], columns["module_chain"]):
            if phase is not None:
                self.chains[op] = [phase, *(chain.split(" > ") if chain else [])]

    def at(self, begin: int, end: int, op: int) -> None:
        chain = self.chains.get(op)
        if chain is None:
            return
        common = 0
        while common < min(len(self.open), len(chain)) and self.open[common] == chain[common]:
            common += 1
        for _ in self.open[common:]:
            self.exporter.ev("E", TID_MODULES, begin)
        for name in chain[common:]:
            self.exporter.ev("B", TID_MODULES, begin, cat="module", name=name)
        self.open = list(chain)
        self.last_end = max(self.last_end, end)

    def finish(self) -> None:
        for _ in self.open:
            self.exporter.ev("E", TID_MODULES, max(self.last_end, self.exporter.last_clock))
        self.open = []


def export_perfetto(recording: Recording | str | os.PathLike, out: str | os.PathLike | IO,
                    *, max_nesting: int = MAX_NESTING,
                    batch_rows: int = BATCH_ROWS) -> PerfettoExport:
    """Write `recording` as Chrome trace-event JSON to `out` (a path, '-' for stdout,
    or a text stream; a path ending in .gz is gzip-compressed). At most
    `max_nesting` levels of rematerializations are shown. See the module doc."""
    rec = as_recording(recording)
    with open_output(out, binary=False, gzip_ok=True) as fh:
        exporter = _PerfettoExporter(rec, fh, batch_rows, max_nesting)
        result = exporter.run()
    return PerfettoExport(**{**result.__dict__, "path": output_name(out)})
