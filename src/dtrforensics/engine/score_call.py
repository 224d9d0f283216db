"""The kernel's call of a policy file's score, by the score's address.

A policy from a file is compiled by numba as a C function
`double score(int64 x N_FEATURES)` (engine/user_policy.py). The kernel takes
its address as a plain int64 rather than a numba function object, so that a
kernel compiled ahead of time (engine/native.py) can call a score compiled
later, in another process.
"""

from __future__ import annotations

import ctypes

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

from .features import N_FEATURES

_C_SCORE = ctypes.CFUNCTYPE(ctypes.c_double, *[ctypes.c_int64] * N_FEATURES)


def call_score(address, features):
    """The score at `address` of `features` (int64, N_FEATURES of them); as
    plain Python (NUMBA_DISABLE_JIT=1), through ctypes."""
    return _C_SCORE(int(address))(*(int(x) for x in features[:N_FEATURES]))


@intrinsic
def _call_c_score(typingctx, address, features):
    """An indirect call of the C function at `address` with features[0..N)."""
    def codegen(context, builder, signature, args):
        address_value, array_value = args
        data = context.make_array(signature.args[1])(context, builder, array_value).data
        i64 = ir.IntType(64)
        c_type = ir.FunctionType(ir.DoubleType(), [i64] * N_FEATURES)
        target = builder.inttoptr(address_value, c_type.as_pointer())
        values = [builder.load(builder.gep(data, [ir.Constant(i64, k)]))
                  for k in range(N_FEATURES)]
        return builder.call(target, values)
    return types.float64(types.int64, features), codegen


@overload(call_score)
def _call_score_compiled(address, features):
    return lambda address, features: _call_c_score(address, features)
