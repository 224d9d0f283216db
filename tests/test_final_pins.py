"""An OOM while pinning what the step keeps, after its last op (docs/semantics.md
§2.3), is said to be one: the op id there stays the last op's, so naming that op
as the failing one (and its module) told a false story."""

from __future__ import annotations

import json

from hostile import dtrf
from logdsl import Log

from dtrforensics.engine.replay import replay

# c (10 B, pinned) feeds a and b (100 B each); at 209 B, b's compute evicts a, and the
# final pins rebuild a (evicting b) and then cannot rebuild b: both outputs are
# pinned by then. At 210 B everything fits.
LOG = (Log().const("c", 10).call("a", "f", ["c"], 5, 100).call("b", "g", ["c"], 7, 100))
BUDGET = 209


def test_the_engine_says_an_oom_came_in_the_final_pins():
    program = LOG.program()
    at_end = replay(program, budget=BUDGET).summary
    assert at_end.outcome == "oom" and at_end.oom.final_pins
    assert at_end.oom.op_id == 2 and at_end.oom.root_tensor == "b"     # the last op's id
    assert replay(program, budget=BUDGET + 1).summary.outcome == "ok"
    early = replay(program, budget=105).summary                          # a itself cannot fit
    assert early.outcome == "oom" and not early.oom.final_pins and early.oom.op_id == 1


def test_oom_run_and_their_verdicts_say_final_pins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pins.log").write_text(LOG.text())
    spec = f"pins.log@{BUDGET}B"
    report = json.loads(dtrf("oom", spec, "--json").out)
    assert report["final_pins"] is True and report["op_id"] == 2
    brief = " ".join(dtrf("oom", spec, "--brief").out.split())
    assert "fails at the final pins after op 2 (paper #3), pinning b" in brief
    assert " g" not in brief.split("next:")[0]     # the last op's name is not the failure's
    run = " ".join(dtrf("run", "pins.log", "--budget", str(BUDGET)).out.split())
    assert "OOM at: the final pins after op 2 (paper #3)" in run
    early = json.loads(dtrf("oom", "pins.log@105B", "--json").out)
    assert early["final_pins"] is False
    assert "final pins" not in dtrf("oom", "pins.log@105B", "--brief").out
