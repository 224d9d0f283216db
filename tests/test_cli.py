"""The `dtrf` entry point: lazily registered commands, what --help imports, the
compile notice."""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli import dtrf, dtrf_process

from dtrforensics.cli import kernel_notice
from dtrforensics.cli.main import COMMANDS, load_command
from dtrforensics.engine import native

HEAVY = ("dtrforensics.analyses", "dtrforensics.engine", "dtrforensics.render", "numba",
         "duckdb", "pyarrow", "textual", "matplotlib", "rich")
# what every invocation loads: the stderr writer (plain Python; it imports rich only
# for a line that may be too wide) and the package around it
LIGHT = ("dtrforensics.render", "dtrforensics.render.lines")


def _paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_listed_help_is_the_commands_own(name):
    """The one-line help `dtrf --help` shows without importing a command is the
    first paragraph of that command's own help."""
    command = load_command(name)
    assert command.name == name
    assert _paragraph(COMMANDS[name][1]) == _paragraph(command.help)


def test_help_lists_every_command_and_runs_one():
    listing = dtrf("--help").ok()
    for name in COMMANDS:
        assert f"\n  {name} " in listing
    assert "--seed" in dtrf("synth", "--help").ok()
    assert dtrf("sythn").code == 2


def test_help_imports_nothing_heavy():
    code = ("import sys, runpy\nsys.argv = ['dtrf', '--help']\n"
            "try:\n    runpy.run_module('dtrforensics.cli.main', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    loaded = done.stderr.split()
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)
             and m not in LIGHT]
    assert "Commands" in done.stdout and heavy == []


def _engine(tmp_path: Path, cached: bool, stamp_of: bytes | None = None,
            uncached: tuple[str, ...] = ()) -> Path:
    """A fake engine folder whose kernel.py has one cached function (its index
    stamped with the sources, or with `stamp_of`'s hash: stale), beside the
    modules `uncached` with the same source and no cache."""
    engine = tmp_path / "engine"
    (engine / "__pycache__").mkdir(parents=True)
    source = b"from .bitsets import njit\n@njit(cache=True)\ndef f(x):\n    return x\n"
    (engine / "kernel.py").write_bytes(source)
    (engine / "summary.py").write_bytes(b"OUTCOMES = ()\n")
    for name in uncached:
        (engine / name).write_bytes(source)
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "program.py").write_bytes(b"CMD_COMPUTE = 0\n")
    if cached:
        stamp = native.sources_stamp(engine) if stamp_of is None else hashlib.sha256(stamp_of).hexdigest()
        with open(engine / "__pycache__" / "kernel.f-2.py311.nbi", "wb") as fh:
            pickle.dump("0.0", fh)
            fh.write(pickle.dumps((stamp, {})))
    return engine


