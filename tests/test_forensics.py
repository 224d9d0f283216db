"""The forensic analyses (analyses/diff, oom, replay_view, reevict), run arguments
(recordings or TRACE@RATIO specs) and the commands `dtrf diff`, `oom`, `replay`,
`reevict` with their JSON contracts. The logs and their known answers are in
test_forensics_queries."""

from __future__ import annotations

import json

import pytest
from cli import dtrf, dtrf_process
from logs import chain_log, fan_log, mixed_log

from dtrforensics.analyses.diff import CAUSES, diff
from dtrforensics.analyses.oom import Level, NotAnOomError, explain_oom
from dtrforensics.analyses.reevict import reevict
from dtrforensics.analyses.replay_view import ReplaySource, replay_window
from dtrforensics.analyses.runs import RunSpec, RunSpecError, open_together, resolve_run
from dtrforensics.engine.replay import prepared
from dtrforensics.recorder.reader import NotARecordingError, open_recording
from dtrforensics.recorder.record import record_run
from dtrforensics.render.oom import Collapsed, collapse
from dtrforensics.rows import fetch_dicts


@pytest.fixture(scope="module")
def recs(forensic_recs):  # noqa: F811
    return {p.name: open_recording(p) for p in forensic_recs.iterdir() if p.is_dir()}


_DIFFS: dict[tuple, object] = {}


def diffed(a, b):
    """diff(a, b), computed once per module for the pairs several tests read."""
    key = (str(a.path), str(b.path))
    if key not in _DIFFS:
        _DIFFS[key] = diff(a, b)
    return _DIFFS[key]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    program = mixed_log().program("mixed")
    out = {}
    for budget in (80, 90, 100, 120):
        _, path = record_run(program, budget=budget, out_dir=root / f"m{budget}", scores="all")
        out[budget] = open_recording(path)
    return out


# --- diff ---------------------------------------------------------------------------

def test_diff_timing_shift(recs):
    """Where the streams part and what each run did there is the answer of the
    first_divergence and aftermath queries, asserted in test_forensics_queries: the
    analysis carries it over (checked against the queries' rows) and adds the cause,
    the explanation, each victim's rank in both runs, the decisions and the failures."""
    r = diffed(recs["shift125"], recs["shift130"])
    assert (r.a.run_id, r.b.run_id) == ("shift125", "shift130")
    con, ids = open_together([recs["shift125"], recs["shift130"]])
    rows = {q["side"]: q for q in fetch_dicts(con, "SELECT * FROM first_divergence(?, ?)", ids)}
    d = r.first_divergence
    assert (r.common_prefix, d.position) == (rows["a"]["common_prefix"], rows["a"]["position"])
    for side, q in ((d.a, rows["a"]), (d.b, rows["b"])):
        assert (side.kind, side.victim, side.op_id, side.paper_op, side.decision, side.score,
                side.request, side.memory, side.shortfall) == \
            (q["kind"], q["storage_id"], q["op_id"], q["paper_op"], q["decision"], q["score"],
             q["request"], q["check_memory"], q["check_shortfall"])
    assert (d.op_id, d.cause) == (d.a.op_id, "timing_shift")
    assert "op 5" in d.explanation and "short by 5 bytes" in d.explanation
    # a is ranked 1 at both runs' decision 0; b was run a's runner-up there, and gone
    # (freed dead) by the time run b decided
    assert (d.a.rank_in_a.rank, d.a.rank_in_b.rank, d.a.rank_in_b.decision) == (1, 1, 0)
    assert (d.b.rank_in_a.rank, d.b.rank_in_a.score) == (2, pytest.approx(0.1))
    assert d.b.rank_in_b.in_pool is False
    assert r.first_divergent_choice is None and r.common_choices == 1
    assert r.prefix_shift is None
    am = r.aftermath
    q = fetch_dicts(con, "SELECT * FROM aftermath_reconvergence(?, ?, ?)", [*ids, d.op_id])[0]
    assert (am.from_op, am.last_difference, am.reconverge_op) == \
        (d.op_id, q["last_difference"], q["reconverge_op"])
    con.close()
    assert r.failures == ()


def test_diff_json_contract(recs):
    out = diffed(recs["fan50"], recs["fan50_forced"]).to_json()
    json.dumps(out)
    for key in ("first_divergence", "first_divergent_choice"):
        d = out[key]
        assert {"position", "op_id", "a", "b"} <= d.keys()
        for side in ("a", "b"):
            assert {"victim", "kind", "score", "clock"} <= d[side].keys()
            assert d[side]["kind"] in ("pressure", "dead")
    assert out["common_prefix"] == 2
    assert out["first_divergence"]["position"] == 3
    choice = out["first_divergent_choice"]
    assert (choice["decision"], choice["position"], choice["cause"]) == (2, 3, "forced")
    assert (choice["a"]["victim"], choice["b"]["victim"]) == (4, 3)
    assert choice["b"]["forced"] and not choice["a"]["forced"]
    # the forced victim ranks 2nd in its own run, the policy's choice 1st in the control
    assert choice["b"]["rank_in_b"]["rank"] == 2 and choice["b"]["rank_in_a"]["rank"] == 2
    assert choice["a"]["rank_in_a"]["rank"] == 1


