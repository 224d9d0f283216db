"""Hostile input (issue 13): every case exits with its documented code and one
clear `error:` line, never a traceback, and changes no file it was not asked to
write (every file of the workspace is fingerprinted before and after)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli import Outcome, command, dtrf
from hostile import fingerprint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtrforensics import db, validate
from dtrforensics.errors import EXIT_NOT_DETERMINISTIC, EXIT_USER, OptionError, UserError
from dtrforensics.recorder.manifest import RecordingDamagedError
from dtrforensics.recorder.reader import open_recording
from dtrforensics.sweep.store import SweepStore

TRACE = "hole"          # the packaged synthetic trace: 24 ops, always available


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A workspace: a recording, a sweep, someone's data folder, odd paths."""
    root = tmp_path_factory.mktemp("hostile")
    assert dtrf("run", TRACE, "--ratio", "0.6", "--record", root / "REC").code == 0
    assert dtrf("sweep", TRACE, "--from", "0.3", "--to", "1.0", "--step", "0.1", "--jobs", "1",
                "--out", root / "SWEEP", "--no-progress").code == 0
    data = root / "data"
    data.mkdir()
    (data / "run.json").write_text('{"format_version": "1.1", "tables": []}')
    (data / "precious.txt").write_text("keep me")
    (root / "adir").mkdir()
    os.symlink("loop", root / "loop")
    return root


def check(ws: Path, args, code: int, message: str) -> Outcome:
    """Run one case: the code, the message in one `error:` line, no traceback, and
    the workspace exactly as before; the run's outcome, for what else it must say."""
    before = fingerprint(ws)
    result = dtrf(*args, cwd=ws)
    assert result.traceback is None, result.traceback
    assert result.code == code, (result.code, result.err)
    assert len(result.error_lines) == 1, result.err
    assert message.lower() in result.error_lines[0].lower(), result.err
    assert "Traceback" not in result.err
    assert fingerprint(ws) == before
    return result


# (arguments, message) pairs: each must exit 2 with that message and change nothing.
USER_ERRORS = [
    # budgets and ratios
    (("run", TRACE, "--ratio", "inf"), "finite"),
    (("run", TRACE, "--ratio", "nan"), "finite"),
    (("run", TRACE, "--ratio", "1e300"), "bytes a budget may be"),
    (("run", TRACE, "--ratio", "1e12"), "bytes a budget may be"),
    (("run", TRACE, "--ratio", "0"), "> 0"),
    (("run", TRACE, "--ratio", "-0.5"), "> 0"),
    (("run", TRACE, "--budget", "9223372036854775808"), "between 1 and"),
    (("run", TRACE, "--budget", "-1"), "between 1 and"),
    (("run", TRACE, "--budget", "0"), "a budget must be > 0"),
    (("explain", TRACE, "--budget", "0"), "a budget must be > 0"),
    (("intervene", TRACE, "--budget", "0", "--retain", "3"), "a budget must be > 0"),
    (("oom", f"{TRACE}@0B"), "a budget must be > 0"),
    (("run", TRACE), "exactly one of --ratio or --budget"),
    (("oom", f"{TRACE}@inf"), "finite"),
    (("oom", f"{TRACE}@nan"), "finite"),
    (("oom", f"{TRACE}@1e300"), "bytes a budget may be"),
    (("oom", f"{TRACE}@-1"), "> 0"),
    (("oom", f"{TRACE}@0.5:nonsense"), "unknown policy"),
    (("oom", f"{TRACE}@half"), "not a budget ratio"),
    # limits and timeouts
    (("run", TRACE, "--ratio", "0.6", "--timeout", "-1"), "--timeout must be > 0"),
    (("run", TRACE, "--ratio", "0.6", "--timeout", "0"), "--timeout must be > 0"),
    (("run", TRACE, "--ratio", "0.6", "--timeout", "nan"), "finite"),
    (("run", TRACE, "--ratio", "0.6", "--timeout", "inf"), "finite"),
    (("run", TRACE, "--ratio", "0.6", "--timeout", "1e308"), "at most 31,536,000 seconds"),
    (("run", TRACE, "--ratio", "0.6", "--timeout", str(1 << 63)), "at most 31,536,000 seconds"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--max-seconds",
      "1e308", "--out", "S1"), "--max-seconds must be <= 3.1536e+07"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--min-step",
      "1e308", "--out", "S1"), "--min-step must be <="),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--overhead-jump",
      str(1 << 63), "--out", "S1"), "--overhead-jump must be <="),
    (("run", TRACE, "--ratio", "0.6", "--thrash-limit", "1e308"), "whatever the trace"),
    (("run", TRACE, "--ratio", "0.6", "--thrash-limit", "inf"), "finite"),
    (("run", TRACE, "--ratio", "0.6", "--thrash-limit", "0"), "must be >= 1"),
    (("run", TRACE, "--ratio", "0.6", "--thrash-limit", "0.5"), "must be >= 1"),
    (("run", TRACE, "--ratio", "0.6", "--thrash-limit", "1e300"), "clock range"),
    # policies, seeds, counts
    (("run", TRACE, "--ratio", "0.6", "--policy", "nonsense"), "unknown policy"),
    (("explain", TRACE, "--ratio", "0.3", "--policy", "nonsense"), "unknown policy"),
    (("explain", TRACE, "--ratio", "0.3", "--max-attempts", "-1"), "--max-attempts must be >= 1"),
    (("explain", TRACE, "--ratio", "0.3", "--max-combo", "0"), "--max-combo must be >= 1"),
    (("explain", TRACE, "--ratio", "0.3", "--max-attempts", str(10**30)),
     "--max-attempts must be <= 100,000"),
    (("explain", TRACE, "--ratio", "0.3", "--max-combo", "1000000"), "--max-combo must be <= 16"),
    (("explain", TRACE, "--ratio", "0.3", "--first", "-1"), "--first must be >= 1"),
    (("explain", TRACE, "--ratio", "0.3", "--jobs", "0"), "--jobs must be >= 1"),
    (("synth", "rnn", "--seed", "-1", "-o", "new.log"), "--seed must be between"),
    (("sql", "SELECT 1", "REC", "--limit", "-1"), "--limit must be >= 0"),
    # op windows and interventions
    (("run", TRACE, "--ratio", "0.6", "--retain", "3", "--retain-ops", "20..10"), "reversed"),
    (("run", TRACE, "--ratio", "0.6", "--retain", "3", "--retain-ops", "0..999"),
     "outside the trace"),
    (("run", TRACE, "--ratio", "0.6", "--retain", "999999"), "not a storage id"),
    (("run", TRACE, "--ratio", "0.6", "--retain-ops", "1..2"), "--retain-ops needs --retain"),
    (("run", TRACE, "--ratio", "0.6", "--forbid-victim", "3"), "STORAGE@DECISION"),
    (("run", TRACE, "--ratio", "0.5", "--force-victim", f"3@{1 << 63}"), "decision index"),
    (("run", TRACE, "--ratio", "0.5", "--forbid-victim", f"3@{1 << 63}"), "decision index"),
    (("run", TRACE, "--ratio", "0.5", "--forbid-victim", "3@-1"), "decision index"),
    (("run", TRACE, "--ratio", "0.5", "--force-victim", f"{1 << 64}@1"), "storage id"),
    (("intervene", TRACE, "--ratio", "0.5", "--force-victim", f"3@{1 << 63}"), "decision index"),
    (("intervene", TRACE, "--ratio", "0.5", "--forbid-victim", f"3@{1 << 63}"),
     "decision index"),
    (("run", TRACE, "--ratio", "0.5", "--retain", f"3,{1 << 63}"), "--retain"),
    (("intervene", TRACE, "--ratio", "0.5", "--retain", "-3"), "--retain"),
    (("run", TRACE, "--ratio", "0.5", "--retain", "3", "--retain-ops", f"0..{1 << 64}"),
     "op id"),
    (("replay", "REC", "--ops", f"{1 << 63}..{1 << 64}"), "op id"),
    (("replay", "REC", "--ops", "0..9999"), "outside the trace"),
    (("replay", "REC", "--ops", "9..3"), "reversed"),
    (("replay", "REC", "--ops", "a..b"), "A..B"),
    # sweeps
    (("sweep", TRACE, "--from", "0.1", "--to", "1e12", "--step", "1e11", "--out", "S1"),
     "bytes a budget may be"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "nan", "--out", "S1"), "finite"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "1e-12", "--out", "S1"),
     "--max-points"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--interior",
      "100000000", "--out", "S1"), "--max-points"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--max-points", "5",
      "--out", "S1"), "--max-points"),
    (("sweep", TRACE, "--from", "inf", "--to", "0.2", "--step", "0.01", "--out", "S1"),
     "finite"),
    (("sweep", TRACE, "--from", "0.2", "--to", "0.1", "--step", "0.01", "--out", "S1"),
     "--from < --to"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--timeout", "nan",
      "--out", "S1"), "finite"),
    (("sweep", TRACE, "--from", "0.1", "--to", "0.2", "--step", "0.01", "--out", "SWEEP"),
     "other parameters"),
    (("holes", "adir"), "not a sweep directory"),
    (("holes", "SWEEP", "--threshold", "nan"), "--threshold must be a finite number"),
    (("holes", "SWEEP", "--threshold", "-1"), "--threshold must be > 0"),
    (("holes", "SWEEP", "--policy", "nope"), "no policy nope"),
    (("sweep", TRACE, "--from", "0.3", "--to", "1.0", "--step", "0.1", "--jobs", "0",
      "--out", "S1"), "--jobs must be >= 1"),
    (("sweep", TRACE, "--from", "0.3", "--to", "1.0", "--exact", "--max-runs", "0",
      "--out", "S1"), "--max-runs"),
    (("sql", "  ", "REC"), "empty"),
    (("sql", "SELECT", "REC"), "SQL: Parser Error"),
    (("sql", "SELECT * FROM nowhere", "REC"), "nowhere"),
    (("diff", "REC", "adir"), "not a recording"),
    (("diff", "REC", "nowhere"), "no such recording"),
    (("replay", "REC", "--limit", "-1"), "--limit must be >= 0"),
    (("synth", "rnn", "--depth", "-1", "-o", "new.log"), "depth must be >= 1"),
    (("synth", "chain", "--param-max", "99999999999999999999", "-o", "new.log"), "must be <="),
    (("synth", "chain", "--size-levels", "1000000000", "-o", "new.log"), "must be <="),
    (("synth", "small", "--ops", "1000000000", "-o", "new.log"), "must be <="),
    (("export", "SWEEP", "-f", "csv", "-o", "/nonexistent/x.csv"), "does not exist"),
    # paths that are not what they claim
    (("run", "adir/", "--ratio", "0.5"), "is a directory"),
    (("run", "./loop", "--ratio", "0.5"), "symbolic link loop"),
    (("run", "/dev/null", "--ratio", "0.5"), "not a regular file"),
    (("run", "nowhere/x.log", "--ratio", "0.5"), "no such trace file"),
    (("show", "adir"), "not a recording"),
    (("show", "nowhere"), "not a recording"),
    (("sql", "SELECT 1", "adir"), "no recordings found"),
    # outputs: never inside a recording, never new folders, never someone's data
    (("export", "REC", "-f", "perfetto", "-o", "/nonexistent/dir/x.json"), "does not exist"),
    (("export", "REC", "-f", "perfetto", "-o", "REC/x.json"), "inside the recording"),
    (("sql", "SELECT 1", "REC", "--parquet", "nodir/x.parquet"), "does not exist"),
    (("run", TRACE, "--ratio", "0.6", "--record", "data", "--overwrite"), "not a recording"),
    (("run", TRACE, "--ratio", "0.6", "--record", "adir/../REC"), "already exists"),
    (("run", TRACE, "--ratio", "0.6", "--record", "/proc/dtrf-hostile/rec"), "/proc"),
    # an empty cluster address is refused as by dtrf sweep, not read as "no cluster"
    (("reproduce", "--findings", "--scheduler", "", "-o", "F"), "needs --scheduler ADDRESS"),
    (("reproduce", "--findings", "--scheduler", " ", "-o", "F"), "needs --scheduler ADDRESS"),
    (("reproduce", "--quick", "--map-seconds", "5", "-o", "F"), "--map-seconds goes with --findings"),
    (("reproduce", "--jobs", "2", "--total-seconds", "9", "-o", "F"), "--jobs, --total-seconds go with"),
]


