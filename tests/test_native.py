"""The kernel's native library (engine/native.py) makes numba's decisions, and a
process that finds it built replays without importing numba."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dtrforensics.engine import native

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "policies"

# Every policy family (incremental, fresh and no neighbourhoods, LRU, a policy
# file with a filter), budgets from starved to loose, and interventions.
RUNS = textwrap.dedent(f"""
    import hashlib, json, sys
    from dtrforensics import api
    from dtrforensics.engine import compiled
    from dtrforensics.engine.replay import Interventions, replay

    program = api.trace("hole-rnn-seed16")
    replay(program, ratio=0.5)              # the first run through numba may build the library
    policies = ["dtr", "no-size", "lru", "msps", "dtr-local", "dtr-exact-nbhd",
                "{EXAMPLES / 'min_evictee.py'}:dtr_min_64kib"]
    out = []
    for policy in policies:
        for ratio in (0.2, 0.35, 0.5, 0.8, 1.0):
            s = replay(program, ratio=ratio, policy=policy).summary
            out.append([policy, ratio, s.outcome, s.clock, s.victims_sha256, s.budget_interval,
                        s.max_pinned.bytes, s.score_evals, s.anomalies])
    stream = replay(program, ratio=0.35, interventions=Interventions(retain=(3,))).stream
    out.append(hashlib.sha256(stream.tobytes()).hexdigest())
    print(json.dumps({{"runs": out, "native": compiled._native_kernel() is not None}}))
