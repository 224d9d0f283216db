"""Concrete values under fake mode: small tensors computed only from Python
constants (`arange`, `full`, `linspace`, tensor literals, real tensors) carry
their real value alongside the fake tensor, as PyTorch's own tracing keeps
such values concrete. A scalar read (`.item()`, `is_nonzero`, `.tolist()`) or
a data-dependent shape (`nonzero`, `unique`, ...) of such a tensor is then
answered with the value the real step would see: causal-mask helpers, packed
sequence checks, drop-path schedules.

A value that depends on parameters, inputs or random numbers has no concrete
value; reading it under fake mode stays an error (`FakeValueError`) naming
the op. The fake tensor of a data-dependent shape is made from the concrete
result, so its storage is the size the real op allocates.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only
from torch.utils.weak import WeakTensorKeyDictionary

from .aten import schema_arguments, tensors_in

# Larger tensors are not mirrored: masks and index tensors of a step are far
# below this; activations of a model that happen to be constant are not needed.
MAX_ELEMENTS = 1 << 20
DATA_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)
UNINITIALISED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
OVERWRITING = ("fill_", "zero_", "copy_")   # ops whose result does not read their destination
# Fake tensor -> its real value; a side table rather than an attribute, so that
# copying a module (`copy.deepcopy` of its tensors' `__dict__`) copies no value.
_VALUES = WeakTensorKeyDictionary()


def forget(t) -> None:
    """Drop the weak references to fake tensor `t`: its concrete value, and its
    fake mode's memo entry (of the real tensor it was converted from, if any)."""
    if isinstance(t, torch.Tensor):
        _VALUES.pop(t, None)
        mode = getattr(t, "fake_mode", None)
        if mode is not None:
            memo = mode.fake_tensor_converter.tensor_memo
            for key in [k for k, v in memo.items() if v is t]:
                del memo[key]


# Mirrored storages whose value went unknown (written by an op that could not be
# mirrored), by storage id; the tensor held keeps the id from being reused.
_STALE: dict[int, torch.Tensor] = {}


class FakeValueError(RuntimeError):
    """An op needs a value that fake tensors do not have."""


def needs_data(func) -> bool:
    return any(tag in func.tags for tag in DATA_TAGS)


def concrete_of(t: torch.Tensor):
    """The real value a fake tensor stands for, or None; a real tensor is its own."""
    from torch._subclasses.fake_tensor import FakeTensor
    if not isinstance(t, FakeTensor):
        return t
    value = _VALUES.get(t)
    if value is None or value.untyped_storage()._cdata in _STALE:
        return None
    return value


def _set(fake: torch.Tensor, value: torch.Tensor) -> None:
    _VALUES[fake] = value


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


class ConcreteValues(TorchDispatchMode):
    """Above a `FakeTensorMode`: mirrors small constant-derived tensors with real ones."""

    def __init__(self, fake_mode):
        super().__init__()
        self.fake_mode = fake_mode

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in OVERWRITING and args and _is_fake(args[0]) and concrete_of(args[0]) is None \
                and args[0]._base is None and args[0].numel() <= MAX_ELEMENTS:
            target = args[0]
            with torch.utils._python_dispatch._disable_current_modes():
                _set(target, torch.empty_strided(target.shape, target.stride(),
                                                           dtype=target.dtype))
        flat = [t for value in (*args, *kwargs.values()) for t in tensors_in(value)]
        values = [concrete_of(t) for t in flat]
        known = all(v is not None for v in values) and \
            torch.Tag.nondeterministic_seeded not in func.tags and \
            name not in UNINITIALISED
        written = _written(func, args, kwargs)
        if needs_data(func):
            if not known and _UNREAD:     # a check that only warns: shapes as fake mode has them
                return _unread_answer(args[0].dtype) if name == "_local_scalar_dense" \
                    else func(*args, **kwargs)
            if not known:
                raise FakeValueError(f"{name} needs tensor values and "
                                     "fake tensors have none (only values computed from Python "
                                     "constants are known)")
            real = self._run_real(func, args, kwargs)
            if not isinstance(real, torch.Tensor) and not isinstance(real, (tuple, list)):
                return real          # a scalar read: the value the real step sees
            return self._fake_like(real)
        out = func(*args, **kwargs)
        if not known:
            for t in written:
                self._stale(t)
            return out
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and _is_fake(t)]
        real = None
        if outs and sum(t.numel() for t in outs) <= MAX_ELEMENTS:
            try:
                real = self._run_real(func, args, kwargs)
            except Exception:   # noqa: BLE001 (a value not known is only a value not known)
                real = None
        if real is not None:
            for fake, value in zip(tree_flatten(out)[0], tree_flatten(real)[0]):
                if isinstance(fake, torch.Tensor) and _is_fake(fake) and isinstance(value, torch.Tensor):
                    _set(fake, value)
        else:
            for t in [*written, *outs]:
                self._stale(t)
        return out

    @staticmethod
    def _stale(t) -> None:
        """`t` was written by an op that could not be mirrored: its value (and that
        of every view of its storage, which shares the mirrored storage) is unknown."""
        for each in (t, getattr(t, "_base", None)):
            value = _VALUES.get(each) if each is not None else None
            if value is not None:
                _STALE[value.untyped_storage()._cdata] = value

    def _run_real(self, func, args, kwargs):
        real_args, real_kwargs = tree_map_only(torch.Tensor, concrete_of, (args, kwargs))
        with torch.utils._python_dispatch._disable_current_modes():
            return func(*real_args, **real_kwargs)

    def _fake_like(self, real):
        def convert(t):
            fake = self.fake_mode.from_tensor(t)
            if t.numel() <= MAX_ELEMENTS:
                _set(fake, t)
            return fake
        with torch.utils._python_dispatch._disable_current_modes():
            return tree_map_only(torch.Tensor, convert, real)