@pytest.mark.parametrize("args,message", USER_ERRORS, ids=lambda x: " ".join(map(str, x))
                         if isinstance(x, tuple) else None)
def test_user_errors_are_one_line_and_change_nothing(ws, args, message):
    check(ws, args, EXIT_USER, message)


SQL_WRITES = [
    ("SELECT kind FROM events LIMIT 5", ("--parquet", "REC/events.parquet"), "inside the recording"),
    ("COPY (SELECT 42 AS x) TO 'REC/events.parquet' (FORMAT parquet)", (), "COPY"),
    ("COPY (SELECT 42 AS x) TO 'REC/events.parquet' (FORMAT parquet, USE_TMP_FILE false)", (),
     "COPY"),
    ("SELECT 1; COPY (SELECT 1) TO 'elsewhere.csv'", (), "COPY"),
    ("ATTACH 'new.duckdb' AS other", (), "ATTACH"),
    ("EXPORT DATABASE 'exported'", (), "EXPORT"),
    ("INSTALL httpfs", (), "LOAD"),
    ("LOAD httpfs", (), "LOAD"),
    ("PRAGMA enable_profiling", (), "PRAGMA"),
    ("SET enable_external_access = true", (), "SET"),
    ("SELECT * FROM read_csv('/etc/passwd')", (), "Permission"),
    ("SELECT * FROM read_parquet('SWEEP/runs/*.parquet')", (), "Permission"),
    ("SELECT * FROM glob('*')", (), "Permission"),
]


@pytest.mark.parametrize("query,options,message", SQL_WRITES)
def test_sql_cannot_write_or_read_beyond_the_recordings(ws, query, options, message):
    check(ws, ("sql", query, "REC", *options), EXIT_USER, message)


def test_sql_may_read_the_views_and_the_recordings_own_files(ws):
    result = dtrf("sql", "SELECT count(*) AS n FROM events", "REC", "--csv", cwd=ws)
    assert result.code == 0 and int(result.out.splitlines()[1]) > 0
    own = ws / "REC" / "events.parquet"
    direct = dtrf("sql", f"SELECT count(*) AS n FROM read_parquet('{own}')", "REC", "--csv",
                  cwd=ws)
    assert direct.code == 0 and direct.out == result.out
    defined = dtrf("sql", "CREATE TEMP VIEW k AS SELECT kind FROM events; "
                   "SELECT count(*) AS n FROM k", "REC", "--csv", cwd=ws)
    assert defined.code == 0 and defined.out == result.out


def test_sql_parquet_output_is_written_outside_recordings(ws, tmp_path):
    out = tmp_path / "kinds.parquet"
    before = fingerprint(ws)
    result = dtrf("sql", "SELECT kind, count(*) AS n FROM events GROUP BY 1", "REC",
                  "--parquet", out, cwd=ws)
    assert result.code == 0, result.err
    assert pq.read_table(out).num_rows > 0
    assert fingerprint(ws) == before
    link = tmp_path / "into-rec"
    os.symlink(ws / "REC", link)
    check(ws, ("sql", "SELECT 1", "REC", "--parquet", link / "x.parquet"), EXIT_USER,
          "inside the recording")


def test_db_connections_are_locked_down(ws):
    con = db.connect(ws / "REC")
    assert con.sql("SELECT count(*) FROM events").fetchall()[0][0] > 0
    with pytest.raises(Exception, match="Permission"):
        con.sql("SELECT * FROM read_csv('/etc/passwd')").fetchall()
    with pytest.raises(Exception, match="lock"):
        con.execute("SET enable_external_access = true")
    with pytest.raises(db.SqlRefusedError):
        db.check_read_only(con, "COPY events TO 'x.parquet'")


# --- damaged recordings -------------------------------------------------------------------

def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(16)
    path.write_bytes(bytes(data))


def _rows(path: Path) -> None:
    run = json.loads((path.parent / "run.json").read_text())
    for entry in run["tables"]:
        if entry["file"] == path.name:
            entry["rows"] += 1
    (path.parent / "run.json").write_text(json.dumps(run))


def _rows_old_format(path: Path) -> None:
    """A format 1.0 manifest (names and rows only) with a wrong row count."""
    run = json.loads((path.parent / "run.json").read_text())
    run["tables"] = [{"file": e["file"], "rows": e["rows"] + (e["file"] == path.name)}
                     for e in run["tables"]]
    (path.parent / "run.json").write_text(json.dumps(run))


DAMAGE = {
    "deleted": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
    "truncated": _truncate,
    "garbled": _garble,
    "swapped": lambda p: shutil.copyfile(p.parent / "decisions.parquet", p),
    "wrong rows": _rows,
    "wrong rows, format 1.0": _rows_old_format,
    "extra table": lambda p: shutil.copyfile(p, p.parent / "candidates.parquet"),
}


SQL_COUNT = ("sql", "SELECT count(*) FROM events", "{rec}")
# Every damage under one command, every command under two damages.
DAMAGED_CASES = [(d, t, SQL_COUNT) for d in DAMAGE for t in ("events.parquet", "storages.parquet")]
DAMAGED_CASES += [(d, "storages.parquet", c) for d in ("deleted", "garbled")
                  for c in [("show", "{rec}"), ("oom", "{rec}"), ("reevict", "{rec}", "{rec}"),
                            ("replay", "{rec}"),
                            ("export", "{rec}", "-f", "perfetto", "-o", "out.json")]]


@pytest.mark.parametrize("damage,table,command", DAMAGED_CASES)
def test_a_damaged_recording_is_named_not_read(ws, tmp_path, damage, table, command):
    rec = tmp_path / "rec"
    shutil.copytree(ws / "REC", rec)
    DAMAGE[damage](rec / table)
    args = [a.format(rec=rec) for a in command]
    check(tmp_path, args, EXIT_USER, "damaged recording")
    with pytest.raises(RecordingDamagedError, match=str(rec)):
        open_recording(rec)


def test_a_damaged_cache_entry_is_recorded_again(tmp_path):
    made = dtrf("oom", f"{TRACE}@0.3", cwd=tmp_path)
    (entry,) = (tmp_path / "recordings" / "cache").iterdir()
    _garble(entry / "events.parquet")
    again = dtrf("oom", f"{TRACE}@0.3", cwd=tmp_path)
    assert again.traceback is None and again.code == made.code, again.err
    assert again.out == made.out
    open_recording(entry)          # whole again
    (entry / "run.json").write_text("{ not json")
    once_more = dtrf("oom", f"{TRACE}@0.3", cwd=tmp_path)
    assert once_more.out == made.out
    open_recording(entry)


