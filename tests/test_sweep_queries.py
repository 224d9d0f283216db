"""Diff tests for queries/sweep/: each question on a tiny hand-made runs table.

The table (policy dtr; budget b bytes at ratio b / 100; certificate in brackets):

    budget  10    20    30    40    50       60        70    80    90    100
    status  oom   oom   ok    oom   timeout  thrashed  ok    ok    oom   ok
    over.               2.0                          1.5   1.0         1.0
    cert.   5-14 15-24 25-34 35-44  -       55-64     65-74 75-84 85-94 95-inf

so: the first success is 30 (two failures below); 40..60 is a failure region
(the timeout at 50 set aside) bracketed by 30 and 70, and 90 is another one
bracketed by 80 and 100; 70 -> 80 is a regime switch (1.5x -> 1.0x). Over the
range [10, 100] the certificates leave 45..54 uncertified (the timeout), and
the failing executions 35-44 and 55-64 form one exact hole with both edges
exact. Reruns: budget 30 reproduced, budget 40 with another clock. Policy lru
holds two overlapping certificates.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dtrforensics import db
from dtrforensics.sweep.store import RUN_SCHEMA, status_of

ROWS = [
    # budget, outcome, overhead, lo, hi
    (10, "oom", 1.2, 5, 14), (20, "oom", 1.3, 15, 24), (30, "ok", 2.0, 25, 34),
    (40, "oom", 1.1, 35, 44), (50, "timeout", None, None, None), (60, "thrashed", 60.0, 55, 64),
    (70, "ok", 1.5, 65, 74), (80, "ok", 1.0, 75, 84), (90, "oom", 1.0, 85, 94),
    (100, "ok", 1.0, 95, None),
]


def row(policy, budget, outcome, overhead, lo, hi, rep=0, **extra):
    out = {c.name: None for c in RUN_SCHEMA}
    out.update(policy=policy, budget=budget, rep=rep, ratio=budget / 100, stage="grid",
               status=status_of(outcome), outcome=outcome, overhead=overhead, clock=budget * 7,
               remat_compute=0, evictions=1, remats=1, max_depth=1, peak_memory=budget,
               max_pinned_bytes=0, max_pinned_depth=0, interval_lo=lo, interval_hi=hi,
               victims_sha256="v", wall_seconds=0.01, worker="test:1",
               finished_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    if outcome == "oom":
        out.update(oom_op_id=3, oom_request=8, oom_pinned=budget - 1, oom_depth=2)
    out.update(extra)
    return out


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep-runs")
    rows = [row("dtr", *r) for r in ROWS]
    rows.append(row("dtr", *ROWS[2], rep=1))                      # identical rerun
    rows.append(row("dtr", *ROWS[3], rep=1, clock=1))             # disagreeing rerun
    rows += [row("lru", 0, "ok", 1.0, 0, 50), row("lru", 45, "oom", 1.0, 40, 60)]
    # two part files, as flushed batches
    table = pa.Table.from_pylist(rows, schema=RUN_SCHEMA)
    pq.write_table(table.slice(0, 6), root / "part-1.parquet")
    pq.write_table(table.slice(6), root / "part-2.parquet")
    con = db.connect([], read_only=False)        # reads sweep parts, not recordings
    db.install_queries(con)
    con.execute("SET VARIABLE files = ?", [[str(root / "part-1.parquet"),
                                           str(root / "part-2.parquet")]])
    yield con
    con.close()


def q(con, sql):
    return [tuple(r) for r in con.sql(sql.replace("FILES", "getvariable('files')")).fetchall()]


def test_sample_points(con):
    got = q(con, "SELECT budget, status FROM sample_points(FILES) WHERE policy = 'dtr'")
    assert [b for b, _ in got] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert dict(got)[50] == "unresolved" and dict(got)[60] == "fail"


def test_first_success(con):
    assert q(con, "SELECT * FROM first_success(FILES)") == [
        ("dtr", 30, 0.3, 2.0, 10, 2, 1), ("lru", 0, 0.0, 1.0, 2, 0, 0)]


def test_failures_above_first_success(con):
    assert q(con, "SELECT policy, budget, outcome FROM failures_above_first_success(FILES)") == [
        ("dtr", 40, "oom"), ("dtr", 60, "thrashed"), ("dtr", 90, "oom"), ("lru", 45, "oom")]


def test_failure_regions(con):
    assert q(con, "SELECT policy, region, lo_budget, hi_budget, failing, outcomes, below_budget, "
                  "above_budget, timeouts_inside FROM failure_regions(FILES)") == [
        ("dtr", 1, 40, 60, 2, "oom,thrashed", 30, 70, 1),
        ("dtr", 2, 90, 90, 1, "oom", 80, 100, 0)]


def test_edge_brackets(con):
    assert q(con, "SELECT direction, ok_budget, fail_budget, width_bytes, timeouts_between "
                  "FROM edge_brackets(FILES) WHERE policy = 'dtr'") == [
        ("fail->ok", 30, 20, 10, 0), ("ok->fail", 30, 40, 10, 0), ("fail->ok", 70, 60, 10, 0),
        ("ok->fail", 80, 90, 10, 0), ("fail->ok", 100, 90, 10, 0)]


def test_unresolved_points(con):
    assert q(con, "SELECT policy, budget, rep FROM unresolved_points(FILES)") == [("dtr", 50, 0)]


def test_regime_switches(con):
    assert q(con, "SELECT lo_budget, hi_budget, factor, direction "
                  "FROM regime_switches(FILES, 0.25) WHERE policy = 'dtr'") == [(70, 80, 1.5, "down")]
    assert q(con, "SELECT * FROM regime_switches(FILES, 0.6) WHERE policy = 'dtr'") == []


def test_repeat_disagreements(con):
    assert q(con, "SELECT policy, budget, rep, differing FROM repeat_disagreements(FILES)") == [
        ("dtr", 40, 1, ["clock"])]
    assert q(con, "SELECT * FROM repeat_disagreements_checked(FILES)") == [("dtr", 2, 2)]


def test_exact_partition(con):
    got = q(con, "SELECT lo, hi, outcome FROM exact_partition(FILES, 10, 100) WHERE policy = 'dtr'")
    assert got == [(10, 14, "oom"), (15, 24, "oom"), (25, 34, "ok"), (35, 44, "oom"),
                   (55, 64, "thrashed"), (65, 74, "ok"), (75, 84, "ok"), (85, 94, "oom"),
                   (95, 100, "ok")]
    raw = q(con, "SELECT raw_lo, raw_hi FROM exact_partition(FILES, 10, 100) "
                 "WHERE policy = 'dtr' AND lo IN (10, 95)")
    assert raw == [(5, 14), (95, None)]


def test_exact_merged(con):
    assert q(con, "SELECT lo, hi, outcome, intervals FROM exact_merged(FILES, 10, 100) "
                  "WHERE policy = 'dtr'") == [
        (10, 24, "oom", 2), (25, 34, "ok", 1), (35, 44, "oom", 1), (55, 64, "thrashed", 1),
        (65, 84, "ok", 2), (85, 94, "oom", 1), (95, 100, "ok", 1)]


def test_exact_failure_regions(con):
    assert q(con, "SELECT region, lo, hi, intervals, outcomes, gap_bytes, below_status, "
                  "above_status, lo_exact, hi_exact, hole "
                  "FROM exact_failure_regions(FILES, 10, 100) WHERE policy = 'dtr'") == [
        (1, 10, 24, 2, "oom", 0, None, "ok", False, True, False),
        (2, 35, 64, 2, "oom,thrashed", 10, "ok", "ok", True, True, True),
        (3, 85, 94, 1, "oom", 0, "ok", "ok", True, True, True)]


def test_exact_certificates(con):
    # clipped to [10, 100]: dtr's first certificate starts at 10, its last ends at 100
    got = q(con, "SELECT policy, lo, hi, prev_max FROM exact_certificates(FILES, 10, 100) "
                 "ORDER BY policy, lo")
    assert got[:3] == [("dtr", 10, 14, None), ("dtr", 15, 24, 14), ("dtr", 25, 34, 24)]
    assert got[8] == ("dtr", 95, 100, 94)
    assert got[9:] == [("lru", 10, 50, None), ("lru", 40, 60, 50)]


def test_exact_coverage(con):
    assert q(con, "SELECT * FROM exact_coverage(FILES, 10, 100)") == [
        ("dtr", 81, 91, 81 / 91, 9), ("lru", 51, 91, 51 / 91, 2)]


def test_exact_gaps(con):
    assert q(con, "SELECT policy, lo, hi, width, timeouts, reason "
                  "FROM exact_gaps(FILES, 10, 100, 1)") == [
        ("dtr", 45, 54, 10, 1, "timeout"), ("lru", 61, 100, 40, 0, "run-limit")]
    assert q(con, "SELECT lo, reason FROM exact_gaps(FILES, 10, 100, 41) WHERE policy = 'lru'") == [
        (61, "below-resolution")]
    # above every lru certificate: one gap; dtr's last one is unbounded above
    assert q(con, "SELECT policy, lo, hi FROM exact_gaps(FILES, 200, 300, 1)") == [
        ("lru", 200, 300)]


def test_exact_overlaps(con):
    assert q(con, "SELECT * FROM exact_overlaps(FILES)") == [("lru", 0, 50, "ok", 40, 60, "oom")]
