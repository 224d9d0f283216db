"""numba's cache of the kernel's functions (engine/bitsets.py `njit`).

numba keys a cached function by its own source file, but the kernel's
functions inline each other across modules (walks.py and kernel.py carry
copies of regions.py's code): an edit of regions.py alone would leave them
their old copies. So every cached kernel function is keyed by all of the
kernel's sources.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dtrforensics.engine import bitsets, kernel, regions, walks

ENGINE = Path(bitsets.__file__).resolve().parent


def test_every_cached_kernel_function_is_keyed_by_all_the_kernels_sources():
    if not hasattr(kernel.run_slice, "py_func"):
        pytest.skip("the kernel runs interpreted (NUMBA_DISABLE_JIT=1): nothing is cached")
    for function in (kernel.run_slice, kernel.check_invariants, walks.shared_rebuilds,
                     regions.absorb_into, regions.compact_arena):
        assert function._cache._cache_file._source_stamp == bitsets.engine_stamp()


def test_the_key_changes_with_any_module_of_the_kernel(tmp_path):
    engine = tmp_path / "dtrforensics" / "engine"
    shutil.copytree(ENGINE, engine, ignore=shutil.ignore_patterns("__pycache__"))
    (engine.parent / "trace").mkdir()
    shutil.copy(ENGINE.parent / "trace" / "program.py", engine.parent / "trace")
    before = bitsets.engine_stamp(engine)
    assert before == bitsets.engine_stamp(ENGINE)
    for changed in (engine / "regions.py", engine / "layout.py", engine.parent / "trace" / "program.py"):
        text = changed.read_text()
        changed.write_text(text + "\n# changed\n")
        bitsets.engine_stamp.cache_clear()
        assert bitsets.engine_stamp(engine) != before
        changed.write_text(text)
        bitsets.engine_stamp.cache_clear()
        assert bitsets.engine_stamp(engine) == before