def test_overwrite_replaces_only_a_recording(ws, tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(ws / "REC", rec)
    assert dtrf("run", TRACE, "--ratio", "0.5", "--record", rec, "--overwrite").code == 0
    assert open_recording(rec).run["ratio"] == 0.5
    (rec / "notes.txt").write_text("mine")
    before = fingerprint(tmp_path)
    check(tmp_path, ("run", TRACE, "--ratio", "0.6", "--record", rec, "--overwrite"), EXIT_USER,
          "not a recording")
    assert fingerprint(tmp_path) == before
    (rec / "notes.txt").unlink()
    (rec / "sub").mkdir()
    check(tmp_path, ("run", TRACE, "--ratio", "0.6", "--record", rec, "--overwrite"), EXIT_USER,
          "not a recording")
    link = tmp_path / "link"
    os.symlink(ws / "REC", link)
    check(tmp_path, ("run", TRACE, "--ratio", "0.6", "--record", link, "--overwrite"), EXIT_USER,
          "not a recording")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_recording_into_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        check(tmp_path, ("run", TRACE, "--ratio", "0.6", "--record", folder / "rec"), EXIT_USER,
              "permission denied")
    finally:
        folder.chmod(0o755)


# --- sweeps --------------------------------------------------------------------------------

def _sweep_args(out: Path) -> list:
    return ["sweep", TRACE, "--from", "0.3", "--to", "1.0", "--step", "0.1", "--jobs", "1",
            "--out", out, "--no-progress", "--json"]


def _runs(out: Path) -> list[tuple]:
    table = SweepStore(out).read_runs().drop(["wall_seconds", "cpu_seconds", "worker", "finished_at"])
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbled", "foreign"])
def test_a_corrupt_sweep_part_is_skipped_then_set_aside_and_rerun(ws, tmp_path, damage):
    out = tmp_path / "sweep"
    shutil.copytree(ws / "SWEEP", out)
    expected = _runs(out)
    (part,) = (out / "runs").glob("part-*.parquet")
    if damage == "foreign":
        pq.write_table(pa.table({"x": [1, 2]}), part)
    else:
        DAMAGE[damage](part)
    for reader in (("holes", out), ("export", out, "-f", "csv", "-o", tmp_path / "runs.csv")):
        result = dtrf(*reader, cwd=tmp_path)
        assert result.traceback is None and result.code == 0, result.err
        assert f"warning: skipping {part}" in result.err
    resumed = dtrf(*_sweep_args(out), cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    assert "set aside" in resumed.err and "8 runs" in resumed.err
    assert (out / "runs" / "corrupt" / part.name).is_file()
    assert _runs(out) == expected


def test_a_killed_sweep_shows_as_killed_and_its_stale_lock_is_taken_over(ws, tmp_path):
    out = tmp_path / "sweep"
    shutil.copytree(ws / "SWEEP", out)
    doc = json.loads((out / "sweep.json").read_text())
    doc["status"] = "running"
    (out / "sweep.json").write_text(json.dumps(doc))
    (out / "sweep.lock").write_text("999999999\n")       # no such process
    shown = dtrf("holes", out, "--json", cwd=tmp_path)
    assert json.loads(shown.out)["status"] == "killed"
    resumed = dtrf(*_sweep_args(out), cwd=tmp_path)
    assert resumed.code == 0 and "no longer running" in resumed.err
    assert not (out / "sweep.lock").exists()
    assert json.loads(dtrf("holes", out, "--json").out)["status"] == "complete"


def test_a_live_lock_is_refused_with_a_hint(ws, tmp_path):
    out = tmp_path / "sweep"
    shutil.copytree(ws / "SWEEP", out)
    (out / "sweep.lock").write_text(f"{os.getppid()}\n")   # a live process, not us
    check(tmp_path, _sweep_args(out), EXIT_USER, f"delete {out / 'sweep.lock'}")


def test_disagreeing_reruns_exit_with_the_not_deterministic_code(ws, tmp_path):
    out = tmp_path / "sweep"
    shutil.copytree(ws / "SWEEP", out)
    (part,) = (out / "runs").glob("part-*.parquet")
    table = pq.read_table(part)
    rerun = table.slice(0, 1).to_pylist()[0]
    rerun.update(rep=1, stage="repeat", clock=rerun["clock"] + 1, evictions=rerun["evictions"] + 1)
    doc = json.loads((out / "sweep.json").read_text())
    doc["params"]["repeats"] = 1
    # A sweep of a version before part identities, so its unmarked parts are its own.
    doc.pop("identity", None)
    (out / "sweep.json").write_text(json.dumps(doc))
    schema = table.schema.remove_metadata()
    pq.write_table(table.replace_schema_metadata(None), part)
    pq.write_table(pa.Table.from_pylist([rerun], schema=schema),
                   out / "runs" / "part-99999999999999999999-1-00001.parquet")
    result = dtrf("holes", out, cwd=tmp_path)
    assert result.traceback is None
    assert result.code == EXIT_NOT_DETERMINISTIC, result.err
    assert "not deterministic" in result.error_lines[0]


# --- the numeric options, at random ----------------------------------------------------------

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-12, 1e-300, 0.3, 0.6, 1.0, 1.5, 1e9, 1e300]),
)


def _one_clean_outcome(result) -> None:
    assert result.traceback is None, result.traceback
    assert result.code in (0, EXIT_USER), result.err
    if result.code == EXIT_USER:
        assert len(result.error_lines) == 1, result.err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(ratio=NUMBERS, timeout=st.one_of(st.none(), NUMBERS),
       thrash=st.one_of(st.just(60.0), NUMBERS))
def test_run_numeric_options_never_crash(tmp_path, ratio, timeout, thrash):
    args = ["run", TRACE, "--ratio", repr(ratio), "--thrash-limit", repr(thrash), "--json"]
    if timeout is not None:
        args += ["--timeout", repr(timeout)]
    before = fingerprint(tmp_path)
    result = dtrf(*args, cwd=tmp_path)
    _one_clean_outcome(result)
    assert fingerprint(tmp_path) == before
    if result.code == 0:
        assert json.loads(result.out)["outcome"] in ("ok", "oom", "thrashed", "timeout")


@settings(max_examples=40, deadline=None)
@given(budget=st.integers(min_value=-(1 << 70), max_value=1 << 70))
def test_budgets_are_checked_at_the_library_door(budget):
    if 1 <= budget <= validate.MAX_BYTES:
        assert validate.budget(budget) == budget
    else:
        with pytest.raises(OptionError, match="between 1 and"):
            validate.budget(budget)


@settings(max_examples=60, deadline=None)
@given(frm=NUMBERS, to=NUMBERS, step=st.one_of(st.none(), NUMBERS),
       interior=st.integers(min_value=-5, max_value=10 ** 9))
def test_sweep_parameters_are_refused_cleanly_before_any_run(frm, to, step, interior):
    from dtrforensics.sweep.runner import check_size
    from dtrforensics.sweep.store import SweepParams
    params = SweepParams(ratio_from=frm, ratio_to=to, step=step, interior=interior)
    try:
        params.validate()
        n = check_size(params)
    except UserError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert 0 < n <= 100_000


def real_command(words: str):
    """The click command of `words` (a command, or a group and its subcommands), as
    `load_command` builds it once per process (the option cases below ask for one
    hundreds of times, at collection and as they run). Parsing a command line
    (make_context) leaves the command as it was."""
    from dtrforensics.cli.main import load_command
    first, *rest = words.split()
    command = load_command(first)
    for word in rest:
        command = command.commands[word]
    return command


def _numeric_options() -> list[tuple[str, str]]:
    """(command words, option) for every int and float option of every command."""
    from dtrforensics.cli.main import COMMANDS

    found = []

    def walk(command, words):
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*words, name])
        for param in command.params:
            if type(param.type).__name__ in ("IntParamType", "FloatParamType"):
                found.append((" ".join(words), param.opts[0]))
    for name in COMMANDS:
        walk(real_command(name), [name])
    return found


def _out_of_range(option_type: str) -> list[str]:
    if option_type == "FloatParamType":     # every float option has a finite maximum
        return ["nan", "inf", "-inf", "1e308", str(1 << 63)]
    return [str(1 << 63), str(-(1 << 63) - 1), "99999999999999999999"]


def _option_cases():
    cases = []
    for words, option in _numeric_options():
        param = next(p for p in real_command(words).params if p.opts[0] == option)
        cases += [(words, option, value) for value in _out_of_range(type(param.type).__name__)]
    return cases


@pytest.mark.parametrize("words,option,value", _option_cases())
def test_every_numeric_option_refuses_what_is_out_of_range_as_it_is_parsed(words, option, value):
    """A value no option can take (nan, inf, beyond int64) is refused by the option's
    own check while the command line is parsed: before any trace, model or file is read
    (issue 39: `torch run --ratio inf` recorded and ran the step first)."""
    with pytest.raises(OptionError, match=option):
        real_command(words).make_context(words, [option, value])


@pytest.mark.parametrize("args,message", [
    (("torch", "run", "zoo:mlp", "--ratio", "inf"), "--ratio must be a finite number"),
    (("torch", "run", "zoo:mlp", "--ratio", "-inf"), "--ratio must be a finite number"),
    (("torch", "run", "zoo:mlp", "--ratio", "nan"), "--ratio must be a finite number"),
    (("torch", "run", "zoo:mlp", "--ratio", "1e308"), "bytes a budget may be"),
    (("torch", "run", "zoo:mlp", "--budget", "99999999999999999999"), "--budget must be between"),
    (("torch", "record", "zoo:mlp", "-o", "m.log", "--seed", "99999999999999999999"),
     "--seed must be between 0 and"),
    (("torch", "record", "zoo:mlp", "-o", "m.log", "--batch", "99999999999999999999"),
     "--batch must be <="),
    (("torch", "run", "zoo:mlp", "--ratio", "0.5", "--seq", "0"), "--seq must be >= 1"),
])
def test_torch_numbers_are_refused_before_the_model_is_built(tmp_path, monkeypatch, args, message):
    pytest.importorskip("torch")
    from dtrforensics.torch import spec

    def built(*_args, **_kwargs):
        raise AssertionError("the model was built before the option was checked")
    monkeypatch.setattr(spec, "build", built)
    check(tmp_path, args, EXIT_USER, message)


@pytest.mark.parametrize("given,message", [
    ({"ratio": float("inf")}, "ratio must be a finite number"),
    ({"ratio": float("-inf")}, "ratio must be a finite number"),
    ({"ratio": 1e308}, "bytes a budget may be"),
    ({"budget": 1 << 63}, "budget must be between 1 and"),
    ({"budget": 0}, "a budget must be > 0"),
])
def test_torch_execute_checks_its_budget_before_the_step(monkeypatch, given, message):
    """The library's door: `execute(ratio=inf)` recorded and ran the step, then crashed."""
    torch = pytest.importorskip("torch")
    from dtrforensics.torch import execute as executing
    monkeypatch.setattr(executing, "prepare", lambda *a, **k: pytest.fail("the step was recorded"))
    model = torch.nn.Linear(3, 1)
    with pytest.raises(OptionError, match=message):
        executing.execute(model, (torch.ones(2, 3), torch.ones(2, 1)),
                          lambda out, target: (out - target).pow(2).sum(), **given)


@pytest.mark.parametrize("value,message", [
    ("nan", "the value must be a finite number"),
    ("-inf", "the value must be a finite number"),
    ("99999999999999999999", "the value is outside the int64 range"),
])
def test_set_numbers_are_range_checked_before_the_model_is_built(tmp_path, monkeypatch, value,
                                                                  message):
    pytest.importorskip("torch")
    from dtrforensics.torch import spec
    monkeypatch.setattr(spec, "build", lambda *a, **k: pytest.fail("the model was built"))
    check(tmp_path, ("torch", "record", "zoo:mlp", "-o", "m.log", "--set", f"layers={value}"),
          EXIT_USER, f"--set layers={value}: {message}")


@pytest.fixture
def raising_factories(tmp_path, monkeypatch):
    """Factories whose library errors span several lines."""
    (tmp_path / "raising_factories.py").write_text(
        "import torch\n\n\n"
        "def lines():\n"
        "    raise ValueError('Class validation error:\\n    ValueError: size (-5) is bad.')\n\n\n"
        "def frames():\n"
        "    return torch.randn(2, 1 << 64)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("factory,message", [
    ("lines", "raised ValueError: Class validation error: ValueError: size (-5) is bad."),
    ("frames", "raised TypeError: randn(): argument 'size' failed to unpack"),
])
def test_a_factorys_error_over_several_lines_is_one_line(raising_factories, factory, message):
    """`--set hidden_size=-5` (hf:llama) printed the config's error over two lines;
    PyTorch's C++ errors bring their stack frames along."""
    pytest.importorskip("torch")
    check(raising_factories, ("torch", "record", f"raising_factories:{factory}", "-o", "x.log"),
          EXIT_USER, message)
    result = dtrf("torch", "record", f"raising_factories:{factory}", "-o", "x.log",
                  cwd=raising_factories)
    assert "frame #" not in result.err and "Exception raised from" not in result.err


