"""The hindsight search (`dtrf explain`): retentions and forced victims, singles
before combinations, what was not tried, and fixes `dtrf intervene` reproduces."""

from __future__ import annotations

import json
import math

import pytest
from cli import dtrf
from logs import MIXED_BUDGET, mixed_log, planted, planted_log
from logs import PLANTED_BUDGET as BUDGET
from public import program_or_skip

from dtrforensics.analyses.explain import Change, explain, search_order
from dtrforensics.analyses.explain_candidates import ForcedVictim, RetentionCandidate
from dtrforensics.engine.replay import Interventions, replay
from dtrforensics.trace import load_trace

HOLE_INSIDE = 25_177_836  # the embedded trace's hole starts here; one byte less completes


def test_planted_failure_is_fixed_by_the_retention_and_by_the_runner_up():
    """Retaining x makes q the victim at decision 0 (see `planted`): forcing q
    there instead of x is the same single change, made as a forced victim."""
    p = planted()
    x, q = p.tensor_by_name("x"), p.tensor_by_name("q")
    result = explain(p, budget=BUDGET, record_root=None, jobs=1)
    assert [c.storage for c in result.candidates] == [x]
    assert [(f.storage, f.decision, f.instead_of) for f in result.forced] == [(q, 0, x)]
    assert sorted(a.args for a in result.fixes) == [["--force-victim", f"{q}@0"],
                                                    ["--retain", str(x)]]
    assert result.control_outcome == "oom" and result.control_matches
    fixes = result.to_json()["fixes"]
    assert {f["kind"] for f in fixes} == {"retain", "force_victim"}
    assert all(f["outcome"] == "ok" and f["evicted_at_op"] for f in fixes)


def test_explain_reuses_recorded_attempts(tmp_path):
    p = planted()
    first = explain(p, budget=BUDGET, record_root=tmp_path, jobs=1)
    kept = {a.recording for a in first.attempts}
    again = explain(p, budget=BUDGET, record_root=tmp_path, jobs=1)
    assert {a.recording for a in again.attempts} == kept
    assert all(json.load(open(f"{r}/run.json"))["summary"]["outcome"] == "ok" for r in kept)


def test_the_completing_choice_at_the_first_divergent_decision_closes_the_hole():
    """The embedded trace's story (data/traces/README.md): below the hole DTR
    evicts storage 4 first; in the hole its first decision evicts storage 12,
    which the failing op then needs. Forcing 4 at that decision completes, as
    the run one byte below does."""
    p = load_trace("hole")
    result = explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1)
    near = result.nearby
    assert (near.budget, near.decision) == (HOLE_INSIDE - 1, 0)
    assert (near.failing_victim, near.completing_victim, near.victim_in_pool) == (12, 4, True)
    first = result.attempts[0]
    assert first.change == Change(force=(4, 0), evicted_at_op=(result.forced[0].op_id,))
    assert first.fixes
    below = replay(p, budget=HOLE_INSIDE - 1).summary
    assert first.summary["overhead"] == below.overhead
    assert [a.retain for a in result.fixes if a.kind == "retain"] == [(12,)]


def test_a_forced_victim_is_the_same_single_change_as_its_intervention():
    p = load_trace("hole")
    result = explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1)
    for a in result.attempts:
        again = replay(p, budget=HOLE_INSIDE, interventions=a.change.interventions()).summary
        assert (again.outcome, again.victims_sha256) == (a.summary["outcome"],
                                                        a.summary["victims_sha256"])


def _candidates(n: int) -> list[RetentionCandidate]:
    return [RetentionCandidate(100 + i, 50 - i, 1, "needed") for i in range(n)]


def _forced(source: str, decisions: range) -> list[ForcedVictim]:
    return [ForcedVictim(200 + k, k, 40 + k, 300 + k, source, "why") for k in decisions]


