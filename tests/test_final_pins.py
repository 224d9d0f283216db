"""An OOM while pinning what the step keeps, after its last op (docs/semantics.md
§2.3), is said to be one: the op id there stays the last op's, so naming that op
as the failing one (and its module) told a false story. And the verdicts' other
words found untrue by a trial: next commands that went round in circles, a replay
verdict that changed with the rows shown, a reevict headline of one run of two."""

from __future__ import annotations

import json

from cli import dtrf
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
    assert "fails at the pins after op 2 (paper #3), pinning b" in brief
    assert " g" not in brief.split("next:")[0]     # the last op's name is not the failure's
    run = " ".join(dtrf("run", "pins.log", "--budget", str(BUDGET)).out.split())
    assert "OOM at: the pins after op 2 (paper #3)" in run
    early = json.loads(dtrf("oom", "pins.log@105B", "--json").out)
    assert early["final_pins"] is False
    assert "the pins after" not in dtrf("oom", "pins.log@105B", "--brief").out


# The same ops with a PIN line (ours, semantics.md §2.2) of each output after them,
# then one more op: at 209 B the PIN of b, after op 2, fails as the final pins do.
PINNED = (Log().const("c", 10).call("a", "f", ["c"], 5, 100).call("b", "g", ["c"], 7, 100)
          .pin("a").pin("b").call("d", "h", ["c"], 1, 0))


def test_an_oom_at_a_pin_line_is_said_to_be_one(tmp_path, monkeypatch):
    """The op id there is the last computed op's: naming that op as the failing
    one ('fails at op 2 g') told a false story."""
    program = PINNED.program()
    oom = replay(program, budget=BUDGET).summary.oom
    assert oom.final_pins and oom.op_id == 2 and oom.root_tensor == "b"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pinned.log").write_text(PINNED.text())
    brief = " ".join(dtrf("oom", f"pinned.log@{BUDGET}B", "--brief").out.split())
    assert "fails at the pins after op 2 (paper #3), pinning b" in brief
    run = " ".join(dtrf("run", "pinned.log", "--budget", str(BUDGET)).out.split())
    assert "OOM at: the pins after op 2 (paper #3)" in run


# c (10 B) feeds a (100 B): at 109 B computing a fails with nothing to evict; at 110 B
# it fits. The two runs make the same (no) decisions: only a check's answer differs.
EDGE = Log().const("c", 10).call("a", "f", ["c"], 5, 100)


def test_next_commands_lead_to_the_failure_not_round_in_circles(tmp_path, monkeypatch):
    """diff of two runs with the same eviction stream, and regime finding no slow
    regime, point at the failing run's OOM (they pointed at each other)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edge.log").write_text(EDGE.text())
    ok_run, failing = "edge.log@110B", "edge.log@109B"
    for command in ("diff", "regime"):
        verdict = json.loads(dtrf(command, ok_run, failing, "--json").out)["verdict"]
        assert verdict["next"] == f"dtrf oom {failing}", (command, verdict)
        assert dtrf(*verdict["next"].split()[1:]).code == 0


def test_the_replay_verdict_is_the_same_however_many_checks_are_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = dtrf("replay", "hole@25200000B", "--limit", "1", "--brief").out
    doc = json.loads(dtrf("replay", "hole@25200000B", "--limit", "1", "--json").out)
    assert text.splitlines() == doc["verdict"]["text"]
    assert "failing check" in text and f"window: {doc['matched']:,} allocation checks" in text


def test_the_reevict_headline_speaks_of_both_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = json.loads(dtrf("reevict", "hole@0.92", "hole@25200000B", "--json").out)
    head = doc["verdict"]["headline"]
    for name, run in zip("ab", doc["runs"]):
        assert f"{name} up to {run['pressure']['max_per_storage']:,} eviction" in head, head
