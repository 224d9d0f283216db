"""The real step under DTR: a dispatch mode that follows the engine's schedule.

`Executor` runs the same training step the recorder recorded, through the
same recorder (`StepRecorder`, which it holds: it names every tensor exactly
as the log does and writes the log again, line by line, checked against the
recording by `following.FollowingLog`), and before each aten call it reads
which log ops the call makes (`lineplan.planned`) and applies the engine's
events up to each op's compute (`schedule.py`): allocation checks, pressure
evictions, dead frees, rebuilds. Its parts, one job each:

- `storages.py`: each engine storage as a real `UntypedStorage` (held weakly,
  or by the executor: ghosts, old versions), evictions (a resize to 0 bytes,
  which every view sees), rebuilt bytes installed (`_swap_data_ptr_`, no
  copy), and the memory truth: the live bytes PyTorch holds, compared at
  every allocation check with the engine's memory;
- `rebuild.py`: what a rerun needs, kept for the ops the schedule reruns, and
  the rerun itself (scratch copies of written arguments, random ops under
  their generator's state from before their first run);
- `versions.py`: new versions of what a step writes in place (semantics.md
  §9.2), and optimizer states written as views of themselves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
from .aten import UNDECLARED_WRITES, op_name_of, output_tensors, schema_tensors
from .following import FollowingLog
from .lineplan import planned as planned_ops
from .rebuild import Rebuilder, rebuilt_ops
from .recorder import PLAIN_TYPES, REJECTED_OPS, Listener, RecordError, StepRecorder
from .schedule import RealOutOfMemory, ScheduleEnded, ScheduleError, op_text, refused_op
from .storages import Storages
from .versions import Versions


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


class Executor(TorchDispatchMode, Listener):
    """The dispatch mode of the real step (see the module docstring): the recorder
    it holds tells it each tensor it names (`Listener`)."""

    def __init__(self, log: FollowingLog, program: Program, events, budget: int, where):
        super().__init__()
        self.recorder = StepRecorder(log, "none", where, listener=self)
        self.log = log
        self.where = where
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
        self.stats = Stats()
        self.storages = Storages(self.stats)
        self._resident = self.storages.resident       # the same set, read at every compute
        self.versions = Versions(program, self.storages)
        self.rebuilder = Rebuilder(program, self.storages, self.stats,
                                   rebuilt_ops(self.events, self._tensor_op),
                                   self.versions.state_writes, where)
        self._binds: list[tuple[torch.Tensor, str, bool, torch.UntypedStorage]] = []
        self.current_op = -1
        self.measured_memory: dict[int, int] = {}   # event index -> live bytes at that check
        self.measured_ns: dict[int, int] = {}       # compute event index -> wall ns of the real op
        self.meter = None      # a `workspace.Meter` measuring each aten call, when asked

    # --- the memory truth (storages.py), checked against the engine's ----------------

    @property
    def live(self) -> int:
        """Bytes of the step's storages PyTorch holds alive (`Storages.live`)."""
        return self.storages.live

    def live_bytes(self) -> int:
        """The same bytes summed afresh from every storage (`Storages.live_bytes`)."""
        return self.storages.live_bytes()

    def _check(self, memory: int, pending: int, op: int, depth: int) -> None:
        live = self.storages.live
        self.measured_memory[self.pos - 1] = live + pending
        st = self.stats
        st.alloc_checks += 1
        if live + pending != memory:
            st.mismatches += 1
            if st.first_mismatch is None:
                st.first_mismatch = (f"allocation check {st.alloc_checks} ({op_text(self.program, op)}, "
                                     f"depth {depth}): live storages {live + pending:,} bytes, "
                                     f"engine memory {memory:,}")
        if live > self.budget:
            st.over_budget += 1

    def _evict(self, sid: int, pressure: bool) -> bool:
        """`Storages.evict`; a storage PyTorch cannot resize is refused."""
        try:
            return self.storages.evict(sid, pressure)
        except RuntimeError as exc:
            raise ScheduleError(f"storage {sid} of {refused_op(self.program, self.current_op)} "
                                f"cannot be evicted: {exc}") from None

    # --- following the schedule -----------------------------------------------------

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
                    self.rebuilder.rebuild(op, self.meter)
                    self.measured_ns[pos - 1] = time.perf_counter_ns() - start
                else:
                    if op != stop_op:
                        raise ScheduleError(f"the schedule computes {op_text(self.program, op)} where the "
                                            f"step runs {op_text(self.program, stop_op)}")
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
            raise ScheduleEnded(f"the engine's run ended before {op_text(self.program, stop_op)}")

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
            raise RealOutOfMemory(e[E_OP], e[E_TENSOR], e[E_BYTES], self.storages.live, e[E_MEMORY])

    # --- what the recorder names (`Listener`) -------------------------------------------

    def named(self, t: torch.Tensor, name: str, owner: bool, storage: torch.UntypedStorage) -> None:
        self._binds.append((t, name, owner, storage))

    def storage_died(self, key: int) -> None:
        self.storages.died(key)

    def constant(self, t: torch.Tensor, name: str) -> None:
        """A CONSTANT (op `log.ops - 1` of the log): the schedule up to it, its storage bound."""
        if self.log.diverged is not None:    # a tensor the recording never saw
            raise ScheduleError(self.log.divergence())
        self._binds.clear()
        self.current_op = op = self.log.ops - 1
        self.advance(op)
        self.storages.bind(self.program.tensor_by_name(name), t.untyped_storage())

    def name_of(self, t: torch.Tensor, op: str = "the step") -> str:
        """The log name of `t` (`StepRecorder.name_of`: a CONSTANT for a new storage)."""
        return self.recorder.name_of(t, op)

    def close(self) -> None:
        self.recorder.close()

    # --- the dispatch ----------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, params, rejected, seeded, _ = _OP_INFO.get(id(func)) or _op_info(func)
        op = _OpLabel(func)      # formatted only in a message
        if rejected:
            raise RecordError(f"{op} {self.where()}: cannot be recorded faithfully: {rejected}")
        log, recorder, rebuilder = self.log, self.recorder, self.rebuilder
        if log.diverged is not None:
            raise ScheduleError(log.divergence())
        inputs, mutated = schema_tensors(func, args, kwargs, params)
        recorder.begin_op()
        try:
            arg_names = recorder.arg_names(inputs, op)
            planned = planned_ops(self._plans.get(log.written), name, arg_names)
            deferred: list[int] = []
            pending = 0
            updated, versioned = Versions.split(recorder, inputs, mutated) if mutated else ([], [])
            for k, kind in planned:
                self.current_op = k
                rerun = k in rebuilder.rebuilt
                slots = rebuilder.slots(k, inputs) if rerun else None
                self.advance(k, pending, deferred)
                if kind == "mutate":
                    self.versions.new_versions(k, inputs, versioned)
                else:
                    pending += self._op_size[k]
                    if kind == "call" and updated:
                        self.versions.states_written(k, updated)
                if rerun:
                    rebuilder.keep(k, func, args, kwargs, slots, mutated, versioned, kind == "mutate")
            if seeded:
                rebuilder.seed(planned, args, kwargs, inputs, op)
            self._binds.clear()
            start = time.perf_counter_ns()
            if self.meter is None:
                out = func(*args, **kwargs)
            else:
                with self.meter.around(planned[0][0] if planned else self.current_op, self.storages.live):
                    out = func(*args, **kwargs)
            if planned:
                self.measured_ns[self.top_compute] = time.perf_counter_ns() - start
            for m in mutated:
                self.storages.reread(inputs[m].untyped_storage())
            outputs = output_tensors(out)
            for t in outputs:
                if type(t) not in PLAIN_TYPES or t.layout != torch.strided:
                    recorder.check_tensor(t, op)
            recorder.write(func, args, kwargs, out, inputs, arg_names, mutated, outputs, 0)
            if log.diverged is not None:
                raise ScheduleError(log.divergence())
            self._bind(planned, outputs)
            for sid in deferred:
                self._evict(sid, pressure=True)
        finally:
            recorder.end_op()
        return out

    def _bind(self, planned: list[tuple[int, str]], outputs: list) -> None:
        """The storages the call made are the engine's (by their log names); the
        ops the schedule reruns learn which output tensors they made."""
        storages, rebuilder, position = self.storages, self.rebuilder, None
        for t, name, owner, storage in self._binds:
            if not owner:
                continue  # a view, or a COPY: its storage is already bound
            tid = self._tensor_id[name]
            storages.bind(tid, storage)
            op = self._tensor_op[tid]
            if op in rebuilder.ops:
                if position is None:
                    position = {id(t): i for i, t in reversed(list(enumerate(outputs)))}
                if id(t) in position:
                    rebuilder.produced(tid, op, position[id(t)])
        self._binds.clear()
        for k, kind in planned:
            if kind == "mutate":
                rebuilder.mutated(k)

    def finish(self) -> None:
        """After the step: the rest of the schedule (dead frees, final pins)."""
        self.current_op = self.program.n_ops - 1
        self.advance(None)
        if self.log.diverged is None and self.log.written != len(self.log.expected):
            self.log.diverged = self.log.written
        if self.log.diverged is not None:
            raise ScheduleError(self.log.divergence())
