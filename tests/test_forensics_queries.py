"""Diff tests for the forensic queries (queries/diff, oom, reevict, replay): each on
small hand-written logs whose answer is worked out below.

SHIFT log (sizes in bytes, costs in ns), the InceptionV4 story in miniature:

    op0 w = const 10 (pinned)       op3 x = f(w) 5ns 1B; RELEASE x  -> dead x
    op1 a = f(w) 10ns 40B           op4 c = f(w) 30ns 40B; RELEASE b
    op2 b = f(w) 20ns 40B           op5 d = g(c) 1ns 50B; RELEASE a, c, d
                                    op6 e = f(w) 1ns 1B; RELEASE e

At op4 memory is 90 (w a b). Budget 125: 90 + 40 is 5 bytes short -> decision 0
evicts a (a: 10/(40*25) = 0.01 beats b: 20/(40*5) = 0.1), then b is freed dead.
Budget 130: it fits (0 to spare); b is freed dead; op5 then needs 90 + 50 > 130
and evicts a (the only candidate: c is locked). Streams (storage ids: a=1, b=2,
x=3, c=4, d=5, e=6):
    125: dead 3 @3, pressure 1 @4, dead 2 @4, dead 4 @5, dead 5 @5, dead 6 @6
    130: dead 3 @3, dead 2 @4, pressure 1 @5, dead 4 @5, dead 5 @5, dead 6 @6
Common prefix 1; entry 2 differs (pressure 1 vs dead 2, both at op 4): a timing
shift. Both runs make the same single choice (a). Op 6 is the same again: the
histories re-converge at op 6 (op 5 is the last difference).

CHAIN log, an OOM with a known frontier:

    op0 w = const 10     op2 b = f(a) 20B; RELEASE a    op4 d = f(w) 30B
    op1 a = f(w) 20B     op3 c = f(b) 20B; RELEASE b    op5 e = h(c, d) 10B

Budget 55: a and b are freed dead after their child is computed; op4 is 5 bytes
short and evicts c (decision 0). op5 locks d, then rematerializes c (depth 2),
b (depth 3), a (depth 4); a's allocation 40 + 20 > 55 finds the pool empty (w
pinned, d locked): OOM, request 20, memory 40, pinned 40, shortfall 5.
Frontier: e (locks d: 30), c, b, a (locks w: 10). Budget 100 never evicts and
keeps c resident from op 3 to the end: c is what the failing run lacked.

FAN log: x0..x7 = f(w), 10 bytes each, costs 3, 5, 4, 3, 5, 4, 3, 5; budget 50
holds w and four of them, so ops 5..8 each evict one: decisions 0..3 take
storages 1, 2, 4, 3 (the candidates table gives every score). Forcing storage 3
(the runner-up) at decision 2 plants a divergence exactly there.
"""

from __future__ import annotations

import math

import pytest
from logs import fan_log

from dtrforensics import db
from dtrforensics.recorder.record import record_run


@pytest.fixture(scope="module")
def con(forensic_recs):
    con = db.connect(forensic_recs)
    db.install_queries(con)
    yield con
    con.close()


def rows(con, sql, params=()):
    return [tuple(r) for r in con.execute(sql, list(params)).fetchall()]


def one(con, sql, params=()):
    rel = con.execute(sql, list(params))
    names = [d[0] for d in rel.description]
    got = rel.fetchall()
    assert len(got) == 1, got
    return dict(zip(names, got[0]))


def sides(con, sql, params=()):
    rel = con.execute(sql, list(params))
    names = [d[0] for d in rel.description]
    return {r[0]: dict(zip(names, r)) for r in rel.fetchall()}


# --- diff/eviction_stream -----------------------------------------------------------

