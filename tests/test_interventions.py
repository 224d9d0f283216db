"""Interventions and controls (`dtrf intervene`); the hindsight search is in test_explain.py."""

from __future__ import annotations

import json

import pytest
from cli import dtrf_process
from hypothesis import given, settings
from hypothesis import strategies as st
from logdsl import Log
from logs import PLANTED_BUDGET as BUDGET
from logs import planted, planted_log, random_logs
from public import program_or_skip

from dtrforensics.analyses.interventions import intervene, same_execution
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import InterventionError, Interventions, replay


def test_retaining_the_planted_storage_prevents_the_oom(tmp_path):
    p = planted()
    x = p.tensor_by_name("x")
    result = intervene(p, Interventions(retain=(x,)), budget=BUDGET, record_root=tmp_path)
    assert result.baseline.summary["outcome"] == "oom"
    assert result.intervention.summary["outcome"] == "ok"
    assert result.control_matches
    assert result.control.summary["outcome"] == "oom"
    assert all(r.recording.is_dir() for r in (result.baseline, result.intervention, result.control))


def test_forbid_and_force_are_single_choice_counterfactuals():
    p = planted()
    x, q = p.tensor_by_name("x"), p.tensor_by_name("q")
    assert replay(p, budget=BUDGET).victims[0, 0] == x
    forbid = replay(p, budget=BUDGET, interventions=Interventions(forbid=((x, 0),)))
    force = replay(p, budget=BUDGET, interventions=Interventions(force=((q, 0),)))
    assert forbid.summary.outcome == force.summary.outcome == "ok"
    assert forbid.victims[0, 0] == force.victims[0, 0] == q


def test_forcing_a_non_candidate_fails_clearly():
    p = planted()
    w = p.tensor_by_name("w")  # a pinned constant: never in the pool
    s = replay(p, budget=BUDGET, interventions=Interventions(force=((w, 0),))).summary
    assert s.outcome == "error" and "not a candidate at decision 0" in s.error


def test_retain_window_limits_the_intervention():
    p = planted()
    x = p.tensor_by_name("x")
    y_op = int(p.tensor_op[p.tensor_by_name("y")])
    inside = Interventions(retain=(x,), retain_ops=(y_op, y_op))
    outside = Interventions(retain=(x,), retain_ops=(0, y_op - 1))
    assert replay(p, budget=BUDGET, interventions=inside).summary.outcome == "ok"
    assert replay(p, budget=BUDGET, interventions=outside).summary.outcome == "oom"


def test_bad_interventions_are_refused_with_a_reason():
    p = planted()
    view_free = Log().const("w", 8).call("a", "f", ["w"], 1, 8).call(
        "v", "view", ["a"], 0, 0, aliases=[0]).program()
    with pytest.raises(InterventionError, match="not a storage id"):
        replay(p, budget=BUDGET, interventions=Interventions(retain=(999,)))
    with pytest.raises(InterventionError, match="is a view of storage"):
        replay(view_free, budget=100, interventions=Interventions(retain=(2,)))
    with pytest.raises(InterventionError, match="outside the trace"):
        replay(p, budget=BUDGET, interventions=Interventions(retain=(2,), retain_ops=(0, 99)))


@settings(max_examples=40, deadline=None)
@given(program=random_logs(), fraction=st.floats(0.1, 1.0))
def test_control_reproduces_the_plain_run(program, fraction):
    budget = int(fraction * baseline(program).peak)
    plain = replay(program, budget=budget).summary.to_json()
    control = replay(program, budget=budget, interventions=Interventions(control=True))
    assert same_execution(plain, control.summary.to_json())


def test_cli_intervene_json(tmp_path):
    log = tmp_path / "planted.log"
    log.write_text(planted_log().text())
    out = dtrf_process("intervene", log, "--budget", BUDGET, "--retain", "2", "--record-root",
                       tmp_path / "rec", "--json", check=True)
    data = json.loads(out.stdout)
    assert data["control_matches"] is True
    assert (data["baseline"]["outcome"], data["intervention"]["outcome"]) == ("oom", "ok")
    text = dtrf_process("intervene", log, "--budget", BUDGET, "--retain", "2", "--record-root",
                        tmp_path / "rec", check=True, columns=200).stdout
    assert "baseline / intervention / control" in text
    assert "the control reproduces the baseline exactly" in text
    # then where the baseline (control) and the intervention part, and what b lost
    assert "Runs" in text and "First divergence of the eviction streams" in text
    assert "Failure of run a" in text
    for role in ("baseline", "intervention", "control"):     # whole, never a prefix
        assert f"victims sha256, {role}: {data[role]['victims_sha256']}" in text
    bad = dtrf_process("intervene", log, "--budget", BUDGET, "--retain", "999")
    assert bad.returncode == 2 and "999 is not a storage id" in bad.stderr


@pytest.mark.public
def test_inceptionv4_retaining_3131_completes():
    p = program_or_skip("inceptionv4")
    s = replay(p, ratio=0.235, interventions=Interventions(retain=(3131,))).summary
    assert s.outcome == "ok"
    assert s.overhead == pytest.approx(1.4773, abs=5e-5)
    assert (s.max_pinned.bytes, s.max_depth) == (986_579_316, 30)