def test_search_order_is_breadth_first_in_the_documented_order():
    retain = _candidates(3)
    forced = _forced("divergent_choice", range(1)) + _forced("last_decisions", range(9, 4, -1))
    order = list(search_order(retain, forced, ("retain", "force_victim"), max_combo=3))
    labels = [" ".join(c.args()) for c in order]
    assert labels[:9] == ["--force-victim 200@0",
                          "--retain 100", "--force-victim 209@9",
                          "--retain 101", "--force-victim 208@8",
                          "--retain 102", "--force-victim 207@7",
                          "--force-victim 206@6", "--force-victim 205@5"]
    sizes = [c.size for c in order]
    assert sizes == sorted(sizes)                       # every single before any pair
    assert sizes.count(2) == math.comb(3, 2) and sizes.count(3) == 1
    assert all(c.kind == "retain" for c in order if c.size > 1)
    only_retain = list(search_order(retain, forced, ("retain",), max_combo=1))
    assert [c.retain for c in only_retain] == [(100,), (101,), (102,)]


def test_every_single_is_tried_before_a_pair_and_the_rest_is_counted():
    p = mixed_log().program("mixed")
    whole = explain(p, budget=MIXED_BUDGET, record_root=None, jobs=1, max_attempts=10_000)
    singles = len(whole.candidates) + len(whole.forced)
    assert len(whole.candidates) == 6 and whole.forced and whole.stopped == "exhausted"
    assert whole.singles_untried == whole.combinations_untried == 0
    cut = explain(p, budget=MIXED_BUDGET, record_root=None, jobs=1, max_attempts=singles + 1)
    assert [a.change.size for a in cut.attempts] == [1] * singles + [2]
    assert cut.stopped == "max_attempts"
    pairs = next(r for r in cut.rounds if r.size == 2)
    assert (pairs.candidates, pairs.tried, pairs.untried) == (math.comb(6, 2), 1, 14)
    few = explain(p, budget=MIXED_BUDGET, record_root=None, jobs=1, max_attempts=3)
    out = few.to_json()
    assert out["tried"] == 3
    assert out["untried"] == {"singles": singles - 3, "combinations": math.comb(6, 2)}
    assert sum(r["tried"] + r["untried"] for r in out["search"]["rounds"]) == (
        singles + math.comb(6, 2))


def test_bounds_past_what_exists_change_nothing():
    """Sets larger than the candidates do not exist, nor attempts past every
    change: a search asked for far more does the whole search, no more."""
    p = mixed_log().program("mixed")
    whole = explain(p, budget=MIXED_BUDGET, record_root=None, jobs=1, max_attempts=10_000,
                    max_combo=6)
    huge = explain(p, budget=MIXED_BUDGET, record_root=None, jobs=1, max_attempts=10**30,
                   max_combo=10**6)
    assert len(whole.candidates) == 6 and whole.stopped == huge.stopped == "exhausted"
    assert [a.change for a in huge.attempts] == [a.change for a in whole.attempts]
    assert [r.to_json() for r in huge.rounds] == [r.to_json() for r in whole.rounds]
    assert max(r.size for r in huge.rounds) == 6
    with pytest.raises(ValueError, match="at least 1"):
        explain(p, budget=MIXED_BUDGET, record_root=None, jobs=1, max_combo=0)


def test_stopping_at_the_first_fix_says_so():
    result = explain(planted(), budget=BUDGET, record_root=None, jobs=1, stop_after_fixes=1)
    assert len(result.fixes) == 1 and result.stopped == "first"
    assert result.singles_untried == 1


def test_retentions_only_search_no_nearby_budget():
    result = explain(load_trace("hole"), budget=HOLE_INSIDE, record_root=None, jobs=1,
                     kinds=("retain",))
    assert result.nearby is None and result.forced == []
    assert [a.kind for a in result.attempts] == ["retain"]
    # sizes up to the default 2, where such sets exist (one candidate: singles)
    assert [(r.kind, r.size) for r in result.rounds] == [
        ("retain", size) for size in range(1, min(2, len(result.candidates)) + 1)]


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kinds are among"):
        explain(planted(), budget=BUDGET, record_root=None, jobs=1, kinds=("forget",))


