"""Controls (docs/semantics.md §14): a control runs the intervention's exclusion
check on every candidate, excludes nothing and reproduces the plain run; the
hindsight search keeps one control per trace, budget and policy."""

from __future__ import annotations

import pytest
from logs import PLANTED_BUDGET as BUDGET
from logs import planted, planted_log

from dtrforensics.analyses.explain import explain
from dtrforensics.analyses.interventions import intervene, same_execution
from dtrforensics.engine.replay import InterventionError, Interventions, replay
from dtrforensics.trace import parse_file


def test_a_control_runs_the_exclusion_path_and_reproduces_the_plain_run():
    p = planted()
    plain = replay(p, budget=BUDGET).summary
    control = replay(p, budget=BUDGET, interventions=Interventions(control=True)).summary
    assert plain.exclusion_checks == 0
    assert control.score_evals > 0
    assert control.exclusion_checks == control.score_evals  # every candidate was checked
    assert same_execution(plain.to_json(), control.to_json())


def test_intervene_reports_a_control_that_checked_every_candidate(tmp_path):
    p = planted()
    result = intervene(p, Interventions(retain=(p.tensor_by_name("x"),)), budget=BUDGET,
                       record_root=None)
    assert result.control_matches
    assert result.control.summary["exclusion_checks"] == result.control.summary["score_evals"] > 0
    assert result.baseline.summary["exclusion_checks"] == 0


def test_a_control_that_changes_something_is_refused():
    p = planted()
    with pytest.raises(InterventionError, match="control changes nothing"):
        replay(p, budget=BUDGET, interventions=Interventions(retain=(p.tensor_by_name("x"),),
                                                             control=True))


def test_explaining_two_traces_at_one_budget_keeps_their_controls_apart(tmp_path):
    paths = [tmp_path / f"planted-{cost}.log" for cost in (1000, 2000)]
    for path, cost in zip(paths, (1000, 2000)):
        path.write_text(planted_log(cost).text())
    first, second = (parse_file(path) for path in paths)
    assert first.sha256 != second.sha256
    runs = [explain(p, budget=BUDGET, jobs=1, record_root=None) for p in (first, second)]
    assert runs[0].baseline["clock"] != runs[1].baseline["clock"]
    for found in runs:
        assert found.baseline["outcome"] == "oom" and found.attempts
        assert found.control_matches and found.all_controls_match