def test_compile_notice_reads_numba_cache_index(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert kernel_notice.compiled_modules_missing(_engine(tmp_path / "a", False)) == ["kernel"]
    assert kernel_notice.compiled_modules_missing(_engine(tmp_path / "b", True)) == []
    stale = _engine(tmp_path / "c", True, stamp_of=b"an older kernel")
    assert kernel_notice.compiled_modules_missing(stale) == ["kernel"]
    # a cached module a plain replay does not compile (the sweeps' digest) is no reason
    warm = _engine(tmp_path / "d", True, uncached=("digest.py",))
    assert kernel_notice.compiled_modules_missing(warm) == []


def test_compile_notice_takes_numbas_own_stamp_where_numbas_njit_compiles(tmp_path, monkeypatch):
    """A module compiled with numba's own njit (exactdiv.py) is keyed by its own
    source's SHA-256; one compiled with bitsets.njit, by all the kernel's sources."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    engine = _engine(tmp_path, True)
    # it may import other things from bitsets: only its njit decides
    plain = (b"from numba import njit\nfrom .bitsets import popcount\n"
             b"@njit(cache=True)\ndef g(x):\n    return x\n")
    (engine / "exactdiv.py").write_bytes(plain)
    with open(engine / "__pycache__" / "kernel.f-2.py311.nbi", "wb") as fh:
        pickle.dump("0.0", fh)    # the kernel again, stamped with the sources as they now are
        fh.write(pickle.dumps((native.sources_stamp(engine), {})))
    for stamp, missing in ((native.sources_stamp(engine), ["exactdiv"]),
                           (hashlib.sha256(plain).digest(), [])):
        with open(engine / "__pycache__" / "exactdiv.g-3.py311.nbi", "wb") as fh:
            pickle.dump("0.0", fh)
            fh.write(pickle.dumps((stamp, {})))
        assert kernel_notice.compiled_modules_missing(engine) == missing


def test_compile_notice_ignores_index_files_left_by_moved_functions(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    engine = _engine(tmp_path, True)
    with open(engine / "__pycache__" / "kernel.f-9.py311.nbi", "wb") as fh:
        pickle.dump("0.0", fh)  # `f` when it started on line 9 of an older source
        fh.write(pickle.dumps((hashlib.sha256(b"an older kernel").hexdigest(), {})))
    assert kernel_notice.compiled_modules_missing(engine) == []
    (engine / "__pycache__" / "kernel.f-2.py311.nbi").unlink()
    assert kernel_notice.compiled_modules_missing(engine) == ["kernel"]


def test_compile_notice_follows_numba_cache_dir(tmp_path, monkeypatch):
    engine = _engine(tmp_path, True)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert kernel_notice.compiled_modules_missing(engine) == ["kernel"]
    target = native.cache_dir(engine)
    target.mkdir(parents=True)
    os.replace(engine / "__pycache__" / "kernel.f-2.py311.nbi", target / "kernel.f-2.py311.nbi")
    assert kernel_notice.compiled_modules_missing(engine) == []


def _notice(monkeypatch, capsys, numba_missing: bool) -> str:
    """What announce_compile says; it then has the kernel made ready (here: noted)."""
    from dtrforensics.engine import compiled
    monkeypatch.setattr(kernel_notice, "compiled_modules_missing",
                        lambda: ["kernel"] if numba_missing else [])
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    prepared = []
    monkeypatch.setattr(compiled, "prepare",
                        lambda replay, sharing=False: prepared.append(sharing))
    kernel_notice.announce_compile()
    assert prepared == [False]
    return capsys.readouterr().err


def test_compile_notice_is_one_stderr_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    err = _notice(monkeypatch, capsys, numba_missing=True)
    assert err.startswith("compiling the replay kernel, once (about ") and err.count("\n") == 1
    assert _notice(monkeypatch, capsys, numba_missing=False) == ""


def test_native_library_notice(tmp_path, monkeypatch, capsys):
    """With the native library absent, a process with numba's cache warm says it
    builds the library; once the library and its manifest exist, nothing is said."""
    monkeypatch.delenv(native.NATIVE_ENV, raising=False)
    paths = (tmp_path / "n.so", tmp_path / "n.json", tmp_path / "n.failed")
    monkeypatch.setattr(native, "library_paths", lambda key=None, folder=None: paths)
    err = _notice(monkeypatch, capsys, numba_missing=False)
    assert err.startswith("building the replay kernel's native library, once (about ")
    assert _notice(monkeypatch, capsys, numba_missing=True).startswith("compiling the replay")
    paths[2].write_text("no C compiler\n")            # a failed build is not retried
    assert _notice(monkeypatch, capsys, numba_missing=False) == ""
    paths[0].write_bytes(b"")
    paths[1].write_text("{}")
    assert _notice(monkeypatch, capsys, numba_missing=True) == ""


def test_cache_option_default_is_the_analyses_default():
    """cli/common.py repeats the run-spec cache folder so that a command's help does
    not import DuckDB; the two must stay one value."""
    from dtrforensics.analyses.runs import DEFAULT_CACHE
    from dtrforensics.cli.common import DEFAULT_CACHE as CLI_DEFAULT
    assert CLI_DEFAULT == DEFAULT_CACHE


def test_version_is_the_packages():
    import tomllib
    version = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
        "project"]["version"]
    done = dtrf_process("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"dtrf {version}\n", "")


def test_bare_dtrf_prints_help_and_succeeds():
    done = dtrf_process()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: dtrf") and "\nCommands:\n" in done.stdout


def test_a_missing_optional_package_is_one_error_line(tmp_path):
    """A figure without matplotlib (blocked here as an install could lack it)
    is an `error:` line naming what to install, exit 2, no traceback."""
    done = dtrf_process("regime", "hole@0.91", "hole@0.95", "-o", str(tmp_path / "x.png"),
                 "--cache", str(tmp_path / "cache"),
                 prelude="sys.modules['matplotlib'] = None", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "matplotlib" in lines[0], done.stderr
    assert not (tmp_path / "x.png").exists()


EXPLAIN = ("explain", "hole", "--ratio", "0.918", "--max-attempts", "2", "--max-combo", "1",
           "--jobs", "1", "--record-root", "")

def _progress_lines(text: str) -> list[str]:
    """The progress bar's lines (`changes ━━━━ 1/2 ...`)."""
    return [ln for ln in text.splitlines() if re.match(r"\s*changes\b.*\d+/\d+", ln)]


def test_explain_progress_never_reaches_a_pipe():
    """Piped, explain writes its result alone: no progress bar on stdout (nor on
    stderr, which is no terminal either)."""
    done = dtrf_process(*EXPLAIN, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Baseline" in done.stdout
    assert _progress_lines(done.stdout) == [] and _progress_lines(done.stderr) == []


def test_explain_progress_shows_on_a_terminal():
    import pty
    import threading
    leader, follower = pty.openpty()
    seen = bytearray()

    def read():
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done = dtrf_process(*EXPLAIN, timeout=600, stderr=follower)
    finally:
        os.close(follower)
        reader.join(timeout=10)
        os.close(leader)
    assert done.returncode == 0
    assert _progress_lines(done.stdout) == []
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode(errors="replace"))
    assert _progress_lines(shown.replace("\r", "\n"))


def test_intervene_names_its_runs_alike_in_the_table_and_the_diff(tmp_path):
    """The diff under `intervene` compares the baseline with the intervention;
    "control" is the third run, never a name for the baseline."""
    done = dtrf_process("intervene", "hole", "--ratio", "0.918", "--retain", "12",
                 "--record-root", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr
    assert "a (baseline)" in done.stdout and "b (intervention)" in done.stdout
    assert "a (control)" not in done.stdout and "(test)" not in done.stdout


def test_regime_says_what_its_divergence_numbers_are(tmp_path):
    done = dtrf_process("regime", "hole@25288251B", "hole@25288252B", "--cache", str(tmp_path),
                 timeout=600)
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("First divergence"))
    assert re.search(r"run a's entry is storage \d+, run b's entry is storage \d+", line), line
    assert "(a: " not in line


def test_torch_record_finds_a_factory_in_the_current_folder(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "mymodule.py").write_text(
        "import torch\nimport torch.nn.functional as F\n\n"
        "def factory():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),\n"
        "                                torch.nn.Linear(8, 3))\n"
        "    return model, (torch.randn(2, 4), torch.tensor([0, 2])), F.cross_entropy\n")
    # the console script, as a user runs it (`python -c` would put the folder on sys.path)
    script = Path(sys.executable).parent / "dtrf"
    if not script.exists():
        pytest.skip("no dtrf script beside python")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([str(script), "torch", "record", "mymodule:factory", "-o", "mine.log"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mine.log").stat().st_size > 0


def test_one_module_per_command():
    """Each command lives in its own cli/*_cmd.py (a group such as `traces` is
    one command), registers nothing else, and every command module is in the
    lazy table."""
    import typer

    from dtrforensics.cli import main
    modules = [m for spec, _ in COMMANDS.values() for m in spec.split("+")]
    assert len(modules) == len(set(modules)), f"modules serving two commands: {modules}"
    files = {p.stem for p in Path(main.__file__).parent.glob("*_cmd.py")}
    assert files == set(modules)
    for name, (spec, _) in COMMANDS.items():
        for module in spec.split("+"):
            scratch = typer.Typer()
            __import__(f"dtrforensics.cli.{module}", fromlist=["register"]).register(scratch)
            names = ([c.name for c in scratch.registered_commands]
                     + [g.name for g in scratch.registered_groups])
            assert names == [name], f"{module} registers {names}, not [{name!r}]"
