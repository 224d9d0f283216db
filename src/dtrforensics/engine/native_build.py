"""Write the numba-compiled kernel out as a native library (engine/native.py).

For each entry point, a small numba C callback unpacks the int64 argument
vector into the very types numba compiled the kernel function for (so numba
reuses that compilation) and calls it. The callback's LLVM module, which numba
links with the whole kernel, is copied, stripped of everything the entry
points do not reach, emitted as a position-independent object for this CPU
and linked with the system C compiler. numba's helper library is not loaded
in a process without numba: the two math helpers the kernel uses get their
own definitions, and the exception paths of numba's C callbacks (never taken:
the kernel does not raise) get stubs that abort. Any failure leaves a note
and the process keeps numba.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import carray, cfunc, types
from numba.extending import intrinsic

from . import native

SHIM = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#define HIDDEN __attribute__((visibility("hidden")))
HIDDEN double numba_frexp(double x, int *exp)
{ if (!isfinite(x) || x == 0.0) { *exp = 0; return x; } return frexp(x, exp); }
HIDDEN double numba_ldexp(double x, int exp)
{ return (isfinite(x) && x != 0.0 && exp) ? ldexp(x, exp) : x; }
static void raised(const char *name)
{ fprintf(stderr, "dtrforensics: the native replay kernel raised (%s); rerun with "
          "DTRF_NATIVE=0 for the error\n", name); abort(); }
"""
HELPERS = ("numba_frexp", "numba_ldexp")
STUB_PREFIXES = ("numba_", "NRT_", "Py", "_Py")
# numba's runtime allocating: the kernel must not (its exception paths only free)
ALLOCATION_PREFIXES = ("NRT_MemInfo_alloc", "NRT_MemInfo_new", "NRT_Allocate")


@intrinsic
def _voidptr(typingctx, address):
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())
    return types.voidptr(types.int64), codegen


@intrinsic
def _readonly(typingctx, array):
    """The same array typed read-only (as numba typed the trace's arrays)."""
    def codegen(context, builder, signature, args):
        return args[0]
    return array.copy(readonly=True)(array), codegen


def plan_of(ty) -> list:
    """How an argument of numba type `ty` is packed (native._pack reads it)."""
    if isinstance(ty, types.Array) and ty.layout == "C":
        return ["array", str(ty.dtype), ty.ndim]
    if isinstance(ty, types.BaseNamedTuple):
        return ["tuple", [plan_of(t) for t in ty.types]]
    if isinstance(ty, types.Integer) and ty.bitwidth == 64 and ty.signed:
        return ["int"]
    raise TypeError(f"cannot pass {ty} through the native library")


def _unpack_source(ty, cursor: list, names: dict) -> str:
    """Source of an expression rebuilding an argument of type `ty` from `packed`."""
    if isinstance(ty, types.Array):
        at = cursor[0]
        cursor[0] += 1 + ty.ndim
        shape = "".join(f"packed[{at + 1 + d}], " for d in range(ty.ndim))
        array = f"carray(_voidptr(packed[{at}]), ({shape}), np.{ty.dtype})"
        return array if ty.mutable else f"_readonly({array})"
    if isinstance(ty, types.BaseNamedTuple):
        cls = ty.instance_class
        names[cls.__name__] = cls
        return f"{cls.__name__}({', '.join(_unpack_source(t, cursor, names) for t in ty.types)})"
    cursor[0] += 1
    return f"packed[{cursor[0] - 1}]"


def entry_signatures(dispatchers: dict, main: str = "run_slice") -> dict | None:
    """name -> signature for every entry point, read off the types `main` was
    compiled for (the first packable signature), by parameter name: the
    kernel's functions name an argument the same wherever they take it. None
    if `main` was compiled for no types the library can take."""
    for signature in dispatchers[main].signatures:
        try:
            [plan_of(t) for t in signature]
        except TypeError:
            continue
        by_name = dict(zip(inspect.signature(dispatchers[main].py_func).parameters, signature))
        return {name: tuple(by_name[p] for p in inspect.signature(d.py_func).parameters)
                for name, d in dispatchers.items()}
    return None


def entry_point(name: str, dispatcher, signature):
    """A numba C callback `int64 f(int64 *packed)` calling `dispatcher` with
    arguments of types `signature`; and their plan."""
    dispatcher.compile(tuple(signature))       # from numba's cache when it is there
    returns = dispatcher.overloads[tuple(signature)].signature.return_type
    names = {"np": np, "carray": carray, "_voidptr": _voidptr, "_readonly": _readonly,
             "target": dispatcher}
    cursor = [0]
    args = ", ".join(_unpack_source(t, cursor, names) for t in signature)
    call = f"target({args})"
    body = f"return {call}" if returns != types.none else f"{call}\n    return 0"
    source = (f"def {name}_packed(packed_ptr):\n"
              f"    packed = carray(packed_ptr, ({cursor[0]},))\n    {body}\n")
    exec(compile(source, f"<native entry point {name}>", "exec"), names)
    callback = cfunc(types.int64(types.CPointer(types.int64)))(names[f"{name}_packed"])
    return callback, [plan_of(t) for t in signature]


