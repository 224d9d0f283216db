"""Record one PyTorch training step as a DTR log, under a `TorchDispatchMode`.

Every aten op the step runs (forward, loss, backward) passes through the
mode and becomes a log record: CALL with one MEMORY and ALIAS line per new
output, MUTATE for ops that write their arguments (in `optimizer.step()`, a
write to an optimizer state is a CALL whose result is a view of it instead), COPY for
ops that only give an existing tensor a new name (`detach`, `alias`). Tensors
the step did not create (parameters, buffers, inputs, wrapped Python scalars)
become CONSTANTs.

Identity is the storage. An output whose storage is already known is an ALIAS
of the argument holding that storage; a tensor the recorder never saw (one
autograd saved for backward and unpacks) is named by its storage's first
name. Lifetimes follow the storage too: a weakref finalizer on the storage
releases every name of it, in creation order, when the last reference to it
dies (a view, or a tensor autograd saved, keeps it alive). So the log's
storage lifetimes are PyTorch's and its unconstrained peak is the peak of live
storage bytes. (Tensor objects are not used for lifetimes: a fake tensor view
keeps its input object alive where a real one does not.)
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .aten import op_name_of, output_tensors, schema_tensors
from .costs import flop_cost, is_repeatable, timed_call
from .log import LogWriter
from .where import Where

IDENTITY_OPS = ("detach", "alias", "lift_fresh")
# A tensor literal (`torch.tensor([...])`) enters the step as a real tensor the
# op lifts; in real mode the lifted tensor is that tensor, under fake mode a new
# fake one. Either way it is one CONSTANT, so fake logs equal real ones.
LIFTS = ("lift_fresh", "lift_fresh_copy")
REJECTED_OPS = {"set_": "it rebinds a tensor to another storage"}
# Ops that read values into Python and make no tensor (`.item()`, `bool(t)`,
# `torch.equal`, `torch.allclose`, `torch._assert_async`, the error check of
# `torch.linalg`): a read needs its storage resident like any op, so each is
# written as a view of the tensor it reads, released at once (0 bytes). (An
# unlisted one would read an evicted storage under `dtrf torch run`.)
VALUE_READS = ("_local_scalar_dense", "is_nonzero", "equal", "allclose", "_assert_async",
               "_linalg_check_errors")


class RecordError(ValueError):
    """A step that cannot be recorded faithfully: which op, where, and why."""


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter, getattr(torch.nn, "Buffer", torch.Tensor))


def _allowed_type(t: torch.Tensor) -> bool:
    if type(t) in PLAIN_TYPES:
        return True
    from torch._subclasses.fake_tensor import FakeTensor
    return type(t) is FakeTensor


class Listener:
    """What a mode built on a recorder hears from it (the executor, `runtime.py`,
    which holds one): every tensor named, every CONSTANT written, every named
    storage's death (before its names are released). Each does nothing here."""

    def named(self, t: torch.Tensor, name: str, owner: bool, storage: torch.UntypedStorage) -> None:
        """`t` was named `name` (`owner`: the first name of `storage`)."""

    def constant(self, t: torch.Tensor, name: str) -> None:
        """A CONSTANT was written for `t` (named and registered)."""

    def storage_died(self, key: int) -> None:
        """The named storage of `storage_key` `key` died."""


