"""An aten op's facts, read from its schema once per overload: its name, its
arguments and the tensors in them, the positions it writes (those its schema
does not mark included), the tensors it returns. Shared by the recorder
(`recorder.py`), the fake-mode values (`concrete.py`) and the executor."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils._pytree import tree_flatten

# Ops that write arguments their schema does not mark as written (batch norm
# updates its running statistics in place in training mode).
UNDECLARED_WRITES = {name: ("running_mean", "running_var")
                     for name in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm")}


_OP_NAMES: dict[int, tuple[str, object]] = {}


def op_name_of(func) -> str:
    """The aten op's name (its overload packet's), read once per overload; kept by
    the overload's id, the overload held so its id is never reused (an overload
    hashes in Python)."""
    found = _OP_NAMES.get(id(func))
    if found is None:
        found = _OP_NAMES[id(func)] = (func.overloadpacket.__name__, func)
    return found[0]


def output_tensors(out) -> list:
    """The tensors an op returned, in `tree_flatten` order: an aten op returns a
    tensor, or tuples and lists of them (and None), walked here without pytree's
    generic machinery; anything else is left to `tree_flatten`."""
    if isinstance(out, torch.Tensor):
        return [out]
    if type(out) is tuple or type(out) is list:
        found: list = []
        for x in out:
            if isinstance(x, torch.Tensor):
                found.append(x)
            elif x is not None and not isinstance(x, (int, float)):
                found += output_tensors(x)
        return found
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def _argument(func, args: tuple, kwargs: dict, name: str):
    for index, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            return args[index] if index < len(args) else kwargs.get(name, arg.default_value)
    return None


_ARGUMENTS: dict = {}


def schema_arguments(func) -> tuple[tuple[str, bool], ...]:
    """(name, written) per argument of an op's schema, read once per overload
    (`_schema.arguments` builds new objects on every call)."""
    found = _ARGUMENTS.get(func)
    if found is None:
        found = _ARGUMENTS[func] = tuple((a.name, a.is_write) for a in func._schema.arguments)
    return found


def tensors_in(value) -> list:
    """The tensors of one op argument: a tensor, or a list of (optional) tensors."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def schema_tensors(func, args: tuple, kwargs: dict,
                   params: Sequence[tuple[int, str, bool]] | None = None) -> tuple[list, list[int]]:
    """The op's tensor arguments in schema order, and the positions it writes.
    `params`: the (position, name, written) arguments to read; by default every
    argument of the schema, with the writes it does not mark (`UNDECLARED_WRITES`).
    The runtime passes only those whose type can hold a tensor: the same tensors,
    found without flattening every integer list."""
    if params is None:
        written = UNDECLARED_WRITES.get(func.overloadpacket.__name__, ())
        if written and not _argument(func, args, kwargs, "training"):
            written = ()
        params = [(index, name, is_write or name in written)
                  for index, (name, is_write) in enumerate(schema_arguments(func))]
    tensors: list = []
    mutated: list[int] = []
    for index, name, writes in params:
        if index < len(args):
            value = args[index]
        elif name in kwargs:
            value = kwargs[name]
        else:
            continue
        for t in (value if isinstance(value, (list, tuple)) else (value,)):   # tensors_in, inline
            if isinstance(t, torch.Tensor):
                if writes and len(tensors) not in mutated:
                    mutated.append(len(tensors))
                tensors.append(t)
    return tensors, mutated
