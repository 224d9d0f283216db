"""Edges of a sweep (analyses/edges) and the decisive comparison (queries/diff/decisive_check).

SHIFT log (tests/logs.py; sizes in bytes, costs in ns):

    op0 w = const 10 (pinned)       op3 x = f(w) 5ns 1B; RELEASE x
    op1 a = f(w) 10ns 40B           op4 c = f(w) 30ns 40B; RELEASE b
    op2 b = f(w) 20ns 40B           op5 d = g(c) 1ns 50B; RELEASE a, c, d
                                    op6 e = f(w) 1ns 1B; RELEASE e

At op 4, 90 bytes are resident (w, a, b) and c asks for 40: under a 125-byte
budget the comparison 90 + 40 > 125 is 5 bytes short, under 130 it fits with 0
to spare. That is the first comparison the two runs decide differently.

The embedded trace (traces/hole-rnn-seed16.log) fails exactly at 25,177,836 -
25,233,075 B and switches regime between 25,288,251 B (1.54x) and one byte
more (1.14x): an exact sweep around them has these three edges, and at each
hole edge one run is 1 byte short where the other fits with 0 to spare.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import dtrf
from logs import shift_log

from dtrforensics.analyses.edges import edges, find_edges
from dtrforensics.analyses.runs import open_together
from dtrforensics.engine.replay import prepared
from dtrforensics.recorder.reader import open_recording
from dtrforensics.recorder.record import record_run
from dtrforensics.rows import fetch_dicts
from dtrforensics.sweep.runner import run_sweep
from dtrforensics.sweep.store import SweepParams
from dtrforensics.trace import load_trace

HOLE = (25_177_836, 25_233_075)
SWITCH = (25_288_251, 25_288_252)


def decisive(tmp_path, budget_a: int, budget_b: int) -> list[dict]:
    program = shift_log().program("shift")
    recs = [open_recording(record_run(program, budget=b, out_dir=tmp_path / f"r{b}")[1])
            for b in (budget_a, budget_b)]
    con, ids = open_together(recs)
    try:
        return fetch_dicts(con, "SELECT * FROM decisive_check(?, ?)", ids)
    finally:
        con.close()


def test_decisive_check_of_the_shift_log(tmp_path):
    (r,) = decisive(tmp_path, 125, 130)
    assert (r["op_id"], r["request"], r["memory"], r["same_state"]) == (4, 40, 90, True)
    assert (r["a_shortfall"], r["b_shortfall"]) == (5, 0)


def test_decisive_check_of_identical_runs_is_empty(tmp_path):
    assert decisive(tmp_path, 130, 131) == []     # 130 and 131 decide every comparison alike


def test_find_edges_outcome_and_regime():
    pieces = [(0, 9, 0.1, "ok", 1.1), (10, 19, 0.2, "oom", None), (20, 29, 0.3, "ok", 2.0),
              (30, 39, 0.4, "ok", 1.1), (45, 49, 0.5, "oom", None)]
    kinds = [(k, a[0], b[0]) for k, a, b in find_edges(pieces, 0.25, exact=True)]
    assert kinds == [("outcome", 0, 10), ("outcome", 10, 20), ("regime", 20, 30)]  # 39 -> 45 not adjacent
    assert len(find_edges(pieces, 0.25, exact=False)) == 4


@pytest.fixture(scope="module")
def embedded_edges(tmp_path_factory):
    root = tmp_path_factory.mktemp("edges")
    program = load_trace("hole-rnn-seed16")
    peak = prepared(program)[1].peak
    params = SweepParams(ratio_from=(HOLE[0] - 2000) / peak, ratio_to=(SWITCH[1] + 2000) / peak,
                         exact=True)
    run_sweep(program, params, root / "sweep", jobs=1)
    return edges(root / "sweep", cache=root / "cache")


def test_exact_edges_of_the_embedded_trace(embedded_edges):
    got = [(e.kind, e.below.budget, e.above.budget, e.below.outcome, e.above.outcome)
           for e in embedded_edges.edges]
    assert ("outcome", HOLE[0] - 1, HOLE[0], "ok", "oom") in got
    assert ("outcome", HOLE[1], HOLE[1] + 1, "oom", "ok") in got
    assert ("regime", SWITCH[0], SWITCH[1], "ok", "ok") in got
    assert all(e.exact and e.gap_bytes == 0 for e in embedded_edges.edges)


def test_hole_edges_are_decided_by_one_byte(embedded_edges):
    for e in embedded_edges.edges:
        if e.kind == "outcome":
            d = e.decisive
            assert d.same_state and (d.below_shortfall, d.above_shortfall) == (1, 0)
            assert e.first_divergent_victim is not None


def test_edges_json_carries_budgets_in_bytes(embedded_edges):
    doc = embedded_edges.to_json()
    assert doc["found"] == len(doc["edges"]) >= 3
    first = doc["edges"][0]
    assert {"below", "above", "below_outcome", "above_outcome", "decisive"} <= set(first)
    assert isinstance(first["below"]["budget"], int)


def test_dtrf_edges_command(embedded_edges, tmp_path):
    sweep = Path(embedded_edges.sweep)
    doc = dtrf("edges", sweep, "--cache", sweep.parent / "cache", "--json", cwd=tmp_path).json()
    assert [(e["below"]["budget"], e["above"]["budget"]) for e in doc["edges"]] == [
        (e.below.budget, e.above.budget) for e in embedded_edges.edges]
    text = dtrf("edges", sweep, "--cache", sweep.parent / "cache", cwd=tmp_path).ok()
    assert f"(dtr): {len(doc['edges'])} edges in" in text and "edge(s)" not in text
    bad = dtrf("edges", tmp_path / "missing", cwd=tmp_path)
    assert bad.refused("no such sweep folder") and "Traceback" not in bad.err
