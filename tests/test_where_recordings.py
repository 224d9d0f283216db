"""Module paths, phases and source lines in recordings, their SQL and the
`queries/` that sum by module: on hand-written logs whose where-file is written
here, so every answer is known; the 2020-style logs without one get nulls."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from logdsl import Log

from dtrforensics import db
from dtrforensics.recorder.record import record_run
from dtrforensics.trace.cache import load_program
from dtrforensics.trace.parser import file_sha256
from dtrforensics.trace.where import write_where

OP_RECORDS = ("CONSTANT", "CALL", "MUTATE")


def placed(log: Log, where: list[tuple], path: Path):
    """Write `log` at `path` and a where-file giving its ops, in order, the
    (module, chain, phase, source) of `where`; the loaded program."""
    path.write_text(log.text())
    lines = [n for n, r in enumerate(log.lines, start=1) if r["INSTRUCTION"] in OP_RECORDS]
    assert len(lines) == len(where)
    write_where(path, file_sha256(path), list(zip(lines, where)))
    return load_program(path, cache=False)


def w(module, phase="forward", line=1):
    return (module, module, phase, f"model.py:{line}" if phase else None)


def frontier_log() -> tuple[Log, list]:
    """w (10 B, the embedding's weight), a = f(w) (40 B, block.0), b = f(a)
    (40 B, block.1), c = g(a, b) (50 B, head). At 139 B the run fails allocating c:
    w, a and b (90 B) are resident and locked, one byte short."""
    log = (Log().const("w", 10).call("a", "f", ["w"], 10, 40).call("b", "f", ["a"], 10, 40)
           .call("c", "g", ["a", "b"], 10, 50).release("a").release("b").release("c"))
    return log, [w("embed", None), w("block.0", line=3), w("block.1", line=4), w("head", line=5)]


def test_recording_columns_carry_module_phase_and_source(tmp_path):
    program = placed(*frontier_log(), tmp_path / "f.log")
    _, path = record_run(program, budget=200, out_dir=tmp_path / "r")
    ops = pq.read_table(path / "ops.parquet").to_pydict()
    assert ops["module"] == ["embed", "block.0", "block.1", "head"]
    assert ops["phase"] == [None, "forward", "forward", "forward"]
    assert ops["source"] == [None, "model.py:3", "model.py:4", "model.py:5"]
    storages = pq.read_table(path / "storages.parquet").to_pydict()
    assert dict(zip(storages["tensor"], storages["module"])) == \
        {"w": "embed", "a": "block.0", "b": "block.1", "c": "head"}
    events = pq.read_table(path / "events.parquet").to_pylist()
    computed = {e["tensor_id"]: e["module"] for e in events if e["kind"] == "compute"}
    assert computed == {0: "embed", 1: "block.0", 2: "block.1", 3: "head"}
    con = db.connect(path)
    try:
        assert con.execute("SELECT module, phase FROM ops ORDER BY op_id").fetchall() == \
            [("embed", None), ("block.0", "forward"), ("block.1", "forward"), ("head", "forward")]
    finally:
        con.close()


def test_logs_without_a_where_file_record_nulls(tmp_path):
    log, _ = frontier_log()
    program = log.program("plain")
    _, path = record_run(program, budget=200, out_dir=tmp_path / "r")
    for table in ("ops", "storages", "events"):
        data = pq.read_table(path / f"{table}.parquet").to_pydict()
        assert set(data["module"]) == {None} and set(data["source"]) == {None}, table
