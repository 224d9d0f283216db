"""Diff tests for queries/: each shipped query on a tiny recording whose answer is
worked out by hand below, plus the ResNet-32 OOM facts answered from a recording alone.

The tiny trace (sizes in bytes, costs in ns):

    op0  w = constant                 10   (pinned)
    op1  a = conv(w)        cost 10   40
    op2  b = conv(w)        cost 20   40
    op3  x = relu(w)        cost  5    1   then RELEASE x   -> free_dead x
    op4  c = conv(w)        cost 30   40
    op5  d = batch_norm(a, b) cost 40 20   then RELEASE a, b, c

Budget 120 ("ok"): at op4 memory 90 + 40 > 120 with pool [a, b]; clock 36,
a: 10 / (40 * 25) = 0.01, b: 20 / (40 * 5) = 0.1 -> decision 0 evicts a
(runner-up b, margin 0.09). op5 rematerializes a (depth 2): 90 + 40 > 120, pool
[c] -> decision 1 evicts c; a recomputed (clock 76); d fits (110). Then a and b
are freed dead. Counts: 2 evictions, 3 dead frees (x, a, b), 7 computes (6 ops +
1 remat), clock 116.

Budget 105 ("oom"): the same until op5's own check: memory 90 (w, a, b) + 20 >
105 with a and b locked and w pinned -> OOM on d: request 20, pinned 90, depth 1,
shortfall 5; d's op batch_norm reads a and b (both conv).
"""

from __future__ import annotations

import math

import pytest
from logs import tiny_program
from public import program_or_skip

from dtrforensics import db
from dtrforensics.recorder.record import record_run


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("recs")
    program = tiny_program()
    record_run(program, budget=120, out_dir=root / "ok", scores="all")
    record_run(program, budget=105, out_dir=root / "oom", scores="all")
    return root


@pytest.fixture()
def con(tiny_dir):
    con = db.connect(tiny_dir)
    db.install_queries(con)
    yield con
    con.close()


def rows(con, sql):
    return [tuple(r) for r in con.sql(sql).fetchall()]


def test_failing_allocation(con):
    assert rows(con, "SELECT run_id, op_id, paper_op, tensor, tensor_op, request, memory, "
                     "pinned_bytes, pool_bytes, depth, budget, shortfall "
                     "FROM failing_allocation") == [
        ("oom", 5, 6, "d", "batch_norm", 20, 90, 90, 0, 1, 105, 5)]


def test_failing_op_chain(con):
    assert rows(con, "SELECT run_id, level, role, arg_index, tensor, size, storage_bytes, "
                     "op_id, paper_op, op_name FROM failing_op_chain "
                     "ORDER BY level, arg_index") == [
        ("oom", 0, "failing", None, "d", 20, 20, 5, 6, "batch_norm"),
        ("oom", 1, "argument", 0, "a", 40, 40, 1, 2, "conv"),
        ("oom", 1, "argument", 1, "b", 40, 40, 2, 3, "conv"),
    ]


def test_counts(con):
    assert rows(con, "SELECT * FROM counts ORDER BY run_id") == [
        # run, evictions, dead frees, computes, remats, collateral, materializations, pins, events
        ("ok", 2, 3, 7, 1, 0, 7, 2, 28),
        ("oom", 2, 1, 6, 1, 0, 7, 1, 25),
    ]


def test_counts_match_runs_view(con):
    assert rows(con, "SELECT c.run_id FROM counts c JOIN runs r USING (run_id) "
                     "WHERE c.evictions <> r.evictions OR c.dead_frees <> r.dead_frees "
                     "OR c.remats <> r.remats") == []


def test_top_candidates(con):
    got = rows(con, "SELECT decision, rank, chosen, storage_id, tensor, op_name, score, "
                    "compute, size, staleness, position FROM top_candidates('ok', 0, 5)")
    assert got == [(0, 1, True, 1, "a", "conv", 0.01, 10, 40, 25, 0),
                   (0, 2, False, 2, "b", "conv", 0.1, 20, 40, 5, 1)]
    assert rows(con, "SELECT rank, tensor FROM top_candidates('ok', 0, 1)") == [(1, "a")]
    # decision 1: c, just computed (staleness 0): +inf, the only candidate
    (only,) = rows(con, "SELECT storage_id, score, chosen FROM top_candidates('ok', 1, 5)")
    assert only[0] == 4 and math.isinf(only[1]) and only[2]


def test_top_candidates_decision_row_agrees(con):
    (d,) = rows(con, "SELECT victim, runner_up, score, runner_up_score, margin, "
                     "relative_margin, shortfall FROM decisions WHERE run_id = 'ok' "
                     "AND decision = 0")
    assert d[:4] == (1, 2, 0.01, 0.1)
    assert d[4] == pytest.approx(0.09) and d[5] == pytest.approx(0.9) and d[6] == 10


def test_op_timeline(con):
    got = rows(con, "SELECT op_id, memory_max, pinned_max, depth_max, evictions, dead_frees, "
                    "remats, remat_compute FROM op_timeline WHERE run_id = 'ok' ORDER BY op_id")
    assert got == [
        (0, 10, 0, 1, 0, 0, 0, 0),
        (1, 50, 10, 1, 0, 0, 0, 0),
        (2, 90, 10, 1, 0, 0, 0, 0),
        (3, 91, 10, 1, 0, 1, 0, 0),
        (4, 90, 10, 1, 1, 0, 0, 0),     # the request is never in `memory` before it fits
        (5, 110, 90, 2, 1, 2, 1, 10),   # d's own check: w + a + b locked = 90 pinned
    ]


def test_every_query_file_has_a_header_and_prefixed_names():
    for name in db.list_queries():
        text = db.load_query(name)
        stem = name.split("/")[1]
        assert text.startswith(f"-- {stem}: "), name
        assert "Parameters:" in text, name
        defined = [line.split()[4] for line in text.splitlines()
                   if line.startswith("CREATE OR REPLACE")]
        assert defined and all(d.split("(")[0].startswith(stem) for d in defined), name


# --- ResNet-32 at 0.104: the published OOM, from the recording alone ----------------

@pytest.fixture(scope="module")
def resnet_con(tmp_path_factory):
    program = program_or_skip("resnet32")
    _, path = record_run(program, ratio=0.104,
                         out_dir=tmp_path_factory.mktemp("resnet") / "r104")
    del program
    con = db.connect(path)
    db.install_queries(con)
    yield con
    con.close()


def test_resnet32_failing_allocation(resnet_con):
    assert rows(resnet_con, "SELECT tensor, tensor_op, request, pinned_bytes, depth, budget "
                            "FROM failing_allocation") == [
        ("x7984", "cudnn_batch_norm", 179_830_912, 889_795_480, 118, 1_046_362_631)]


def test_resnet32_failing_op_chain(resnet_con):
    chain = rows(resnet_con, "SELECT level, tensor, op_name, storage_bytes "
                             "FROM failing_op_chain ORDER BY level, arg_index")
    assert chain[0] == (0, "x7984", "cudnn_batch_norm", 179_830_784)
    assert (1, "x7977", "cudnn_convolution", 179_830_784) in chain[1:]
