"""A callee's IR made once and copied faster in numba's inliner, for the kernel's compile.

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
process's other numba code is left to numba as it is. The shared memo alone
left run_slice's LLVM IR and assembly byte-identical (numba 0.68) and made the
kernel's compile about a quarter cheaper (an install, and the first replay
after an engine change).

Before a copy, numba also makes the callee's IR from its bytecode anew at
every call site (`InlineWorker.inline_function` runs the untyped passes,
which inline the callee's own callees, each made anew in turn): 819 times
for the kernel's 111 inlined helpers. `cheaper_copies` makes each function's
IR once per compile and hands the inliner that (which copies it before any
change, as it does numba's). A copy's variables then take the names of the
first making, numbered apart by the caller's scope, so the LLVM IR differs
in its names only: the machine code is the same (the native library's .text
byte for byte; tests/test_native.py compiles inlining helpers both ways and
compares their assembly).

It reaches into numba's private internals (`InlineWorker.inline_ir`,
`InlineWorker.inline_function`, `FunctionIR.copy`, `Block`); where a numba
lacks them or already gives `Block` a deep copy of its own, nothing is
changed. `DTRF_INLINER_COPIES=0` turns it off.
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager

_copying = {"depth": 0, "memo": None}
_entered = 0             # cheaper_copies blocks open (they nest: a replay inside prepare)
_replaced: tuple = ()    # (InlineWorker, FunctionIR, Block, numba's inline_ir, numba's copy,
                         #  numba's inline_function)
_made: dict = {}         # (function, what numba makes its IR with) -> its untyped IR


def _numba_parts():
    """numba's inliner, FunctionIR and Block, or None where this numba lacks what
    the cheaper copies replace (or already deep-copies a Block its own way)."""
    try:
        from numba.core import ir
        from numba.core.inline_closurecall import InlineWorker
    except ImportError:
        return None
    if "__deepcopy__" in vars(ir.Block) or not hasattr(ir.FunctionIR, "copy") \
            or not hasattr(InlineWorker, "inline_ir") or not hasattr(copy, "_reconstruct") \
            or not hasattr(InlineWorker, "inline_function") \
            or not hasattr(InlineWorker, "run_untyped_passes"):
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
        _replaced = (worker, function_ir, block, worker.inline_ir, function_ir.copy,
                     worker.inline_function)
        worker.inline_ir = _inlining(worker.inline_ir)
        worker.inline_function = _inlining_made_once
        function_ir.copy = _copying_function(function_ir.copy)
        block.__deepcopy__ = _copying_block
    _entered += 1
    try:
        yield True
    finally:
        _entered -= 1
        if _entered == 0:
            worker, function_ir, block, inline_ir, copy_function_ir, inline_function = _replaced
            worker.inline_ir, function_ir.copy = inline_ir, copy_function_ir
            worker.inline_function = inline_function
            del block.__deepcopy__
            _made.clear()


def _inlining(inline_ir):
    def inlining(self, *args, **kwargs):
        saved = dict(_copying)
        _copying["depth"] += 1
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _copying.update(saved)
    return inlining


def _inlining_made_once(self, caller_ir, block, i, function, arg_typs=None):
    """numba's InlineWorker.inline_function, the callee's untyped IR made once
    for every worker that would make it alike (same contexts, flags, locals)."""
    flags = self.flags.values()
    flags.pop("enable_ssa", None)     # numba sets it (off) on the caller's flags as it makes
    key = (function, self.typingctx, self.targetctx, repr(sorted(flags.items())), repr(self.locals))
    callee_ir = _made.get(key)
    if callee_ir is None:
        callee_ir = _made[key] = self.run_untyped_passes(function)
    else:
        self.flags.enable_ssa = False     # as numba's making leaves the caller's flags
    return self.inline_ir(caller_ir, block, i, callee_ir, function.__code__.co_freevars,
                          arg_typs=arg_typs)


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
