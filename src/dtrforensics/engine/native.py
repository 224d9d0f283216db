"""The replay kernel as a native library, loaded with ctypes: a process that
only replays never imports numba.

Loading the kernel from numba's cache needs numba, and importing numba alone
costs a third of a second: more than a whole run of a small trace. So the
first process that runs the kernel through numba also writes it out as a
shared library (engine/native_build.py): numba's own compiled module of the
kernel, with one C entry point per function, emitted for this machine's CPU.
Later processes load that library. An install builds it the same way
(setup.py runs `compiled.prepare` on the package being installed), so the
first command after `pip install` finds it in the package. It is the same
code as numba's, and
`DTRF_NATIVE=0` turns it off (then numba runs the kernel, as under
`NUMBA_DISABLE_JIT=1`).

An entry point takes every argument of its kernel function packed into one
int64 vector: an array as its address and shape, an integer as itself, a
named tuple as its fields in order. The library's manifest (JSON beside it)
gives that plan, and the library's name carries a key of everything that
shapes the code (the engine's sources, numba's and llvmlite's versions, the
Python version, the CPU), so a changed engine or machine never loads a stale
library.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

NATIVE_ENV = "DTRF_NATIVE"
ENGINE = Path(__file__).resolve().parent
ENTRY_POINTS = ("run_slice", "check_invariants", "compact_arena")
# The library an install built (setup.py), inside the package.
PACKAGED = ENGINE / "__pycache__"


class Mismatch(Exception):
    """The arguments are not what the library was built for (dtype, rank, layout)."""


def enabled() -> bool:
    return os.environ.get(NATIVE_ENV, "1") != "0" and os.environ.get("NUMBA_DISABLE_JIT") != "1"


def cache_dir(package: Path = ENGINE) -> Path:
    """Where numba caches the modules of the folder `package` (honouring
    NUMBA_CACHE_DIR, as numba names it): the library lives beside the engine's."""
    override = os.environ.get("NUMBA_CACHE_DIR")
    if override:
        name = f"{package.name}_{hashlib.sha1(str(package).encode()).hexdigest()}"
        return Path(override) / name
    return package / "__pycache__"


def _package_version_file(name: str) -> bytes:
    """The version file of an installed package, read without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return b"absent"
    path = Path(next(iter(spec.submodule_search_locations))) / "_version.py"
    return path.read_bytes() if path.exists() else b"unknown"


def _cpu_identity() -> bytes:
    """The CPU the code is emitted for: its model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor().encode()
    wanted = ("model name", "flags", "Features", "CPU part")
    seen = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in wanted and key not in seen:
            seen[key] = value.strip()
    return json.dumps(seen, sort_keys=True).encode()


def sources_stamp(engine: Path | None = None) -> str:
    """A hash of the kernel's sources (the `engine` folder's modules and, beside
    it, the program's layout, trace/program.py): the library's key, and numba's cache key of every
    kernel function (bitsets.njit), since the kernel's functions inline each
    other's code across modules."""
    engine = engine or ENGINE
    digest = hashlib.sha256()
    for source in sorted(engine.glob("*.py")) + [engine.parent / "trace" / "program.py"]:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()


def library_key() -> str:
    digest = hashlib.sha256(sources_stamp().encode())
    for part in (_package_version_file("numba"), _package_version_file("llvmlite"),
                 sys.version.encode(), platform.machine().encode(), _cpu_identity()):
        digest.update(part + b"\0")
    return digest.hexdigest()[:24]


def library_paths(key: str | None = None, folder: Path | None = None) -> tuple[Path, Path, Path]:
    """(library, manifest, failure note) of the current key, in `folder`
    (default: the cache folder, cache_dir)."""
    stem = (folder or cache_dir()) / f"native-{key or library_key()}"
    return stem.with_suffix(".so"), stem.with_suffix(".json"), stem.with_suffix(".failed")


def folders() -> list[Path]:
    """Where a library is looked for, in order: the cache folder, then the
    package's own (where an install built it: setup.py), which NUMBA_CACHE_DIR
    does not move."""
    found = [cache_dir()]
    if PACKAGED not in found:
        found.append(PACKAGED)
    return found


def built(key: str | None = None) -> bool:
    """Whether a library of the current key is in one of `folders()`."""
    key = key or library_key()
    return any(lib.exists() and manifest.exists()
               for lib, manifest, _ in (library_paths(key, f) for f in folders()))


def _pack(plan, value, out: list) -> None:
    kind = plan[0]
    if kind == "int":
        out.append(int(value))
    elif kind == "array":
        _, dtype, ndim = plan
        if not isinstance(value, np.ndarray) or value.dtype != np.dtype(dtype) or \
                value.ndim != ndim or not value.flags.c_contiguous:
            raise Mismatch(f"expected a C-contiguous {ndim}-d {dtype} array")
        out.append(value.ctypes.data)
        out.extend(value.shape)
    else:
        fields = plan[1]
        if len(value) != len(fields):
            raise Mismatch(f"expected a tuple of {len(fields)} fields")
        for field_plan, field in zip(fields, value):
            _pack(field_plan, field, out)


class EntryPoint:
    """One kernel function in the library, called like the numba function.

    Each top-level array or tuple is packed into its fixed slots once and
    repacked only when it is another object than at the previous call (a run
    passes the same state arrays to every slice, and every run the same
    graph); integers are written at every call. Every call packs into its own
    copy of the vector and publishes it with the objects it holds as one
    tuple, never writing a published vector: a call in another thread (or a
    process forked meanwhile) reads the vector while the library runs."""

    def __init__(self, c_function, plan: list):
        c_function.restype = ctypes.c_int64
        c_function.argtypes = [ctypes.c_void_p]
        self._call = c_function
        self._plan = plan
        self._slots: list[tuple[int, int]] = []   # each argument's first slot and count
        slot = 0
        for p in plan:
            self._slots.append((slot, _slot_count(p)))
            slot += self._slots[-1][1]
        self._cache = ((None,) * len(plan), np.zeros(slot, dtype=np.int64))

    def __call__(self, *args):
        if len(args) != len(self._plan):
            raise Mismatch(f"expected {len(self._plan)} arguments, got {len(args)}")
        held, cached = self._cache
        packed = cached.copy()
        for i, (p, a) in enumerate(zip(self._plan, args)):
            first, count = self._slots[i]
            if p[0] == "int":
                packed[first] = a
            elif a is not held[i]:
                out: list = []
                _pack(p, a, out)
                packed[first:first + count] = out
        self._cache = (args, packed)
        return self._call(packed.ctypes.data)


def _slot_count(plan) -> int:
    if plan[0] == "int":
        return 1
    if plan[0] == "array":
        return 1 + plan[2]
    return sum(_slot_count(p) for p in plan[1])


class NativeKernel:
    """The library's entry points, by kernel function name."""

    def __init__(self, library: Path, manifest: dict):
        self._library = ctypes.CDLL(str(library))
        self.entry_points = {
            name: EntryPoint(getattr(self._library, spec["symbol"]), spec["plan"])
            for name, spec in manifest["functions"].items()}


def load(key: str | None = None) -> NativeKernel | None:
    """The library of the current key from the first of `folders()` that
    holds it, or None when it is not built (or unusable)."""
    key = key or library_key()
    for folder in folders():
        library, manifest, _ = library_paths(key, folder)
        try:
            spec = json.loads(manifest.read_text())
            if sorted(spec["functions"]) != sorted(ENTRY_POINTS) or not library.exists():
                continue
            return NativeKernel(library, spec)
        except (OSError, ValueError, KeyError, AttributeError):
            continue
    return None