@pytest.mark.parametrize("command", [("record", "-o", "x.log"), ("run", "--ratio", "0.5")])
def test_a_model_file_named_as_a_spec_says_what_to_write(raising_factories, command):
    """`file.py:factory` is no module name: the error says the spec to write instead."""
    pytest.importorskip("torch")
    verb, *rest = command
    check(raising_factories, ("torch", verb, "raising_factories.py:lines", *rest), EXIT_USER,
          "a model spec names a module, not a file: write raising_factories:lines, run in .")


def test_an_hf_config_error_is_one_line(tmp_path):
    pytest.importorskip("transformers")
    check(tmp_path, ("torch", "record", "hf:llama", "-o", "m.log", "--set", "hidden_size=-5"),
          EXIT_USER, "The hidden size (-5) is not a multiple")


def test_every_user_error_is_printed_in_one_line(capsys):
    from dtrforensics.cli.errors import report_user_error
    assert report_user_error(UserError("a library's\n   message\n\nover lines")) == EXIT_USER
    assert capsys.readouterr().err == "error: a library's message over lines\n"


@pytest.mark.parametrize("args,names", [
    (("run", TRACE, "--budget", "inf"), ("--budget", "dtrf run --help")),
    (("run", TRACE, "--budget", "1.5"), ("--budget", "dtrf run --help")),
    (("run", TRACE, "--bogus"), ("--bogus", "dtrf run --help")),
    (("run",), ("trace", "dtrf run --help")),
    (("nosuchcmd",), ("nosuchcmd", "dtrf --help")),
    (("--bogus",), ("--bogus", "dtrf --help")),
    (("traces", "list", "--bogus"), ("--bogus", "dtrf traces list --help")),
    (("sql", "SELECT 1", "REC", "--limit", "many"), ("--limit", "dtrf sql --help")),
])
def test_a_usage_error_is_one_error_line(ws, args, names):
    """click's own report is four lines (Usage, Try, blank, Error); ours is one
    `error:` line naming what is wrong and where the help is, exit 2."""
    result = dtrf(*args, cwd=ws)
    assert result.traceback is None, result.traceback
    assert result.code == EXIT_USER, result.err
    assert result.err.count("\n") == 1 and result.err.startswith("error: "), result.err
    assert all(name in result.err for name in names), result.err
    assert result.out == ""


@pytest.mark.parametrize("args", [("--help",), ("run", "--help"), ("--version",), ()])
def test_help_and_version_still_succeed(args):
    result = dtrf(*args)
    assert (result.code, result.err, result.traceback) == (0, "", None)
    assert "dtrf" in result.out


def test_the_sql_table_shows_control_characters_escaped(ws):
    """A TAB split a value, a leading CR hid it, a newline looked like two rows and
    an ESC reached the terminal raw; CSV and JSON keep the values exact."""
    query = ("SELECT 'a' || chr(9) || 'b' AS tab, chr(13) || 'cr' AS cr, "
             "'l1' || chr(10) || 'l2' AS nl, chr(27) || '[31mred' AS esc")
    shown = dtrf("sql", query, "REC", cwd=ws)
    assert shown.code == 0, shown.err
    for raw, escaped in (("\t", r"a\tb"), ("\r", r"\rcr"), ("\x1b", r"\x1b[31mred")):
        assert raw not in shown.out and escaped in shown.out, shown.out
    assert r"l1\nl2" in shown.out
    exact = dtrf("sql", query, "REC", "--json", cwd=ws)
    assert json.loads(exact.out) == [{"tab": "a\tb", "cr": "\rcr", "nl": "l1\nl2",
                                      "esc": "\x1b[31mred"}]
    assert "a\tb" in dtrf("sql", query, "REC", "--csv", cwd=ws).out


def test_the_narrow_sql_view_shows_control_characters_escaped():
    """Too narrow for a table, the rows become `key: value` lines: escaped too."""
    from rich.console import Console

    from dtrforensics.render.recording import result_table
    console = Console(width=24, record=True, color_system=None)
    console.print(result_table([("a_long_column_name", "VARCHAR"), ("another_long_name", "VARCHAR")],
                               [("x\ty\nz", "\x1b[2J\rq")]))
    text = console.export_text()
    assert "a_long_column_name:" in text and "┃" not in text, text     # the fallback
    assert "\t" not in text and "\x1b" not in text and "\r" not in text, repr(text)
    assert r"x\ty\nz" in text and r"\x1b[2J\rq" in text, text


def test_a_victim_pin_the_run_never_reaches_is_reported(ws):
    result = dtrf("run", TRACE, "--ratio", "0.6", "--forbid-victim", "3@999999", "--json", cwd=ws)
    assert result.code == 0
    assert "warning: --forbid-victim 3@999999 never applied" in result.err


# --- the hierarchy and its exit codes --------------------------------------------------------

def test_every_user_error_class_maps_to_its_exit_code(monkeypatch, ws):
    import dtrforensics.trace as trace_package  # `dtrf run` imports load_trace when it runs
    from dtrforensics.errors import DataError, NotDeterministicError, RefusedError

    cases = [(OptionError("bad --thing"), EXIT_USER), (DataError("bad file"), EXIT_USER),
             (RefusedError("no"), EXIT_USER),
             (NotDeterministicError("reruns disagree"), EXIT_NOT_DETERMINISTIC),
             (PermissionError(13, "Permission denied", "/some/file"), EXIT_USER)]
    for exc, code in cases:
        def boom(*args, exc=exc, **kwargs):
            raise exc
        monkeypatch.setattr(trace_package, "load_trace", boom)
        result = dtrf("run", TRACE, "--ratio", "0.6", cwd=ws)
        assert result.traceback is None and result.code == code
        assert result.error_lines == [f"error: {exc}" if not isinstance(exc, OSError)
                                      else "error: /some/file: Permission denied"]


def test_a_bug_keeps_its_traceback(monkeypatch, ws):
    import dtrforensics.trace as trace_package

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(trace_package, "load_trace", bug)
    result = dtrf("run", TRACE, "--ratio", "0.6", cwd=ws)
    assert result.traceback is not None and "ZeroDivisionError" in result.traceback


# Exceptions of the package that are not a user's to fix, or that a command
# catches and says in its own words (each: where it is met).
NOT_USER_ERRORS = {
    "dtrforensics.engine.replay.InvariantError": "a bug in the replay (strict checking)",
    "dtrforensics.engine.native.Mismatch": "engine/compiled.py falls back to numba",
    "dtrforensics.engine.replay._ArenaFull": "control flow: the run starts again, larger",
    "dtrforensics.engine.regions.RegionsBroken": "a bug in the engine (DTRF_CHECK_REGIONS pass)",
    "dtrforensics.engine.graph.GraphOrderError": "a bug in the graph build (edges come sorted)",
    "dtrforensics.trace.cache.CacheEntryError": "trace/cache.py parses the log again",
    "dtrforensics.interop.plumbing.ExportError": "a recording that is not a run: a bug",
    "dtrforensics.interop.tables.TableExportError": "cli/export_cmd.py: a CommandError",
    "dtrforensics.torch.recorder.RecordError": "cli/torch_cmd.py: a CommandError",
    "dtrforensics.sweep.scheduler.OutOfTime": "control flow: run_sweep returns stopped",
    "dtrforensics.torch.concrete.FakeValueError": "a RecordError's cause: one error line",
    "dtrforensics.torch.execute.BudgetError": "cli/torch_run_cmd.py: a CommandError",
    "dtrforensics.torch.schedule.RealOutOfMemory": "the real step's OOM, reported as a result",
    "dtrforensics.torch.schedule.ScheduleEnded": "control flow inside the executor",
    "dtrforensics.torch.schedule.ScheduleError": "cli/torch_run_cmd.py: a CommandError",
}


def _package_exceptions() -> dict[str, type]:
    """Every exception class defined in a module of the package (every module
    imported; one needing a missing optional extra is left out)."""
    import importlib
    import pkgutil

    import dtrforensics
    for info in pkgutil.walk_packages(dtrforensics.__path__, "dtrforensics."):
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            if exc.name and exc.name.split(".")[0] == "dtrforensics":
                raise
    found, todo = {}, [Exception]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("dtrforensics.") and not issubclass(cls, Warning):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_library_errors_belong_to_the_hierarchy():
    """Walking every exception class of the package: each is a UserError (one
    error line, exit 2) unless NOT_USER_ERRORS says where else it is met."""
    found = _package_exceptions()
    assert {"dtrforensics.sweep.store.SweepStoreError", "dtrforensics.db.SqlRefusedError",
            "dtrforensics.recorder.manifest.RecordingDamagedError"} <= set(found)
    # a subclass of a named class is met where that class is caught (the CLI's
    # `except RecordError` turns backend, checkpointing and lowering errors into
    # one error line)
    named = tuple(found[name] for name in NOT_USER_ERRORS if name in found)
    outside = sorted(name for name, cls in found.items()
                     if not issubclass(cls, (UserError, *named)))
    assert not outside, f"exceptions outside the UserError hierarchy: {outside}"
    stale = sorted(set(NOT_USER_ERRORS) - set(found))
    assert not stale, f"NOT_USER_ERRORS names classes that do not exist: {stale}"


