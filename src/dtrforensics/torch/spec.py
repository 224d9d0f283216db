"""Model specs: `zoo:NAME` (built in) or `package.module:factory` (a callable
returning `(model, batch, loss_fn)`), built real or under a FakeTensorMode."""

from __future__ import annotations

import contextlib
import importlib
import inspect

import torch

from . import zoo
from .recorder import RecordError

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def parse_dtype(text: str) -> torch.dtype:
    try:
        return DTYPES[text]
    except KeyError:
        raise RecordError(f"unknown dtype {text!r}; known: {', '.join(DTYPES)}") from None


def resolve(spec: str):
    """The factory a spec names, and a label for messages."""
    if spec.startswith("zoo:"):
        name = spec[4:]
        if name not in zoo.ZOO:
            raise RecordError(f"unknown zoo model {name!r}; known: {', '.join(zoo.ZOO)}")
        return zoo.ZOO[name]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RecordError(f"model spec {spec!r} is neither zoo:NAME nor package.module:factory")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise RecordError(f"cannot import {module_name!r} for {spec}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise RecordError(f"{spec}: module {module_name!r} has no callable {attr!r}")
    return factory


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
    context = contextlib.nullcontext()
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode
        context = FakeTensorMode()
    try:
        with context:
            built = factory(**given)
    except Exception as exc:
        raise RecordError(f"the factory {spec} raised {type(exc).__name__}: {exc}") from None
    if not (isinstance(built, tuple) and len(built) == 3 and isinstance(built[0], torch.nn.Module)
            and callable(built[2])):
        raise RecordError(f"the factory {spec} must return (model, batch, loss_fn), "
                          f"got {type(built).__name__}")
    return built
