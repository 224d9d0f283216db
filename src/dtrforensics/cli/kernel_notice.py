"""Say on stderr that the replay kernel is about to be compiled, instead of
looking hung, and compile it before a command's clock starts: an install
compiles it (setup.py, and `make install` beside the extras' download, both
through `python -m dtrforensics.cli.kernel_notice`), but a changed engine,
`DTRF_NATIVE=0` with numba's cache elsewhere, or a failed install build
leaves it to the first replay.

The check reads numba's cache index files (`<module>.<function>-<line>.pyXY.nbi`)
without importing numba: a module's cache is warm when every index carries
the stamp numba compares: the hash of the kernel's current sources
(`native.sources_stamp`) for a module compiled with engine/bitsets.py's
`njit`, which keys it so, else the SHA-256 of the module's own source.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
from pathlib import Path

from ..engine import native

COMPILE_SECONDS = 110   # measured: 109 s on the 2-core development machine (two processes, 140 s of CPU)
NATIVE_SECONDS = 15     # measured: 15 s of CPU, same machine

_ENGINE = Path(__file__).resolve().parent.parent / "engine"


def _fresh(index: Path, stamp: bytes) -> bool:
    try:
        with open(index, "rb") as fh:
            pickle.load(fh)                  # numba's version
            cached_stamp, _ = pickle.loads(fh.read())
    except Exception:
        return False
    return cached_stamp == stamp


# The modules every replay compiles. engine/digest.py is compiled only by
# sweeps that share prefixes, on their first shared run: a plain run that
# announced it would announce a compile that never comes.
REPLAY_MODULES = ("exactdiv", "kernel")


# a function inlined into its callers (inline="always") is never cached on its own
_DECORATED = re.compile(rb"^@(?:numba_)?njit\(cache=True(?:, _nrt=\w+)?\)[^\n]*\n(?:@[^\n]*\n)*def (\w+)\(",
                        re.M)


def _index_prefixes(source: Path, text: bytes) -> set[str]:
    """`<module>.<function>-<line>` of every cached function as the source stands
    (numba names its index files so, the line being the decorator's): index
    files left behind by functions since moved or removed are not the cache."""
    lines = (text.count(b"\n", 0, m.start()) + 1 for m in _DECORATED.finditer(text))
    names = (m.group(1).decode() for m in _DECORATED.finditer(text))
    return {f"{source.stem}.{name}-{line}" for name, line in zip(names, lines)}


_KERNEL_NJIT = re.compile(rb"^from \.bitsets import (?:\([^)]*|[^\n(]*)\bnjit\b", re.M)


def _numba_stamp(engine: Path, text: bytes):
    """The stamp numba's index must carry for a module of this source: the
    kernel's sources' hash where the module compiles with bitsets.njit, else
    numba's own (the SHA-256 of the module's source)."""
    if _KERNEL_NJIT.search(text):
        return native.sources_stamp(engine)
    return hashlib.sha256(text).digest()


def compiled_modules_missing(engine: Path = _ENGINE,
                             modules: tuple[str, ...] = REPLAY_MODULES) -> list[str]:
    """The replay's numba modules whose cache is absent or stale."""
    missing = []
    for source in sorted(engine.glob("*.py")):
        text = source.read_bytes()
        if source.stem not in modules or b"cache=True" not in text:
            continue
        stamp = _numba_stamp(engine, text)
        current = _index_prefixes(source, text)
        indexes = [i for i in native.cache_dir(source.parent).glob(f"{source.stem}.*.nbi")
                   if i.name.split(".py")[0] in current]
        if not indexes or not all(_fresh(i, stamp) for i in indexes):
            missing.append(source.stem)
    return missing


def announce_compile(sharing: bool = False) -> None:
    """One stderr line when this process is going to compile the kernel, or
    to build its native library (engine/native.py); then have the kernel
    ready (engine/compiled.py `prepare`, with `sharing` prefix sharing's
    digest too). Commands call this before their clocks start: no
    `--timeout`, `--max-seconds` or `--total-seconds` counts a compile."""
    if os.environ.get("NUMBA_DISABLE_JIT") == "1":
        return
    _say_compile()
    from ..engine import compiled
    from ..engine.replay import replay
    compiled.prepare(replay, sharing=sharing)


def _say_compile() -> None:
    builds_native = False
    if native.enabled():
        if native.built():
            return
        builds_native = not native.library_paths()[2].exists()
    if compiled_modules_missing():
        print(f"compiling the replay kernel, once (about {COMPILE_SECONDS} s)...",
              file=sys.stderr, flush=True)
    elif builds_native:
        print(f"building the replay kernel's native library, once (about {NATIVE_SECONDS} s)...",
              file=sys.stderr, flush=True)


def build_for_install() -> str:
    """What an install runs (setup.py's build step, the Makefile): the kernel
    and prefix sharing's digest compiled and the native library built, as a
    cold replay would; a note of an earlier failed build is removed, so that
    the first command on this machine tries again. Says what it left."""
    from ..engine import compiled
    from ..engine.replay import replay
    compiled.prepare(replay, sharing=True)
    for folder in native.folders():
        for failed in folder.glob("native-*.failed"):
            failed.unlink()
    return "native library" if native.built() else "numba's cache only (no native library)"


if __name__ == "__main__":
    print(f"dtrforensics: replay kernel ready ({build_for_install()})", flush=True)