def test_outputs_never_replace_a_device_pipe_or_symlink(tmp_path):
    """An atomic write renames a temporary file onto its target: onto a pipe or a
    device that would replace it with a plain file. It is refused; a symlink is
    written through (the link stays)."""
    import stat

    from dtrforensics.errors import RefusedError
    from dtrforensics.fsutil import atomic_path
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(RefusedError, match="not a regular file"):
        with atomic_path(fifo) as tmp:
            tmp.write_text("x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old")
    link.symlink_to(target)
    with atomic_path(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"


def test_an_edited_or_undecodable_run_json_is_refused(tmp_path):
    """run.json carries its own checksum: a changed budget or outcome, or bytes that
    are not UTF-8, make the recording an error naming the file, never a traceback."""
    import json as _json

    from dtrforensics.recorder.reader import open_recording
    from dtrforensics.recorder.record import record_run
    from dtrforensics.trace import load_trace
    _, rec = record_run(load_trace(TRACE), ratio=0.6, out_dir=tmp_path / "rec")
    run_file = rec / "run.json"
    original = run_file.read_bytes()
    open_recording(rec)                                   # intact: opens
    for field, value in (("budget", 1), ("outcome", "ok"), ("policy", "nope")):
        doc = _json.loads(original)
        doc[field] = value
        run_file.write_text(_json.dumps(doc))
        with pytest.raises(UserError, match="run.json was changed"):
            open_recording(rec)
        result = dtrf("show", str(rec), cwd=tmp_path)
        assert result.code == EXIT_USER and result.traceback is None
    run_file.write_bytes(b"\xff\xfe" + original)
    result = dtrf("show", str(rec), cwd=tmp_path)
    assert result.code == EXIT_USER and result.traceback is None and "run.json" in result.err


def test_sweep_jobs_are_bounded(tmp_path):
    """--jobs 100000 started about 900 processes; now it is refused before any start."""
    result = dtrf("sweep", TRACE, "--from", "0.5", "--to", "0.6", "--step", "0.05",
                  "--jobs", "100000", "--out", str(tmp_path / "sw"), cwd=tmp_path)
    assert result.code == EXIT_USER and result.traceback is None
    assert "worker processes" in result.err and not (tmp_path / "sw").exists()


def test_a_sweep_description_without_parameters_is_one_error_line(tmp_path):
    import json as _json
    out = tmp_path / "sw"
    assert dtrf("sweep", TRACE, "--from", "0.5", "--to", "0.6", "--step", "0.05", "--jobs", "1",
                "--out", str(out), cwd=tmp_path).code == 0
    doc = _json.loads((out / "sweep.json").read_text())
    doc["params"] = None
    (out / "sweep.json").write_text(_json.dumps(doc))
    result = dtrf("holes", str(out), cwd=tmp_path)
    assert result.code == EXIT_USER and result.traceback is None


# --- issue 31: one rule for "inside a recording", every writer ------------------------------

# Every command that writes, aimed at the recording REC or inside it: refused, REC unchanged.
WRITES_INTO_REC = [
    ("torch", "record", "zoo:mlp", "-o", "REC/x.log"),
    ("torch", "record", "zoo:mlp", "-o", "REC/events.parquet"),
    ("synth", "chain", "-o", "REC/ops.parquet"),
    ("synth", "chain", "-o", "REC/sub/x.log"),
    ("explain", TRACE, "--ratio", "0.6", "--record-root", "REC"),
    ("explain", TRACE, "--ratio", "0.6", "--record-root", "REC/runs"),
    ("intervene", TRACE, "--ratio", "0.6", "--retain", "3", "--record-root", "REC"),
    ("run", TRACE, "--ratio", "0.6", "--record", "REC/sub"),
    ("sweep", TRACE, "--from", "0.5", "--to", "0.6", "--step", "0.1", "--out", "REC/sw"),
    ("compare-policies", TRACE, "--policy", "dtr,lru", "--step", "0.1", "--out", "REC"),
    ("compare-policies", TRACE, "--policy", "dtr,lru", "--step", "0.1", "--out", "SWEEP",
     "--figure", "REC/fig"),
    ("plot", "SWEEP", "-o", "REC/plot"),
    ("regime", f"{TRACE}@0.6", f"{TRACE}@0.9", "--plot", "REC/x.png"),
    ("reproduce", "--quick", "-o", "REC"),
    ("reproduce", "--findings", "-o", "REC/f"),
    ("demo", "-o", "REC/demo"),
    ("export", "SWEEP", "-f", "csv", "-o", "REC/x.csv"),
    ("sql", "SELECT 1 AS x", "REC", "--parquet", "REC/x.parquet"),
    ("oom", f"{TRACE}@0.6", "--cache", "REC/cache"),
    ("torch", "run", "zoo:mlp", "--ratio", "0.9", "--log", "REC/step.log"),
    ("torch", "run", "zoo:mlp", "--ratio", "0.9", "--record", "REC/sub"),
]


@pytest.mark.parametrize("args", WRITES_INTO_REC, ids=" ".join)
def test_no_command_writes_into_a_recording(ws, args):
    check(ws, args, EXIT_USER, "the recording")


@pytest.fixture
def stray(tmp_path) -> Path:
    """tmp_path holding REC (a recording) and saved/ whose run.json is a saved
    `dtrf run --json`: an ordinary file, not a manifest."""
    assert dtrf("run", TRACE, "--ratio", "0.6", "--record", tmp_path / "REC").code == 0
    saved = dtrf("run", TRACE, "--ratio", "0.6", "--json")
    assert saved.code == 0, saved.err
    (tmp_path / "saved" / "sub").mkdir(parents=True)
    (tmp_path / "saved" / "run.json").write_text(saved.out)
    return tmp_path


def test_show_says_a_stray_run_json_is_not_a_recording(stray):
    check(stray, ("show", "saved"), EXIT_USER, "not a recording")
    assert "run.json" in dtrf("show", "saved", cwd=stray).error_lines[0]


@pytest.mark.parametrize("args,written", [
    (("export", "REC", "-f", "perfetto", "-o", "saved/x.json"), "saved/x.json"),
    (("sql", "SELECT 1 AS x", "REC", "--parquet", "saved/sub/x.parquet"), "saved/sub/x.parquet"),
    (("regime", f"{TRACE}@0.6", f"{TRACE}@0.9", "--plot", "saved/sub/x.png"), "saved/sub/x.png"),
    (("synth", "chain", "-o", "saved/x.log"), "saved/x.log"),
    (("run", TRACE, "--ratio", "0.6", "--record", "saved/rec"), "saved/rec/run.json"),
])
def test_a_folder_with_a_stray_run_json_is_an_ordinary_folder(stray, args, written):
    result = dtrf(*args, cwd=stray)
    assert result.traceback is None, result.traceback
    assert result.code == 0, result.err
    assert (stray / written).exists()


def test_a_recording_is_a_folder_whose_run_json_is_a_manifest(ws, tmp_path):
    from dtrforensics.recorder.reader import enclosing_recording, is_recording
    assert is_recording(ws / "REC") and enclosing_recording(ws / "REC" / "a" / "b") == ws / "REC"
    for text in ('{"format_version": "1.1", "tables": []}', '{"trace": "hole"}', "[1]",
                 "{ not json", '{"format_version": 3, "tables": []}'):
        folder = tmp_path / f"f{abs(hash(text))}"
        folder.mkdir()
        (folder / "run.json").write_text(text)
        assert not is_recording(folder) and enclosing_recording(folder / "x") is None, text
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "run.json").write_text('{"format_version": "9.0"}')
    assert is_recording(newer)     # a newer format is refused by version, not written into


def test_reproduce_writes_only_into_a_folder_it_owns(tmp_path):
    from dtrforensics.fsutil import OWN_MARK
    root_mark = Path("/work") / OWN_MARK
    had_mark = root_mark.exists()
    check(tmp_path, ("reproduce", "--quick", "-o", "/"), EXIT_USER, "root")
    assert root_mark.exists() == had_mark
    (tmp_path / "out" / "work").mkdir(parents=True)
    (tmp_path / "out" / "work" / "thesis.tex").write_text("mine")
    check(tmp_path, ("reproduce", "--quick", "-o", "out"), EXIT_USER, "not made by")
    check(tmp_path, ("reproduce", "--findings", "-o", "out"), EXIT_USER, "not made by")


def test_an_owned_folder_is_made_marked_reused_or_refused(tmp_path):
    from dtrforensics.errors import RefusedError
    from dtrforensics.fsutil import OWN_MARK, claim_folder
    made = claim_folder(tmp_path / "a" / "work", owner="x")
    assert (made / OWN_MARK).is_file()
    (made / "anything").mkdir()
    assert claim_folder(made, owner="x") == made            # marked: ours, whatever it holds
    old = tmp_path / "old"
    (old / "runs").mkdir(parents=True)
    claim_folder(old, owner="x", may_hold=frozenset({"runs"}))   # from before the mark
    assert (old / OWN_MARK).is_file()
    foreign = tmp_path / "foreign"
    (foreign / "runs").mkdir(parents=True)
    (foreign / "notes").write_text("x")
    with pytest.raises(RefusedError, match="notes"):
        claim_folder(foreign, owner="x", may_hold=frozenset({"runs"}))
    assert not (foreign / OWN_MARK).exists()
    unchecked = tmp_path / "later"
    claim_folder(unchecked, owner="x", create=False)
    assert not unchecked.exists()


# --- issue 31: no traceback from ordinary use ------------------------------------------------

def _no_matplotlib(monkeypatch):
    import sys
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize("args,untouched", [
    (("compare-policies", TRACE, "--policy", "dtr,lru", "--from", "0.5", "--to", "0.9",
      "--step", "0.1", "--out", "cp", "--json", "--no-progress"), "cp"),
    (("reproduce", "--quick", "-o", "rep", "--json"), "rep"),
    (("regime", f"{TRACE}@0.6", f"{TRACE}@0.9", "--plot", "r.png"), "recordings"),
])
def test_a_missing_figure_dependency_is_one_line_before_the_work(monkeypatch, tmp_path, args,
                                                                 untouched):
    _no_matplotlib(monkeypatch)
    check(tmp_path, args, EXIT_USER, "matplotlib")
    assert not (tmp_path / untouched).exists()


def test_json_has_no_nan_and_says_where_one_was():
    import math

    from dtrforensics.jsonsafe import json_safe
    from dtrforensics.render.jsonout import dumps

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    doc = strict(dumps({"loss": math.nan, "runs": [{"x": 1.0}, {"x": math.nan}],
                        "score": math.inf}))
    assert doc["loss"] is None and doc["runs"][1]["x"] is None and doc["score"] == "inf"
    assert any("loss" in n for n in doc["notes"]) and any("runs[1].x" in n for n in doc["notes"])
    assert json_safe([math.nan, -math.inf]) == [None, "-inf"]
    assert "notes" not in strict(dumps({"loss": 1.5}))