def test_diff_causes_pool_and_score_order(mixed):
    # 100 vs 120: at decision 0 each run's victim was not even in the other's pool
    c = diffed(mixed[100], mixed[120]).first_divergent_choice
    assert c.cause == "different_pool"
    assert c.a.rank_in_b.in_pool is False and c.b.rank_in_a.in_pool is False
    # 80 vs 90: both victims were candidates in both runs, ranked in the other order
    c = diffed(mixed[80], mixed[90]).first_divergent_choice
    assert c.cause == "different_score_order"
    assert c.a.rank_in_b.in_pool and c.b.rank_in_a.in_pool
    assert c.a.rank_in_a.rank == 1 and c.a.rank_in_b.rank > 1
    assert set(CAUSES) >= {c.cause}


def test_diff_shows_coinciding_divergences_once(recs, mixed):
    """When the streams first differ at the first divergent choice, one panel says
    both; otherwise each has its own panel."""
    from rich.console import Console

    from dtrforensics.render.diff import print_diff
    seen = set()
    for a, b in ((mixed[80], mixed[90]), (mixed[100], mixed[120]),
                 (recs["fan50"], recs["fan50_forced"]), (recs["shift125"], recs["shift130"])):
        r = diffed(a, b)
        out = Console(record=True, width=160)
        print_diff(r, out)
        text = out.export_text()
        choice, first = r.first_divergent_choice, r.first_divergence
        both = choice is not None and (first.a, first.b) == (choice.a, choice.b)
        seen.add(both)
        assert (", and first divergent choice" in text) == both
        assert ("First divergent choice" in text) == (choice is not None and not both)
        if both:
            assert f"decision {choice.decision:,}" in text
    assert seen == {True, False}


def test_diff_prefix_shift_is_a_timing_shift(recs, tmp_path):
    _, path = record_run(fan_log().program("fan"), budget=60, out_dir=tmp_path / "fan60",
                         scores="all")
    r = diff(recs["fan50"], open_recording(path))
    assert r.common_prefix == 3
    assert (r.prefix_shift.position, r.prefix_shift.a_op_id, r.prefix_shift.b_op_id) == (1, 5, 6)
    assert r.first_divergence.cause == "timing_shift"
    assert r.first_divergent_choice.cause == "run_ended"     # 4 decisions against 3


def test_diff_failure(recs):
    r = diff(recs["chain100"], recs["chain55"])
    assert r.first_divergence.cause == "different_shortfall"
    assert (r.first_divergence.a.shortfall, r.first_divergence.b.shortfall) == (-40, 5)
    (f,) = r.failures
    assert (f.run, f.op_id, f.tensor, f.depth, f.pinned, f.request, f.needed_missing) == \
        ("b", 5, "a", 4, 40, 20, 3)
    c = f.culprit
    assert (c.storage.storage, c.storage.tensor, c.storage.evicted_op,
            c.storage.evicted_decision) == (3, "c", 4, 0)
    assert (c.storage.other_from_op, c.storage.other_to_op, c.other_evictions_at_op) == (3, 5, 0)
    assert c.other_victim is None and c.alloc_tensor == "d"
    assert [n.storage for n in f.kept_by_other] == [3]


def test_diff_refuses_different_traces(recs):
    with pytest.raises(RunSpecError, match="different traces"):
        diff(recs["shift125"], recs["chain55"])


def test_diff_of_a_run_with_itself(recs):
    r = diff(recs["fan50"], recs["fan50"])
    assert r.first_divergence is None and r.common_prefix == 8 and r.aftermath is None


# --- oom ----------------------------------------------------------------------------

