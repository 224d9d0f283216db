"""The real step under DTR: a dispatch mode that follows the engine's schedule.

`Executor` runs the same training step the recorder recorded, as the same
recorder (so it names every tensor exactly as the log does and writes the log
again, line by line, checked against the recording), and before each op it
applies the engine's events up to that op's compute: rebuilds
(rematerializations) by rerunning the recorded op on its resident inputs,
pressure evictions, dead frees, allocation checks. An engine storage is a real
`UntypedStorage`:

- evicting one PyTorch still holds resizes it to 0 bytes (every view sees it);
  rebuilding it reruns its op and swaps the new data pointer in
  (`_swap_data_ptr_`, no copy);
- a storage PyTorch let die (a released tensor) that the engine rebuilds as a
  parent lives on as a *ghost* the executor holds until the engine evicts it;
- a mutation makes a new version (semantics.md §9.2): the old version's bytes
  are copied to a new storage (held by the executor) before the op writes the
  original, which becomes the new version; a parameter's old version is a
  constant, held to the end of the step as the engine keeps it pinned;
- in `optimizer.step()` a write of an optimizer state is a view of it, as the
  recorder logs it: written in place, nothing kept. A rebuild that would read
  a state written since its op ran is refused (`ScheduleError`): the log gives
  it no old version to read.

Random ops keep their generator's state (the CPU's, or their CUDA device's)
from before their first run and rerun under it, as `torch.utils.checkpoint`'s
`preserve_rng_state` does.

The memory truth is PyTorch's: at every allocation check the executor sums
`nbytes()` of every storage of the step that is still alive (weak references:
a storage PyTorch freed is gone, an evicted one counts 0) and compares it with
the engine's memory at that check.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_map

from ..engine.hooks import (
    E_BYTES,
    E_DEPTH,
    E_FLAG,
    E_KIND,
    E_MEMORY,
    E_OP,
    E_STORAGE,
    E_TENSOR,
    EV_ALLOC_CHECK,
    EV_COMPUTE,
    EV_EVICT,
    EV_FREE_DEAD,
    EV_OOM,
    FLAG_COLLATERAL,
    FLAG_REMAT,
)
from ..trace.program import Program
from .aten import UNDECLARED_WRITES, op_name_of, output_tensors, schema_arguments, schema_tensors
from .following import FollowingLog
from .lineplan import planned as planned_ops
from .recorder import PLAIN_TYPES, REJECTED_OPS, RecordError, StepRecorder, storage_key


class ScheduleError(RecordError):
    """The real step cannot follow its schedule faithfully: which op and why."""


class RealOutOfMemory(Exception):
    """The engine's schedule ends in an OOM here: the real step stops at the same check."""

    def __init__(self, op_id: int, tensor_id: int, request: int, live: int, memory: int):
        super().__init__(f"out of memory at op {op_id}: request {request}")
        self.op_id, self.tensor_id, self.request, self.live, self.memory = (
            op_id, tensor_id, request, live, memory)


class ScheduleEnded(Exception):
    """The engine's run stopped (thrashed, timeout, error) before the real step did."""


@dataclass
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
    device's), taken before the op's first run."""

    def __init__(self, device: torch.device):
        self.device = device
        self.state = self._read()

    def _read(self) -> torch.Tensor:
        if self.device.type == "cuda":
            return torch.cuda.get_rng_state(self.device)
        return torch.get_rng_state()

    def _write(self, state: torch.Tensor) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        else:
            torch.set_rng_state(state)

    @contextlib.contextmanager
    def replayed(self):
        """Run the block under the saved state; the generator's own state after."""
        now = self._read()
        self._write(self.state)
        try:
            yield
        finally:
            self._write(now)


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


class _OpLabel:
    """`op NAME (overload)` for messages, formatted only when one is written."""

    __slots__ = ("func",)

    def __init__(self, func):
        self.func = func

    def __str__(self) -> str:
        return f"op {self.func.overloadpacket.__name__} ({self.func})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


