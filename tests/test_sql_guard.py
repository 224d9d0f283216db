"""`dtrf sql` and `db.connect` read the recordings' own files and nothing else, and
Ctrl-C ends any query (exit 130), even one that never hands control back to Python."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli import dtrf
from hostile import fingerprint

from dtrforensics import db
from dtrforensics.errors import EXIT_INTERRUPTED, EXIT_USER

TRACE = "hole"          # the packaged synthetic trace: 24 ops, always available


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A recording, and someone's files where DuckDB keeps its temporary files by
    default (`.tmp` of the current folder): plain text, Parquet, and a link out."""
    root = tmp_path_factory.mktemp("sqlguard")
    assert dtrf("run", TRACE, "--ratio", "0.6", "--record", root / "REC").code == 0
    spill = root / ".tmp"
    spill.mkdir()
    (spill / "s.txt").write_text("secret\n")
    (spill / "s.json").write_text('{"secret": 1}\n')
    pq.write_table(pa.table({"secret": [1]}), spill / "s.parquet")
    (root / "other").mkdir()
    (root / "other" / "s.txt").write_text("secret\n")
    os.symlink(root / "other", spill / "out")
    return root


OUTSIDE = [
    "SELECT * FROM read_text('.tmp/s.txt')",
    "SELECT * FROM read_text('./.tmp/s.txt')",
    "SELECT * FROM read_text('{root}/.tmp/s.txt')",
    "SELECT * FROM read_text('.tmp/../other/s.txt')",
    "SELECT * FROM read_blob('.tmp/s.txt')",
    "SELECT * FROM read_csv('.tmp/s.txt')",
    "SELECT * FROM read_json('.tmp/s.json')",
    "SELECT * FROM parquet_scan('.tmp/s.parquet')",
    "SELECT * FROM read_text('.tmp/out/s.txt')",
    "SELECT * FROM glob('.tmp/*')",
    "SELECT * FROM glob('{root}/.tmp/*')",
    "SELECT * FROM read_text('other/s.txt')",
    "SELECT * FROM read_text('REC/run.json')",
]


@pytest.mark.parametrize("query", OUTSIDE)
def test_sql_reads_nothing_beside_the_recordings(ws, query):
    before = fingerprint(ws)
    result = dtrf("sql", query.format(root=ws), "REC", "--csv", cwd=ws)
    assert result.traceback is None, result.traceback
    assert result.code == EXIT_USER, (result.code, result.out, result.err)
    assert len(result.error_lines) == 1 and "Permission" in result.error_lines[0], result.err
    assert "secret" not in result.out + result.err
    assert fingerprint(ws) == before


def test_a_connection_may_spill_only_into_a_private_folder_it_removes(ws, monkeypatch):
    monkeypatch.chdir(ws)
    con = db.connect(ws / "REC")
    assert con.sql("SELECT count(*) FROM events").fetchall()[0][0] > 0
    allowed = con.sql("SELECT current_setting('allowed_directories')").fetchall()[0][0]
    temp = con.sql("SELECT current_setting('temp_directory')").fetchall()[0][0]
    private = Path(temp).parent
    assert [Path(folder) for folder in allowed] == [Path(temp)]
    assert private.is_dir() and not private.is_relative_to(ws)
    assert private.stat().st_mode & 0o077 == 0                # only this user may enter
    con.close()
    del con
    gc.collect()
    assert not private.exists()


# --- Ctrl-C ------------------------------------------------------------------------------

# `dtrf sql` in a child that says on stderr when its query is about to run.
CHILD = """
import contextlib, sys
from dtrforensics import db
from dtrforensics.cli.main import main

inner = getattr(db, "interruptible", None)

@contextlib.contextmanager
def announced(con):
    with inner(con) if inner else contextlib.nullcontext():
        print("RUNNING", file=sys.stderr, flush=True)
        yield

db.interruptible = announced
if inner is None:
    print("RUNNING", file=sys.stderr, flush=True)
sys.argv = ["dtrf", *sys.argv[1:]]
main()
"""

ENDLESS = [
    ("WITH RECURSIVE t(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM t) SELECT count(*) FROM t",),
    ("SELECT count(*) FROM range(1000000000000) a",),
    ("SELECT * FROM range(1000000000000) a", "--csv"),
    ("SELECT a.range AS x FROM range(1000000000000) a", "--parquet", "{out}"),
]


@pytest.mark.parametrize("args", ENDLESS)
def test_ctrl_c_ends_any_query_with_exit_130(ws, tmp_path, args):
    args = [a.format(out=tmp_path / "big.parquet") for a in args]
    child = subprocess.Popen([sys.executable, "-c", CHILD, "sql", args[0], "REC", *args[1:]],
                             cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stderr.readline() == "RUNNING\n"
        try:
            child.wait(timeout=1)         # the query has started (and does not end)
        except subprocess.TimeoutExpired:
            pass
        child.send_signal(signal.SIGINT)
        err = child.communicate(timeout=60)[1]
        code = child.returncode
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == ["interrupted (Ctrl-C): the query was stopped"]
    assert list(tmp_path.iterdir()) == []          # no Parquet file, no temporary one
