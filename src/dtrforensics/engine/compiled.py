"""The kernel functions the driver calls, from the native library when it is
built (engine/native.py) and from numba otherwise.

The first process that runs the kernel through numba builds the library at
the end of its first run (engine/native_build.py), once every entry point
has been compiled for the types the driver passes; a failure leaves a note
beside the cache and that process, and later ones, keep numba.

`prepare` does that ahead of time, on a small packaged trace: an install
runs it (setup.py), and every replay's setup calls it before its clock
starts, so no deadline (a run's timeout, a sweep's or a reproduction's
seconds) counts a compile.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import UserError
from ..fsutil import atomic_path
from . import native, split_compile
from .inliner_copies import cheaper_copies

_native: native.NativeKernel | None = None
_looked = False
_built = False
_prepared: set[str] = set()    # what prepare() has readied in this process
# The trace `prepare` replays: the package's own, a few dozen ops.
WARMUP_TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "hole-rnn-seed16.log"


def _native_kernel() -> native.NativeKernel | None:
    global _native, _looked
    if not _looked:
        _looked = True
        if native.enabled():
            _native = native.load()
    return _native


def _numba():
    from . import kernel
    return kernel


def _call(name: str, *args):
    kernel = _native_kernel()
    if kernel is not None:
        try:
            return kernel.entry_points[name](*args)
        except native.Mismatch:
            pass
    K = _numba()
    if name == "run_slice" and split_compile.wanted(K):
        split_compile.compile_split(K, args)    # a cold compile: part of it on a second core
    with cheaper_copies():             # a first call compiles: the same code, in less time
        result = getattr(K, name)(*args)
    if name == "check_invariants":       # the end of a run: the driver's types are known
        _build_once(K)
    return result


def run_slice(*args) -> int:
    return _call("run_slice", *args)


def check_invariants(g, sc, st) -> int:
    return _call("check_invariants", g, sc, st)


def compact_arena(rg, sc) -> None:
    _call("compact_arena", rg, sc)


def _build_once(K) -> None:
    """Build the library after this process's first run through numba."""
    global _built, _native
    if _built or not native.enabled() or _native_kernel() is not None:
        return
    _built = True
    _, _, failed = native.library_paths()
    if failed.exists():
        return
    from . import native_build
    dispatchers = {name: getattr(K, name) for name in native.ENTRY_POINTS}
    signatures = native_build.entry_signatures(dispatchers)
    if signatures is None:
        return                     # compiled only for types the library cannot take
    try:
        native_build.build({name: (d, signatures[name]) for name, d in dispatchers.items()})
    except Exception as exc:       # noqa: BLE001 (any failure: keep numba, say why once)
        try:
            with atomic_path(failed) as tmp:
                tmp.write_text(f"{type(exc).__name__}: {exc}\n")
        except (OSError, UserError):
            pass
        print(f"dtrforensics: the native kernel was not built ({exc}); replays use numba "
              f"(delete {failed} to try again)", file=sys.stderr)
        return
    _native = native.load()


def prepare(replay, sharing: bool = False) -> None:
    """Have the kernel ready in this process: the native library loaded, or
    else numba's kernel compiled (from numba's cache when it is there) for
    the types the driver passes, by one run of `replay` (the driver's own
    function, engine/replay.py, which calls this: it is passed, not imported)
    on a small packaged trace, which also builds the library when it can.
    With `sharing`, the digest of prefix sharing too (engine/digest.py,
    numba). Once per process."""
    wanted = {"kernel", "digest"} if sharing else {"kernel"}
    if wanted <= _prepared or os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return
    _prepared.update(wanted)             # first: the replay below calls prepare() too
    if not sharing and _native_kernel() is not None:
        return
    from ..trace.parser import parse_file
    with cheaper_copies():
        result = replay(parse_file(WARMUP_TRACE), ratio=0.5, keep_state=sharing)
        if sharing:
            from .digest import state_digest
            state_digest(result.state)
