"""dtrforensics.db: recordings as DuckDB views, several runs in one query; `dtrf sql`."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from cli import dtrf_process
from logs import tiny_program

from dtrforensics import db
from dtrforensics.recorder.record import record_run
from dtrforensics.recorder.schema import FILE_TABLES, FORMAT_VERSION, RUNS, TABLES

REPO = Path(__file__).resolve().parents[1]
DUCK = {"int64": "BIGINT", "double": "DOUBLE", "bool": "BOOLEAN", "string": "VARCHAR",
        "list<item: string>": "VARCHAR[]", "list<item: int64>": "BIGINT[]"}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """'ok' (budget 120, with candidates) and 'oom' (budget 105, without)."""
    root = tmp_path_factory.mktemp("two")
    program = tiny_program()
    record_run(program, budget=120, out_dir=root / "ok", scores="all")
    record_run(program, budget=105, out_dir=root / "oom")
    return root


def columns(con, view):
    return [(r[0], r[1]) for r in con.sql(f"DESCRIBE {view}").fetchall()]


def declared(table):
    """(name, DuckDB type) of a view: run_id, then the declared columns as SQL sees them."""
    return [("run_id", "VARCHAR")] + [(f.name, DUCK[str(f.type)]) for f in table.query_schema()]


def test_views_have_run_id_and_every_declared_column(two_runs):
    con = db.connect(two_runs)
    for table in FILE_TABLES:
        assert columns(con, table.name) == declared(table), table.name
    assert [c for c, _ in columns(con, "runs")] == list(RUNS.column_names)


def test_small_recordings_read_into_memory_answer_as_the_files_do(two_runs, tmp_path):
    """load_below: tables of the same rows and types as the views over the files,
    and the connection reads no other file; files over the limit stay views."""
    (tmp_path / "other.csv").write_text("a\n1\n")
    files = db.connect(two_runs)
    size = sum(os.path.getsize(p) for p in two_runs.rglob("*.parquet"))
    loaded = db.connect(two_runs, load_below=size)
    kinds = dict(loaded.sql("SELECT table_name, table_type FROM information_schema.tables")
                 .fetchall())
    for table in FILE_TABLES:
        assert kinds[table.name] == "BASE TABLE", table.name
        assert columns(loaded, table.name) == columns(files, table.name)
        rows = f"SELECT * FROM {table.name} ORDER BY ALL"
        assert loaded.sql(rows).fetchall() == files.sql(rows).fetchall(), table.name
    assert files.sql("SELECT count(*) FROM candidates").fetchall() != [(0,)]
    with pytest.raises(duckdb.Error):
        loaded.sql(f"SELECT * FROM read_csv('{tmp_path / 'other.csv'}')").fetchall()
    over = db.connect(two_runs, load_below=size - 1)
    kinds = dict(over.sql("SELECT table_name, table_type FROM information_schema.tables")
                 .fetchall())
    assert {kinds[t.name] for t in FILE_TABLES} == {"VIEW"}


def test_empty_connection_is_typed(tmp_path):
    con = db.connect([])
    for table in FILE_TABLES:
        assert columns(con, table.name) == declared(table)
        assert con.sql(f"SELECT count(*) FROM {table.name}").fetchall() == [(0,)]
    assert con.sql("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_runs_view(two_runs):
    con = db.connect(two_runs)
    got = con.sql("SELECT run_id, trace, policy, ratio, budget, scores, outcome, evictions, "
                  "dead_frees, remats, max_depth, oom_tensor, oom_request, oom_pinned, "
                  "oom_depth, format_version FROM runs ORDER BY run_id").fetchall()
    assert got == [
        ("ok", "tiny", "dtr", None, 120, "all", "ok", 2, 3, 1, 2, None, None, None, None, FORMAT_VERSION),
        ("oom", "tiny", "dtr", None, 105, "victims", "oom", 2, 1, 1, 2, "d", 20, 90, 1, FORMAT_VERSION),
    ]
    (path,) = con.sql("SELECT path FROM runs WHERE run_id = 'ok'").fetchall()[0]
    assert Path(path) == (two_runs / "ok").resolve()


def test_candidates_come_only_from_recordings_that_have_them(two_runs):
    con = db.connect(two_runs)
    assert con.sql("SELECT run_id, count(*) FROM candidates GROUP BY run_id").fetchall() == \
        [("ok", 3)]
    only_oom = db.connect(two_runs / "oom")
    assert only_oom.sql("SELECT count(*) FROM candidates").fetchall() == [(0,)]
    assert columns(only_oom, "candidates") == declared(TABLES["candidates"])


def test_two_runs_in_one_query(two_runs):
    """The two budgets make the same first two choices and part at op 5."""
    con = db.connect(two_runs)
    same = con.sql("""
        SELECT a.decision, a.victim = b.victim
        FROM decisions a JOIN decisions b USING (decision)
        WHERE a.run_id = 'ok' AND b.run_id = 'oom' ORDER BY decision""").fetchall()
    assert same == [(0, True), (1, True)]
    first_difference = con.sql("""
        SELECT min(seq) FROM (
            SELECT seq, kind, storage_id, memory FROM events WHERE run_id = 'ok'
            EXCEPT
            SELECT seq, kind, storage_id, memory FROM events WHERE run_id = 'oom')""").fetchall()
    assert first_difference == [(24,)]   # ok computes d where oom fails to allocate it


def test_accepts_recordings_and_paths_and_disambiguates_names(tmp_path):
    program = tiny_program()
    _, a = record_run(program, budget=120, out_dir=tmp_path / "x" / "run")
    _, b = record_run(program, budget=105, out_dir=tmp_path / "y" / "run")
    from dtrforensics.recorder.reader import open_recording
    con = db.connect([open_recording(a), b])
    assert con.sql("SELECT run_id, outcome FROM runs ORDER BY run_id").fetchall() == [
        ("x/run", "ok"), ("y/run", "oom")]
    assert con.sql("SELECT DISTINCT run_id FROM events ORDER BY 1").fetchall() == [
        ("x/run",), ("y/run",)]


def test_load_query():
    names = db.list_queries()
    for expected in ("oom/failing_allocation", "oom/failing_op_chain", "run/counts",
                     "decisions/top_candidates"):
        assert expected in names
    assert db.load_query("oom.failing_allocation") == db.load_query("oom/failing_allocation")
    with pytest.raises(FileNotFoundError, match="known: "):
        db.load_query("oom/nothing")
    with pytest.raises(ValueError):
        db.load_query("failing_allocation")


def test_queries_are_shipped_in_the_package_and_shown_at_the_repo_root():
    package_dir = REPO / "src" / "dtrforensics" / "queries"
    for name in db.list_queries():
        area, stem = name.split("/")
        text = db.load_query(name)
        assert (package_dir / area / f"{stem}.sql").read_text() == text
        assert (REPO / "queries" / area / f"{stem}.sql").read_text() == text
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"queries/**/*.sql"' in pyproject


def test_each_query_installs_on_demand_with_what_it_reads(two_runs):
    """Installing a query's SQL through QueriesOnDemand installs the queries its
    views read first (a view is bound when it is created); alone, some fail."""
    failed_alone = []
    for name in db.list_queries():
        con = db.QueriesOnDemand(db.connect(two_runs))
        con.install_named(db.load_query(name))
        assert name in con.installed
        con.close()
        bare = db.connect(two_runs)
        try:
            db.install_query(bare, name)
        except duckdb.CatalogException:   # what its views read is missing
            failed_alone.append(name)
        bare.close()
    assert "diff/first_divergence" in failed_alone


def test_sql_naming_a_query_installs_it_and_no_other(two_runs):
    con = db.QueriesOnDemand(db.connect(two_runs))
    rows = con.execute("SELECT * FROM failing_allocation").fetchall()
    assert len(rows) == 1                         # the 'oom' run's failing allocation
    assert con.installed == db.queries_named("failing_allocation") == {"oom/failing_allocation"}
    first = con.execute("SELECT side, position FROM first_divergence('ok', 'oom')").fetchall()
    assert [side for side, _ in first] == ["a", "b"] and first[0][1] is not None
    assert "diff/eviction_stream" in con.installed
    assert con.installed < set(db.list_queries())
    con.close()


# --- dtrf sql ---------------------------------------------------------------------------

def dtrf(*args):
    return dtrf_process(*args, columns=200)


def test_sql_command(two_runs, tmp_path):
    table = dtrf("sql", "SELECT run_id, tensor, request FROM failing_allocation", two_runs)
    assert table.returncode == 0, table.stderr
    assert "oom" in table.stdout and " d " in table.stdout and "20" in table.stdout

    as_csv = dtrf("sql", "SELECT * FROM counts ORDER BY run_id", two_runs, "--csv")
    got = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["run_id"], r["evictions"], r["dead_frees"]) for r in got] == \
        [("ok", "2", "3"), ("oom", "2", "1")]

    as_json = dtrf("sql", "SELECT * FROM top_candidates('ok', 0, 2)", two_runs, "--json")
    assert [r["storage_id"] for r in json.loads(as_json.stdout)] == [1, 2]

    out = tmp_path / "events.parquet"
    written = dtrf("sql", "SELECT * FROM events", two_runs, "--parquet", out)
    assert written.returncode == 0 and "wrote 53 rows" in written.stderr
    assert pq.read_table(out).num_rows == 53

    bad = dtrf("sql", "SELECT * FROM nowhere", two_runs)
    assert bad.returncode == 2 and "nowhere" in bad.stderr
    both = dtrf("sql", "SELECT 1", two_runs, "--csv", "--json")
    assert both.returncode == 2
    nothing = dtrf("sql", "SELECT 1", tmp_path / "void")
    assert nothing.returncode == 2


def test_users_sql_reads_the_files_through_views_it_cannot_change(two_runs):
    """`dtrf sql` and `api.sql` keep the views however small the recordings (an
    analysis would read them into tables): a statement changing their rows
    fails, and nothing is loaded that the query does not read."""
    from dtrforensics import api
    kinds = api.sql("SELECT table_name, table_type FROM information_schema.tables",
                    two_runs / "ok", two_runs / "oom")
    assert {r["table_type"] for r in kinds if r["table_name"] in {t.name for t in FILE_TABLES}} \
        == {"VIEW"}
    for statement in ("DELETE FROM decisions", "INSERT INTO decisions SELECT * FROM decisions",
                      "UPDATE events SET run_id = 'x'", "DROP TABLE decisions"):
        changed = dtrf("sql", f"{statement}; SELECT count(*) FROM decisions", two_runs)
        assert changed.returncode == 2 and changed.stderr.startswith("error: SQL:"), statement


def test_sql_command_warns_about_partial_recordings(two_runs, tmp_path):
    root = tmp_path / "mixed"
    root.mkdir()
    os.symlink(two_runs / "ok", root / "ok")
    (root / ".dead.partial-99999999").mkdir()
    result = dtrf("sql", "SELECT count(*) AS n FROM runs", root, "--csv")
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["n", "1"]
    assert "warning: skipping unfinished recording" in result.stderr


def test_sql_opens_sweep_folders(tmp_path):
    """An exact sweep of hole_log over 0.3-1.0 (range 160-536 B) knows its one
    hole, 424-439 B, and its first success, 392 B (tests/test_sweep_honest.py
    finds both by a replay at every budget); SQL over the folder reads them
    from the certificates, and the sweeps view its sweep.json."""
    from sweeps import hole_log

    from dtrforensics.sweep import runner
    from dtrforensics.sweep.store import SweepParams
    log = tmp_path / "hole.log"
    log.write_text(hole_log().text())
    sweep = tmp_path / "hole-sweep"
    runner.run_sweep(str(log), SweepParams(0.3, 1.0, exact=True), sweep, jobs=1)
    fails = dtrf("sql", "SELECT interval_lo, interval_hi FROM runs WHERE status = 'fail' AND "
                 "rep = 0 AND interval_lo > (SELECT min(budget) FROM runs WHERE status = 'ok') "
                 "ORDER BY 1", sweep, "--json")
    assert fails.returncode == 0, fails.stderr
    assert json.loads(fails.stdout) == [{"interval_lo": 424, "interval_hi": 439}]
    first = dtrf("sql", "SELECT min(greatest(interval_lo, range_lo)) AS first_success "
                 "FROM runs JOIN sweeps USING (sweep_id) WHERE status = 'ok'", sweep, "--json")
    assert json.loads(first.stdout) == [{"first_success": 392}]
    row = json.loads(dtrf("sql", "SELECT * FROM sweeps", sweep, "--json").stdout)
    assert [(r["sweep_id"], r["trace"], r["range_lo"], r["range_hi"], r["exact"],
             r["policies"]) for r in row] == [("hole-sweep", "hole", 160, 536, True, ["dtr"])]
    count = dtrf("sql", "SELECT count(*) AS n, count(DISTINCT sweep_id) AS s FROM runs",
                 sweep, "--json")
    from dtrforensics.sweep.store import SweepStore
    assert json.loads(count.stdout) == [{"n": SweepStore(sweep).read_runs().num_rows, "s": 1}]
    refused = dtrf("sql", "COPY runs TO 'out.csv'", sweep)
    assert refused.returncode == 2 and "refused" in refused.stderr
    mixed = dtrf("sql", "SELECT 1", sweep, tmp_path / "nothing")
    assert mixed.returncode == 2 and "not both" in mixed.stderr
    assert "sweep folders" in dtrf("sql", "--help").stdout