def test_explain_oom(recs):
    r = explain_oom(recs["chain55"])
    assert [(lv.depth, lv.tensor, lv.op_id, lv.locked_bytes, lv.cumulative_bytes)
            for lv in r.frontier] == [(1, "e", 5, 30, 30), (2, "c", 3, 0, 30),
                                      (3, "b", 2, 0, 30), (4, "a", 1, 10, 40)]
    assert (r.tensor, r.request, r.memory, r.pinned, r.budget, r.shortfall) == \
        ("a", 20, 40, 40, 55, 5)
    assert (r.op_id, r.paper_op, r.op_name, r.depth, r.root_tensor) == (5, 6, "h", 4, "e")
    assert r.pool_empty and r.pool_size == 0 and r.chain_from_events
    assert (r.depth_at_peak_pinned, r.peak_pinned, r.max_depth) == (4, 40, 4)
    j = r.to_json()
    assert {"tensor", "request", "pinned", "depth", "budget", "frontier"} <= j.keys()
    assert [lv["tensor"] for lv in j["frontier"]] == ["e", "c", "b", "a"]
    assert {"tensor", "op_id", "depth", "locked_bytes"} <= j["frontier"][0].keys()


def test_explain_oom_refuses_a_run_that_completed(recs):
    with pytest.raises(NotAnOomError, match="outcome ok"):
        explain_oom(recs["chain100"])


def _level(depth, op_name):
    return Level(depth, f"t{depth}", depth, depth, depth + 1, op_name, True, 0, 0, 0, ())


def test_collapse_long_chains():
    levels = [_level(d, "add" if d % 2 else "conv") for d in range(1, 31)]
    shown = collapse(levels)
    assert [x.depth for x in shown[:3]] == [1, 2, 3]
    assert [x.depth for x in shown[-5:]] == [26, 27, 28, 29, 30]
    middle = shown[3]
    assert isinstance(middle, Collapsed)
    assert (middle.first_depth, middle.last_depth, middle.count) == (4, 25, 22)
    assert dict(middle.ops) == {"add": 11, "conv": 11}
    assert len(collapse(levels, full=True)) == 30
    assert collapse(levels[:9]) == levels[:9]


# --- replay -------------------------------------------------------------------------

def test_replay_window(recs):
    w = replay_window(recs["tiny120"])
    assert w.matched == len(w.steps) == 7
    s4 = w.steps[4]
    assert (s4.tensor, s4.shortfall, s4.evictions, [v.victim for v in s4.victims]) == \
        ("c", 10, 1, [1])
    assert (s4.victims[0].runner_up, s4.victims[0].score) == (2, pytest.approx(0.01))
    assert w.steps[5].remat and w.steps[5].tensor == "a"
    only = replay_window(recs["tiny120"], (4, 5), only_evicting=True)
    assert [s.step for s in only.steps] == [4, 5] and (only.lo_op, only.hi_op) == (4, 5)
    limited = replay_window(recs["tiny120"], limit=2)
    assert len(limited.steps) == 2 and limited.matched == 7
    out = w.to_json()
    json.dumps(out, allow_nan=False)
    assert out["steps"][5]["victims"][0]["score"] == "inf"      # c, just computed


def test_replay_source_navigation(recs):
    src = ReplaySource(recs["tiny105"])
    try:
        assert len(src) == 7
        assert src.next_index(0, "eviction") == 4
        assert src.next_index(4, "eviction") == 5
        assert src.next_index(5, "eviction") is None
        assert src.next_index(0, "remat") == 5
        assert src.next_index(0, "oom") == 6
        assert src.prev_index(6, "eviction") == 5
        assert [v.victim for v in src.victims(4)] == [1]
        assert [(c.rank, c.storage, c.chosen) for c in src.candidates(0)] == \
            [(1, 1, True), (2, 2, False)]
        assert [lv.tensor for lv in src.stack(5)] == ["d", "a"]
    finally:
        src.close()
    fallback = ReplaySource(recs["fan50_victims"])
    try:
        assert [(c.rank, c.storage, c.source) for c in fallback.candidates(0)] == \
            [(1, 1, "decisions"), (2, 2, "decisions")]
    finally:
        fallback.close()


# --- reevict ------------------------------------------------------------------------

def test_reevict(recs):
    r = reevict([recs["tiny120"], recs["tiny105"]], top=3)
    a, b = r.runs
    assert (a.pressure.evictions, a.pressure.distinct_storages, a.stream.evictions,
            a.stream.distinct_storages, a.stream.mean_per_storage) == (2, 2, 5, 4, 1.25)
    assert [(t.storage, t.evictions) for t in a.stream.top] == [(1, 2), (2, 1), (3, 1)]
    assert (b.stream.evictions, b.stream.distinct_storages) == (3, 3)
    assert r.overlap["stream"].jaccard == 0.75 and r.overlap["pressure"].jaccard == 1.0
    single = reevict([recs["tiny120"]])
    assert single.overlap is None and len(single.runs) == 1
    json.dumps(r.to_json())


# --- run specs ------------------------------------------------------------------------

