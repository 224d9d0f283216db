"""New versions of what a step writes in place (semantics.md §9.2).

A MUTATE makes a new version of each storage it writes: before the aten op
writes the original, the old version's bytes are copied to a new storage the
executor holds (the engine's old version, which a rebuild may read), and the
original becomes the new version. A parameter's old version is a constant,
held to the end of the step as the engine keeps it pinned.

In `optimizer.step()` a write of an optimizer state is a view of it, as the
recorder logs it (`StepRecorder.update_in_place`): written in place, nothing
kept; the last op that wrote each state is remembered (`state_writes`), so a
rebuild that would read a state written since its op ran is refused
(`rebuild.Rebuilder.check_states_unwritten`).
"""

from __future__ import annotations

import weakref

from torch.utils._python_dispatch import _disable_current_modes

from ..trace.program import Program
from .storages import Storages


class Versions:
    """The written storages of the real step: old versions kept, states' writers."""

    def __init__(self, program: Program, storages: Storages):
        self.program = program
        self.storages = storages
        self.state_writes: dict[int, int] = {}  # state storage -> the last op that wrote it
        self._tensor_storage = program.tensor_storage.tolist()

    @staticmethod
    def split(recorder, inputs: list, mutated: list[int]) -> tuple[list[int], list[int]]:
        """The written arguments: optimizer states updated in place (as `recorder`
        writes them), and the rest, which the log's MUTATE makes new versions of."""
        updated = [m for m in mutated if recorder.updated_in_place(inputs[m])]
        return updated, [m for m in mutated if m not in updated]

    def states_written(self, op: int, written: list[int]) -> None:
        """Log op `op` writes the optimizer states among its arguments `written`."""
        args = self.program.op_args_of(op).tolist()
        for m in written:
            self.state_writes[self._tensor_storage[args[m]]] = op

    def new_versions(self, op: int, inputs: list, mutated: list[int]) -> None:
        """Before MUTATE `op` writes its arguments: the old versions move to copies."""
        prog, storages = self.program, self.storages
        args = prog.op_args_of(op).tolist()
        with _disable_current_modes():
            for out_tid, m in zip(prog.op_outputs_of(op), mutated):
                old = self._tensor_storage[args[m]]
                real = inputs[m].untyped_storage()
                storages.keep(old, real.clone())
                storages.weak[out_tid] = weakref.ref(real)
                storages.resident.add(out_tid)
