"""Every `dtrf` command in README.md runs as written.

The commands are read from the README's code blocks, in order, and run by bash
in one temporary folder (later commands use what earlier ones recorded), with
the environment's `dtrf` first on PATH, DTRF_TRACES set and an 80-column
terminal. Commands on the public traces skip without them; the ones that take
more than a few seconds are slow (`make test-full`), and so is anything that
reads what a slow one wrote.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from public import SKIP_TRACES, traces_dir

README = Path(__file__).resolve().parents[1] / "README.md"
PUBLIC = ("resnet32", "lstm", "inceptionv4", "transformer", "unet", "treelstm", "densenet",
          "unroll_gan")
# Commands (by their leading words) that take more than a few seconds, and those
# that read a slow command's output.
SLOW = ("dtrf diff inceptionv4", "dtrf run lstm", "dtrf reevict", "dtrf regime", "dtrf explain",
        "dtrf sweep resnet32 --from 0.095", "dtrf holes", 'dtrf sql "SELECT status',
        "dtrf plot", "dtrf reproduce",
        "dtrf torch")
TIMEOUT = 1800


def readme_commands(text: str) -> list[str]:
    """The `dtrf ...` lines of the README's fenced code blocks, in order."""
    commands, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside and line.startswith("dtrf "):
            commands.append(line)
    return commands


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def _param(command: str):
    marks = [pytest.mark.slow] if command.startswith(SLOW) else []
    return pytest.param(command, marks=marks, id=command.split("#")[0].strip()[:60])


def test_the_readme_names_real_paths_not_placeholders():
    assert len(COMMANDS) >= 20
    for command in COMMANDS:
        words = re.sub(r'"[^"]*"', "", command.split("#")[0]).split()
        assert not [w for w in words if re.fullmatch(r"[A-Z][A-Z_]+", w)], command


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A fresh folder that sees the clone's `examples/` (the README's commands
    run from the clone, where the example policies are)."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "examples").symlink_to(README.parent / "examples")
    return folder


@pytest.mark.parametrize("command", [_param(c) for c in COMMANDS])
def test_readme_command_runs(command, workdir):
    if any(name in command.split("#")[0] for name in PUBLIC) and traces_dir() is None:
        pytest.skip(SKIP_TRACES)
    if command.startswith("dtrf torch"):
        pytest.importorskip("torch")
    bin_dir = Path(sys.executable).parent
    assert shutil.which("dtrf", path=str(bin_dir)), "dtrf is not installed beside python"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "80"}
    if traces_dir() is not None:
        env["DTRF_TRACES"] = str(traces_dir())
    done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    assert "…" not in done.stdout, done.stdout
    for stream in (done.stdout, done.stderr):
        assert not cut_lines(stream), f"{command}: {cut_lines(stream)}\n{stream}"


WIDTH = 80      # the README's commands run with COLUMNS=80


def cut_lines(text: str, width: int = WIDTH) -> list[str]:
    """What a terminal `width` columns wide would cut: a line wider than it (a
    lone word wider than it, such as a long path, cannot break and is printed
    whole), and a number folded at the edge onto the next line."""
    from rich.cells import cell_len
    lines = text.splitlines()
    wide = [ln for ln in lines if cell_len(ln) > width and len(ln.split()) > 1]
    folded = [f"{a}|{b}" for a, b in zip(lines, lines[1:])
              if cell_len(a) == width and re.search(r"\d[\d,.]*$", a) and re.match(r"[\d,.]", b)]
    return wide + folded


# `torch` commands quick on CPU (the zoo's MLP), each at 80 columns, in order:
# a log recorded, described, run for real under DTR, and a budget below its floor.
TORCH = [("dtrf torch record zoo:mlp -o mlp.log", 0), ("dtrf traces info mlp.log", 0),
         ("dtrf torch run zoo:mlp --ratio 0.99", 0), ("dtrf torch run zoo:mlp --ratio 0.5", 2)]


def test_torch_commands_keep_every_line_whole_at_80_columns(tmp_path):
    """Run through dtrf's entry point in this process (PyTorch is imported once;
    the README's own commands above run as a shell runs them)."""
    pytest.importorskip("torch")
    from cli import dtrf
    for command, code in TORCH:
        done = dtrf(*shlex.split(command)[1:], cwd=tmp_path, columns=WIDTH)
        assert done.code == code and done.traceback is None, f"{command}\n{done.out}\n{done.err}"
        assert "Traceback" not in done.err
        for stream in (done.out, done.err):
            assert not cut_lines(stream), f"{command}: {cut_lines(stream)}\n{stream}"


