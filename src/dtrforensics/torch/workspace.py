"""Kernel workspaces of the real step: memory an op allocates and frees inside
itself, beyond the outputs it returns (scratch buffers, temporaries of composite
kernels), which DTR does not model (it knows an op by its outputs).

`Meter` measures them around each aten call the executor makes (the step's ops
and every rebuild), by log op:

- on CPU, with PyTorch's profiler recording memory events
  (`profile_memory=True`): every allocation and free of the CPU allocator
  inside the call, in order, from the profiler's event tree;
- on CUDA, with the caching allocator's statistics
  (`torch.cuda.memory_allocated` before and after the call, its peak reset
  before it).

An op's workspace is the peak of its allocations above what it held at the
start, less what it still holds at the end (its outputs):
`peak - max(start, end)`, never below 0. Beside it, the live storage bytes of
the step when the op began plus the op's peak above its start is what the
step's storages and that op's allocations held at once (`peak_with_workspaces`)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

_MARK = "dtrf_workspace:"


@dataclass(frozen=True)
class Workspaces:
    """The workspaces of one real step."""

    largest: int                 # bytes, the largest of any one op run
    op_id: int | None            # the log op of that run
    op_name: str | None
    module: str | None           # where the op ran (None without a where-file)
    total: int                   # summed over every op run of the step, rebuilds included
    op_runs: int                 # op runs measured
    with_workspace: int          # of them, those with a workspace above 0
    method: str                  # how: "profiler memory events (CPU)" or "allocator statistics (CUDA)"
    peak_with_workspaces: int    # the largest of live bytes at an op's start plus its peak above that

    def to_json(self) -> dict:
        return {"largest": self.largest, "op_id": self.op_id, "op_name": self.op_name,
                "module": self.module, "total": self.total, "op_runs": self.op_runs,
                "with_workspace": self.with_workspace, "method": self.method,
                "peak_with_workspaces": self.peak_with_workspaces}


def workspace_of(deltas) -> tuple[int, int]:
    """The workspace of one op run from its allocator deltas in order (+bytes
    allocated, -bytes freed): the running peak less what is still held at the end;
    and the running peak itself."""
    running = peak = 0
    for delta in deltas:
        running += delta
        if running > peak:
            peak = running
    return max(0, peak - max(0, running)), peak


class Meter:
    """Measures workspaces around each aten call (`around(op)`), inside `session()`."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.runs: list[tuple[int, int, int]] = []   # (log op, workspace, live + peak), in order
        self._live: list[int] = []                   # live bytes at each marked call's start
        self._profile = None

    @property
    def method(self) -> str:
        return ("allocator statistics (CUDA)" if self.cuda
                else "profiler memory events (CPU)")

    @contextlib.contextmanager
    def session(self):
        """The span in which ops are measured (on CPU, the profiler's)."""
        if self.cuda:
            yield self
            return
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _quiet_stderr():
            prof.__enter__()
        try:
            yield self
        finally:
            with _quiet_stderr():
                prof.__exit__(None, None, None)
            self._profile = prof
            self._read_profile()

    def around(self, op: int, live: int):
        """A context around the aten call of log op `op`, begun with `live` bytes live."""
        if self.cuda:
            return self._cuda_around(op, live)
        self._live.append(live)
        return torch._C._profiler._RecordFunctionFast(f"{_MARK}{op}:{len(self._live) - 1}")

    @contextlib.contextmanager
    def _cuda_around(self, op: int, live: int):
        dev = self.device
        start = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        yield
        peak, end = torch.cuda.max_memory_allocated(dev), torch.cuda.memory_allocated(dev)
        self.runs.append((op, max(0, peak - max(start, end)), live + peak - start))

    def _read_profile(self) -> None:
        """Every marked op run's workspace, from the allocation events under it."""
        found = []
        stack = list(self._profile.profiler.kineto_results.experimental_event_tree())
        while stack:
            event = stack.pop()
            if event.name.startswith(_MARK):
                allocs = sorted(_allocations(event), key=lambda e: e.start_time_ns)
                ws, peak = workspace_of([e.extra_fields.alloc_size for e in allocs])
                op, call = (int(x) for x in event.name[len(_MARK):].split(":"))
                found.append((call, op, ws, self._live[call] + peak))
            else:
                stack.extend(event.children)
        found.sort()
        self.runs = [(op, ws, held) for _, op, ws, held in found]
        self._profile = None

    def summary(self, program) -> Workspaces:
        """The step's workspaces, the largest named by its op and module."""
        largest, op = 0, None
        for k, ws, _ in self.runs:
            if ws > largest:
                largest, op = ws, k
        return Workspaces(
            largest=largest, op_id=op, op_name=program.op_name(op) if op is not None else None,
            module=program.op_where(op) if op is not None else None,
            total=sum(ws for _, ws, _ in self.runs), op_runs=len(self.runs),
            with_workspace=sum(ws > 0 for _, ws, _ in self.runs), method=self.method,
            peak_with_workspaces=max((held for _, _, held in self.runs), default=0))


def _allocations(event) -> list:
    """The allocator events under `event` (frees as negative sizes)."""
    out, stack = [], list(event.children)
    while stack:
        e = stack.pop()
        if type(e.extra_fields).__name__ == "_ExtraFields_Allocation":
            if e.extra_fields.device.type == "cpu":
                out.append(e)
        else:
            stack.extend(e.children)
    return out


@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side prints start and stop notices (and, without a GPU,
    a failed device count) on file descriptor 2: not the command's output."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