def test_run_spec_parse():
    assert RunSpec.parse("inceptionv4@0.235") == RunSpec("inceptionv4", 0.235, "dtr")
    assert RunSpec.parse("lstm@0.264:lru") == RunSpec("lstm", 0.264, "lru")
    assert RunSpec.parse("/tmp/a@b/x.log@0.5") == RunSpec("/tmp/a@b/x.log", 0.5, "dtr")
    assert RunSpec.parse("resnet32@1024657200B") == RunSpec("resnet32", None, "dtr", 1024657200)
    assert RunSpec.parse("resnet32@1,024,657,200B:lru") == RunSpec("resnet32", None, "lru",
                                                                   1024657200)
    assert str(RunSpec.parse("resnet32@1024657200B")) == "resnet32@1024657200B:dtr"
    for bad in ("lstm", "lstm@", "lstm@x", "lstm@-1", "lstm@0.5:nope", "@0.5", "lstm@0B",
                "lstm@1.5B", "lstm@B", "lstm@-3B"):
        with pytest.raises(RunSpecError):
            RunSpec.parse(bad)


def test_resolve_run_records_once(tmp_path):
    log = tmp_path / "chain.log"
    log.write_text(chain_log().text())
    peak = prepared(chain_log().program("chain"))[1].peak
    spec = f"{log}@{55.5 / peak!r}"
    made = []
    rec = resolve_run(spec, cache=tmp_path / "cache", on_record=lambda s, f: made.append(f))
    assert rec.outcome == "oom" and rec.run["budget"] == 55 and len(made) == 1
    again = resolve_run(spec, cache=tmp_path / "cache", on_record=lambda s, f: made.append(f))
    assert again.path == rec.path and len(made) == 1
    # asking for candidate scores re-records a victims-only recording, once
    resolve_run(spec, scores="all", cache=tmp_path / "cache",
                on_record=lambda s, f: made.append(f))
    resolve_run(spec, scores="all", cache=tmp_path / "cache",
                on_record=lambda s, f: made.append(f))
    assert len(made) == 2 and open_recording(rec.path).run["scores"] == "all"
    with pytest.raises(NotARecordingError):
        resolve_run(tmp_path / "nothing-here")


# --- commands -------------------------------------------------------------------------

# What the analyses find is asserted above; a command adds its arguments, its JSON
# (the analysis's result, strict, beside the verdict) and its text.

def invoke_json(*args):
    return dtrf(*args, "--json").json()


def assert_the_analysis(out: dict, result) -> None:
    """A command's --json is its analysis's result, through strict JSON."""
    assert "verdict" in out
    assert {k: v for k, v in out.items() if k != "verdict"} == \
        json.loads(json.dumps(result.to_json()))


def test_cli_diff(forensic_recs, recs):  # noqa: F811
    out = invoke_json("diff", forensic_recs / "shift125", forensic_recs / "shift130")
    assert_the_analysis(out, diffed(recs["shift125"], recs["shift130"]))
    text = dtrf("diff", forensic_recs / "chain100", forensic_recs / "chain55",
                "--window", "1").ok()
    for phrase in ("share their first 2 entries", "different shortfall", "Failure of run b",
                   "Earliest: storage 3"):
        assert phrase in text, phrase


def test_cli_oom(forensic_recs, recs):  # noqa: F811
    assert_the_analysis(invoke_json("oom", forensic_recs / "chain55"), explain_oom(recs["chain55"]))
    assert "empty, nothing left to evict" in dtrf("oom", forensic_recs / "chain55").ok()


def test_cli_replay(forensic_recs, recs):  # noqa: F811
    out = invoke_json("replay", forensic_recs / "tiny105", "--ops", "4..5")
    assert_the_analysis(out, replay_window(recs["tiny105"], (4, 5)))
    text = dtrf("replay", forensic_recs / "tiny105", "--limit", "5").ok()
    assert "evict 1 a" in text
    assert "5 of 7 steps shown" in text


def test_cli_reevict(forensic_recs, recs):  # noqa: F811
    out = invoke_json("reevict", forensic_recs / "tiny120", forensic_recs / "tiny105")
    assert_the_analysis(out, reevict([recs["tiny120"], recs["tiny105"]]))
    text = dtrf("reevict", forensic_recs / "tiny120").ok()
    assert "pressure victims only" in text and "whole stream" in text


def test_cli_user_errors_exit_2(forensic_recs, tmp_path):  # noqa: F811
    """The first through the real process, the others through main() in this one."""
    done = dtrf_process("oom", forensic_recs / "chain100")
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr
    for args in (["diff", forensic_recs / "shift125", tmp_path / "missing"],
                 ["diff", forensic_recs / "shift125", forensic_recs / "chain55"]):
        result = dtrf(*args)
        assert result.code == 2 and result.traceback is None, (args, result.err)
        assert result.err.startswith("error: ") and len(result.error_lines) == 1, result.err