def test_run_json_is_strict_json(ws):
    text = (ws / "REC" / "run.json").read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in run.json"))


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """A module of odd model factories on sys.path."""
    (tmp_path / "odd_factories.py").write_text(
        "import sys\n"
        "import torch\n\n\n"
        "def exits():\n"
        "    sys.exit(0)\n\n\n"
        "def nan_loss(batch: int = 2):\n"
        "    model = torch.nn.Linear(3, 1)\n"
        "    data = (torch.ones(batch, 3), torch.ones(batch, 1))\n"
        "    return model, data, lambda out, target: (out * float('nan')).sum()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_torch_record_refuses_what_is_not_a_factory(tmp_path):
    pytest.importorskip("torch")
    check(tmp_path, ("torch", "record", "torch:zeros", "-o", "z.log"), EXIT_USER,
          "not a model factory")


def test_a_factory_calling_sys_exit_is_one_error_line(factories):
    pytest.importorskip("torch")
    check(factories, ("torch", "record", "odd_factories:exits", "-o", "x.log"), EXIT_USER,
          "sys.exit(0)")
    assert not (factories / "x.log").exists()


def test_a_factory_calling_sys_exit_under_torch_run_is_one_error_line(factories):
    """`torch run` exited 0, silently, when the model's code called sys.exit(0)."""
    pytest.importorskip("torch")
    check(factories, ("torch", "run", "odd_factories:exits", "--ratio", "0.5"), EXIT_USER,
          "sys.exit(0)")


def test_torch_record_json_of_a_nan_loss_is_strict(factories):
    pytest.importorskip("torch")
    result = dtrf("torch", "record", "odd_factories:nan_loss", "-o", "n.log", "--json",
                  cwd=factories)
    assert result.code == 0 and result.traceback is None, result.err
    doc = json.loads(result.out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert doc["loss"] is None and any("loss" in n for n in doc["notes"])


@pytest.mark.parametrize("args,message", [
    (("torch", "record", "zoo:mlp", "-o", "-"), "not stdout"),
    (("synth", "chain", "-o", "-"), "not stdout"),
    (("sql", "SELECT 1 AS x", "REC", "--parquet", "-"), "not stdout"),
    (("torch", "record", "zoo:mlp", "-o", "m.log", "--set", "batch=3", "--batch", "4"),
     "both set batch"),
    (("torch", "record", "zoo:mlp", "-o", "m.log", "--set", "layers=2", "--set", "layers=3"),
     "given twice"),
    (("torch", "run", "zoo:mlp", "--ratio", "1", "--set", "batch=3", "--batch", "4"),
     "both set batch"),
    (("torch", "run", "zoo:mlp", "--ratio", "1", "--set", "layers=2", "--set", "layers=3"),
     "given twice"),
    (("sweep", TRACE, "--from", "0.5", "--to", "0.6", "--step", "0.1",
      "--policy", "{pol}:p,{pold}:p", "--out", "sw"), "twice"),
    (("compare-policies", TRACE, "--from", "0.5", "--to", "0.6", "--step", "0.1",
      "--policy", "{pol}:p,{pold}:p", "--out", "cp"), "twice"),
])
def test_ambiguous_outputs_and_options_are_refused(ws, args, message):
    pol = ws / "twice.py"
    if not pol.exists():
        pol.write_text("from dtrforensics.policy import policy, ratio\n\n\n"
                       "@policy\ndef p(compute, size):\n    return ratio(compute, size)\n")
    args = [a.format(pol="twice.py", pold="./twice.py") for a in args]
    check(ws, args, EXIT_USER, message)
    assert not (ws / "-").exists()


# --- sweep parts from strangers, dying workers (issue 31 #1, #3) ------------------------

def _grid_sweep_args(trace: str, out: Path) -> list[str]:
    return ["sweep", trace, "--from", "0.5", "--to", "0.9", "--step", "0.1", "--jobs", "1",
            "--no-progress", "--out", str(out)]


def test_a_part_from_another_sweep_is_set_aside_and_its_points_rerun(tmp_path):
    """A valid part of another trace's sweep copied into SWEEP/runs/ was read as
    this sweep's runs; now readers skip it with a warning, and resuming sets it
    aside into runs/corrupt/ and keeps the sweep's own answer."""
    from logdsl import Log
    log = tmp_path / "other.log"
    log.write_text(Log().const("w", 64).call("a", "f", ["w"], 10, 128)
                   .call("b", "g", ["a", "w"], 20, 256).release("a")
                   .call("c", "h", ["b"], 5, 64).text())
    mine, other = tmp_path / "mine", tmp_path / "other"
    assert dtrf(*_grid_sweep_args(TRACE, mine), cwd=tmp_path).code == 0
    assert dtrf(*_grid_sweep_args(str(log), other), cwd=tmp_path).code == 0
    before = json.loads(dtrf("holes", str(mine), "--json", cwd=tmp_path).out)
    own = sorted(p.name for p in (mine / "runs").glob("part-*.parquet"))
    stranger = next((other / "runs").glob("part-*.parquet"))
    shutil.copy(stranger, mine / "runs" / "part-99999999999999999999-1-00001.parquet")
    read = dtrf("holes", str(mine), "--json", cwd=tmp_path)
    assert read.code == 0 and read.traceback is None
    assert "another trace" in read.err
    assert json.loads(read.out)["policies"] == before["policies"]
    resumed = dtrf(*_grid_sweep_args(TRACE, mine), "--json", cwd=tmp_path)
    assert resumed.code == 0 and resumed.traceback is None and "set aside" in resumed.err
    assert sorted(p.name for p in (mine / "runs").glob("part-*.parquet")) == own
    assert [p.name for p in (mine / "runs" / "corrupt").iterdir()] == [
        "part-99999999999999999999-1-00001.parquet"]
    assert json.loads(resumed.out)["policies"] == before["policies"]
    # a part of this trace's sweep under other parameters is a stranger too
    timed = tmp_path / "timed"
    assert dtrf(*_grid_sweep_args(TRACE, timed), "--timeout", "100", cwd=tmp_path).code == 0
    shutil.copy(next((timed / "runs").glob("part-*.parquet")),
                mine / "runs" / "part-99999999999999999999-2-00001.parquet")
    read = dtrf("holes", str(mine), "--json", cwd=tmp_path)
    assert "another sweep of this trace" in read.err
    assert json.loads(read.out)["policies"] == before["policies"]


KILLING_SWEEP = """
import os, signal, sys
from dtrforensics.cli.main import main
from dtrforensics.sweep import backends

real = backends.run_point


def run_point(sha256, point, timeout):
    if abs(point.ratio - 0.7) < 1e-9:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(sha256, point, timeout)


backends.run_point = run_point
sys.argv = ["dtrf", *sys.argv[1:]]
main()
"""


def test_a_dying_sweep_worker_is_one_error_line_and_the_sweep_resumes(tmp_path):
    import subprocess
    import sys as _sys
    out = tmp_path / "sw"
    args = ["sweep", TRACE, "--from", "0.5", "--to", "0.9", "--step", "0.1", "--jobs", "2",
            "--no-progress", "--flush-rows", "1", "--out", str(out)]
    import dtrforensics
    src = str(Path(dtrforensics.__file__).resolve().parents[1])
    env = {**os.environ, "COLUMNS": "1000",  # stderr wraps at COLUMNS: the error line whole
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([_sys.executable, "-c", KILLING_SWEEP, *args], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == EXIT_USER, res.stderr
    assert "Traceback" not in res.stderr and "BrokenProcessPool" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert "worker" in errors[0] and "killed by signal 9" in errors[0]
    assert "ratio 0.7," in errors[0] and "rerun the same command" in errors[0]
    kept = {r["budget"] for r in SweepStore(out).read_runs().to_pylist()}
    assert SweepStore(out).status == "interrupted"
    resumed = dtrf(*args, cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    rows = SweepStore(out).read_runs().to_pylist()
    assert len(rows) == 5 and kept <= {r["budget"] for r in rows}
    assert sorted(round(r["ratio"], 6) for r in rows) == [0.5, 0.6, 0.7, 0.8, 0.9]


# --- policies that crash or never return (issue 31 #4, #5) ---------------------------------

RUNAWAY_POLICIES = '''
import os
from pathlib import Path

from numba import njit

import runaway_helpers
from dtrforensics.policy import policy


def arrived(program):
    """Called once the score is compiled, just before the run: the test's cue."""
    Path(os.environ["ARRIVED"]).touch()
    return []


@njit
def depth(n):
    if n <= 0:
        return 0
    return 1 + depth(n - 1)


@njit
def ping(n):
    return 0 if n <= 0 else pong(n - 1)


@njit
def pong(n):
    return 0 if n <= 0 else ping(n - 1)


@njit
def spin(n):
    k = 0
    while k >= 0:
        k = (k + n) % 7
    return k


@policy
def deep(size):
    return depth(size)


@policy
def mutual(size):
    return ping(size)


@policy
def through_a_module(size):
    return runaway_helpers.down(size)


@policy(locked=arrived)
def forever(size, staleness):
    x = size
    while x >= 0:
        x = (x * 3 + staleness) % 1000003
    return x


@policy(locked=arrived)
def forever_in_a_helper(size):
    return spin(size)


@policy(locked=arrived)
def forever_in_a_comprehension(size):
    return sum([k for k in range(size * size) if k < 0])
'''

RUNAWAY_HELPERS = '''
import numba


@numba.njit
def down(n):
    return n if n <= 0 else down(n - 1)
'''


@pytest.fixture
def runaway(tmp_path) -> Path:
    (tmp_path / "runaway_helpers.py").write_text(RUNAWAY_HELPERS)
    path = tmp_path / "runaway.py"
    path.write_text(RUNAWAY_POLICIES)
    return path


def _dtrf_process(*args, cwd: Path, wait: float, interrupt: bool = False):
    """`dtrf ARGS` in its own process (a crash or a hang must not take the suite
    with it), with SIGINT handled as at a terminal even when the suite's own is
    ignored (a background job). With `interrupt`, SIGINT goes 1 s after the run
    started. Returns (exit code, stdout, stderr, seconds to the exit from the
    interrupt, else from the start)."""
    import signal
    import subprocess
    import time

    import dtrforensics
    src = str(Path(dtrforensics.__file__).resolve().parents[1])
    arrived = cwd / "arrived"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(cwd)]), "ARRIVED": str(arrived)}
    proc = subprocess.Popen(
        [*command(), *map(str, args)],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = time.monotonic()
    try:
        while interrupt and not arrived.exists() and proc.poll() is None:
            if time.monotonic() - started > wait:
                raise subprocess.TimeoutExpired(args, wait)
            time.sleep(0.05)
        if interrupt and proc.poll() is None:
            time.sleep(1)
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"dtrf {' '.join(map(str, args))} still ran after {wait} s: {err[-2000:]}")
    return proc.returncode, out, err, time.monotonic() - started


# --- policy files: code, and only regular files of source (issue 39) --------------------

MARKING_POLICY = '''
from pathlib import Path
Path(__file__).with_name("top-level code ran").touch()

from dtrforensics.policy import policy, ratio


@policy
def p(compute, size):
    return ratio(compute, size)
'''


NOT_SOURCE = ", not a regular file of Python source"


@pytest.mark.parametrize("make,what", [
    (lambda path: os.symlink("/dev/zero", path), "is a character device" + NOT_SOURCE),
    (lambda path: os.mkfifo(path), "is a FIFO" + NOT_SOURCE),
    (lambda path: path.mkdir(), "is a directory" + NOT_SOURCE),
    (lambda path: path.write_text("#" * ((1 << 20) + 1)),
     "is larger than the 1,048,576 bytes a policy file may be"),
])
def test_a_policy_file_must_be_a_regular_file_of_source(tmp_path, make, what):
    """A link to /dev/zero was read without end, a FIFO blocked forever: both are
    refused, before reading, in one line (each in its own process, so a hang fails)."""
    make(tmp_path / "pol.py")
    code, _, err, _ = _dtrf_process("run", TRACE, "--ratio", "0.6", "--policy", "pol.py:p",
                                    cwd=tmp_path, wait=60)
    assert code == EXIT_USER, err
    assert err.strip().splitlines() == [f"error: policy pol.py:p: pol.py {what}"]


def test_loading_a_policy_file_runs_its_top_level_code(tmp_path):
    """Documented (docs/policies.md, every --policy's help): a policy file is code,
    run with the user's privileges as it loads, before any policy is looked up."""
    from dtrforensics.engine.policies import get_policy
    (tmp_path / "marks.py").write_text(MARKING_POLICY)
    with pytest.raises(UserError, match="defines no 'missing'"):
        get_policy(f"{tmp_path / 'marks.py'}:missing")
    assert (tmp_path / "top-level code ran").exists()


def _policy_options() -> list[tuple[str, str]]:
    from dtrforensics.cli.main import COMMANDS

    found = []

    def walk(command, words):
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*words, name])
        found.extend((" ".join(words), p.opts[0]) for p in command.params
                     if p.opts and p.opts[0] == "--policy")
    for name in COMMANDS:
        walk(real_command(name), [name])
    return found


