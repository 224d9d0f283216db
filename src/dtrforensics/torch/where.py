"""Where each op of a recorded step ran: its module path, phase and source line.

- **Module**: the name `named_modules()` gives the innermost module whose
  forward is running (`layers.0.attention.query_key_value`), and the chain of
  modules around it, outermost first (`layers.0 > layers.0.attention > ...`;
  the model itself is named by its class, and only where no submodule runs).
  Forward calls are followed with a global forward pre-hook and forward hook
  (a stack of names); frames' locals are never read, since a frame's locals
  snapshot would keep tensors alive past their death and change the log.
  In backward, the module is the one whose forward op made the autograd node
  running now: a forward op's context is filed under the sequence number of
  the node it creates (`torch._C._autograd._get_sequence_nr()`, read at the
  op, is that number plus one), and a backward op finds it through
  `torch._C._current_autograd_node()`. A gradient accumulated into a
  parameter names the parameter's module.
- **Phase**: `forward`, `loss`, `backward`, `optimizer`, or `recompute` for a
  forward module running again inside backward (`torch.utils.checkpoint`).
  Constants made before the step have none. An optimizer's op names the
  module of its first argument that a parameter, its gradient or its
  optimizer state is (a foreach op over several modules: the first); a
  temporary's (Adam's denominator) is the module of the update in progress.
- **Source**: `file:line` of the innermost Python frame outside PyTorch, the
  standard library, the model libraries (transformers, timm, torchvision) and
  this package (whose zoo counts as model code); where the step has no such
  frame (a library model called by the package), the innermost model-library
  frame. A backward op has its forward op's source line.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager

import torch

PHASES = ("forward", "loss", "backward", "optimizer", "recompute")
CHAIN_SEPARATOR = " > "

# (module, chain, phase, source); every field may be None
Context = tuple

_NO_CONTEXT: Context = (None, None, None, None)
_ACCUMULATE = (1 << 64) - 1      # AccumulateGrad's sequence number: it has none

_USER, _LIBRARY, _SKIP, _BOUNDARY = 0, 1, 2, 3
_MODEL_LIBRARIES = ("transformers", "timm", "torchvision")


def _directory(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) + os.sep if path else None


def _prefixes() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str, str]:
    """(skipped, site-packages, model libraries, zoo, step): folders and files."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    paths = sysconfig.get_paths()
    folders = lambda names: tuple(os.path.join(p, "") for p in names if p)  # noqa: E731
    skipped = folders([_directory("torch"), package, paths.get("stdlib"), paths.get("platstdlib")])
    # in a virtual environment the platform library folder holds site-packages
    installed = folders([paths.get("purelib"), paths.get("platlib")])
    libraries = tuple(d for d in (_directory(name) for name in _MODEL_LIBRARIES) if d)
    zoo = os.path.join(package, "torch", "zoo.py")
    step = os.path.join(package, "torch", "step.py")
    return skipped, installed, libraries, zoo, step