def _written(func, args, kwargs) -> list:
    found = []
    for index, (name, is_write) in enumerate(schema_arguments(func)):
        if is_write:
            found += tensors_in(args[index] if index < len(args) else kwargs.get(name))
    return found


_UNREAD: list[bool] = []    # non-empty inside `values_unread()`


@contextlib.contextmanager
def values_unread():
    """A scalar read of a value fake mode does not have answers 0 (False) here, for a
    library path that reads a value only to decide whether to warn: the ops it runs
    (logged as the real step logs them) are the same whatever the answer. Other ops
    that need values (an index by a list) get the shapes fake mode gives them."""
    _UNREAD.append(True)
    try:
        yield
    finally:
        _UNREAD.pop()


def _unread_answer(dtype: torch.dtype):
    if dtype == torch.bool:
        return False
    return 0.0 if dtype.is_floating_point else 0j if dtype.is_complex else 0


def _warning_only(method):
    """`method`, a library check that only warns, with its value reads unread."""
    def unread(*args, **kwargs):
        with values_unread():
            return method(*args, **kwargs)
    return unread


# Library checks that read input values only to decide whether to warn.
WARNING_ONLY = (("transformers.modeling_utils", "PreTrainedModel",
                 "warn_if_padding_and_no_attention_mask"),)


@contextlib.contextmanager
def _warnings_unread():
    """Every `WARNING_ONLY` method of a library already imported, its reads unread."""
    patched = []
    for module_name, owner_name, attr in WARNING_ONLY:
        owner = getattr(sys.modules.get(module_name), owner_name, None)
        method = vars(owner).get(attr) if isinstance(owner, type) else None
        if callable(method):
            patched.append((owner, attr, method))
            setattr(owner, attr, _warning_only(method))
    try:
        yield
    finally:
        for owner, attr, method in patched:
            setattr(owner, attr, method)


@contextlib.contextmanager
def real_paths():
    """Libraries that branch on "is this a FakeTensor" take their real-mode path.

    transformers' `is_tracing(tensor)` is true for fake tensors, and then builds
    masks the way a compiled graph needs them rather than the way the eager step
    runs (its packed-sequence check, `.all()` then a scalar read, is skipped). Here
    the fake step has the real step's concrete values, so it takes the eager path
    and its log equals the real one; a read of a value fake mode does not have
    still fails, naming the op, except in a check that only warns
    (`WARNING_ONLY`: transformers' padding warning reads the input ids), where
    the read is answered 0 and the same ops run."""
    module = sys.modules.get("transformers.utils.import_utils")
    if module is None or not hasattr(module, "is_fake_tensor"):
        with _warnings_unread():
            yield
        return
    original = module.is_fake_tensor
    module.is_fake_tensor = lambda _x: False
    try:
        with _warnings_unread():
            yield
    finally:
        module.is_fake_tensor = original
