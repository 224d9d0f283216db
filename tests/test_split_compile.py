"""engine/split_compile.py: the units a second process compiles while this one
compiles others are the very ones run_slice's compile then asks for (else the
split would only add work), and the split stays out of a warm cache's way."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from dtrforensics.engine import compiled, split_compile
from dtrforensics.engine.replay import replay
from dtrforensics.trace.parser import parse_file


def _run_slice_arguments(monkeypatch) -> tuple:
    """The arguments the driver passes run_slice, on the packaged warm-up trace."""
    seen = []
    call = compiled.run_slice

    def recording(*args):
        seen.append(args)
        return call(*args)
    monkeypatch.setattr(compiled, "run_slice", recording)
    replay(parse_file(compiled.WARMUP_TRACE), ratio=0.5)
    return seen[0]


def _compiled_for(module: str, name: str) -> set:
    """The argument types numba's cache holds `module.name` compiled for, under
    the current sources (empty where the cache is cold or stale)."""
    function = getattr(importlib.import_module(f"dtrforensics.engine.{module}"), name)
    return {key[0] for key in function._cache._cache_file._load_index()}


@pytest.fixture(scope="module")
def kernel():
    from dtrforensics.engine import kernel
    return kernel


def test_each_unit_is_planned_for_the_types_run_slice_compiled_it_for(kernel, monkeypatch):
    if not _compiled_for("kernel", "run_slice"):
        pytest.skip("numba's cache of the kernel is cold or stale: `make install` (or "
                    "`python -m dtrforensics.cli.kernel_notice`) compiles it")
    args = _run_slice_arguments(monkeypatch)
    units = split_compile.CHILD_UNITS + split_compile.OWN_UNITS
    planned = split_compile.unit_signatures(kernel, args, units)
    assert [(m, n) for m, n, _ in planned] == list(units)
    for module, name, signature in planned:
        # one typing per unit (bitsets._one_typing), and the one planned
        assert _compiled_for(module, name) == {signature}, f"{module}.{name}"


def test_no_split_where_run_slice_is_cached_or_it_is_turned_off(kernel, monkeypatch):
    monkeypatch.delenv(split_compile.SPLIT_ENV, raising=False)
    monkeypatch.setattr(kernel.run_slice, "overloads", {})   # as in a process yet to compile
    monkeypatch.setattr(split_compile, "_cores", lambda: 2)
    index = kernel.run_slice._cache._cache_file
    monkeypatch.setattr(index, "_load_index", lambda: {"types": "kernel.run_slice.1.nbc"})
    assert not split_compile.wanted(kernel)        # cached
    monkeypatch.setattr(index, "_load_index", lambda: {})
    assert split_compile.wanted(kernel)            # cold: split
    monkeypatch.setattr(split_compile, "_cores", lambda: 1)
    assert not split_compile.wanted(kernel)        # no second core
    monkeypatch.setattr(split_compile, "_cores", lambda: 2)
    monkeypatch.setenv(split_compile.SPLIT_ENV, "0")
    assert not split_compile.wanted(kernel)


def test_a_failing_or_slow_child_is_reaped_and_nothing_escapes(kernel, monkeypatch, tmp_path):
    bad = tmp_path / "units.pickle"
    bad.write_bytes(b"not a plan")                 # the child fails at once
    split_compile._compile_beside(bad, [])
    assert not _processes_naming(bad)
    slow = tmp_path / "slow.pickle"
    slow.write_bytes(b"not a plan either")
    monkeypatch.setattr(split_compile, "CHILD_SECONDS", 0.01)   # stopped before it starts
    split_compile._compile_beside(slow, [])
    assert not _processes_naming(slow)
    monkeypatch.setattr(split_compile, "CHILD_UNITS", (("cutoff", "no_such_unit"),))
    split_compile.compile_split(kernel, ())        # no plan: back, for numba to compile


def _processes_naming(path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(path).encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            pass
    return found


def test_stale_data_files_go_and_fresh_ones_stay(monkeypatch):
    from dtrforensics.engine import cutoff, regions
    stale, fresh = cutoff.peel._cache._cache_file, regions.absorb_into._cache._cache_file
    monkeypatch.setattr(stale, "_load_index", lambda: {})
    monkeypatch.setattr(fresh, "_load_index", lambda: {"types": "absorb_into.1.nbc"})
    made = []
    for index in (stale, fresh):
        Path(index._cache_path).mkdir(parents=True, exist_ok=True)
        data = Path(index._cache_path) / f"{index._index_name[:-len('.nbi')]}.98.nbc"
        data.write_bytes(b"an older build's")
        made.append(data)
    try:
        split_compile.drop_stale_data()
        assert not made[0].exists() and made[1].exists()
    finally:
        for data in made:
            data.unlink(missing_ok=True)
