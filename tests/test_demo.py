"""`make demo` in a reduced form: the demo's entry point and its key findings,
and the embedded trace's planted properties (a hole and a regime switch)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dtrforensics.cli.demo_cmd import run_demo
from dtrforensics.engine.replay import replay
from dtrforensics.trace import load_trace

HOLE = (25_177_836, 25_233_075)


def test_embedded_trace_has_a_hole_and_a_regime_switch():
    program = load_trace("hole")
    below, inside, above = (replay(program, budget=b).summary
                            for b in (HOLE[0] - 1, HOLE[0], HOLE[1] + 1))
    assert (below.outcome, inside.outcome, above.outcome) == ("ok", "oom", "ok")
    assert inside.budget_interval == HOLE  # the whole hole is one execution
    before, after = (replay(program, budget=b).summary for b in (25_288_251, 25_288_252))
    assert before.outcome == after.outcome == "ok"
    assert before.overhead / after.overhead > 1.25


@pytest.fixture(scope="module")
def demo():
    """The demo run once, at 80 columns (where its suggestions must read as commands):
    its folder, its text and its findings."""
    # a short folder: the suggestions name it, and a path longer than the terminal
    # cannot be cut (a parallel worker's pytest folder, popen-gwN/, is 83 characters
    # with the demo's longest name)
    import shutil
    import tempfile
    from pathlib import Path
    folder = Path(tempfile.mkdtemp(prefix="dtrf-demo-"))
    out = io.StringIO()
    try:
        findings = run_demo(Console(file=out, width=80), folder / "demo", public=False, jobs=1)
        yield folder, out.getvalue(), findings
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_demo_tells_the_whole_story(demo):
    folder, text, findings = demo
    for heading in ("1. Sweep hole", "2. Diff", "3. The OOM", "4. Which retention", "Your turn"):
        assert heading in text
    story = findings["embedded"]
    assert story["hole"]["bytes"] == list(HOLE)
    assert story["common_prefix"] == 2
    assert story["first_divergence"]["op_id"] == 10
    assert story["oom"]["tensor"] == "x1020" and story["oom"]["depth"] == 2
    assert story["fixes"] == [[12]]
    assert all((folder / "demo" / "hole" / name).is_file() for name in ("hole.png", "hole.svg"))


def test_every_command_the_demo_suggests_runs(demo):
    """The "Your turn" lines are commands: each runs as printed (one that ends with
    ` \\` goes on in the next line, as in a shell) and succeeds."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    tmp_path, text, _ = demo
    turn = text.split("Your turn", 1)[1]
    commands = [ln.strip() for ln in turn.replace(" \\\n", " ").splitlines()
                if ln.startswith("  dtrf ")]
    assert all(len(ln) <= 80 for ln in turn.splitlines())
    assert len(commands) >= 8 and any(" --record " in c for c in commands)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
        assert "Traceback" not in done.stderr
