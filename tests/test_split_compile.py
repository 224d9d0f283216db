"""engine/split_compile.py: the units a second process compiles while this one
compiles others are the very ones run_slice's compile then asks for (else the
split would only add work), and the split stays out of a warm cache's way."""
from __future__ import annotations

import importlib

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
    if not _compiled_for("kernel", "run_slice"):
        pytest.skip("numba's cache of the kernel is cold or stale: `make install` (or "
                    "`python -m dtrforensics.cli.kernel_notice`) compiles it")
    return kernel


def test_each_unit_is_planned_for_the_types_run_slice_compiled_it_for(kernel, monkeypatch):
    args = _run_slice_arguments(monkeypatch)
    units = split_compile.CHILD_UNITS + split_compile.OWN_UNITS
    planned = split_compile.unit_signatures(kernel, args, units)
    assert [(m, n) for m, n, _ in planned] == list(units)
    for module, name, signature in planned:
        # one typing per unit (bitsets._one_typing), and the one planned
        assert _compiled_for(module, name) == {signature}, f"{module}.{name}"


def test_no_split_where_run_slice_is_cached_or_it_is_turned_off(kernel, monkeypatch):
    monkeypatch.setattr(kernel.run_slice, "overloads", {})   # as in a process yet to compile
    monkeypatch.setattr(split_compile, "_cores", lambda: 2)
    assert not split_compile.wanted(kernel)        # the fixture found run_slice cached
    monkeypatch.setattr(kernel.run_slice._cache._cache_file, "_load_index", lambda: {})
    assert split_compile.wanted(kernel)            # cold: split
    monkeypatch.setattr(split_compile, "_cores", lambda: 1)
    assert not split_compile.wanted(kernel)        # no second core
    monkeypatch.setattr(split_compile, "_cores", lambda: 2)
    monkeypatch.setenv(split_compile.SPLIT_ENV, "0")
    assert not split_compile.wanted(kernel)