# id of an aten op overload -> its facts, the overload last (held, so its id is never reused):
# an overload hashes in Python (`OpOverload.__hash__`), its id does not
_OP_INFO: dict[int, tuple] = {}


def _op_info(func) -> tuple[str, list[tuple[int, str, bool]] | None, str | None, bool, object]:
    """Per aten op, found once: its name; its schema arguments whose type can
    hold a tensor as (position, name, written) (None for an op that writes
    arguments its schema does not mark, left to the recorder's reading); why the
    recorder rejects it (or None); whether it draws random numbers."""
    info = _OP_INFO.get(id(func))
    if info is None:
        name = op_name_of(func)
        params = None if name in UNDECLARED_WRITES else [
            (i, a.name, a.is_write) for i, a in enumerate(func._schema.arguments)
            if "Tensor" in str(a.type)]
        info = _OP_INFO[id(func)] = (name, params, REJECTED_OPS.get(name),
                                     torch.Tag.nondeterministic_seeded in func.tags, func)
    return info


@dataclass
class Stats:
    """What the real step did, counted from its own actions."""

    alloc_checks: int = 0
    mismatches: int = 0
    first_mismatch: str | None = None
    over_budget: int = 0
    peak_live: int = 0
    victims: list[int] = field(default_factory=list)
    dead_frees: int = 0
    remats: int = 0
    collateral: int = 0
    model_compute: int = 0
    remat_compute: int = 0
    ghosts: int = 0
    random_rebuilds: int = 0     # rebuilds of ops that draw random numbers


