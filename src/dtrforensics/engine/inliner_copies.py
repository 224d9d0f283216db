"""A faster copy of a callee's IR in numba's inliner, for the kernel's compile.

The kernel inlines most of its helpers (`inline="always"`), so numba's
inliner copies a callee's IR at every call site, and twice (a copy to
rewrite, a copy to keep). It deep-copies the blocks one at a time, each with
its own memo, so the function's scope, which every block refers to and which
holds every variable of the function, is copied once per block: a copy costs
blocks x variables, and copying was half of the kernel's compile.

`install` gives each copy of a function's IR one memo for all its blocks, so
the scope is copied once per copy and the blocks share it, as they share the
original. The compiled code is unchanged: run_slice's LLVM IR and assembly
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

_copying = {"depth": 0, "memo": None}
_installed = False


def install() -> bool:
    """Share one memo per copy of a callee's IR (see above); True if it is in place."""
    global _installed
    if _installed:
        return True
    if os.environ.get("DTRF_INLINER_COPIES") == "0":
        return False
    try:
        from numba.core import ir
        from numba.core.inline_closurecall import InlineWorker
    except ImportError:
        return False
    if "__deepcopy__" in vars(ir.Block) or not hasattr(ir.FunctionIR, "copy") \
            or not hasattr(InlineWorker, "inline_ir") or not hasattr(copy, "_reconstruct"):
        return False
    inline_ir, copy_function_ir = InlineWorker.inline_ir, ir.FunctionIR.copy

    def inlining(self, *args, **kwargs):
        saved = dict(_copying)
        _copying["depth"] += 1
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _copying.update(saved)

    def copying_function(self):
        if _copying["depth"]:
            _copying["memo"] = {}       # numba's copy of a callee begins: blocks follow
        return copy_function_ir(self)

    def copying_block(self, memo):
        shared = _copying["memo"] if _copying["depth"] and _copying["memo"] is not None else memo
        if id(self) in shared:
            return shared[id(self)]
        return copy._reconstruct(self, shared, *self.__reduce_ex__(4))

    InlineWorker.inline_ir = inlining
    ir.FunctionIR.copy = copying_function
    ir.Block.__deepcopy__ = copying_block
    _installed = True
    return True