def test_cli_fix_args_reproduce_with_intervene(tmp_path):
    log = tmp_path / "planted.log"
    log.write_text(planted_log(1000).text())
    run = dtrf("explain", log, "--budget", BUDGET, "--jobs", "1", "--record-root", "", "--json")
    assert run.code == 0, run.err
    data = json.loads(run.out)
    assert {f["kind"] for f in data["fixes"]} == {"retain", "force_victim"}
    assert data["untried"] == {"singles": 0, "combinations": 0}
    for fix in data["fixes"]:
        again = dtrf("intervene", log, "--budget", BUDGET, *fix["args"], "--record-root", "",
                     "--json")
        assert again.code == 0, again.err
        both = json.loads(again.out)
        assert (both["baseline"]["outcome"], both["intervention"]["outcome"]) == ("oom", "ok")


def test_cli_screen_shows_the_ops_and_what_was_not_tried(tmp_path):
    run = dtrf("explain", "hole", "--budget", HOLE_INSIDE, "--jobs", "1", "--max-attempts", "1",
               "--record-root", "")
    assert run.code == 0, run.err
    assert "evicted" in run.out and "at op" in run.out
    assert "--force-victim 4@0" in run.out
    assert "Tried 1 change: singles 1 of" in run.out and "untried" in run.out
    assert "Stopped at --max-attempts 1" in run.out
    assert "Reproduce a fix: dtrf intervene hole --budget" in run.out


@pytest.mark.parametrize("args, message", [
    (("--last-decisions", "-1"), "--last-decisions must be >= 0"),
    (("--kind", "forget"), "forget"),
])
def test_cli_bad_options_are_one_line(args, message):
    run = dtrf("explain", "hole", "--budget", HOLE_INSIDE, *args)
    assert run.code == 2 and message in run.err and run.traceback is None


@pytest.mark.public
def test_resnet32_retaining_the_storage_evicted_five_ops_before_the_failure():
    """The published fix: the storage evicted five operators before the failure;
    retaining it completes at 2.24x."""
    p = program_or_skip("resnet32")
    result = explain(p, ratio=0.104, record_root=None, jobs=2)
    failing_op = result.baseline["oom"]["op_id"]
    first = next(a for a in result.fixes if a.kind == "retain")
    (evicted_at,) = first.change.evicted_at_op
    assert failing_op - evicted_at == 5
    assert first.summary["overhead"] == pytest.approx(2.2406, abs=5e-5)
    assert first.summary["max_depth"] == 57 and result.control_matches
    again = replay(p, ratio=0.104, interventions=Interventions(retain=first.retain)).summary
    assert again.victims_sha256 == first.summary["victims_sha256"]
    assert result.stopped == "max_attempts" and result.singles_untried > 0
    tried = sum(r.tried for r in result.rounds)
    assert tried == len(result.attempts) == 32


@pytest.mark.public
@pytest.mark.slow
def test_inceptionv4_explain_finds_3131_among_the_retentions():
    p = program_or_skip("inceptionv4")
    result = explain(p, ratio=0.235, max_attempts=1, kinds=("retain",), record_root=None,
                     jobs=1)
    assert result.baseline["outcome"] == "oom"
    assert [a.retain for a in result.fixes] == [(3131,)]


def test_a_rerun_that_disagrees_voids_the_search(monkeypatch):
    """The run observed for its runner-ups must be the failing run again; if it
    is not, the result says so and the command exits 3."""
    from dtrforensics.analyses import explain_candidates
    from dtrforensics.errors import EXIT_NOT_DETERMINISTIC
    monkeypatch.setattr(explain_candidates, "same_execution", lambda a, b: False)
    result = explain(planted(), budget=BUDGET, record_root=None, jobs=1)
    assert result.all_controls_match and result.control_matches is False
    run = dtrf("explain", "hole", "--budget", HOLE_INSIDE, "--jobs", "1", "--record-root", "")
    assert run.code == EXIT_NOT_DETERMINISTIC
    assert "did not reproduce" in run.err and "a control or a rerun" in run.out