class Where:
    """The context of the op running now, for a step of `model`."""

    def __init__(self, model: torch.nn.Module, state: dict | None = None):
        self._names = {id(m): name for name, m in model.named_modules()}
        self._root = type(model).__name__
        self._stack: list[str] = []
        self._by_node: dict[int, Context] = {}
        self._owners: dict[int, str] = {}          # storage key -> module, for parameters
        self._kinds: dict[str, int] = {}
        self._interned: dict[Context, Context] = {}
        self._skipped, self._installed, self._libraries, self._zoo, self._step = _prefixes()
        self._torch_and_ours = self._skipped[:2]
        self.phase: str | None = None
        self._updating: str | None = None        # the optimizer's last owned argument's
        named = state.items() if state is not None else \
            [*model.named_parameters(), *model.named_buffers()]
        for name, t in named:
            self._owners[_key(t)] = name.rpartition(".")[0] or self._root

    # --- module calls ------------------------------------------------------------

    @contextmanager
    def following_modules(self) -> Iterator[None]:
        """Follow module calls inside the block (global module hooks)."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )
        names, stack = self._names, self._stack

        def enter(module, _args):
            name = names.get(id(module))
            if name is not None:
                stack.append(name)

        def leave(module, _args, _result):
            if id(module) in names and stack:
                stack.pop()

        handles = [register_module_forward_pre_hook(enter),
                   register_module_forward_hook(leave, always_call=True)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            stack.clear()

    # --- the context now -----------------------------------------------------------

    def own(self, optimizer) -> None:
        """Give each parameter's gradient and optimizer states its module (for the
        optimizer's ops, which run outside any module)."""
        if optimizer is None:
            return
        for group in optimizer.param_groups:
            for p in group["params"]:
                owner = self._owners.get(_key(p))
                if owner is None:
                    continue
                tensors = [p.grad, *optimizer.state[p].values()]
                for t in tensors:
                    if isinstance(t, torch.Tensor):
                        self._owners[_key(t)] = owner

    def now(self, inputs: list = ()) -> Context:
        """The context of the op being dispatched now (`inputs`: its tensor
        arguments; an optimizer's op is its first owned argument's module's)."""
        phase = self.phase
        if phase == "backward" and not self._stack:
            return self._intern(self._backward_context())
        if phase == "optimizer":
            owner = next((o for o in (self._owners.get(_key(t)) for t in inputs) if o),
                         self._updating)
            self._updating = owner
            return self._intern((owner, owner, phase, self._source()))
        if phase == "backward":
            phase = "recompute"
        module, chain = self._module()
        context = self._intern((module, chain, phase, self._source()))
        if phase is not None:
            node = torch._C._autograd._get_sequence_nr() - 1
            if node >= 0 and node not in self._by_node:
                self._by_node[node] = context
        return context

    def constant(self, t: torch.Tensor) -> Context:
        """The context of a constant: a parameter's or buffer's module; the step's
        context for one made during the step (a wrapped scalar)."""
        owner = self._owners.get(_key(t))
        if owner is not None:
            return self._intern((owner, owner, self.phase, None))
        return self.now() if self.phase is not None else _NO_CONTEXT

    def _module(self) -> tuple[str | None, str | None]:
        stack = [name for name in self._stack if name]
        if not stack:
            return (self._root, self._root) if self._stack else (None, None)
        chain = []
        for name in stack:                      # a module called twice in a row: once
            if not chain or chain[-1] != name:
                chain.append(name)
        return chain[-1], CHAIN_SEPARATOR.join(chain)

    def _backward_context(self) -> Context:
        node = torch._C._current_autograd_node()
        if node is None:
            return (None, None, "backward", None)
        sequence = node._sequence_nr()
        if sequence == _ACCUMULATE:
            variable = getattr(node, "variable", None)
            owner = self._owners.get(_key(variable)) if variable is not None else None
            return (owner, owner, "backward", None)
        module, chain, _, source = self._by_node.get(sequence, _NO_CONTEXT)
        return (module, chain, "backward", source)

    def _kind(self, filename: str) -> int:
        kind = self._kinds.get(filename)
        if kind is None:
            path = os.path.abspath(filename)
            if path == self._step:
                kind = _BOUNDARY
            elif path == self._zoo:
                kind = _USER
            elif path.startswith(self._libraries):
                kind = _LIBRARY
            elif filename.startswith("<") or path.startswith(self._torch_and_ours):
                kind = _SKIP
            elif path.startswith(self._skipped) and not path.startswith(self._installed):
                kind = _SKIP                    # the standard library
            else:
                kind = _USER
            self._kinds[filename] = kind
        return kind

    def _source(self) -> str | None:
        """The innermost user frame's `file:line` inside the step (else the innermost
        model library's): codes and line numbers only, never locals."""
        library = None
        frame = sys._getframe(2)
        while frame is not None:
            kind = self._kind(frame.f_code.co_filename)
            if kind == _USER:
                return f"{frame.f_code.co_filename}:{frame.f_lineno}"
            if kind == _BOUNDARY:
                break
            if kind == _LIBRARY and library is None:
                library = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return library

    def _intern(self, context: Context) -> Context:
        return self._interned.setdefault(context, context)


def _key(t) -> int:
    return t.untyped_storage()._cdata