@pytest.mark.parametrize("words,option", _policy_options())
def test_every_option_that_runs_a_policy_file_says_it_is_code(tmp_path, words, option):
    """An option that loads a policy file (its code runs as the option is parsed)
    says in its --help that the file is code run as the user, by workers too."""
    from typer.exceptions import TyperException

    from dtrforensics.cli.main import load_command
    command = load_command(words.split()[0])
    for word in words.split()[1:]:
        command = command.commands[word]
    (tmp_path / "marks.py").write_text(MARKING_POLICY)
    try:
        command.make_context(words, [option, f"{tmp_path / 'marks.py'}:p"])
    except TyperException:
        pass                 # an argument the command needs, asked for after the option
    if not (tmp_path / "top-level code ran").exists():
        pytest.skip(f"dtrf {words} {option} names a sweep's policies; it loads no file")
    help_text = " ".join(next(p for p in command.params if p.opts[0] == option).help.split())
    assert "A policy file is Python code, run as you (with your privileges)" in help_text
    assert "every sweep worker and Dask worker" in help_text
    assert "load only files you trust" in help_text


@pytest.mark.parametrize("command", ["diff", "oom", "reevict", "replay", "regime"])
def test_every_run_spec_argument_says_a_policy_file_in_it_is_code(command):
    """A run spec TRACE@RATIO:PATH.py:NAME loads a policy file too: each argument that
    takes one says in its --help that the file is code run as the user."""
    from dtrforensics.cli.main import load_command
    specs = [p for p in load_command(command).params
             if p.param_type_name == "argument" and "TRACE@RATIO[:POLICY]" in (p.help or "")]
    assert specs
    for param in specs:
        help_text = " ".join(param.help.split())
        assert "is a policy file: Python code, run as you" in help_text
        assert "load only files you trust" in help_text


def test_a_recursive_policy_is_one_error_line_not_a_crash(runaway):
    """Numba compiles recursion, and a deep one killed the process with SIGSEGV
    (exit 139, no line): the cycle is found in the code and named instead."""
    code, _, err, _ = _dtrf_process("run", TRACE, "--ratio", "0.9", "--policy",
                                    f"{runaway}:deep", cwd=runaway.parent, wait=120)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == EXIT_USER and len(errors) == 1 and "Traceback" not in err, (code, err)
    assert f"policy {runaway}:deep" in errors[0] and "depth -> depth" in errors[0]
    assert "write it as a loop" in errors[0]


@pytest.mark.parametrize("name,where,cycle", [
    ("mutual", "runaway.py:31", "ping -> pong -> ping"),
    ("through_a_module", "runaway_helpers.py:7", "down -> down")])
def test_every_cycle_of_calls_is_refused_before_compiling(runaway, monkeypatch, name, where,
                                                         cycle):
    from dtrforensics.engine.policies import get_policy
    from dtrforensics.errors import PolicyError
    monkeypatch.syspath_prepend(str(runaway.parent))
    monkeypatch.delitem(sys.modules, "runaway_helpers", raising=False)
    with pytest.raises(PolicyError) as refused:
        get_policy(f"{runaway}:{name}")
    assert str(refused.value).startswith(str(runaway.parent / where))
    assert cycle in str(refused.value)


RUN_AWAY_WITH_A_TIMEOUT = """
import json, sys
from dtrforensics.engine.replay import replay
from dtrforensics.trace import load_trace
hole = load_trace("hole")
print(json.dumps([replay(hole, ratio=0.9, policy=spec, timeout=0.5).summary.outcome
                  for spec in sys.argv[1:]]))
"""


