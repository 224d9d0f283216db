"""Model specs: `zoo:NAME` (built in), `hf:ARCH`, `timm:NAME`, `torchvision:NAME`
(named by their library, `named.py`) or `package.module:factory` (a callable
returning `(model, batch, loss_fn)`), built real or under a FakeTensorMode."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys
from pathlib import Path

import torch

from ..errors import one_line
from . import named, zoo
from .recorder import RecordError

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def parse_dtype(text: str) -> torch.dtype:
    try:
        return DTYPES[text]
    except KeyError:
        raise RecordError(f"unknown dtype {text!r}; known: {', '.join(DTYPES)}") from None


@contextlib.contextmanager
def _no_bytecode():
    was = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = was


def import_users_module(name: str):
    """The user's module `name`, found as `python -m` finds it (the current folder
    first), imported without writing its bytecode: a command leaves the user's
    folder as it found it (no __pycache__), whatever PYTHONDONTWRITEBYTECODE says.
    The functions taken from it go through `users_function`."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    with _no_bytecode():
        return importlib.import_module(name)


def users_function(function):
    """`function` (the user's), writing no bytecode while it runs either: what
    it imports late lands in the user's folder too."""
    @functools.wraps(function)
    def without_bytecode(*args, **kwargs):
        with _no_bytecode():
            return function(*args, **kwargs)
    return without_bytecode


def resolve(spec: str):
    """The factory a spec names, and a label for messages."""
    if spec.startswith("zoo:"):
        name = spec[4:]
        if name not in zoo.ZOO:
            raise RecordError(f"unknown zoo model {name!r}; known: {', '.join(zoo.ZOO)}")
        return zoo.ZOO[name]
    if spec.partition(":")[0] in named.PREFIXES:
        return named.resolve(spec)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RecordError(f"model spec {spec!r} is none of zoo:NAME, hf:ARCH, timm:NAME, "
                          "torchvision:NAME or package.module:factory")
    try:
        module = import_users_module(module_name)
    except Exception as exc:
        hint = ""
        if module_name.endswith(".py"):      # a file named where a module goes
            file = Path(module_name)
            hint = (f"; a model spec names a module, not a file: write {file.stem}:{attr}, "
                    f"run in {file.parent} or with it on PYTHONPATH")
        raise RecordError(f"cannot import {module_name!r} for {spec}: {model_error(exc)}{hint}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise RecordError(f"{spec}: module {module_name!r} has no callable {attr!r}")
    return users_function(factory)


@contextlib.contextmanager
def fake_context():
    """A `FakeTensorMode` with concrete values for what Python constants compute, so
    a factory runs as its library wrote it (initialisers, `linspace(...).item()`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .concrete import ConcreteValues, real_paths
    mode = FakeTensorMode()
    with mode, ConcreteValues(mode), real_paths(), _FakeDeepcopy(), _swappable(), \
            _fake_trunc_normal():
        yield mode


@contextlib.contextmanager
def _fake_trunc_normal():
    """`nn.init.trunc_normal_` of a fake tensor as a normal draw clamped to [a, b].

    PyTorch redraws the values outside [a, b] until none is left, a loop on
    `mask.any()` over random values, which fake mode cannot read (ViT, DeiT,
    DINOv2 and ModernBERT initialise with it). Under fake mode values do not
    matter, only shapes and the ops' kind: the same tensor, filled in place."""
    from torch.nn import init

    from .concrete import _is_fake
    original = init._no_grad_trunc_normal_

    def trunc_normal(tensor, mean, std, a, b, generator=None):
        if not _is_fake(tensor):
            return original(tensor, mean, std, a, b, generator=generator)
        with torch.no_grad():
            return tensor.normal_(mean, std, generator=generator).clamp_(a, b)
    init._no_grad_trunc_normal_ = trunc_normal
    try:
        yield
    finally:
        init._no_grad_trunc_normal_ = original


@contextlib.contextmanager
def _swappable():
    """`model.to(dtype)`, `.half()`, `.bfloat16()`, `.to(device)` of a fake model.

    `Module._apply` swaps a fake parameter with its converted copy
    (`torch.utils.swap_tensors`), which refuses a tensor with a weak reference,
    and a fake parameter can have two: its concrete value's entry (a parameter
    an initialiser filled with a constant) and the fake mode's memo of the real
    tensor it was made from. The converted parameter replaces it, so both are
    dropped before the swap (`concrete.forget`)."""
    from .concrete import forget
    swap = torch.utils.swap_tensors

    def swap_forgetting(t1, t2):
        forget(t1)
        forget(t2)
        return swap(t1, t2)
    torch.utils.swap_tensors = swap_forgetting
    try:
        yield
    finally:
        torch.utils.swap_tensors = swap


class _FakeDeepcopy(torch.overrides.TorchFunctionMode):
    """`copy.deepcopy` of a fake tensor as a clone in its own fake mode.

    PyTorch deep-copies a tensor through its storage, which for a fake tensor
    yields a tensor of a new `FakeTensorMode`; a module cloned that way
    (`nn.TransformerEncoder` clones its layer) then fails with `Mixing fake
    modes NYI` on its first op. A clone is what the real deep copy makes: new
    storage, same values, strides, `requires_grad` and parameter-ness."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import FakeTensor
        if func is torch.Tensor.__deepcopy__ and isinstance(args[0], FakeTensor):
            tensor, memo = args
            if id(tensor) not in memo:
                with torch.no_grad():
                    copied = tensor.clone(memory_format=torch.preserve_format)
                if isinstance(tensor, torch.nn.Parameter):
                    copied = torch.nn.Parameter(copied, requires_grad=tensor.requires_grad)
                memo[id(tensor)] = copied
            return memo[id(tensor)]
        return func(*args, **(kwargs or {}))


def model_error(exc: BaseException) -> str:
    """A model's exception in one line: its type and message, the message's lines
    joined and PyTorch's C++ stack (`Exception raised from ...`, frames) left out."""
    text = str(exc).split("Exception raised from ")[0]
    return f"{type(exc).__name__}: {one_line(text)}"


def build(spec: str, fake: bool = False, **options):
    """Call the spec's factory with the options given (None means "not given");
    under a FakeTensorMode when `fake`. Returns `(model, batch, loss_fn)`."""
    factory = resolve(spec)
    given = {k: v for k, v in options.items() if v is not None}
    try:
        accepted = inspect.signature(factory).parameters
    except (ValueError, TypeError):     # a builtin such as torch.zeros has no signature
        raise RecordError(f"{spec} is not a model factory (a callable returning (model, "
                          "batch, loss_fn) whose keywords can be read); it has no signature") from None
    takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    unknown = [k for k in given if k not in accepted and not takes_any]
    if unknown:
        raise RecordError(f"{spec} does not take {', '.join(unknown)} "
                          f"(it takes: {', '.join(accepted) or 'nothing'})")
    try:
        with fake_context() if fake else contextlib.nullcontext():
            built = factory(**given)
    except RecordError:
        raise
    except Exception as exc:
        raise RecordError(f"the factory {spec} raised {model_error(exc)}") from None
    if not (isinstance(built, tuple) and len(built) == 3 and isinstance(built[0], torch.nn.Module)
            and callable(built[2])):
        raise RecordError(f"the factory {spec} must return (model, batch, loss_fn), "
                          f"got {type(built).__name__}")
    return built
