"""Old values of constants written in place by `optimizer.step()`, kept while a
rebuild of the real step still reads them.

The recorder writes an optimizer's update of a parameter or an optimizer state
as a view of that constant (the same bytes, written in place), so the log
counts each constant once, as PyTorch holds it. DTR's graph still has every op
that read the constant before the update as rebuildable from it: when the
schedule rebuilds such an op after the update (a gradient evicted in backward
and read by the optimizer, or rebuilt by the final pins, through forward ops
that read the weights), the rerun must read the bytes from before the write to
give the value it gave. The executor keeps exactly those: at each write, a copy
of the storage if a later rebuild of an op that ran since the storage's
previous write reads it, held until the last such rebuild. They are real
memory the log does not count: the live bytes exceed the engine's memory by
them, and only by them (`Stats.unexplained`).
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..engine.hooks import E_FLAG, E_KIND, E_TENSOR, EV_COMPUTE, FLAG_COLLATERAL, FLAG_REMAT
from ..trace.program import Program


class OldValues:
    """Per constant storage, its in-place writes in the step, each with the bytes
    from before it when a later rebuild reads them."""

    def __init__(self, program: Program, events: list, track):
        self._program = program
        self._events = events
        self._track = track          # counts a new storage in the live bytes
        self._reads: dict[int, list[tuple[int, int]]] | None = None
        self._writes: dict[int, list[list]] = {}   # storage -> [write op, copy or None, rebuilds left]
        self.bytes = 0               # bytes of the copies held now
        self.kept = 0                # copies made

    def _rebuild_reads(self) -> dict[int, list[tuple[int, int]]]:
        """Constant storage -> (event index, op) of every rebuild of an op reading it."""
        prog = self._program
        tensor_op, storage = prog.tensor_op.tolist(), prog.tensor_storage.tolist()
        reads: dict[int, list[tuple[int, int]]] = {}
        for index, e in enumerate(self._events):
            if e[E_KIND] != EV_COMPUTE or not e[E_FLAG] & FLAG_REMAT or e[E_FLAG] & FLAG_COLLATERAL:
                continue
            op = tensor_op[e[E_TENSOR]]
            for sid in {storage[t] for t in prog.op_args_of(op).tolist()}:
                if prog.is_constant(tensor_op[sid]):
                    reads.setdefault(sid, []).append((index, op))
        return reads

    def keep(self, op: int, position: int, inputs: list, written: list[int]) -> None:
        """Before log op `op` writes its constant arguments `written` in place, with
        the schedule's events applied up to `position`."""
        if not written:
            return
        if self._reads is None:
            self._reads = self._rebuild_reads()
        prog = self._program
        args = prog.op_args_of(op).tolist()
        for m in written:
            sid = int(prog.tensor_storage[args[m]])
            history = self._writes.setdefault(sid, [])
            since = history[-1][0] if history else -1
            uses = sum(1 for index, reader in self._reads.get(sid, ())
                       if index >= position and since < reader <= op)
            copy = None
            if uses:
                with _disable_current_modes():
                    copy = inputs[m].untyped_storage().clone()
                self._track(copy)
                self.bytes += copy.nbytes()
                self.kept += 1
            history.append([op, copy, uses])

    def sources(self, op: int) -> dict[int, torch.UntypedStorage]:
        """The kept bytes a rebuild of `op` reads in place of its constant storages'
        current ones; each call is one of the rebuilds counted at the write, and a
        copy goes once its last rebuild has it."""
        if not self._writes:
            return {}
        prog, found = self._program, {}
        for sid in {int(prog.tensor_storage[t]) for t in prog.op_args_of(op).tolist()}:
            entry = next((w for w in self._writes.get(sid, ()) if w[0] >= op), None)
            if entry is None:
                continue
            if entry[1] is None:
                raise RuntimeError(f"rebuilding op {op}: storage {sid} was written in place "
                                   "after the op ran, and no rebuild was counted for it")
            found[sid] = entry[1]
            entry[2] -= 1
            if entry[2] == 0:
                self.bytes -= entry[1].nbytes()
                entry[1] = None
        return found
