"""A faster copy of a callee's IR in numba's inliner, for the kernel's compile.

The kernel inlines most of its helpers (`inline="always"`), so numba's
inliner copies a callee's IR at every call site, and twice (a copy to
rewrite, a copy to keep). It deep-copies the blocks one at a time, each with
its own memo, so the function's scope, which every block refers to and which
holds every variable of the function, is copied once per block: a copy costs
blocks x variables, and copying was half of the kernel's compile.

`cheaper_copies` gives each copy of a function's IR one memo for all its
blocks, so the scope is copied once per copy and the blocks share it, as
they share the original. It is in place only while the kernel compiles
(engine/compiled.py: the driver's calls through numba and `prepare`): a
process's other numba code is left to numba as it is. The compiled code is unchanged: run_slice's LLVM IR and assembly
are byte-identical with and without it (numba 0.68), and
tests/test_native.py compiles inlining helpers both ways and compares them.
Only the compile gets cheaper (about a quarter less CPU for the kernel, so
for an install and the first replay after an engine change).

It reaches into numba's private internals (`InlineWorker.inline_ir`,
`FunctionIR.copy`, `Block`); where a numba lacks them or already gives
`Block` a deep copy of its own, nothing is changed. `DTRF_INLINER_COPIES=0`
turns it off.
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager

_copying = {"depth": 0, "memo": None}
_entered = 0             # cheaper_copies blocks open (they nest: a replay inside prepare)
_replaced: tuple = ()    # (InlineWorker, FunctionIR, Block, numba's inline_ir, numba's copy)


def _numba_parts():
    """numba's inliner, FunctionIR and Block, or None where this numba lacks what
    the cheaper copies replace (or already deep-copies a Block its own way)."""
    try:
        from numba.core import ir
        from numba.core.inline_closurecall import InlineWorker
    except ImportError:
        return None
    if "__deepcopy__" in vars(ir.Block) or not hasattr(ir.FunctionIR, "copy") \
            or not hasattr(InlineWorker, "inline_ir") or not hasattr(copy, "_reconstruct"):
        return None
    return InlineWorker, ir.FunctionIR, ir.Block


@contextmanager
def cheaper_copies():
    """While the block runs, numba's inliner shares one memo per copy of a
    callee's IR (see above); numba is as it was after the outermost block.
    Yields whether it is in place (not where numba lacks the parts, nor under
    DTRF_INLINER_COPIES=0)."""
    global _entered, _replaced
    if _entered == 0:
        parts = _numba_parts() if os.environ.get("DTRF_INLINER_COPIES") != "0" else None
        if parts is None:
            yield False
            return
        worker, function_ir, block = parts
        _replaced = (worker, function_ir, block, worker.inline_ir, function_ir.copy)
        worker.inline_ir = _inlining(worker.inline_ir)
        function_ir.copy = _copying_function(function_ir.copy)
        block.__deepcopy__ = _copying_block
    _entered += 1
    try:
        yield True
    finally:
        _entered -= 1
        if _entered == 0:
            worker, function_ir, block, inline_ir, copy_function_ir = _replaced
            worker.inline_ir, function_ir.copy = inline_ir, copy_function_ir
            del block.__deepcopy__


def _inlining(inline_ir):
    def inlining(self, *args, **kwargs):
        saved = dict(_copying)
        _copying["depth"] += 1
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _copying.update(saved)
    return inlining


def _copying_function(copy_function_ir):
    def copying_function(self):
        if _copying["depth"]:
            _copying["memo"] = {}       # numba's copy of a callee begins: its blocks follow
        return copy_function_ir(self)
    return copying_function


def _copying_block(self, memo):
    shared = _copying["memo"] if _copying["depth"] and _copying["memo"] is not None else memo
    if id(self) in shared:
        return shared[id(self)]
    return copy._reconstruct(self, shared, *self.__reduce_ex__(4))