class Executor(StepRecorder):
    """The dispatch mode of the real step (see the module docstring)."""

    def __init__(self, log: FollowingLog, program: Program, events, budget: int, where):
        super().__init__(log, "none", where)
        self.program = program
        self.events = events.tolist()     # Python rows: read one field at a time, per op
        self.budget = budget
        self.pos = 0
        self.expected = log.expected
        self._plans = log.recording.plans
        self._tensor_op = program.tensor_op.tolist()
        names = program.tensor_names
        # name -> the last tensor made under it, as `Program.tensor_by_name`
        self._tensor_id = {names[nid]: tid for tid, nid in enumerate(program.tensor_name_id.tolist())}
        self._tensor_storage = program.tensor_storage.tolist()
        self._op_cost = program.op_cost.tolist()
        self._op_size = program.op_total_size.tolist()
        self._rebuilt = self._rebuilt_ops()
        self._tracked: dict[int, tuple[weakref.ref, int]] = {}   # storage key -> (storage, bytes)
        self.live = 0          # bytes of the tracked storages PyTorch holds alive
        self._weak: dict[int, weakref.ref] = {}
        self._strong: dict[int, torch.UntypedStorage] = {}
        self._resident: set[int] = set()
        self._ops: dict[int, OpRecord] = {}
        self._binds: list[tuple[torch.Tensor, str, bool, torch.UntypedStorage]] = []
        self._state_writes: dict[int, int] = {}  # state storage -> the last op that wrote it
        self.stats = Stats()
        self.current_op = -1
        self.measured_memory: dict[int, int] = {}   # event index -> live bytes at that check
        self.measured_ns: dict[int, int] = {}       # compute event index -> wall ns of the real op
        self.meter = None      # a `workspace.Meter` measuring each aten call, when asked

    def _rebuilt_ops(self) -> set[int]:
        """The ops the schedule reruns: only these keep what a rerun needs."""
        return {self._tensor_op[e[E_TENSOR]] for e in self.events
                if e[E_KIND] == EV_COMPUTE and e[E_FLAG] & FLAG_REMAT and not e[E_FLAG] & FLAG_COLLATERAL}

    # --- the memory truth ------------------------------------------------------------

    def _track(self, storage: torch.UntypedStorage, watched: bool = False) -> None:
        """Count `storage` in the live bytes until PyTorch frees it. A storage the
        recorder already `watched` (it named it) is uncounted by the recorder's
        callback (`_storage_died`), not by a second one of its own."""
        key = storage._cdata
        if key in self._tracked:
            return
        size = storage.nbytes()
        ref = weakref.ref(storage) if watched else \
            weakref.ref(storage, lambda _, key=key: self._died(key))
        self._tracked[key] = (ref, size)
        self.live += size
        self._peaked()

    def _died(self, key: int) -> None:
        self.live -= self._tracked.pop(key)[1]

    def _storage_died(self, key: int) -> None:
        entry = self._tracked.pop(key, None)
        if entry is not None:
            self.live -= entry[1]
        super()._storage_died(key)

    def _reread(self, storage: torch.UntypedStorage) -> None:
        """Read a tracked storage's size again (after an eviction, a rebuild, or an
        op that may have resized it)."""
        entry = self._tracked.get(storage._cdata)
        if entry is not None and entry[1] != (size := storage.nbytes()):
            self.live += size - entry[1]
            self._tracked[storage._cdata] = (entry[0], size)
            self._peaked()

    def _peaked(self) -> None:
        """The step's peak: the live bytes after every allocation, a check's request
        included (what PyTorch held, not what the engine was asked before it)."""
        if self.live > self.stats.peak_live:
            self.stats.peak_live = self.live

    def live_bytes(self) -> int:
        """Bytes of the step's storages PyTorch holds alive now, summed afresh from
        every storage (`live` is the same sum kept as PyTorch frees and resizes
        them: each death is PyTorch's, each size read from the storage after
        anything that can change it)."""
        return sum(s.nbytes() for ref, _ in self._tracked.values() if (s := ref()) is not None)

    def _check(self, memory: int, pending: int, op: int, depth: int) -> None:
        live = self.live
        self.measured_memory[self.pos - 1] = live + pending
        st = self.stats
        st.alloc_checks += 1
        if live + pending != memory:
            st.mismatches += 1
            if st.first_mismatch is None:
                st.first_mismatch = (f"allocation check {st.alloc_checks} ({self._op_text(op)}, "
                                     f"depth {depth}): live storages {live + pending:,} bytes, "
                                     f"engine memory {memory:,}")
        if live > self.budget:
            st.over_budget += 1

    # --- storages ----------------------------------------------------------------------

    def _storage(self, sid: int) -> torch.UntypedStorage | None:
        s = self._strong.get(sid)
        if s is not None:
            return s
        ref = self._weak.get(sid)
        return ref() if ref is not None else None

    def _evict(self, sid: int, pressure: bool) -> bool:
        """Release a storage's memory; False when it does not exist yet."""
        if sid not in self._strong and sid not in self._weak:
            return False
        self._resident.discard(sid)
        if pressure:
            self.stats.victims.append(sid)
        else:
            self.stats.dead_frees += 1
        if self._strong.pop(sid, None) is not None:
            return True
        s = self._weak[sid]()
        if s is not None and pressure:
            try:
                s.resize_(0)
            except RuntimeError as exc:
                raise ScheduleError(f"storage {sid} of {self._refused_op(self.current_op)} cannot "
                                    f"be evicted: {exc}") from None
            self._reread(s)
        return True

    def _install(self, sid: int, new: torch.UntypedStorage) -> None:
        """Make storage `sid` resident with the bytes of `new`."""
        current = self._storage(sid)
        if current is None:
            self._strong[sid] = new
            self._track(new)
            self.stats.ghosts += 1
        else:
            current._swap_data_ptr_(new)
            self._reread(current)
        self._resident.add(sid)

    # --- following the schedule -----------------------------------------------------

    def _op_text(self, op: int) -> str:
        return f"op {op} ({self.program.op_name(op)})" if op >= 0 else "the step"

    def _refused_op(self, op: int) -> str:
        """`_op_text`, with the op's module where the log's where-file names it."""
        module = self.program.op_where(op) if op >= 0 else None
        return self._op_text(op) + (f" in module {module}" if module else "")

    def advance(self, stop_op: int | None, pending: int = 0, deferred: list | None = None) -> None:
        """Apply the engine's events up to the top-level compute of `stop_op`
        (None: to the end of the run), then the collateral computes that follow it."""
        ev, pos, n = self.events, self.pos, len(self.events)
        while pos < n:
            e = ev[pos]
            pos += 1
            kind = e[E_KIND]
            if kind == EV_ALLOC_CHECK:
                self.pos = pos
                self._check(e[E_MEMORY], pending, e[E_OP], e[E_DEPTH])
            elif kind == EV_COMPUTE:
                self.pos = pos
                t, flag = e[E_TENSOR], e[E_FLAG]
                op = self._tensor_op[t]
                if flag & FLAG_COLLATERAL:
                    self._resident.add(self._tensor_storage[t])
                    self.stats.collateral += bool(flag & FLAG_REMAT)
                elif flag & FLAG_REMAT:
                    start = time.perf_counter_ns()
                    self._rebuild(op)
                    self.measured_ns[pos - 1] = time.perf_counter_ns() - start
                else:
                    if op != stop_op:
                        raise ScheduleError(f"the schedule computes {self._op_text(op)} where the "
                                            f"step runs {self._op_text(stop_op)}")
                    self._resident.add(self._tensor_storage[t])
                    self.stats.model_compute += self._op_cost[op]
                    self.top_compute = pos - 1
                    while pos < n and (e := ev[pos])[E_KIND] == EV_COMPUTE and e[E_FLAG] & FLAG_COLLATERAL:
                        self._resident.add(self._tensor_storage[e[E_TENSOR]])
                        pos += 1
                    self.pos = pos
                    return
            else:
                self.pos = pos
                self._other_event(e, deferred)
        self.pos = pos
        if stop_op is not None:
            raise ScheduleEnded(f"the engine's run ended before {self._op_text(stop_op)}")

    def _other_event(self, e: list, deferred: list | None) -> None:
        """An eviction, a dead free or the engine's OOM."""
        kind = e[E_KIND]
        if kind == EV_EVICT:
            if not self._evict(e[E_STORAGE], pressure=True):
                if deferred is None:
                    raise ScheduleError(f"the schedule evicts storage {e[E_STORAGE]}, "
                                        "which the step has not made")
                deferred.append(e[E_STORAGE])
        elif kind == EV_FREE_DEAD:
            self._evict(e[E_STORAGE], pressure=False)
        elif kind == EV_OOM:
            self.pos -= 1
            raise RealOutOfMemory(e[E_OP], e[E_TENSOR], e[E_BYTES], self.live, e[E_MEMORY])

    def _rebuild(self, op: int) -> None:
        """Rerun log op `op` on its resident inputs; install its non-resident outputs."""
        self.stats.remats += 1
        self.stats.remat_compute += self._op_cost[op]
        rec = self._ops.get(op)
        if rec is None:
            raise ScheduleError(f"the schedule rebuilds {self._refused_op(op)}, which the step "
                                "never ran")
        targets = [(i, tid) for i, tid in rec.outputs if tid not in self._resident]
        if not targets:
            return  # views only: their storage is rebuilt by its own op
        self._check_states_unwritten(op, rec)
        with _disable_current_modes(), torch.no_grad():
            tensors = []
            for index, (sid, dtype, size, stride, offset) in enumerate(rec.slots):
                s = self._storage(sid)
                if s is None or sid not in self._resident:
                    raise ScheduleError(f"rebuilding {self._refused_op(op)}: its input storage {sid} "
                                        "is not resident")
                if index in rec.writes:
                    s = s.clone()
                tensors.append(torch.empty(0, dtype=dtype, device=s.device).set_(s, offset, size, stride))
            args, kwargs = _fill((rec.args, rec.kwargs), tensors)
            if rec.rng is not None:
                self.stats.random_rebuilds += 1
            with (rec.rng.replayed() if rec.rng is not None else contextlib.nullcontext(),
                  self.meter.around(op, self.live) if self.meter is not None else contextlib.nullcontext()):
                out = rec.func(*args, **kwargs)
            produced = ([tensors[i] for i in rec.versioned] if rec.mutation
                        else output_tensors(out))
            for index, tid in targets:
                self._install(tid, produced[index].untyped_storage())
            del out, produced, tensors, args, kwargs

    def _check_states_unwritten(self, op: int, rec: OpRecord) -> None:
        """A rebuild must read what `op` read. An optimizer state is written in place
        as a view (no old version), so a rebuild of an op that read it before a
        later write would read the new bytes: refused, never computed wrong."""
        for sid, *_ in rec.slots:
            writer = self._state_writes.get(sid, -1)
            if writer > op:
                raise ScheduleError(
                    f"the schedule rebuilds {self._refused_op(op)}, which read optimizer state "
                    f"{self.program.tensor_name(sid)} before {self._op_text(writer)} wrote it in "
                    "place; the log writes a state's update as a view of it (no old version), so "
                    "the rebuild cannot read the value the op read: cannot be recomputed faithfully")

    # --- naming and binding ----------------------------------------------------------

    def name_of(self, t: torch.Tensor, op: str = "the step") -> str:
        before = self.log.ops
        name = super().name_of(t, op)
        if self.log.ops > before:  # a CONSTANT: op `before` of the log
            if self.log.diverged is not None:    # a tensor the recording never saw
                raise ScheduleError(self.log.divergence())
            self._binds.clear()
            self.current_op = before
            self.advance(before)
            tid = self.program.tensor_by_name(name)
            storage = t.untyped_storage()
            self._weak[tid] = weakref.ref(storage)
            self._track(storage, watched=True)
        return name

    def _register(self, t: torch.Tensor, name: str, owner: bool, storage=None) -> None:
        if storage is None:
            storage = t.untyped_storage()
        super()._register(t, name, owner, storage)
        self._binds.append((t, name, owner, storage))

    def _slots(self, op: int, inputs: list) -> list:
        prog, slots = self.program, []
        arg_ids = prog.op_args_of(op).tolist()
        for t, tid in zip(inputs, arg_ids):
            sid = self._tensor_storage[tid]
            real = self._storage(sid)
            if real is None or real._cdata != t.untyped_storage()._cdata:
                raise ScheduleError(
                    f"{self._op_text(op)} {self.where()}: reads a tensor whose storage an in-place "
                    "op changed after the tensor was made (the DTR model gives it the old "
                    "value): cannot be recomputed faithfully")
            slots.append((sid, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset()))
        return slots

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, params, rejected, seeded, _ = _OP_INFO.get(id(func)) or _op_info(func)
        op = _OpLabel(func)      # formatted only in a message
        if rejected:
            raise RecordError(f"{op} {self.where()}: cannot be recorded faithfully: {rejected}")
        if self.log.diverged is not None:
            raise ScheduleError(self.log.divergence())
        inputs, mutated = schema_tensors(func, args, kwargs, params)
        self._busy = True
        try:
            # a tensor already named was checked when it was named
            names = self._names
            arg_names = [names.get(id(t)) or self.name_of(t, op) for t in inputs]
            planned = planned_ops(self._plans.get(self.log.written), name, arg_names)
            deferred: list[int] = []
            pending = 0
            updated, versioned = self._written(inputs, mutated) if mutated else ([], [])
            for k, kind in planned:
                self.current_op = k
                rerun = k in self._rebuilt
                slots = self._slots(k, inputs) if rerun else None
                self.advance(k, pending, deferred)
                if kind == "mutate":
                    self._new_versions(k, inputs, versioned)
                else:
                    pending += self._op_size[k]
                    if kind == "call" and updated:
                        self._states_written(k, updated)
                if rerun:
                    self._ops[k] = OpRecord(func, *_template(func, args, kwargs), slots, tuple(mutated),
                                            tuple(versioned), [], kind == "mutate", None)
            kept = [self._ops[k] for k, _ in planned if k in self._ops] if seeded else None
            if kept:
                if any(isinstance(a, torch.Generator) for a in (*args, *kwargs.values())):
                    raise ScheduleError(f"{op} {self.where()}: the schedule reruns it, and it draws "
                                        "from a torch.Generator of its own, whose state is not "
                                        "replayed: cannot be recomputed faithfully")
                rng = RandomState(_op_device(inputs, kwargs))
                for rec in kept:
                    rec.rng = rng
            self._binds.clear()
            start = time.perf_counter_ns()
            if self.meter is None:
                out = func(*args, **kwargs)
            else:
                with self.meter.around(planned[0][0] if planned else self.current_op, self.live):
                    out = func(*args, **kwargs)
            if planned:
                self.measured_ns[self.top_compute] = time.perf_counter_ns() - start
            for m in mutated:
                self._reread(inputs[m].untyped_storage())
            outputs = output_tensors(out)
            for t in outputs:
                if type(t) not in PLAIN_TYPES or t.layout != torch.strided:
                    self._check_tensor(t, op)
            self._write(func, args, kwargs, out, inputs, arg_names, mutated, outputs, 0)
            if self.log.diverged is not None:
                raise ScheduleError(self.log.divergence())
            self._bind(planned, outputs)
            for sid in deferred:
                self._evict(sid, pressure=True)
        finally:
            self._busy = False
            if self._pending:
                pending_names, self._pending = self._pending, []
                for name in pending_names:
                    self.log.release(name)
        return out

    def _written(self, inputs: list, mutated: list[int]) -> tuple[list[int], list[int]]:
        """The written arguments: optimizer states updated in place, and the rest,
        which the log's MUTATE makes new versions of."""
        updated = [m for m in mutated if storage_key(inputs[m]) in self._in_place]
        return updated, [m for m in mutated if m not in updated]

    def _states_written(self, op: int, written: list[int]) -> None:
        args = self.program.op_args_of(op).tolist()
        for m in written:
            self._state_writes[self._tensor_storage[args[m]]] = op

    def _new_versions(self, op: int, inputs: list, mutated: list[int]) -> None:
        """Before a mutation writes its arguments: the old versions move to copies."""
        prog = self.program
        args = prog.op_args_of(op).tolist()
        with _disable_current_modes():
            for out_tid, m in zip(prog.op_outputs_of(op), mutated):
                old = self._tensor_storage[args[m]]
                real = inputs[m].untyped_storage()
                copy = real.clone()
                self._strong[old] = copy
                self._weak.pop(old, None)
                self._track(copy)
                self._weak[out_tid] = weakref.ref(real)
                self._resident.add(out_tid)

    def _bind(self, planned: list[tuple[int, str]], outputs: list) -> None:
        prog, position = self.program, None
        for t, name, owner, storage in self._binds:
            if not owner:
                continue  # a view, or a COPY: its storage is already bound
            tid = self._tensor_id[name]
            self._weak[tid] = weakref.ref(storage)
            self._track(storage, watched=True)
            rec = self._ops.get(self._tensor_op[tid])
            if rec is not None:
                if position is None:
                    position = {id(t): i for i, t in reversed(list(enumerate(outputs)))}
                if id(t) in position:
                    rec.outputs.append((position[id(t)], tid))
        self._binds.clear()
        for k, kind in planned:
            if kind == "mutate" and k in self._ops:
                self._ops[k].outputs = list(enumerate(prog.op_outputs_of(k)))

    def finish(self) -> None:
        """After the step: the rest of the schedule (dead frees, final pins)."""
        self.current_op = self.program.n_ops - 1
        self.advance(None)
        if self.log.diverged is None and self.log.written != len(self.log.expected):
            self.log.diverged = self.log.written
        if self.log.diverged is not None:
            raise ScheduleError(self.log.divergence())
