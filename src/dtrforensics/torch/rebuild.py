"""Rebuilding: a log op the schedule rematerializes, rerun for real.

What a rerun needs is kept as the step runs, only for the ops the schedule
reruns (`Rebuilder.keep`): the aten op, its non-tensor arguments, and per
tensor argument the engine storage and the view of it the op read (`OpRecord`).
A rebuild (`Rebuilder.rebuild`) reruns the op on views of its input storages
(resident: the engine rebuilt them first) and installs each output the engine
rebuilds into its storage (`storages.Storages.install`: the new data pointer
swapped in, no copy; a ghost where PyTorch let the storage die):

- an argument the op writes (batch norm's running statistics) is a scratch
  copy, so a rebuild changes nothing but the storages it rebuilds;
- a random op reruns under its generator's state (the CPU's, or its CUDA
  device's) from before its first run (`RandomState`), as
  `torch.utils.checkpoint`'s `preserve_rng_state` does;
- a rebuild that would read an optimizer state written since its op ran is
  refused (`ScheduleError`): the log writes a state's update as a view of it,
  with no old version to read.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_map

from ..engine.hooks import E_FLAG, E_KIND, E_TENSOR, EV_COMPUTE, FLAG_COLLATERAL, FLAG_REMAT
from ..trace.program import Program
from .aten import output_tensors, schema_arguments
from .schedule import ScheduleError, op_text, refused_op
from .storages import Storages


@dataclass(slots=True)
class OpRecord:
    """What rerunning one log op needs: the aten op, its non-tensor arguments, and
    per tensor argument the engine storage and view it read."""

    func: object
    args: tuple
    kwargs: dict
    slots: list[tuple[int, torch.dtype, tuple, tuple, int]]  # storage id, dtype, size, stride, offset
    writes: tuple[int, ...]          # argument slots the aten op writes (rerun on scratch copies)
    versioned: tuple[int, ...]       # those the log's MUTATE makes new versions of
    outputs: list[tuple[int, int]]   # (index among produced tensors, owning tensor id)
    mutation: bool                   # a MUTATE op: produced tensors are the written slots
    rng: RandomState | None


class RandomState:
    """The state of the generator a random op draws from (the CPU's, or its CUDA
    device's), taken before the op's first run. `replayed` runs a block under
    it inside `torch.random.fork_rng`, which puts every generator it forks back
    as it was after the block."""

    def __init__(self, device: torch.device):
        self.device = device
        self.state = (torch.cuda.get_rng_state(device) if device.type == "cuda"
                      else torch.get_rng_state())

    @contextlib.contextmanager
    def replayed(self):
        """Run the block under the saved state; the generators' own states after."""
        cuda = self.device.type == "cuda"
        with torch.random.fork_rng(devices=[self.device] if cuda else [],
                                   device_type="cuda" if cuda else "cpu"):
            if cuda:
                torch.cuda.set_rng_state(self.state, self.device)
            else:
                torch.set_rng_state(self.state)
            yield


def _op_device(inputs: list, kwargs: dict) -> torch.device:
    """The device an op runs on: its `device=` argument, else its first tensor's."""
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    return inputs[0].device if inputs else torch.device("cpu")


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _mapped(fn, x, kind):
    """`tree_map(fn, x)` for the leaves of type `kind`: an op argument is such a
    leaf, another leaf, or a tuple or list of them, walked here in pytree's order
    without its generic machinery; any other container is left to `tree_map`."""
    if isinstance(x, kind):
        return fn(x)
    t = type(x)
    if t is tuple or t is list:
        return t([_mapped(fn, v, kind) for v in x])
    if isinstance(x, (tuple, list, dict)):
        return tree_map(lambda v: fn(v) if isinstance(v, kind) else v, x)
    return x


def _template(func, args: tuple, kwargs: dict):
    """args and kwargs with every tensor replaced by its slot, numbered in the
    order `schema_tensors` lists them."""
    counter = iter(range(1 << 62))

    def slot(t):
        return _Slot(next(counter))
    new_args = tuple(_mapped(slot, a, torch.Tensor) for a in args)
    new_kwargs = dict(kwargs)
    for name, _ in schema_arguments(func)[len(args):]:
        if name in kwargs:
            new_kwargs[name] = _mapped(slot, kwargs[name], torch.Tensor)
    return new_args, new_kwargs


def _fill(template, tensors: list):
    args, kwargs = template

    def fill(x):
        return tensors[x.index]
    return (tuple(_mapped(fill, a, _Slot) for a in args),
            {k: _mapped(fill, v, _Slot) for k, v in kwargs.items()})


def rebuilt_ops(events: list, tensor_op: list[int]) -> set[int]:
    """The ops the schedule reruns (top-level rematerializations): only these keep
    what a rerun needs."""
    return {tensor_op[e[E_TENSOR]] for e in events
            if e[E_KIND] == EV_COMPUTE and e[E_FLAG] & FLAG_REMAT and not e[E_FLAG] & FLAG_COLLATERAL}


class Rebuilder:
    """Keeps what the schedule's reruns need as the step runs, and reruns them.
    `state_writes`: optimizer state storage -> the last op that wrote it in place
    (`versions.Versions`); `where()` names the code running now."""

    def __init__(self, program: Program, storages: Storages, stats, rebuilt: set[int],
                 state_writes: dict[int, int], where):
        self.program = program
        self.storages = storages
        self.stats = stats
        self.rebuilt = rebuilt
        self.state_writes = state_writes
        self.where = where
        self.ops: dict[int, OpRecord] = {}
        self._op_cost = program.op_cost.tolist()
        self._tensor_storage = program.tensor_storage.tolist()

    # --- what a rerun needs, kept as the step runs -------------------------------------

    def slots(self, op: int, inputs: list) -> list:
        """Per tensor argument of log op `op` (the aten call's `inputs`), its engine
        storage and the view of it the op reads; refused where the tensor's
        storage is no longer the one the engine knows."""
        slots, storages = [], self.storages
        for t, tid in zip(inputs, self.program.op_args_of(op).tolist()):
            sid = self._tensor_storage[tid]
            real = storages.storage(sid)
            if real is None or real._cdata != t.untyped_storage()._cdata:
                raise ScheduleError(
                    f"{op_text(self.program, op)} {self.where()}: reads a tensor whose storage an "
                    "in-place op changed after the tensor was made (the DTR model gives it the old "
                    "value): cannot be recomputed faithfully")
            slots.append((sid, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset()))
        return slots

    def keep(self, op: int, func, args: tuple, kwargs: dict, slots: list, mutated: list[int],
             versioned: list[int], mutation: bool) -> None:
        self.ops[op] = OpRecord(func, *_template(func, args, kwargs), slots, tuple(mutated),
                                tuple(versioned), [], mutation, None)

    def seed(self, planned: list[tuple[int, str]], args: tuple, kwargs: dict, inputs: list,
             label) -> None:
        """A random aten call about to run: the ops of it the schedule reruns keep
        its generator's state."""
        kept = [self.ops[k] for k, _ in planned if k in self.ops]
        if not kept:
            return
        if any(isinstance(a, torch.Generator) for a in (*args, *kwargs.values())):
            raise ScheduleError(f"{label} {self.where()}: the schedule reruns it, and it draws "
                                "from a torch.Generator of its own, whose state is not "
                                "replayed: cannot be recomputed faithfully")
        rng = RandomState(_op_device(inputs, kwargs))
        for rec in kept:
            rec.rng = rng

    def produced(self, tid: int, op: int, index: int) -> None:
        """Tensor `tid`, made by log op `op`, is the call's `index`-th output tensor."""
        rec = self.ops.get(op)
        if rec is not None:
            rec.outputs.append((index, tid))

    def mutated(self, op: int) -> None:
        """Log op `op` is a MUTATE: what it produces are its written arguments."""
        rec = self.ops.get(op)
        if rec is not None:
            rec.outputs = list(enumerate(self.program.op_outputs_of(op)))

    # --- the rerun ----------------------------------------------------------------------

    def rebuild(self, op: int, meter=None) -> None:
        """Rerun log op `op` on its resident inputs; install its non-resident outputs
        (`meter`: a `workspace.Meter` measuring the call, when asked)."""
        self.stats.remats += 1
        self.stats.remat_compute += self._op_cost[op]
        rec = self.ops.get(op)
        if rec is None:
            raise ScheduleError(f"the schedule rebuilds {refused_op(self.program, op)}, which the "
                                "step never ran")
        storages = self.storages
        targets = [(i, tid) for i, tid in rec.outputs if tid not in storages.resident]
        if not targets:
            return  # views only: their storage is rebuilt by its own op
        self.check_states_unwritten(op, rec)
        with _disable_current_modes(), torch.no_grad():
            tensors = []
            for index, (sid, dtype, size, stride, offset) in enumerate(rec.slots):
                s = storages.storage(sid)
                if s is None or sid not in storages.resident:
                    raise ScheduleError(f"rebuilding {refused_op(self.program, op)}: its input "
                                        f"storage {sid} is not resident")
                if index in rec.writes:
                    s = s.clone()
                tensors.append(torch.empty(0, dtype=dtype, device=s.device).set_(s, offset, size, stride))
            args, kwargs = _fill((rec.args, rec.kwargs), tensors)
            if rec.rng is not None:
                self.stats.random_rebuilds += 1
            with (rec.rng.replayed() if rec.rng is not None else contextlib.nullcontext(),
                  meter.around(op, storages.live) if meter is not None else contextlib.nullcontext()):
                out = rec.func(*args, **kwargs)
            produced = ([tensors[i] for i in rec.versioned] if rec.mutation
                        else output_tensors(out))
            for index, tid in targets:
                storages.install(tid, produced[index].untyped_storage())
            del out, produced, tensors, args, kwargs

    def check_states_unwritten(self, op: int, rec: OpRecord) -> None:
        """A rebuild must read what `op` read. An optimizer state is written in place
        as a view (no old version), so a rebuild of an op that read it before a
        later write would read the new bytes: refused, never computed wrong."""
        for sid, *_ in rec.slots:
            writer = self.state_writes.get(sid, -1)
            if writer > op:
                raise ScheduleError(
                    f"the schedule rebuilds {refused_op(self.program, op)}, which read optimizer "
                    f"state {self.program.tensor_name(sid)} before {op_text(self.program, writer)} "
                    "wrote it in place; the log writes a state's update as a view of it (no old "
                    "version), so the rebuild cannot read the value the op read: cannot be "
                    "recomputed faithfully")
