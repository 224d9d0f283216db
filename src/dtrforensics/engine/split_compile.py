"""The kernel's cold compile on two cores.

numba compiles on one core. Each kernel function that is not inlined is its
own unit, compiled when the first function calling it is typed, and cached on
disk (`njit(cache=True)`): a unit another process has compiled and cached is
loaded, not compiled again. So, where the cache is cold and a second core is
free, `compile_split` has a child process compile engine/cutoff.py's units
(differences of regions; they call nothing in engine/walks.py), `absorb_into`
and some of the scoring while this process compiles the walks' (shared
rebuilds, the builds a view or the first eviction asks for); run_slice's
compile, which follows, loads the child's from the cache.

A unit is compiled for the types run_slice passes it, read off run_slice's
own arguments by parameter name (the kernel's functions name an argument the
same wherever they take it) and a few derived names (`_DERIVED`). A unit
whose types are not the ones run_slice's compile asks for is compiled again
there, as without the split: the split changes what the compile costs, never
what it makes (the native library's machine code was byte-identical with and
without it; tests/test_split_compile.py holds the planned types to those
numba's cache holds each unit compiled for).
`DTRF_SPLIT_COMPILE=0` turns it off.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

SPLIT_ENV = "DTRF_SPLIT_COMPILE"
CHILD_SECONDS = 600          # a child not done by then is stopped; this process compiles the rest

# (module, function): compiled by the child, and by this process meanwhile
# (measured on the 2-core development machine: about 40 s and 32 s of CPU)
CHILD_UNITS = (("cutoff", "from_parent"), ("cutoff", "peel"), ("cutoff", "cut_off"),
               ("regions", "absorb_into"), ("kernel", "_exact_score"),
               ("kernel", "_custom_score"), ("kernel", "_pin"))
OWN_UNITS = (("walks", "shared_rebuilds"), ("walks", "build_all"), ("walks", "view_made"))

# parameters that are not run_slice's: (how, run_slice's parameter, field)
_DERIVED = {
    "material": ("row", "st", None),          # st[R_MATERIAL]
    "st_compute": ("row", "st", None),        # st[R_COMPUTE]
    "bases": ("row", "scratch", None),        # scratch[SCRATCH_*]
    "arrivals": ("field", "rg", "deferred_list"),
    "emit": ("boolean", None, None),          # sc[S_EMIT] != 0
}


def wanted(kernel) -> bool:
    """Whether to split: not turned off, run_slice compiled (not plain Python)
    and not yet in this process, nor in numba's cache for the current sources,
    and a second core."""
    if os.environ.get(SPLIT_ENV) == "0":
        return False
    try:
        entry = kernel.run_slice
        if entry.overloads or entry._cache._cache_file._load_index():
            return False
    except Exception:            # noqa: BLE001 (JIT off, or a numba without these parts)
        return False
    return _cores() >= 2


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _param_type(name: str, by_name: dict):
    from numba.core import types
    if name in by_name:
        return by_name[name]
    how, source, field = _DERIVED.get(name, (None, None, None))
    if how == "row":
        return by_name[source].copy(ndim=1, layout="C")
    if how == "field":
        tuple_type = by_name[source]
        return tuple_type.types[tuple_type.fields.index(field)]
    if how == "boolean":
        return types.boolean
    return types.int64


def unit_signatures(kernel, args, units) -> list[tuple[str, str, tuple]]:
    """(module, function, argument types) of each unit, for run_slice called with `args`."""
    entry = kernel.run_slice
    params = inspect.signature(entry.py_func).parameters
    by_name = dict(zip(params, (entry.typeof_pyval(a) for a in args)))
    return [(module, name, tuple(_param_type(p, by_name) for p in
                                 inspect.signature(_unit(module, name).py_func).parameters))
            for module, name in units]


def _unit(module: str, name: str):
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


def compile_units(signatures) -> None:
    from .inliner_copies import cheaper_copies
    with cheaper_copies():
        for module, name, signature in signatures:
            _unit(module, name).compile(signature)


def compile_split(kernel, args) -> None:
    """The child's units in a child process and ours here, both cached; back
    when both are done. Whatever fails (types not derived, no temporary
    folder, no child) leaves what is missing to run_slice's compile."""
    try:
        with tempfile.TemporaryDirectory(prefix="dtrf-split-") as work:
            plan = Path(work) / "units.pickle"
            plan.write_bytes(pickle.dumps(unit_signatures(kernel, args, CHILD_UNITS)))
            own_units = unit_signatures(kernel, args, OWN_UNITS)
            drop_stale_data()
            _compile_beside(plan, own_units)
    except Exception:            # noqa: BLE001 (compile as numba would)
        return


def _compile_beside(plan: Path, own_units) -> None:
    root = str(Path(__file__).resolve().parents[2])    # the package's own copy, for the child
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    child = subprocess.Popen([sys.executable, "-m", f"{__package__}.split_compile", str(plan)],
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        try:
            compile_units(own_units)
        except Exception:        # noqa: BLE001 (run_slice's compile meets it again, and says)
            pass
        child.wait(timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if child.poll() is None:
            child.terminate()    # numba writes a cache entry's index, then its data
            try:
                child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def drop_stale_data() -> None:
    """Remove the data files of the kernel's stale cache entries. numba writes a
    new entry's index before its data, and numbers data files from 1 again under
    new sources: a process reading the index in between (the other side of the
    split compiling the same unit, as both do `regions._move_set`) would load
    the data file an older build left under that number. With none there, it
    finds nothing and compiles."""
    from numba.core.dispatcher import Dispatcher

    from .bitsets import engine_stamp
    stamp = engine_stamp()
    indexes = {}      # a function is found in each module that imports it: once each
    for name, module in list(sys.modules.items()):
        if name.startswith(f"{__package__}.") and module is not None:
            for fn in list(vars(module).values()):
                index = getattr(getattr(fn, "_cache", None), "_cache_file", None)
                if isinstance(fn, Dispatcher) and getattr(index, "_source_stamp", None) == stamp:
                    indexes[index._index_path] = index
    for index in indexes.values():
        if index._load_index():
            continue                          # fresh: its data is this build's
        stem = index._index_name[:-len(".nbi")]
        for data in Path(index._cache_path).glob(f"{stem}.*.nbc"):
            data.unlink(missing_ok=True)


if __name__ == "__main__":
    compile_units(pickle.loads(Path(sys.argv[1]).read_bytes()))