def test_eviction_stream(con):
    got = rows(con, "SELECT position, kind, storage_id, op_id, paper_op, decision, "
                    "check_tensor_id, request, check_shortfall "
                    "FROM eviction_stream('shift125')")
    assert got == [
        (1, "dead", 3, 3, 4, None, 3, 1, -34),       # x freed after its own allocation
        (2, "pressure", 1, 4, 5, 0, 4, 40, 5),       # a evicted for c: 5 bytes short
        (3, "dead", 2, 4, 5, None, 4, 40, 5),
        (4, "dead", 4, 5, 6, None, 5, 50, -25),
        (5, "dead", 5, 5, 6, None, 5, 50, -25),
        (6, "dead", 6, 6, 7, None, 6, 1, -114),
    ]
    (score,) = rows(con, "SELECT score FROM eviction_stream('shift125') WHERE kind = 'pressure'")
    assert score == (pytest.approx(0.01),)
    assert rows(con, "SELECT count(*) FROM eviction_stream('shift125') WHERE kind = 'dead' "
                     "AND score IS NOT NULL") == [(0,)]


def test_eviction_stream_matches_the_run_summary(con):
    for run_id, evictions, dead in rows(con, "SELECT run_id, evictions, dead_frees FROM runs"):
        assert rows(con, "SELECT count(*) FILTER (WHERE kind = 'pressure'), "
                         "count(*) FILTER (WHERE kind = 'dead') FROM eviction_stream(?)",
                    [run_id]) == [(evictions, dead)], run_id


# --- diff/first_divergence -----------------------------------------------------------

def test_first_divergence_timing_shift(con):
    s = sides(con, "SELECT * FROM first_divergence('shift125', 'shift130')")
    a, b = s["a"], s["b"]
    assert a["common_prefix"] == b["common_prefix"] == 1
    assert a["position"] == b["position"] == 2
    assert (a["kind"], a["storage_id"], a["tensor"], a["op_id"], a["paper_op"], a["decision"]) == \
        ("pressure", 1, "a", 4, 5, 0)
    assert a["score"] == pytest.approx(0.01)
    assert (b["kind"], b["storage_id"], b["tensor"], b["op_id"], b["decision"], b["score"]) == \
        ("dead", 2, "b", 4, None, None)
    assert a["leads"] and not b["leads"]
    # both runs at the allocation of c (tensor 4) at op 4, memory 90: only the budget differs
    for side, budget, shortfall in ((a, 125, 5), (b, 130, 0)):
        assert (side["check_op_id"], side["check_tensor_id"], side["request"],
                side["check_memory"], side["budget"], side["check_shortfall"],
                side["check_pool_size"]) == (4, 4, 40, 90, budget, shortfall, 2)
    assert (a["entries"], b["entries"]) == (6, 6)


def test_first_divergence_identical_runs(con):
    s = sides(con, "SELECT * FROM first_divergence('shift125', 'shift125')")
    assert s["a"]["position"] is None and s["a"]["common_prefix"] == 6
    assert s["b"]["kind"] is None
    assert rows(con, "SELECT * FROM first_divergence_prefix_shift('shift125', 'shift125')") == []


def test_first_divergence_when_a_run_ends(con):
    # chain: 100 frees a, b dead, then c, d, e dead at the end; 55 frees a, b dead and
    # evicts c at op 4, then fails.
    s = sides(con, "SELECT * FROM first_divergence('chain100', 'chain55')")
    a, b = s["a"], s["b"]
    assert a["common_prefix"] == 2 and a["position"] == 3
    assert (a["kind"], a["storage_id"], a["op_id"]) == ("dead", 3, 5)
    assert (b["kind"], b["storage_id"], b["op_id"], b["decision"]) == ("pressure", 3, 4, 0)
    assert b["leads"]
    # the allocation of d (tensor 4) at op 4 in both: 100 fits with 40 to spare, 55 is 5 short
    assert (a["check_tensor_id"], a["check_shortfall"]) == (4, -40)
    assert (b["check_tensor_id"], b["check_shortfall"]) == (4, 5)