""")


def _replays(native_on: bool) -> dict:
    env = dict(os.environ, **{native.NATIVE_ENV: "1" if native_on else "0"})
    done = subprocess.run([sys.executable, "-c", RUNS], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def with_native() -> dict:
    """The runs with the library on (built by that process if absent)."""
    if not (shutil.which(os.environ.get("CC", "cc")) and shutil.which("nm")):
        pytest.skip("no C compiler (cc) or nm: the native library cannot be built here")
    return _replays(True)


def test_native_library_makes_numbas_decisions(with_native):
    assert with_native["native"], "the library was neither found nor built"
    without = _replays(False)
    assert not without["native"]
    assert with_native["runs"] == without["runs"]
    assert {r[2] for r in without["runs"][:-1]} >= {"ok", "oom"}


def test_a_replay_with_the_library_never_imports_numba(with_native, tmp_path):
    script = textwrap.dedent("""
        import sys
        from dtrforensics.cli.main import main
        sys.argv = ["dtrf", "run", "hole-rnn-seed16", "--ratio", "0.35", "--json"]
        try:
            main()
        except SystemExit as exc:
            assert not exc.code, exc.code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite"))
        print("IMPORTED", heavy)
    """)
    env = dict(os.environ)
    env.pop(native.NATIVE_ENV, None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[0])
    assert summary["outcome"] in ("ok", "oom")
    assert done.stdout.splitlines()[-1] == "IMPORTED []"


def test_arguments_the_library_was_not_built_for_are_refused():
    plan = [["array", "int64", 2], ["int"], ["tuple", [["array", "uint8", 1], ["int"]]]]
    out: list = []
    native._pack(plan[2], (np.zeros(3, dtype=np.uint8), 7), out)
    assert out[1:] == [3, 7]
    for wrong in (np.zeros(4, dtype=np.int64),               # rank
                  np.zeros((4, 2), dtype=np.int32),          # dtype
                  np.zeros((4, 2), dtype=np.int64)[:, :1]):  # not C-contiguous
        with pytest.raises(native.Mismatch):
            native._pack(plan[0], wrong, [])
    with pytest.raises(native.Mismatch):
        native._pack(plan[2], (np.zeros(3, dtype=np.uint8),), [])


def test_the_library_key_follows_the_engine_sources(tmp_path, monkeypatch):
    """A changed engine source (or an added module) names another library."""
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "kernel.py").write_text("A = 1\n")
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "program.py").write_text("CMD_COMPUTE = 0\n")
    monkeypatch.setattr(native, "ENGINE", engine)
    first = native.library_key()
    assert native.library_key() == first
    (engine / "kernel.py").write_text("A = 2\n")
    second = native.library_key()
    (engine / "other.py").write_text("\n")
    assert len({first, second, native.library_key()}) == 3


def test_a_missing_or_broken_library_is_not_loaded(tmp_path, monkeypatch):
    paths = (tmp_path / "n.so", tmp_path / "n.json", tmp_path / "n.failed")
    monkeypatch.setattr(native, "library_paths", lambda key=None, folder=None: paths)
    assert native.load() is None                          # nothing there
    paths[1].write_text(json.dumps({"functions": {"run_slice": {}}}))
    paths[0].write_bytes(b"not a library")
    assert native.load() is None                          # incomplete manifest
    paths[1].write_text(json.dumps({"functions": {n: {"symbol": "x", "plan": []}
                                                  for n in native.ENTRY_POINTS}}))
    assert native.load() is None                          # not a shared object


def test_the_library_an_install_built_is_found_wherever_numbas_cache_goes(
        with_native, tmp_path, monkeypatch):
    """An install leaves the library in the package (setup.py); a process whose
    NUMBA_CACHE_DIR points elsewhere still loads it from there."""
    built = next(f for f in native.folders() if native.built() and
                 native.library_paths(folder=f)[0].exists())
    library, manifest, _ = native.library_paths(folder=built)
    packaged = tmp_path / "package" / "__pycache__"
    packaged.mkdir(parents=True)
    for path in (library, manifest):
        shutil.copy(path, packaged / path.name)
    monkeypatch.setattr(native, "PACKAGED", packaged)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert native.folders() == [native.cache_dir(), packaged]
    assert native.built()
    loaded = native.load()
    assert loaded is not None and sorted(loaded.entry_points) == sorted(native.ENTRY_POINTS)
    (packaged / library.name).unlink()
    assert not native.built() and native.load() is None


def test_compaction_keeps_every_block_in_order(with_native):
    """The arena's compaction (kernel.compact_arena, allocation-free: it sorts in
    the regions' work space) slides live blocks down in their order, natively
    and through numba alike."""
    from dtrforensics.engine import compiled, kernel
    from dtrforensics.engine.layout import N_SCALARS, S_ARENA_TOP
    from dtrforensics.engine.state import new_regions

    rng = np.random.default_rng(7)
    rg = new_regions(40, arena_size=4096)
    n_sets = len(rg.start)
    live = rng.choice(n_sets, size=60, replace=False)
    top = 0
    for k in rng.permutation(live):
        top += int(rng.integers(0, 9))                     # an abandoned gap
        cap = int(rng.integers(1, 12))
        rg.start[k], rg.cap[k], rg.len[k] = top, cap, int(rng.integers(0, cap + 1))
        rg.arena[top:top + cap] = rng.integers(0, 10**6, size=cap)
        top += cap
    order = sorted(live, key=lambda k: rg.start[k])
    members = {k: rg.arena[rg.start[k]:rg.start[k] + rg.len[k]].tolist() for k in live}
    library = compiled._native_kernel()
    assert library is not None
    results = []
    for compact in (library.entry_points["compact_arena"], kernel.compact_arena):
        copy = rg._replace(arena=rg.arena.copy(), start=rg.start.copy())
        sc = np.zeros(N_SCALARS, dtype=np.int64)
        sc[S_ARENA_TOP] = top
        compact(copy, sc)
        assert sc[S_ARENA_TOP] == sum(int(rg.cap[k]) for k in live)
        assert [copy.start[k] for k in order] == sorted(copy.start[k] for k in live)
        assert all(copy.arena[copy.start[k]:copy.start[k] + rg.len[k]].tolist() == members[k]
                   for k in live)
        results.append((copy.start.tolist(), int(sc[S_ARENA_TOP])))
    assert results[0] == results[1]


def test_without_a_c_compiler_nothing_is_compiled_for_the_library(tmp_path, monkeypatch):
    """A machine without `cc` learns so before the entry points are compiled
    (seconds of CPU at every first command, the library being impossible)."""
    from dtrforensics.engine import native_build
    compiled_for = []
    monkeypatch.setattr(native_build, "entry_point",
                        lambda name, *args: compiled_for.append(name) or (None, []))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="no C compiler"):
        native_build.build({name: (None, ()) for name in native.ENTRY_POINTS}, key="k")
    assert compiled_for == []


INLINING = textwrap.dedent("""
    import copy, json
    import numpy as np
    from numba.core import ir

    scope_copies = [0]
    def counting(self, memo):
        scope_copies[0] += 1
        return copy._reconstruct(self, memo, *self.__reduce_ex__(4))
    ir.Scope.__deepcopy__ = counting

    from numba.core.inline_closurecall import InlineWorker
    made = []
    numbas_making = InlineWorker.run_untyped_passes
    def making(self, func, *args, **kwargs):
        made.append(func.__name__)
        return numbas_making(self, func, *args, **kwargs)
    InlineWorker.run_untyped_passes = making
    from dtrforensics.engine.bitsets import njit
    from dtrforensics.engine.inliner_copies import cheaper_copies
    numbas = InlineWorker.inline_ir

    @njit(inline="always")
    def branchy(a, k):
        total = 0
        for i in range(a.shape[0]):
            if a[i] > k:
                total += a[i]
            elif a[i] == k:
                total -= 1
            else:
                while total > 100:
                    total //= 2
        return total

    @njit(inline="always")
    def twice(a, k):
        return branchy(a, k) + branchy(a, k + 1)

    @njit
    def caller(a):
        return twice(a, 1) * twice(a, 2) - branchy(a, 3)

    with cheaper_copies() as installed:
        with cheaper_copies() as nested:         # a replay inside prepare
            value = caller(np.arange(20))
        assert nested == installed and (InlineWorker.inline_ir is numbas) != installed
    print(json.dumps({"installed": installed, "value": int(value),
                      "restored": InlineWorker.inline_ir is numbas and "__deepcopy__" not in vars(ir.Block),
                      "asm": caller.inspect_asm(caller.signatures[0]),
                      "scope_copies": scope_copies[0], "made": sorted(made)}))
""")


def test_the_inliners_cheaper_copies_compile_the_same_code(tmp_path):
    """engine/inliner_copies.py makes a callee's IR once and shares one memo per
    copy of it: the same machine code as numba's own inlining, the LLVM IR the
    same but for its names (values, blocks), with the IR made once per function and the scope
    copied far less often, and numba as it was once the kernel's compile is over."""
    def compiled(**env):
        done = subprocess.run([sys.executable, "-c", INLINING], capture_output=True, text=True,
                              env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), **env}, check=True)
        return json.loads(done.stdout.splitlines()[-1])

    numbas, ours = compiled(DTRF_INLINER_COPIES="0"), compiled()
    assert not numbas["installed"] and ours["installed"] and ours["restored"]
    assert ours["value"] == numbas["value"]
    assert ours["asm"] == numbas["asm"]
    assert numbas["made"] == ["branchy"] * 5 + ["twice"] * 2   # at every call site, nested ones too
    assert ours["made"] == ["branchy", "twice"]
    assert ours["scope_copies"] * 3 < numbas["scope_copies"]

