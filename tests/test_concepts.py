"""concepts.py and the SQL of queries/sweep say the same: regime switch, hole, status.

Random runs tables (outcomes and overheads drawn by Hypothesis) go through the
SQL questions and through the Python definitions; both must find the same
switches and the same holes.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtrforensics import concepts as K
from dtrforensics import db
from dtrforensics.sweep.store import RUN_SCHEMA, SweepParams


def _row(budget: int, outcome: str, overhead: float | None) -> dict:
    out = {c.name: None for c in RUN_SCHEMA}
    out.update(policy="dtr", budget=budget, rep=0, ratio=budget / 1000, stage="grid",
               status=K.status_of(outcome), outcome=outcome,
               overhead=overhead if outcome != K.TIMEOUT else None, clock=1, remat_compute=0,
               evictions=0, remats=0, max_depth=0, peak_memory=budget, max_pinned_bytes=0,
               max_pinned_depth=0, victims_sha256="v", wall_seconds=0.0, worker="t:1",
               finished_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    return out


@pytest.fixture(scope="module")
def con():
    con = db.connect([], read_only=False)
    db.install_queries(con)
    yield con
    con.close()      # Hypothesis keeps references to it: its database's threads end here


samples = st.lists(st.tuples(st.sampled_from(K.OUTCOMES),
                             st.sampled_from([1.0, 1.25, 1.5, 2.0, 2.5, 4.0])),
                   min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(points=samples, jump=st.sampled_from([0.25, 0.5, K.DOUBLING]))
def test_sql_and_python_find_the_same_switches_and_holes(con, tmp_path_factory, points, jump):
    path = tmp_path_factory.mktemp("concepts") / "part.parquet"
    rows = [_row(10 * (i + 1), o, v) for i, (o, v) in enumerate(points)]
    pq.write_table(pa.Table.from_pylist(rows, schema=RUN_SCHEMA), path)
    sql = {tuple(r) for r in con.execute(
        "SELECT lo_budget, hi_budget FROM regime_switches(?, ?)", [[str(path)], jump]).fetchall()}
    certain = [r for r in rows if K.known(r["outcome"])]
    py = {(a["budget"], b["budget"]) for a, b in zip(certain, certain[1:])
          if K.completes(a["status"]) and K.completes(b["status"])
          and K.is_regime_switch(a["overhead"], b["overhead"], jump)}
    assert sql == py
    sql_holes = [tuple(r) for r in con.execute(
        "SELECT lo_budget, hi_budget FROM failure_regions(?)", [[str(path)]]).fetchall()]
    outcomes = [r["outcome"] for r in rows]
    assert sql_holes == [(rows[a]["budget"], rows[b]["budget"]) for a, b in K.holes(outcomes)]


def test_statuses():
    assert [K.status_of(o) for o in K.OUTCOMES] == ["ok", "fail", "fail", "fail", "unresolved"]
    assert not K.known(None) and not K.known(K.TIMEOUT) and not K.known(K.STATUS_UNRESOLVED)
    assert K.is_feasibility_switch("ok", "oom") and not K.is_feasibility_switch("ok", None)


def test_a_regime_switch_is_strictly_more_than_the_jump():
    assert not K.is_regime_switch(1.0, 2.0, K.DOUBLING)      # doubling exactly: the same regime
    assert K.is_regime_switch(2.01, 1.0, K.DOUBLING)
    assert not K.is_regime_switch(None, 3.0, K.REGIME_JUMP)
    assert SweepParams(0.1, 0.2, 0.01).overhead_jump == K.REGIME_JUMP


def test_failure_runs_set_unknown_entries_aside():
    seq = ["oom", "ok", "oom", None, "thrashed", "ok", "oom", "timeout"]
    assert K.failure_runs(seq) == [(0, 0), (2, 4), (6, 6)]
    assert K.holes(seq) == [(2, 4)]          # below the first success, at the top: not holes
    assert K.holes([None, "ok", None]) == [] and K.holes([]) == []


def test_fringes_group_regions_closer_than_the_resolution():
    peak = 1_000_000                      # resolution: 1,000 bytes
    regions = [(100, 200), (700, 710), (5000, 5001), (5500, 5600), (9000, 9000)]
    assert K.fringes(regions, peak) == [(0, 1), (2, 3)]
    assert K.fringes(regions[:1], peak) == [] and K.fringes([], peak) == []
    assert K.is_micro(999, peak) and not K.is_micro(1000, peak)
