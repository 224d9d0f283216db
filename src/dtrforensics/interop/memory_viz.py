"""A recording as a PyTorch CUDA memory snapshot, for pytorch.org/memory_viz.

`export_memory_viz(recording, out)` writes the pickle that
`torch.cuda.memory._snapshot()` / `_dump_snapshot()` produce, so PyTorch's
viewer (drag the file onto https://pytorch.org/memory_viz, "Active Memory
Timeline") and `python -m torch.cuda._memory_viz {stats,trace,trace_plot,
segment_plot,memory,segments} FILE` read it. torch is not needed to write it.

The snapshot is a dict `{"segments": [...], "device_traces": [[...]]}`:

* `device_traces[0]` is the whole run, in event order. A storage becoming
  resident (an op's first computation, a rematerialization, a sibling output
  recomputed along) is `segment_alloc` + `alloc`; an eviction (pressure or
  dead) is `free_requested` + `free_completed` + `segment_free`; the failed
  allocation of an OOM run is `oom` (`size` = the request, `device_free` =
  budget - memory). An op allocates all its outputs at once, so when it
  recomputes outputs that are still resident, those bytes are allocated
  and freed right after, exactly as the engine counts them: the running total
  of the trace is the recording's `memory` column at every event, and its
  maximum is the run's peak memory.
* `segments` is the state when the run ended (at the OOM for an OOM run): one
  segment per resident storage, holding one `active_allocated` block.
* Each entry's and block's `frames` (innermost first) name what happened:
  first the storage (`alloc x7977 (storage 612, 179830784 B)`, `remat ...`,
  `duplicate of resident output ...`, `evict ...: decision 12 of dtr, room
  for x8012`, `free dead ...`, `OOM allocating ...`), then the chain of
  materializations in progress, innermost first, one frame per level
  (`filename` = the trace's log, `line` = the op's line in it, `name` =
  `op 470 (paper #471) add: remat x9012 [depth 2]`; for a log with a
  where-file, docs/torch.md, the level's op's module leads the name and its
  source line is the frame's `filename` and `line`, so the stack view reads
  `blocks.0.fc: op 79 (paper #80) addmm: remat x87 [depth 12] zoo.py:69`).
  Chains deeper than
  `max_frames` keep their innermost levels and the top-level op, with one
  frame saying how many levels were left out.
* Sizes are exact (`size` = `requested_size` = the storage's bytes).

Synthetic fields (the simulator has no allocator, device or streams):

* `addr`/`address`: every allocation gets a fresh address from a bump
  allocator starting at 0x7f0000000000, aligned to 512 bytes, never reused,
  so each allocation is its own block.
* segments: one segment per allocation (`segment_alloc` before each alloc,
  `segment_free` after each free): reserved memory equals allocated memory,
  there is no caching or fragmentation to show. `segment_type` is "large"
  above 1 MiB, `segment_pool_id` (0, 0).
* `device` 0, `stream` 0 everywhere.
* `time_us`: the simulated clock in microseconds (clock // 1000), not wall
  time. `seq` (an extension that viewers ignore): the recording event's seq.
* zero-byte storages are not allocated (they change no total).
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from typing import IO

from ..recorder.reader import Recording
from ..trace.program import op_label
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

BASE_ADDRESS = 0x7F00_0000_0000
ALIGN = 512
LARGE_SEGMENT = 1 << 20
MAX_FRAMES = 64
APPEND_BATCH = 1000

EVENT_COLUMNS = ("seq", "kind", "op_id", "clock", "depth", "tensor_id", "storage_id", "bytes",
                 "memory", "request", "decision", "remat", "collateral")


@dataclass(frozen=True)
class MemoryVizExport:
    """What `export_memory_viz` wrote."""

    path: str
    trace_entries: int
    allocations: int
    frees: int
    peak_bytes: int
    final_bytes: int
    segments: int
    outcome: str

    def to_json(self) -> dict:
        return {"format": "memory-viz", **self.__dict__}


# --- a pickle written piece by piece --------------------------------------------------

def _body(obj) -> bytes:
    """The opcodes that push `obj` (protocol 2, without the PROTO header and STOP)."""
    return pickle.dumps(obj, protocol=2)[2:-1]


class _SnapshotWriter:
    """Writes {"device_traces": [[entry, ...]], "segments": [...]} as one pickle,
    appending the entries in batches so the trace is never held in memory.

    The entries of a batch are pickled by one Pickler, so objects they share
    (frames, frame lists) are written once per batch and referenced after that;
    each batch starts a new memo (its indices overwrite the previous batch's,
    which it never refers to), which every unpickler accepts."""

    def __init__(self, fh: IO[bytes]):
        self.fh = fh
        self.count = 0
        self._new_batch()
        fh.write(pickle.PROTO + bytes([2]) + pickle.EMPTY_DICT + _body("device_traces")
                 + pickle.EMPTY_LIST + pickle.EMPTY_LIST)

    def _new_batch(self) -> None:
        self.buffer = io.BytesIO()
        self.pickler = pickle.Pickler(self.buffer, protocol=2)
        self.pieces: list[bytes] = []
        self.in_batch = 0

    def add(self, entry: dict) -> None:
        start = self.buffer.tell()
        self.pickler.dump(entry)
        self.buffer.seek(start)
        self.pieces.append(self.buffer.read()[2:-1])      # drop PROTO 2 and STOP
        self.count += 1
        self.in_batch += 1
        if self.in_batch >= APPEND_BATCH:
            self.flush()

    def flush(self) -> None:
        if self.pieces:
            self.fh.write(pickle.MARK + b"".join(self.pieces) + pickle.APPENDS)
        self._new_batch()

    def close(self, segments: list[dict]) -> None:
        self.flush()
        self.fh.write(pickle.APPEND + pickle.SETITEM      # device 0 -> traces -> dict
                      + _body("segments") + _body(segments) + pickle.SETITEM + pickle.STOP)


# --- the exporter -----------------------------------------------------------------------

def _op_where(rec: Recording) -> dict[int, tuple[str | None, str | None, int]]:
    """op -> (module, source file, source line) from the recording's ops table, for
    ops that have either; empty for a log without a where-file."""
    ops = rec.table("ops")
    if "module" not in ops.column_names:
        return {}
    columns = ops.select(["op_id", "module", "source"]).to_pydict()
    found = {}
    for op, module, source in zip(columns["op_id"], columns["module"], columns["source"]):
        if module is None and source is None:
            continue
        filename, _, line = (source or "").rpartition(":")
        found[op] = (module, filename or None, int(line) if line.isdigit() else 0)
    return found


class _Level:
    """One materialization in progress."""

    __slots__ = ("tensor", "op", "depth", "remat", "frame")

    def __init__(self, tensor: int, op: int, depth: int, remat: bool, frame: dict):
        self.tensor, self.op, self.depth, self.remat, self.frame = tensor, op, depth, remat, frame


class _MemoryVizExporter:
    def __init__(self, rec: Recording, fh: IO[bytes], batch_rows: int, max_frames: int):
        self.rec = rec
        self.batch_rows = batch_rows
        self.max_frames = max(2, max_frames)
        self.s = Static.load(rec)
        self.w = _SnapshotWriter(fh)
        self.filename = os.path.basename(str(rec.run["trace"].get("source") or
                                             rec.run["trace"]["name"]))
        self.stack: list[_Level] = []
        self.resident: dict[int, tuple[int, int, list]] = {}   # storage -> addr, size, frames
        self.next_addr = BASE_ADDRESS
        self.allocated = 0
        self.peak = 0
        self.op_done = bytearray(len(self.s.op_name))
        self.n_alloc = self.n_free = 0
        self.where = _op_where(rec)

    # frames ------------------------------------------------------------------------
    def frame(self, name: str, op: int | None = None) -> dict:
        line = self.s.op_line[op] if op is not None else 0
        where = self.where.get(op) if op is not None else None
        if where is not None:           # the model's module and source line
            module, filename, source_line = where
            return {"filename": filename or self.filename,
                    "line": source_line if filename else line,
                    "name": (f"{module}: {name}" if module else name).replace(";", ",")}
        return {"filename": self.filename, "line": line, "name": name.replace(";", ",")}

    def chain(self) -> list[dict]:
        """Frames of the materializations in progress, innermost first (capped)."""
        levels = self.stack
        if len(levels) <= self.max_frames:
            return [lv.frame for lv in reversed(levels)]
        keep = self.max_frames - 2
        inner = [lv.frame for lv in reversed(levels[-keep:])]
        skipped = len(levels) - keep - 1
        return inner + [self.frame(f"... {skipped} levels omitted"), levels[0].frame]

    def storage_label(self, storage: int, size: int) -> str:
        return f"{self.s.storage_tensor.get(storage, storage)} (storage {storage}, {size} B)"

    # trace entries ---------------------------------------------------------------------
    def entry(self, action: str, addr: int, size: int, frames: list, clock: int,
              seq: int) -> None:
        self.w.add({"action": action, "addr": addr, "size": size, "stream": 0,
                    "frames": frames, "time_us": clock // 1000, "seq": seq})

    def alloc(self, storage: int | None, size: int, frames: list, clock: int, seq: int) -> int:
        addr = self.next_addr
        self.next_addr += max(ALIGN, -(-size // ALIGN) * ALIGN)
        self.entry("segment_alloc", addr, size, frames, clock, seq)
        self.entry("alloc", addr, size, frames, clock, seq)
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        self.n_alloc += 1
        if storage is not None:
            self.resident[storage] = (addr, size, frames)
        return addr

    def free(self, addr: int, size: int, frames: list, clock: int, seq: int) -> None:
        for action in ("free_requested", "free_completed", "segment_free"):
            self.entry(action, addr, size, frames, clock, seq)
        self.allocated -= size
        self.n_free += 1

    # events ---------------------------------------------------------------------------
    def run(self) -> MemoryVizExport:
        for row in iter_rows(self.rec, "events", EVENT_COLUMNS, self.batch_rows):
            (seq, kind, op_id, clock, depth, tensor, storage, nbytes, memory, request,
             decision, remat, collateral) = row
            if not (kind == "compute" and collateral):
                if kind != "compute" and memory != self.allocated:
                    raise ExportError(f"{self.rec.path}: event {seq} ({kind}) has memory "
                                      f"{memory}, the allocations so far total {self.allocated}")
            if kind == "materialize":
                self.materialize(seq, depth, tensor)
            elif kind == "compute":
                if collateral:
                    if self.s.tensor_size[tensor] and storage not in self.resident:
                        raise ExportError(f"{self.rec.path}: collateral compute {seq}: "
                                          f"storage {storage} was not allocated")
                else:
                    self.compute(seq, clock, depth, tensor, memory)
            elif kind in ("evict", "free_dead"):
                self.evict(seq, clock, kind, storage, tensor, decision)
            elif kind == "oom":
                self.w.add({"action": "oom", "size": request,
                            "device_free": self.rec.run["budget"] - memory, "stream": 0,
                            "frames": [self.frame(f"OOM allocating {self.s.tensor_name[tensor]}"
                                                  f" ({request} B)", self.s.tensor_op[tensor])]
                            + self.chain(), "time_us": clock // 1000, "seq": seq})
        segments = [self.segment(addr, size, frames)
                    for addr, size, frames in sorted(self.resident.values())]
        self.w.close(segments)
        return MemoryVizExport(path="", trace_entries=self.w.count, allocations=self.n_alloc,
                               frees=self.n_free, peak_bytes=self.peak,
                               final_bytes=self.allocated, segments=len(segments),
                               outcome=self.rec.run["outcome"])

    def materialize(self, seq: int, depth: int, tensor: int) -> None:
        op = self.s.tensor_op[tensor]
        remat = depth > 1 or bool(self.op_done[op])
        verb = "remat" if remat else "compute"
        name = (f"{op_label(op, self.s.op_name[op])}: {verb} "
                f"{self.s.tensor_name[tensor]} [depth {depth}]")
        self.stack.append(_Level(tensor, op, depth, remat, self.frame(name, op)))
        check_depth(self.rec, seq, len(self.stack), depth)

    def compute(self, seq: int, clock: int, depth: int, tensor: int, memory: int) -> None:
        """The op of the innermost materialization ran: all its outputs are allocated;
        those whose storage was still resident are freed again at once."""
        level = self.stack[-1] if self.stack else None
        chain = self.chain()
        pop_frame(self.rec, self.stack, seq, tensor, depth)
        if not level.remat:
            self.op_done[level.op] = 1
        duplicates = []
        for u in self.s.outputs_of(level.op):
            size = self.s.tensor_size[u]
            if size == 0:
                continue
            storage = self.s.tensor_storage[u]
            if storage in self.resident:
                frames = [self.frame(f"duplicate of resident output "
                                     f"{self.storage_label(storage, size)}, freed at once",
                                     level.op)] + chain
                duplicates.append((self.alloc(None, size, frames, clock, seq), size, frames))
            else:
                verb = "remat" if level.remat else "alloc"
                frames = [self.frame(f"{verb} {self.storage_label(storage, size)}",
                                     level.op)] + chain
                self.alloc(storage, size, frames, clock, seq)
        if memory != self.allocated:
            raise ExportError(f"{self.rec.path}: compute event {seq} has memory {memory}, "
                              f"the allocations total {self.allocated}")
        for addr, size, frames in duplicates:
            self.free(addr, size, frames, clock, seq)

    def evict(self, seq, clock, kind, storage, tensor, decision) -> None:
        if storage not in self.resident:
            size = self.s.tensor_size[storage] if storage < len(self.s.tensor_size) else 0
            if size == 0:
                return
            raise ExportError(f"{self.rec.path}: {kind} event {seq} frees storage {storage}, "
                              "which is not allocated")
        addr, size, _ = self.resident.pop(storage)
        label = self.storage_label(storage, size)
        if kind == "evict":
            what = (f"evict {label}: decision {decision} of {self.rec.run['policy']}, "
                    f"room for {self.s.tensor_name[tensor]}")
        else:
            what = f"free dead {label}"
        self.free(addr, size, [self.frame(what)] + self.chain(), clock, seq)

    @staticmethod
    def segment(addr: int, size: int, frames: list) -> dict:
        block = {"address": addr, "size": size, "requested_size": size,
                 "state": "active_allocated", "frames": frames}
        return {"device": 0, "address": addr, "total_size": size, "allocated_size": size,
                "active_size": size, "requested_size": size, "stream": 0,
                "segment_type": "large" if size > LARGE_SEGMENT else "small",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                "blocks": [block]}


def export_memory_viz(recording: Recording | str | os.PathLike, out: str | os.PathLike | IO,
                      *, max_frames: int = MAX_FRAMES,
                      batch_rows: int = BATCH_ROWS) -> MemoryVizExport:
    """Write `recording` as a PyTorch memory snapshot pickle to `out` (a path, '-' for
    stdout, or a binary stream). See the module doc for what is synthetic."""
    rec = as_recording(recording)
    with open_output(out, binary=True) as fh:
        result = _MemoryVizExporter(rec, fh, batch_rows, max_frames).run()
    return MemoryVizExport(**{**result.__dict__, "path": output_name(out)})