def test_a_policy_that_never_returns_ends_at_the_timeout(runaway):
    """The score's loop (its own, a helper's, a comprehension's) stops at the
    deadline, and the run's outcome is the timeout, as between slices."""
    import subprocess

    import dtrforensics
    src = str(Path(dtrforensics.__file__).resolve().parents[1])
    names = ("forever", "forever_in_a_helper", "forever_in_a_comprehension")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(runaway.parent)]),
           "ARRIVED": str(runaway.parent / "arrived")}
    try:
        res = subprocess.run([sys.executable, "-c", RUN_AWAY_WITH_A_TIMEOUT,
                              *(f"{runaway}:{n}" for n in names)], capture_output=True,
                             text=True, env=env, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("a policy that never returns ran on past its timeout")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == ["timeout"] * 3


@pytest.mark.parametrize("timeout", [0.0, 1.0, 1e300, float("inf")])
def test_a_watch_takes_any_timeout_the_options_take(timeout):
    """Its deadline is int64 nanoseconds of the monotonic clock: a timeout too
    far away for one is no deadline, and one already spent is now."""
    import time

    from dtrforensics.engine.score_watch import CLOCK, NO_DEADLINE, ScoreWatch
    before = time.clock_gettime_ns(CLOCK)
    deadline = ScoreWatch(True, time.perf_counter(), timeout).deadline
    if timeout > 1e9:
        assert deadline == NO_DEADLINE
    else:
        assert before + timeout * 1e9 <= deadline <= time.clock_gettime_ns(CLOCK) + timeout * 1e9


def test_ctrl_c_stops_a_policy_that_never_returns(runaway):
    code, _, err, seconds = _dtrf_process("run", TRACE, "--ratio", "0.9", "--policy",
                                          f"{runaway}:forever", cwd=runaway.parent,
                                          wait=120, interrupt=True)
    assert code == 130, err
    assert seconds < 5 and "Traceback" not in err


# --- issue 39: writers stay in their lane -----------------------------------------------------

# Every command that writes, aimed at the sweep SWEEP's own files: refused, SWEEP unchanged.
WRITES_INTO_SWEEP = [
    ("sql", "SELECT 1 AS x", "SWEEP", "--parquet", "SWEEP/sweep.json"),
    ("sql", "SELECT 1 AS x", "SWEEP", "--parquet", "SWEEP/runs/x.parquet"),
    ("sql", "SELECT 1 AS x", "SWEEP", "--parquet", "to-sweep-json"),        # a link to it
    ("export", "SWEEP", "-f", "csv", "-o", "SWEEP/sweep.json"),
    ("synth", "chain", "-o", "SWEEP/sweep.lock"),
    ("torch", "record", "zoo:mlp", "-o", "SWEEP/sweep.json"),
    ("torch", "run", "zoo:mlp", "--ratio", "0.9", "--log", "SWEEP/sweep.json"),
    ("regime", f"{TRACE}@0.6", f"{TRACE}@0.9", "--plot", "SWEEP/runs/x.png"),
    ("plot", "SWEEP", "-o", "SWEEP/runs/p"),
    ("run", TRACE, "--ratio", "0.6", "--record", "SWEEP/runs/r"),
    ("torch", "run", "zoo:mlp", "--ratio", "0.9", "--record", "SWEEP/runs/r"),
    ("sweep", TRACE, "--from", "0.5", "--to", "0.6", "--step", "0.1", "--out", "SWEEP/runs"),
    ("explain", TRACE, "--ratio", "0.6", "--record-root", "SWEEP/runs"),
    ("oom", f"{TRACE}@0.6", "--cache", "SWEEP/runs"),
    ("diff", f"{TRACE}@0.6", f"{TRACE}@0.9", "--cache", "SWEEP/runs/c"),
]


@pytest.mark.parametrize("args", WRITES_INTO_SWEEP, ids=" ".join)
def test_no_command_writes_a_sweeps_own_files(ws, args):
    """A sweep is read through its sweep.json and runs/: `sql --parquet sw/sweep.json`
    made it unreadable. Every output option refuses them (one check, cli/options)."""
    link = ws / "to-sweep-json"
    if not link.is_symlink():
        link.symlink_to(ws / "SWEEP" / "sweep.json")
    check(ws, args, EXIT_USER, "the sweep")
    assert SweepStore(ws / "SWEEP").read_runs().num_rows > 0


def test_a_stray_sweep_json_is_an_ordinary_file(tmp_path):
    """Only a sweep description makes a folder a sweep."""
    (tmp_path / "sweep.json").write_text("mine")
    result = dtrf("synth", "chain", "-o", "sweep.json", cwd=tmp_path)
    assert result.code == 0, result.err
    assert "replaced sweep.json" in result.err


def test_torch_run_into_an_existing_folder_says_what_to_do(ws):
    """`torch run` has no --overwrite: its refusal must not offer one."""
    for folder in ("REC", "adir"):
        args = ("torch", "run", "zoo:mlp", "--ratio", "0.9", "--record", folder)
        assert "--overwrite" not in check(ws, args, EXIT_USER, "choose a new folder").err


@pytest.mark.parametrize("args,existing,named", [
    (("torch", "run", "zoo:mlp", "--ratio", "0.9", "--log", "old.txt"), "old.txt", "old.txt"),
    # below the step's floor: refused after the log was written, which is still named
    (("torch", "run", "zoo:mlp", "--ratio", "0.01", "--log", "old.txt"), "old.txt", "old.txt"),
    # the log's where-file beside it (trace/where.py)
    (("torch", "run", "zoo:mlp", "--ratio", "0.9", "--log", "old.txt"), "old.txt.where.json",
     "old.txt.where.json"),
    (("torch", "record", "zoo:mlp", "-o", "old.log"), "old.log.where.json", "old.log.where.json"),
    (("compare-policies", TRACE, "--policy", "dtr,lru", "--from", "0.5", "--to", "0.9",
      "--step", "0.1", "--out", "cp", "--figure", "fig", "--no-progress"), "fig.svg", "fig.svg"),
    (("plot", "SWEEP", "-o", "p.v2"), "p.png", "p.png"),
])
def test_every_replaced_file_is_named(ws, tmp_path, args, existing, named):
    shutil.copytree(ws / "SWEEP", tmp_path / "SWEEP")
    (tmp_path / existing).write_text("precious")
    result = dtrf(*args, cwd=tmp_path)
    assert result.traceback is None, result.traceback
    assert (tmp_path / existing).read_bytes() != b"precious"
    assert f"replaced {named}" in result.err.splitlines(), result.err


@pytest.mark.parametrize("args", [
    ("plot", "SWEEP", "-o", "new/dir/p"),
    ("compare-policies", TRACE, "--policy", "dtr,lru", "--step", "0.1", "--out", "SWEEP",
     "--figure", "new/fig"),
    ("synth", "chain", "-o", "new/x.log"),
    ("torch", "run", "zoo:mlp", "--ratio", "0.9", "--log", "new/x.log"),
    ("torch", "record", "zoo:mlp", "-o", "new/x.log"),
    ("sql", "SELECT 1 AS x", "REC", "--parquet", "new/x.parquet"),
    ("regime", f"{TRACE}@0.6", f"{TRACE}@0.9", "--plot", "new/x.png"),
    ("export", "SWEEP", "-f", "csv", "-o", "new/x.csv"),
])
def test_no_output_file_creates_folders(ws, args):
    """`plot -o /new/dir/p` and `compare-policies --figure /nonexist/fig` made the
    folders (at the file system's root); an output file's folder must exist."""
    check(ws, args, EXIT_USER, "does not exist")


def test_an_extra_file_in_a_recording_is_named(ws, tmp_path):
    """The README promises any extra file is caught, not only an extra Parquet file."""
    for extra in ("notes.txt", ".hidden", "sub/"):
        rec = tmp_path / f"rec-{extra.strip('/.')}"
        shutil.copytree(ws / "REC", rec)
        if extra.endswith("/"):
            (rec / extra).mkdir()
        else:
            (rec / extra).write_text("x")
        with pytest.raises(RecordingDamagedError, match=extra.rstrip("/")):
            open_recording(rec)
        check(tmp_path, ("show", rec.name), EXIT_USER, extra.rstrip("/"))


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # a write past the limit fails (EFBIG)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = ["dtrf", *sys.argv[2:]]
from dtrforensics.cli.main import main
main()
"""


@pytest.mark.parametrize("args,target", [
    (("synth", "resnet", "-o", "old.log"), "old.log"),
    (("torch", "record", "zoo:mlp", "-o", "old.log"), "old.log"),
    (("sql", "SELECT random() AS x FROM range(100000)", "SWEEP", "--parquet", "old.parquet"),
     "old.parquet"),
    (("export", "SWEEP", "-f", "csv", "-o", "old.csv"), "old.csv"),
])
def test_a_full_disk_leaves_the_old_file_whole(ws, tmp_path, args, target):
    """A write that fails midway (the disk full: here a file-size limit) leaves the file it
    was to replace as it was, and no temporary file beside it."""
    import subprocess
    shutil.copytree(ws / "SWEEP", tmp_path / "SWEEP")
    old = "the old file, " * 20
    (tmp_path / target).write_text(old)
    res = subprocess.run([sys.executable, "-c", FULL_DISK, "512", *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0, res.stderr
    assert (tmp_path / target).read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["SWEEP", target]), res.stderr


# --- writers stay in their lane: default folders, links, replaced folders -----------------

@pytest.mark.parametrize("where,args,message", [
    ("REC", ("sweep", TRACE, "--from", "0.9", "--to", "0.91", "--step", "0.01"),
     "inside the recording"),
    ("REC", ("compare-policies", TRACE, "--from", "0.9", "--to", "0.91", "--step", "0.01",
             "--policy", "dtr,lru"), "inside the recording"),
    ("REC", ("replay", f"{TRACE}@0.5"), "inside the recording"),
    ("REC", ("reproduce", "--quick"), "inside the recording"),
    ("REC", ("export", ".", "-f", "perfetto"), "inside the recording"),
    ("SWEEP/runs", ("sweep", TRACE, "--from", "0.9", "--to", "0.91", "--step", "0.01"),
     "runs/ folder"),
    ("SWEEP/runs", ("export", "..", "-f", "csv"), "runs/ folder"),
])
def test_default_output_folders_are_refused_inside_a_recording_or_a_sweeps_runs(
        ws, tmp_path, where, args, message):
    """Run from inside a recording (or a sweep's runs/), a command's default output
    folder (recordings/sweeps/..., recordings/cache, recordings/reproduce, recordings/)
    landed inside it and damaged it: refused as an explicit one is, before anything
    is created."""
    shutil.copytree(ws / where.split("/")[0], tmp_path / where.split("/")[0])
    check(tmp_path / where, args, EXIT_USER, message)


def test_a_sweeps_runs_folder_that_is_a_link_is_never_written_through(ws, tmp_path):
    """runs/ replaced by a link to a recording: the part files landed in the recording."""
    shutil.copytree(ws / "REC", tmp_path / "REC")
    shutil.copytree(ws / "SWEEP", tmp_path / "s")
    shutil.rmtree(tmp_path / "s" / "runs")
    os.symlink("../REC", tmp_path / "s" / "runs")
    check(tmp_path, ("sweep", TRACE, "--from", "0.3", "--to", "1.0", "--step", "0.05",
                     "--jobs", "1", "--out", "s", "--no-progress"), EXIT_USER, "is a link")


def test_a_linked_part_file_is_never_read(ws, tmp_path):
    """A link in a sweep's runs/ to a part file elsewhere was read by `dtrf sql` (and the
    file outside added to DuckDB's allowed paths): only the folder's own files count."""
    out = tmp_path / "s"
    shutil.copytree(ws / "SWEEP", out)
    (part,) = (out / "runs").glob("part-*.parquet")
    (tmp_path / "elsewhere").mkdir()
    outside = tmp_path / "elsewhere" / part.name
    shutil.copy(part, outside)
    os.symlink(outside, out / "runs" / "part-00000000000000000000-1-00001.parquet")
    result = dtrf("sql", "SELECT count(*) AS n FROM runs", out, "--csv", cwd=tmp_path)
    assert result.code == 0 and result.traceback is None, result.err
    assert result.out.split() == ["n", str(pq.read_metadata(part).num_rows)]
    assert "a link" in result.err


def test_overwriting_a_recording_names_it(ws, tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(ws / "REC", rec)
    result = dtrf("run", TRACE, "--ratio", "0.5", "--record", rec, "--overwrite", cwd=tmp_path)
    assert result.code == 0, result.err
    assert f"replaced {rec}" in result.err.splitlines(), result.err
    result = dtrf("run", TRACE, "--ratio", "0.5", "--record", tmp_path / "new", cwd=tmp_path)
    assert result.code == 0 and "replaced" not in result.err, result.err


@pytest.mark.parametrize("args", [
    ("run", TRACE, "--ratio", "0.6", "--record", "new/deep/r"),
    ("sweep", TRACE, "--from", "0.9", "--to", "0.91", "--step", "0.01", "--out", "new/b/c"),
    ("compare-policies", TRACE, "--policy", "dtr,lru", "--from", "0.9", "--to", "0.91",
     "--step", "0.01", "--out", "new/b/c"),
    ("explain", TRACE, "--ratio", "0.5", "--record-root", "new/b/c"),
    ("replay", f"{TRACE}@0.5", "--cache", "new/b/c"),
])
def test_no_output_folder_creates_its_parent(ws, args):
    """`--record nodir/deep/r` made every missing folder: the tool's own new folder
    is made, but a parent a typo named must exist (as an output file's folder)."""
    check(ws, args, EXIT_USER, "does not exist")


def test_a_file_written_meanwhile_then_replaced_is_named(tmp_path, capsys):
    """Two writers of one file: the one renaming last replaced a file that did not exist
    when it started (a before/after comparison saw nothing to name)."""
    from dtrforensics.cli.common import reporting_replaced
    from dtrforensics.fsutil import atomic_path
    target = tmp_path / "x.parquet"
    with reporting_replaced(target):
        target.write_text("the other command's")
        with atomic_path(target) as tmp:
            tmp.write_text("mine")
    assert f"replaced {target}" in capsys.readouterr().err.splitlines()
    with reporting_replaced(tmp_path / "fresh"):
        with atomic_path(tmp_path / "fresh") as tmp:
            tmp.write_text("mine")
    assert "replaced" not in capsys.readouterr().err


def test_the_tools_own_recordings_folder_is_made_whole(tmp_path):
    """The README's `--record recordings/resnet32-0.104` in a new folder: parents under
    the current folder's `recordings/` are the tool's own, and made."""
    result = dtrf("run", TRACE, "--ratio", "0.6", "--record", "recordings/deep/r", cwd=tmp_path)
    assert result.code == 0, result.err
    assert open_recording(tmp_path / "recordings" / "deep" / "r").run["ratio"] == 0.6


def test_a_factory_importing_late_leaves_no_bytecode_in_the_users_folder(tmp_path,
                                                                         monkeypatch):
    """The user's folder is left as it was found, whatever PYTHONDONTWRITEBYTECODE
    says: also what the factory imports only when it is called."""
    pytest.importorskip("torch")
    (tmp_path / "late_factory.py").write_text(
        "def make():\n    from late_parts import parts\n    return parts()\n")
    (tmp_path / "late_parts.py").write_text(
        "import torch\n\n"
        "def parts():\n"
        "    model = torch.nn.Linear(4, 2)\n"
        "    batch = (torch.ones(3, 4), torch.zeros(3, 2))\n"
        "    return model, batch, torch.nn.MSELoss()\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    result = dtrf("torch", "record", "late_factory:make", "-o", "x.log", cwd=tmp_path)
    assert result.code == 0 and result.traceback is None, result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late_factory.py", "late_parts.py",
                                                          "x.log", "x.log.where.json"]