class StepRecorder(TorchDispatchMode):
    """The dispatch mode that writes the log; `where()` names the code running now.
    A `listener` hears what it names (`Listener`)."""

    def __init__(self, log: LogWriter, cost: str, where: Callable[[], str], fake: bool = False,
                 context: Where | None = None, listener: Listener | None = None):
        super().__init__()
        self._listener = listener
        self.context = context       # module path, phase, source line of each op written
        self.fake = fake
        self.log = log
        self.cost = cost
        self.where = where
        self._names: dict[int, str] = {}
        self._storage_names: dict[int, list[str]] = {}
        self._finalizers: list[weakref.ref] = []
        self._pending: list[str] = []
        self._busy = False
        self._open = True
        self._counter = 0
        self._in_place: set[int] = set()     # storage keys written as views (optimizer states)
        # every constant, held to the end of the step: a DTR run pins constants, so a
        # lifted literal or wrapped scalar lives as long in PyTorch as in the engine
        self._constants: list[torch.Tensor] = []

    # --- names and lifetimes -------------------------------------------------------

    def _new_name(self) -> str:
        name = f"x{self._counter}"
        self._counter += 1
        return name

    def _watch(self, obj, callback, *args) -> None:
        """Call `callback(*args)` when `obj` dies, until `close`. A weak reference
        with a callback, held here (`weakref.finalize` is the same reference
        behind a registry, several times the cost, paid for every tensor)."""
        self._finalizers.append(weakref.ref(obj, lambda _, f=callback, a=args: f(*a)))

    def _register(self, t: torch.Tensor, name: str, owner: bool, storage=None) -> None:
        """Name tensor `t` (`storage` is its storage, when the caller has it)."""
        names, tid = self._names, id(t)
        names[tid] = name
        # as `_watch(t, names.pop, tid, None)`, without its argument tuple
        self._finalizers.append(weakref.ref(t, lambda _, tid=tid: names.pop(tid, None)))
        if storage is None:
            storage = t.untyped_storage()
        key = storage._cdata
        if owner:
            self._storage_names[key] = [name]
            self._watch(storage, self._storage_died, key)
        else:
            self._storage_names[key].append(name)
        if self._listener is not None:
            self._listener.named(t, name, owner, storage)

    def _storage_died(self, key: int) -> None:
        if self._listener is not None:
            self._listener.storage_died(key)
        for name in self._storage_names.pop(key):
            self._release(name)

    def _release(self, name: str) -> None:
        if not self._open:
            return
        if self._busy:
            self._pending.append(name)
        else:
            self.log.release(name)

    @contextlib.contextmanager
    def simultaneous_releases(self):
        """Frees inside this block happen at one moment (a cache cleared at once, in
        an order that depends on addresses): released in creation order."""
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            pending, self._pending = self._pending, []
            for name in sorted(pending, key=lambda n: int(n[1:])):
                self.log.release(name)

    def begin_op(self) -> None:
        """An aten call is being written: releases wait for `end_op`."""
        self._busy = True

    def end_op(self) -> None:
        """The call's records are written: the releases that waited, in order."""
        self._busy = False
        if self._pending:
            pending, self._pending = self._pending, []
            for name in pending:
                self.log.release(name)

    def release_dead_views(self) -> None:
        """Release the names of views whose tensors have died, in creation order.

        A view's name otherwise lives as long as its storage. That is harmless
        until the storage is written in place: the simulator rebinds only the
        written name and keeps the old version referenced by the other names, so
        a parameter the optimizer updates, with a forward view (`t`) still named,
        would hold its old version in the unconstrained run to the end of the
        step. Called once the backward pass is over and collected, when no
        transient view is alive in real or fake mode."""
        alive = set(self._names.values())
        dead = []
        for names in self._storage_names.values():
            dead += [n for n in names[1:] if n not in alive]
            names[1:] = [n for n in names[1:] if n in alive]
        for name in sorted(dead, key=lambda n: int(n[1:])):
            self._release(name)

    def update_in_place(self, states: Sequence[torch.Tensor]) -> None:
        """From now on, an op writing one of `states` (an optimizer's momentum,
        moments, step counts) is a CALL whose result is a view of it, not a MUTATE.

        Every other in-place write stays a MUTATE, a parameter's included: a new
        version beside the old one, which a DTR run keeps pinned (constants are
        never freed), as the DTR model has it. A state may be a view because
        nothing reads it across its own update but the update itself (the
        executor refuses a rebuild that would: `runtime.Executor`), so its old
        version is never needed, and it would only pin a second copy of every
        state."""
        self._in_place = {storage_key(t) for t in states}

    def updated_in_place(self, t: torch.Tensor) -> bool:
        """Whether a write of `t` is written as a view of it (`update_in_place`)."""
        return storage_key(t) in self._in_place

    def close(self) -> None:
        """Stop writing; tensors that outlive the step end the log still referenced."""
        self._open = False
        self._finalizers.clear()     # a dropped reference never calls back
        self._constants.clear()

    # --- constants -----------------------------------------------------------------

    def name_of(self, t: torch.Tensor, op: str = "the step") -> str:
        """The log name for tensor `t`, writing a CONSTANT for a storage never seen."""
        self.check_tensor(t, op)
        name = self._names.get(id(t))
        if name is not None:
            return name
        names = self._storage_names.get(storage_key(t))
        if names is not None:
            return names[0]
        name = self._new_name()
        if self.context is None:
            self.log.constant(name, t.untyped_storage().nbytes())
        else:
            log, now = self.log, self.log.context
            log.context = self.context.constant(t)
            log.constant(name, t.untyped_storage().nbytes())
            log.context = now
        self._register(t, name, owner=True)
        self._constants.append(t)
        if self._listener is not None:
            self._listener.constant(t, name)
        return name

    def arg_names(self, inputs: list, op: str) -> list[str]:
        """The log names of an op's tensor arguments, CONSTANTs written for new ones
        (`name_of`); a tensor already named was checked when it was named."""
        names = self._names
        return [names.get(id(t)) or self.name_of(t, op) for t in inputs]

    # --- ops -----------------------------------------------------------------------

    def check_tensor(self, t: torch.Tensor, op: str) -> None:
        """A tensor the log can hold: plain or fake, strided."""
        if not _allowed_type(t):
            raise RecordError(f"{op} {self.where()}: unknown tensor subclass "
                              f"{type(t).__qualname__} (only plain and fake tensors can be recorded)")
        if t.layout != torch.strided:
            raise RecordError(f"{op} {self.where()}: {t.layout} tensors cannot be recorded "
                              "(sizes of sparse storages are not fixed by shapes)")

    def _check_op(self, func, op: str) -> None:
        why = REJECTED_OPS.get(op_name_of(func))
        if why:
            raise RecordError(f"{op} {self.where()}: cannot be recorded faithfully: {why}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = f"op {func.overloadpacket.__name__} ({func})"
        self._check_op(func, op)
        inputs, mutated = schema_tensors(func, args, kwargs)
        if self.context is not None:
            self.log.context = self.context.now(inputs)
        if func.overloadpacket.__name__ in LIFTS and inputs and self.fake \
                and type(inputs[0]) in PLAIN_TYPES:
            return self._lift(func, args, kwargs, op)
        self._busy = True
        try:
            arg_names = [self.name_of(t, op) for t in inputs]
            call = lambda: self._call(func, args, kwargs, op)  # noqa: E731
            if self.cost == "measured":
                out, cost = timed_call(call, is_repeatable(func, bool(mutated)))
            else:
                out, cost = call(), 0
            outputs = output_tensors(out)
            for t in outputs:
                self.check_tensor(t, op)
            self.write(func, args, kwargs, out, inputs, arg_names, mutated, outputs, cost)
        finally:
            self._busy = False
            pending, self._pending = self._pending, []
            for name in pending:
                self.log.release(name)
        return out

    def _lift(self, func, args, kwargs, op: str):
        out = self._call(func, args, kwargs, op)
        self._busy = True
        try:
            self.name_of(out, op)
        finally:
            self._busy = False
        return out

    def _call(self, func, args, kwargs, op: str):
        from torch._subclasses.fake_tensor import (
            DataDependentOutputException,
            DynamicOutputShapeException,
        )

        from .concrete import FakeValueError
        try:
            return func(*args, **kwargs)
        except (FakeValueError, DataDependentOutputException, DynamicOutputShapeException) as exc:
            raise RecordError(f"{op} {self.where()}: in fake mode {_first_line(exc)}; record this "
                              "model in real mode (a small size gives the same log), or compute "
                              "that value from Python constants or arange") from None

    def _wrote_new_storage(self, op_name: str, t: torch.Tensor, inputs: list, arg_names: list[str],
                           cost: int) -> bool:
        """`write` for the commonest op: one output, a new tensor on a storage no
        named tensor and no input holds, written nothing; False, having done
        nothing, for any other."""
        if id(t) in self._names or op_name in IDENTITY_OPS or _one_of(t, inputs):
            return False
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._storage_names:
            return False
        for x in inputs:
            if x.untyped_storage()._cdata == key:
                return False
        name = self._new_name()
        self.log.call(op_name, list(arg_names), [(name, storage.nbytes(), -1)], cost)
        self._register(t, name, True, storage)
        return True

    def write(self, func, args, kwargs, out, inputs: list, arg_names: list[str],
              mutated: list[int], outputs: list, cost: int) -> None:
        """The log records of one aten call (`out` its result, `outputs` its tensors,
        `inputs` its tensor arguments named `arg_names`, `mutated` those it writes),
        each new tensor named."""
        op_name = op_name_of(func)
        if len(outputs) == 1 and not mutated and self.cost != "flops" and \
                self._wrote_new_storage(op_name, outputs[0], inputs, arg_names, cost):
            return
        arg_keys = [storage_key(t) for t in inputs]
        fresh = _fresh(outputs, inputs, self._names)
        if op_name in IDENTITY_OPS and len(fresh) == 1 and inputs and _same_view(fresh[0], inputs[0]):
            name = self._new_name()
            self.log.copy(name, arg_names[0])
            self._register(fresh[0], name, owner=False)
            return
        results: list[tuple] = []  # tensor, name, alias index, storage
        follow_ups: list[tuple[torch.Tensor, str]] = []
        new_storages: dict[int, str] = {}
        call_args = list(arg_names)
        for t in fresh:
            storage = t.untyped_storage()
            key = storage._cdata
            name = self._new_name()
            if key in new_storages:
                follow_ups.append((t, new_storages[key]))
                continue
            if key in arg_keys:
                results.append((t, name, arg_keys.index(key), storage))
            elif key in self._storage_names:
                call_args.append(self._storage_names[key][0])
                arg_keys.append(key)
                results.append((t, name, len(call_args) - 1, storage))
            else:
                new_storages[key] = name
                results.append((t, name, -1, storage))
        updated = [i for i in mutated if arg_keys[i] in self._in_place] if mutated else []
        if updated:
            results += [(inputs[i], self._new_name(), i, inputs[i].untyped_storage()) for i in updated]
        if self.cost == "flops":
            written = [t for t, _, alias, _ in results if alias < 0] + [inputs[i] for i in mutated]
            cost = flop_cost(func, args, kwargs, out, inputs, written)
        if not results and not mutated and op_name in VALUE_READS and inputs:
            name = self._new_name()
            self.log.call(op_name, call_args, [(name, inputs[0].untyped_storage().nbytes(), 0)], cost)
            self.log.release(name)
        if results:
            self.log.call(op_name, call_args, [(n, st.nbytes(), a) for _, n, a, st in results], cost)
            for t, name, alias, storage in results:
                self._register(t, name, alias < 0, storage)
        versioned = [i for i in mutated if i not in updated] if mutated else []
        if versioned:
            self.log.mutate(op_name, arg_names, versioned, 1 if results else cost)
        for t, source in follow_ups:
            name = self._new_name()
            self.log.call("alias", [source], [(name, t.untyped_storage().nbytes(), 0)], 1)
            self._register(t, name, owner=False)
        if versioned:
            self._rebind_views(inputs, arg_names, versioned)

    def _rebind_views(self, inputs: list, arg_names: list[str], versioned: list[int]) -> None:
        """After a MUTATE: a write through one name of a storage is a new version of
        the whole storage, as DTR has it (every view of the storage sees the new
        bytes). The MUTATE rebinds the written name; every other name of that
        storage, in creation order, is rebound here to a view of the new version (an
        `alias` of the written name) and its old name released, so the old version
        dies after the write, as PyTorch's bytes do, and a later read of any view
        reads the new version. Every name is rebound, live tensor or not: which
        tensor objects are alive differs in fake mode, the log must not."""
        done: set[int] = set()
        for i in versioned:
            key = storage_key(inputs[i])
            names = self._storage_names.get(key)
            if names is None or key in done or names == [arg_names[i]]:
                continue
            done.add(key)
            renamed: dict[str, str] = {}
            nbytes = inputs[i].untyped_storage().nbytes()
            for k, old in enumerate(names):
                if old != arg_names[i]:
                    names[k] = renamed[old] = self._new_name()
                    self.log.call("alias", [arg_names[i]], [(names[k], nbytes, 0)], 1)
            for tid, name in list(self._names.items()):
                if name in renamed:
                    self._names[tid] = renamed[name]
            for old in renamed:
                self._release(old)


def _one_of(t, tensors: list) -> bool:
    """Whether `t` is one of `tensors`, by identity (`in` would compare tensors)."""
    for x in tensors:
        if x is t:
            return True
    return False


def _fresh(outputs: list, inputs: list, names: dict) -> list:
    """The outputs that are new tensor objects (not an input, not named before),
    each once, in order."""
    if len(outputs) == 1:
        t = outputs[0]
        return [] if id(t) in names or _one_of(t, inputs) else [t]
    input_ids = {id(t) for t in inputs}
    return list({id(t): t for t in outputs if id(t) not in input_ids and id(t) not in names}.values())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (storage_key(a) == storage_key(b) and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride() and a.storage_offset() == b.storage_offset())


def constants_of(model: torch.nn.Module, batch: Sequence, state: dict | None = None) -> list:
    """What exists before the step, in a fixed order: parameters, buffers (or the
    tensors of `state` standing in for them), gradients, batch tensors."""
    found = list(state.values()) if state is not None else \
        [*model.parameters(), *model.buffers()]
    found += [t.grad for t in found if t.grad is not None]
    found += [t for t in tree_flatten(list(batch))[0] if isinstance(t, torch.Tensor)]
    return found