def test_first_divergence_prefix_shift(con, forensic_recs, tmp_path):
    # fan at 50 and 60: the first three victims agree by storage but not by op
    record_run(fan_log().program("fan"), budget=60, out_dir=tmp_path / "fan60")
    c2 = db.connect([forensic_recs / "fan50", tmp_path / "fan60"])
    db.install_queries(c2)
    assert rows(c2, "SELECT * FROM first_divergence_prefix_shift('fan50', 'fan60')") == [
        (1, "pressure", 1, 5, 6)]


# --- diff/first_divergent_choice, candidate_rank ---------------------------------------

def test_first_divergent_choice_none_when_choices_agree(con):
    s = sides(con, "SELECT * FROM first_divergent_choice('shift125', 'shift130')")
    assert s["a"]["decision"] is None and s["a"]["common_choices"] == 1
    assert (s["a"]["decisions"], s["b"]["decisions"]) == (1, 1)


def test_first_divergent_choice_planted_by_force(con):
    s = sides(con, "SELECT * FROM first_divergent_choice('fan50', 'fan50_forced')")
    a, b = s["a"], s["b"]
    assert a["decision"] == b["decision"] == 2 and a["common_choices"] == 2
    assert (a["storage_id"], a["op_id"], a["stream_position"]) == (4, 7, 3)
    assert (b["storage_id"], b["op_id"], b["stream_position"]) == (3, 7, 3)
    assert a["alloc_tensor"] == b["alloc_tensor"] == "x6"
    assert a["shortfall"] == b["shortfall"] == 10
    # the stream diverges at the same place
    d = sides(con, "SELECT * FROM first_divergence('fan50', 'fan50_forced')")
    assert d["a"]["position"] == 3 and d["a"]["common_prefix"] == 2


def test_candidate_rank(con):
    def rank(run, k, s):
        return one(con, "SELECT * FROM candidate_rank(?, ?, ?)", [run, k, s])
    r = rank("fan50", 0, 1)
    assert (r["source"], r["in_pool"], r["rank"], r["chosen"], r["candidates"]) == \
        ("candidates", True, 1, True, 4)
    assert rank("fan50", 0, 2)["rank"] == 2
    r = rank("fan50", 0, 7)                      # x6: not computed yet
    assert (r["in_pool"], r["rank"], r["score"], r["chosen"]) == (False, None, None, False)
    # forced: storage 3 chosen at decision 2 although the policy ranks it 2nd
    r = rank("fan50_forced", 2, 3)
    assert (r["rank"], r["chosen"]) == (2, True)
    assert rank("fan50", 9, 1)["source"] is None          # no decision 9
    # without scores=all only the victim and the runner-up are known
    assert rank("fan50_victims", 0, 1)["rank"] == 1
    r = rank("fan50_victims", 0, 2)
    assert (r["source"], r["in_pool"], r["rank"], r["chosen"]) == ("decisions", True, 2, False)
    r = rank("fan50_victims", 0, 3)
    assert (r["in_pool"], r["rank"], r["candidates"]) == (None, None, None)


# --- diff/residency, aftermath --------------------------------------------------------

def test_residency(con):
    assert rows(con, "SELECT storage_id, stint, from_op, to_op, end_kind, remat "
                     "FROM residency('tiny120') WHERE storage_id IN (1, 4, 5)") == [
        (1, 0, 1, 4, "pressure", False),     # a: evicted at op 4
        (1, 1, 5, 5, "dead", True),          # rematerialized at op 5, freed dead
        (4, 0, 4, 5, "pressure", False),     # c: evicted to make room for a
        (5, 0, 5, None, None, False),        # d: resident (pinned) to the end
    ]