def _host_machine():
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=3, reloc="pic", codemodel="default")


def _module(callbacks: dict) -> tuple[llvm.ModuleRef, dict]:
    """One module holding every entry point (exported as dtrf_NAME) and what they
    reach, nothing else."""
    module = None
    symbols = {}
    for name, callback in callbacks.items():
        part = llvm.parse_bitcode(callback._library._final_module.as_bitcode())
        symbol = f"dtrf_{name}"
        part.get_function(callback.native_name).name = symbol
        symbols[name] = symbol
        if module is None:
            module = part
        else:
            for value in (*part.functions, *part.global_variables):  # shared definitions
                if not value.is_declaration and value.name != symbol:
                    value.linkage = "linkonce_odr"
            module.link_in(part)
    for fn in module.functions:
        if not fn.is_declaration:
            fn.linkage = "external" if fn.name in symbols.values() else "internal"
    for gv in module.global_variables:
        if not gv.is_declaration:
            gv.linkage = "internal"
    machine = _host_machine()
    passes = llvm.create_new_module_pass_manager()
    passes.add_global_dead_code_eliminate_pass()
    passes.add_strip_dead_prototype_pass()
    passes.run(module, llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(3)))
    # The whole -O3 pipeline once more over the linked module: the entry points'
    # modules as numba leaves them ran 1.7x slower here than numba's own code
    # (UNet 0.42: 2.6 ms against 1.5 ms with this pass).
    full = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(3))
    full.getModulePassManager().run(module, full)
    return module, symbols


def _shim_source(module: llvm.ModuleRef) -> str:
    """Definitions of numba's helper symbols the module still refers to."""
    allocating = sorted(fn.name for fn in module.functions
                        if fn.is_declaration and fn.name.startswith(ALLOCATION_PREFIXES))
    if allocating:
        raise RuntimeError(f"the kernel allocates ({', '.join(allocating)}): numba's runtime "
                           "is not in the native library")
    lines = [SHIM]
    for fn in module.functions:
        if fn.is_declaration and fn.name.startswith(STUB_PREFIXES) and fn.name not in HELPERS:
            lines.append(f'HIDDEN void {fn.name}(void) {{ raised("{fn.name}"); }}')
    for gv in module.global_variables:
        if gv.is_declaration and gv.name.startswith(STUB_PREFIXES):
            lines.append(f"HIDDEN void *{gv.name} = 0;")
    return "\n".join(lines) + "\n"


def _undefined(library: Path) -> list[str]:
    """Symbols the library still needs from outside, other than the C library's."""
    listing = subprocess.run(["nm", "-u", "--format=posix", str(library)], capture_output=True,
                             text=True, check=True).stdout
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    return [n for n in names if "@" not in n and not n.startswith(("_ITM_", "__gmon", "__cxa"))]


def build(dispatchers: dict, key: str | None = None) -> Path:
    """Write the library and its manifest for the current key; returns the
    library. `dispatchers`: name -> (numba dispatcher, signature to export)."""
    key = key or native.library_key()
    library, manifest, failed = native.library_paths(key)
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:           # before the entry points are compiled: seconds of CPU
        raise RuntimeError("no C compiler (cc) to link the native kernel")
    callbacks, plans = {}, {}
    for name, (dispatcher, signature) in dispatchers.items():
        callbacks[name], plans[name] = entry_point(name, dispatcher, signature)
    module, symbols = _module(callbacks)
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent, prefix=".native-") as work:
        work = Path(work)
        (work / "kernel.o").write_bytes(_host_machine().emit_object(module))
        (work / "shim.c").write_text(_shim_source(module))
        out = work / "kernel.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(work / "kernel.o"),
                        str(work / "shim.c"), "-lm"], check=True, capture_output=True, text=True)
        missing = _undefined(out)
        if missing:
            raise RuntimeError(f"the native kernel needs symbols it cannot have: {missing}")
        (work / "manifest.json").write_text(json.dumps({
            "key": key, "functions": {n: {"symbol": symbols[n], "plan": plans[n]}
                                      for n in dispatchers}}))
        os.replace(out, library)                 # the library first: a manifest means both
        os.replace(work / "manifest.json", manifest)
    failed.unlink(missing_ok=True)
    return library