ROOT = README.parent


def _make_dry_run(target: str) -> str:
    """What `make TARGET` would run from nothing (`-n -B`: print, run nothing)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return done.stdout


def _pyproject() -> dict:
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_make_demo_installs_no_pytorch():
    """The demo replays the embedded trace: its install is the core package
    (figures included), never an extra that brings PyTorch."""
    installs = [ln for ln in _make_dry_run("demo").splitlines() if "pip install" in ln]
    assert installs and all("[" not in ln and "torch" not in ln for ln in installs), installs
    assert any(re.search(r"install -q -e \.(;|$)", ln.rstrip()) for ln in installs), installs
    core = _pyproject()["project"]["dependencies"]
    # the kernel's compile starts once numpy and numba are in, as pyproject requires them
    kernel_first = [f"'{d}'" for d in core if re.match(r"(numpy|numba)\b", d)]
    assert len(kernel_first) == 2 and any(all(d in ln for d in kernel_first) for ln in installs)
    assert any(d.startswith("matplotlib") for d in core)
    assert not any(d.startswith(("torch", "transformers", "timm")) for d in core)


def test_make_test_installs_the_model_libraries():
    assert "pip install -q -e '.[test,torch,lint]'" in _make_dry_run("test")
    test_extra = " ".join(_pyproject()["project"]["optional-dependencies"]["test"])
    for package in ("pytest", "transformers", "timm", "torchvision"):
        assert package in test_extra


def test_the_suite_says_why_a_test_was_skipped(tmp_path):
    """pytest under the project's configuration lists each skip with its reason."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_absent():\n    pytest.skip('the reason is shown')\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
                           str(tmp_path / "test_skips.py")],
                          capture_output=True, text=True)
    assert "1 skipped" in done.stdout
    assert "the reason is shown" in done.stdout, done.stdout


def test_readme_gives_each_setup_commands_size_and_time():
    setup = README.read_text(encoding="utf-8").split("## Set up", 1)[1].split("\n## ", 1)[0]
    lines = {target: next(ln for ln in setup.splitlines() if ln.startswith(target))
             for target in ("make demo", "make test")}
    for line in lines.values():
        assert re.search(r"\d+(\.\d+)? [MG]B", line), line
    assert re.search(r"\d+ (s|min)\b", lines["make demo"]), lines["make demo"]


def _policy_examples() -> list:
    """The README's commands that run a policy file, each with what it compares."""
    found = []
    for command in COMMANDS:
        words = command.split("#")[0].split()
        policy = words[words.index("--policy") + 1] if "--policy" in words else ""
        if ".py:" not in policy:
            continue
        trace = words[2]
        marks = ([pytest.mark.slow] if trace in PUBLIC else [])
        found.append(pytest.param(words, marks=marks, id=" ".join(words[1:3])))
    return found


def _outcome(program, ratio: float, policy: str) -> tuple:
    from dtrforensics.engine.replay import replay
    s = replay(program, ratio=ratio, policy=policy).summary
    return s.outcome, None if s.overhead is None else round(s.overhead, 4)


@pytest.mark.parametrize("words", _policy_examples())
def test_readme_policy_examples_show_a_difference(words, monkeypatch):
    """A policy example must show the policy doing something: an outcome or an
    overhead that differs from DTR's at the budget shown, or somewhere in the
    range compared (sampled every 0.001)."""
    from dtrforensics.trace import load_trace
    trace = words[2]
    if trace in PUBLIC:
        if traces_dir() is None:
            pytest.skip(SKIP_TRACES)
        monkeypatch.setenv("DTRF_TRACES", str(traces_dir()))
    monkeypatch.chdir(ROOT)
    program = load_trace(trace)
    policies = [p for p in words[words.index("--policy") + 1].split(",") if p != "dtr"]
    if words[1] == "run":
        ratios = [float(words[words.index("--ratio") + 1])]
    else:
        lo, hi = float(words[words.index("--from") + 1]), float(words[words.index("--to") + 1])
        ratios = [round(lo + i * 0.001, 6) for i in range(round((hi - lo) / 0.001) + 1)]
    for policy in policies:
        assert any(_outcome(program, r, policy) != _outcome(program, r, "dtr") for r in ratios), \
            f"{policy} makes DTR's outcomes at every budget of {' '.join(words)}"


def test_the_tour_has_policy_examples_on_the_embedded_trace():
    assert [w for w in _policy_examples() if w.values[0][2] not in PUBLIC]