def test_aftermath(con):
    got = rows(con, "SELECT op_id, a_ran, b_ran, a_evictions, b_evictions, a_dead_frees, "
                    "b_dead_frees, same FROM aftermath_ops('shift125', 'shift130', 4)")
    assert got == [(4, True, True, 1, 0, 1, 1, False),
                   (5, True, True, 0, 1, 2, 2, False),
                   (6, True, True, 0, 0, 1, 1, True)]
    assert rows(con, "SELECT \"window\", first_op, last_op, a_ops, b_ops, a_evictions, "
                     "b_evictions, same_stream FROM aftermath('shift125', 'shift130', 4, 2)") == [
        (0, 4, 5, 2, 2, 1, 1, False), (1, 6, 7, 1, 1, 0, 0, True)]
    assert one(con, "SELECT * FROM aftermath_reconvergence('shift125', 'shift130', 4)") == {
        "last_difference": 5, "reconverge_op": 6, "a_last_op": 6, "b_last_op": 6}
    # a failing run never re-converges
    r = one(con, "SELECT * FROM aftermath_reconvergence('chain100', 'chain55', 4)")
    assert r["reconverge_op"] is None and (r["a_last_op"], r["b_last_op"]) == (5, 5)


# --- oom/ ------------------------------------------------------------------------------

def test_frontier_stack_oom(con):
    assert rows(con, "SELECT depth, tensor, op_id, paper_op, op_name, remat "
                     "FROM frontier_stack_oom WHERE run_id = 'chain55' ORDER BY depth") == [
        (1, "e", 5, 6, "h", False), (2, "c", 3, 4, "f", True),
        (3, "b", 2, 3, "f", True), (4, "a", 1, 2, "f", True)]
    (seq,) = rows(con, "SELECT seq FROM events WHERE run_id = 'chain55' AND kind = 'oom'")[0]
    assert rows(con, "SELECT depth, tensor FROM frontier_stack('chain55', ?)", [seq]) == [
        (1, "e"), (2, "c"), (3, "b"), (4, "a")]
    # at the allocation check of c at op 4 only the top level is open
    (check,) = rows(con, "SELECT seq FROM events WHERE run_id = 'chain55' "
                         "AND kind = 'alloc_check' AND op_id = 4")[0]
    assert rows(con, "SELECT depth, tensor, remat FROM frontier_stack('chain55', ?)",
                [check]) == [(1, "d", False)]


def test_pinned_peak(con):
    got = {r[0]: r[1:] for r in rows(con, "SELECT run_id, peak_pinned, peak_depth, "
                                          "peak_op_id, max_depth FROM pinned_peak")}
    assert got["chain55"] == (40, 4, 5, 4)
    assert got["chain100"] == (None, None, None, 1)
    for run_id, peak, depth, op in rows(con, "SELECT run_id, max_pinned_bytes, "
                                             "max_pinned_depth, max_pinned_op FROM runs"):
        p = one(con, "SELECT * FROM pinned_peak WHERE run_id = ?", [run_id])
        if op < 0:
            assert p["peak_pinned"] is None
        else:
            assert (p["peak_pinned"], p["peak_depth"], p["peak_op_id"]) == (peak, depth, op)


def test_needed_storages(con):
    got = rows(con, "SELECT storage_id, tensor, produced_by_op, level, role, fail_op_id, "
                    "evicted_op, evicted_kind, evicted_decision, evictions_before, "
                    "other_resident, other_from_op, other_to_op "
                    "FROM needed_storages('chain55', 'chain100')")
    assert got == [
        (1, "a", 1, 3, "argument", 5, 2, "dead", None, 0, False, None, None),
        (2, "b", 2, 2, "argument", 5, 3, "dead", None, 0, False, None, None),
        (3, "c", 3, 1, "argument", 5, 4, "pressure", 0, 1, True, 3, 5),
    ]


# --- reevict/ --------------------------------------------------------------------------
# tiny (test_queries) at 120: stream dead x, pressure a, pressure c, dead a, dead b;
# at 105: dead x, pressure a, pressure c, then OOM.

def test_evictions_per_storage(con):
    assert rows(con, "SELECT storage_id, tensor, pressure, dead, stream FROM "
                     "evictions_per_storage WHERE run_id = 'tiny120' ORDER BY storage_id") == [
        (1, "a", 1, 1, 2), (2, "b", 0, 1, 1), (3, "x", 0, 1, 1), (4, "c", 1, 0, 1)]
    assert rows(con, "SELECT rank, storage_id, evictions FROM "
                     "evictions_per_storage_top('tiny120', 'stream', 2)") == [(1, 1, 2), (2, 2, 1)]
    assert rows(con, "SELECT rank, storage_id, evictions FROM "
                     "evictions_per_storage_top('tiny120', 'pressure', 5)") == [(1, 1, 1), (2, 4, 1)]


def test_reeviction_figures(con):
    got = {r[0]: r[1:] for r in rows(
        con, "SELECT scope, evictions, distinct_storages, mean_per_storage, max_per_storage, "
             "top10_evictions, top10_share, remats, collateral_remats, collateral_share "
             "FROM reeviction_figures WHERE run_id = 'tiny120'")}
    assert got["pressure"] == (2, 2, 1.0, 1, 2, 1.0, 1, 0, 0.0)
    assert got["stream"] == (5, 4, 1.25, 2, 5, 1.0, 1, 0, 0.0)
    # a run without any eviction still has both rows
    assert rows(con, "SELECT scope, evictions, distinct_storages, mean_per_storage FROM "
                     "reeviction_figures WHERE run_id = 'chain100' AND scope = 'pressure'") == [
        ("pressure", 0, 0, None)]


def test_reeviction_figures_remats_match_the_summary(con):
    assert rows(con, "SELECT f.run_id FROM reeviction_figures f JOIN runs r USING (run_id) "
                     "WHERE f.scope = 'stream' AND (f.remats <> r.remats "
                     "OR f.collateral_remats <> r.collateral_remats)") == []


def test_reevicted_overlap(con):
    got = {r[0]: r[1:] for r in rows(con, "SELECT * FROM reevicted_overlap('tiny120', 'tiny105')")}
    assert got["pressure"] == (2, 2, 2, 2, 1.0, 1.0, 1.0)
    assert got["stream"] == (4, 3, 3, 4, 0.75, 0.75, 1.0)


# --- replay/ ---------------------------------------------------------------------------

def test_allocation_steps(con):
    got = rows(con, "SELECT step, op_id, tensor, request, memory, pinned_bytes, pool_bytes, "
                    "pool_size, shortfall, must_free, evictions, first_decision, remat, oom "
                    "FROM allocation_steps('tiny105', 0, 100)")
    assert got == [
        (0, 0, "w", 10, 0, 0, 0, 0, -95, False, 0, None, False, False),
        (1, 1, "a", 40, 10, 10, 0, 0, -55, False, 0, None, False, False),
        (2, 2, "b", 40, 50, 10, 40, 1, -15, False, 0, None, False, False),
        (3, 3, "x", 1, 90, 10, 80, 2, -14, False, 0, None, False, False),
        (4, 4, "c", 40, 90, 10, 80, 2, 25, True, 1, 0, False, False),
        (5, 5, "a", 40, 90, 50, 40, 1, 25, True, 1, 1, True, False),
        (6, 5, "d", 20, 90, 90, 0, 0, 5, True, 0, None, None, True),
    ]
    # a window keeps the global step numbers
    assert rows(con, "SELECT step, tensor FROM allocation_steps('tiny105', 5, 5)") == [
        (5, "a"), (6, "d")]


def test_step_victims(con):
    got = rows(con, "SELECT step, decision, victim, victim_tensor, victim_bytes, runner_up, "
                    "runner_up_tensor, shortfall FROM step_victims('tiny120', 0, 100)")
    assert got == [(4, 0, 1, "a", 40, 2, "b", 10), (5, 1, 4, "c", 40, None, None, 10)]
    scores = rows(con, "SELECT score, runner_up_score FROM step_victims('tiny120', 4, 4)")
    assert scores == [(0.01, 0.1)]
    (inf,) = rows(con, "SELECT score FROM step_victims('tiny120', 5, 5)")[0]
    assert math.isinf(inf)
