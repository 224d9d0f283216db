"""The recorder: events reproduce the run summary exactly; folders are all-or-nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from cli import dtrf_process
from logs import tiny_log, tiny_program
from public import program_or_skip

from dtrforensics import db
from dtrforensics.engine.replay import Interventions
from dtrforensics.engine.summary import victims_sha256
from dtrforensics.recorder import record as record_mod
from dtrforensics.recorder.manifest import run_checksum
from dtrforensics.recorder.reader import (
    NotARecordingError,
    PartialRecordingWarning,
    find_recordings,
    open_recording,
)
from dtrforensics.recorder.record import default_recording_dir, record_run, run_hash
from dtrforensics.recorder.schema import (
    DOC_PATH,
    FILE_TABLES,
    FORMAT_VERSION,
    META_FORMAT,
    RecordingFormatError,
    render_format_doc,
)
from dtrforensics.recorder.writer import Recorder, RecordingExistsError, candidate_ranks

REPO = Path(__file__).resolve().parents[1]


# --- consistency: the events are the run --------------------------------------------

def check_consistency(path: Path, summary) -> None:
    """Every invariant a recording must satisfy against its run summary."""
    rec = open_recording(path)
    ev = {k: np.asarray(v) for k, v in rec.table("events").to_pydict().items()
          if k not in ("remat", "collateral", "must_free", "bytes", "request", "decision",
                       "cost")}
    t = rec.table("events").to_pydict()
    kind = ev["kind"]
    n = len(kind)
    assert np.array_equal(ev["seq"], np.arange(n))
    assert rec.outcome == summary.outcome == rec.run["summary"]["outcome"]

    # counts
    collateral = np.array([bool(c) for c in t["collateral"]])
    remat = np.array([bool(c) for c in t["remat"]])
    computes = kind == "compute"
    primary = computes & ~collateral
    assert (kind == "evict").sum() == summary.evictions
    assert (kind == "free_dead").sum() == summary.dead_frees
    assert (primary & remat).sum() == summary.remats
    assert (computes & collateral & remat).sum() == summary.collateral_remats
    first_computes = (primary & ~remat).sum()
    assert first_computes == summary.ops_done - (summary.outcome == "oom")
    cost = np.array([c or 0 for c in t["cost"]], dtype=np.int64)
    assert cost[computes].sum() == summary.clock - 1
    assert (cost[collateral] == 0).all()
    assert rec.run["summary"]["clock"] == summary.clock

    # memory: the running sum of what compute / evict / free_dead events imply
    sizes = dict(zip(rec.table("storages").column("storage_id").to_pylist(),
                     rec.table("storages").column("size").to_pylist()))
    op_total = rec.table("ops").column("total_size").to_pylist()
    tensor_op = rec.table("tensors").column("op_id").to_pylist()
    material: set[int] = set()
    implied = 0
    peak = 0
    for i in range(n):
        k, s, mem = kind[i], int(ev["storage_id"][i]), int(ev["memory"][i])
        if k == "compute":
            if not collateral[i]:
                assert mem == implied + op_total[tensor_op[int(ev["tensor_id"][i])]], i
                peak = max(peak, mem)
            if s not in material:
                material.add(s)
                implied += sizes[s]
            continue
        assert mem == implied, (i, k)
        if k in ("evict", "free_dead"):
            assert s in material
            material.discard(s)
            implied -= sizes[s]
    if summary.outcome in ("ok", "oom"):
        assert peak == summary.peak_memory
    applies = np.isin(kind, ["alloc_check", "evict", "oom"])
    assert all(p is None for p in ev["pinned_bytes"][~applies])
    pinned = np.where(applies, ev["pinned_bytes"], 0).astype(np.int64)
    memory = ev["memory"]
    assert (pinned[applies] <= memory[applies]).all() and (pinned >= 0).all()
    assert (pinned[applies] == (memory - ev["pool_bytes"])[applies]).all()
    assert (np.asarray(t["budget"]) == summary.budget).all()

    # the OOM row is the summary's OOM
    ooms = np.flatnonzero(kind == "oom")
    if summary.outcome == "oom":
        (row,) = ooms
        o = summary.oom
        assert row == n - 1
        assert (int(ev["tensor_id"][row]), t["request"][row], int(pinned[row]),
                int(memory[row]), int(ev["depth"][row]), int(ev["op_id"][row])) == \
            (o.tensor_id, o.request, o.pinned, o.memory, o.depth, o.op_id)
        assert rec.run["frontier"]["pinned"] == o.pinned
        assert len(rec.run["frontier"]["frontier"]) == o.depth
    else:
        assert len(ooms) == 0 and rec.run["frontier"] is None

    # decisions: one per evict event, in order; the victim sequence is the summary's
    d = rec.table("decisions").to_pydict()
    assert d["decision"] == list(range(summary.evictions))
    assert d["seq"] == [int(x) for x in np.flatnonzero(kind == "evict")]
    assert victims_sha256(d["victim"]) == summary.victims_sha256
    assert all(sf > 0 for sf in d["shortfall"])
    for margin, has_runner in zip(d["margin"], d["runner_up"]):
        assert (margin is None) or (has_runner is not None and margin >= 0)

    # candidates: every score evaluated, rank 1 is the victim
    if rec.run["scores"] == "all":
        c = rec.table("candidates").to_pydict()
        assert len(c["decision"]) == summary.score_evals
        firsts = {dec: s for dec, s, r in zip(c["decision"], c["storage_id"], c["rank"]) if r == 1}
        assert [firsts[k] for k in range(summary.evictions)] == d["victim"]
        assert sum(c["chosen"]) == summary.evictions
    else:
        assert not rec.has("candidates")

    # run.json row counts are the files' row counts
    for entry in rec.run["tables"]:
        assert pq.ParquetFile(path / entry["file"]).metadata.num_rows == entry["rows"]


@pytest.mark.parametrize("budget,outcome", [(120, "ok"), (105, "oom")])
@pytest.mark.parametrize("scores", ["victims", "all"])
def test_tiny_consistency(tmp_path, budget, outcome, scores):
    result, path = record_run(tiny_program(), budget=budget, out_dir=tmp_path / "r",
                              scores=scores)
    assert result.summary.outcome == outcome
    check_consistency(path, result.summary)


@pytest.mark.parametrize("ratio", [0.104, 0.101])
def test_resnet32_consistency(tmp_path, ratio):
    program = program_or_skip("resnet32")
    result, path = record_run(program, ratio=ratio, out_dir=tmp_path / "r", scores="all")
    check_consistency(path, result.summary)


@pytest.mark.slow
def test_lstm_consistency(tmp_path):
    program = program_or_skip("lstm")
    result, path = record_run(program, ratio=0.264, out_dir=tmp_path / "r")
    assert result.summary.outcome == "ok"
    check_consistency(path, result.summary)


def test_small_row_groups_change_nothing(tmp_path):
    program = program_or_skip("resnet32")
    from dtrforensics.engine.replay import replay
    rec = Recorder(tmp_path / "small", rows_per_group=100, scores="all")
    result = replay(program, ratio=0.104, observers=[rec])
    _, big = record_run(program, ratio=0.104, out_dir=tmp_path / "big", scores="all")
    assert pq.ParquetFile(tmp_path / "small" / "events.parquet").metadata.num_row_groups > 10
    for table in ("events", "decisions", "candidates"):
        a, b = open_recording(tmp_path / "small").table(table), open_recording(big).table(table)
        assert a.equals(b), table
    check_consistency(tmp_path / "small", result.summary)


def test_run_json(tmp_path):
    iv = Interventions(forbid=((1, 0),))
    result, path = record_run(tiny_program(), budget=120, out_dir=tmp_path / "r",
                              interventions=iv, policy="lru", timeout=30)
    run = open_recording(path).run
    assert run["format_version"] == FORMAT_VERSION
    assert run["trace"]["name"] == "tiny"
    assert (run["budget"], run["ratio"], run["policy"], run["scores"], run["timeout"]) == \
        (120, None, "lru", "victims", 30)
    assert run["interventions"]["forbid"] == [[1, 0]]
    assert run["summary"] == json.loads(json.dumps(result.summary.to_json()))
    assert run["command_line"] == sys.argv
    assert run["started_at"] <= run["finished_at"]
    assert run["tool"]["name"] == "dtrforensics"
    for table in FILE_TABLES:
        if table.file and not table.optional:
            meta = pq.ParquetFile(path / table.file).schema_arrow.metadata
            assert meta[META_FORMAT] == FORMAT_VERSION.encode()


@pytest.mark.parametrize("outcome", ["thrashed", "timeout"])
def test_unfinished_outcomes_are_complete_recordings(tmp_path, outcome):
    if outcome == "thrashed":     # remat limit 0: the first rematerialization thrashes
        result, path = record_run(tiny_program(), budget=120, out_dir=tmp_path / "r",
                                  thrash_factor=1.0)
    else:                         # a zero wall-clock limit stops after the first slice
        result, path = record_run(program_or_skip("lstm"), ratio=0.264,
                                  out_dir=tmp_path / "r", timeout=0.0)
    assert result.summary.outcome == outcome
    rec = open_recording(path)
    assert rec.outcome == outcome
    assert rec.table("events").num_rows > 0
    assert [r.path for r in find_recordings(tmp_path)] == [path]


# --- folders: refuse, replace, default names -------------------------------------------

def test_existing_folder_is_refused_then_replaced(tmp_path):
    target = tmp_path / "r"
    record_run(tiny_program(), budget=120, out_dir=target)
    first = open_recording(target).run["started_at"]
    with pytest.raises(RecordingExistsError, match="already exists"):
        record_run(tiny_program(), budget=105, out_dir=target)
    assert open_recording(target).outcome == "ok"
    time.sleep(0.002)
    result, _ = record_run(tiny_program(), budget=105, out_dir=target, overwrite=True)
    rec = open_recording(target)
    assert rec.outcome == result.summary.outcome == "oom"
    assert rec.run["started_at"] > first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_overwrite_never_replaces_other_data(tmp_path):
    target = tmp_path / "data"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(RecordingExistsError, match="not a recording"):
        record_run(tiny_program(), budget=120, out_dir=target, overwrite=True)
    assert (target / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_failed_run_leaves_nothing(tmp_path, monkeypatch):
    class Broken(Recorder):
        def on_events(self, batch):
            super().on_events(batch)
            raise RuntimeError("disk on fire")

    monkeypatch.setattr(record_mod, "Recorder", Broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        record_run(tiny_program(), budget=120, out_dir=tmp_path / "r")
    assert list(tmp_path.iterdir()) == []


def test_default_folder_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    program = tiny_program()
    _, path = record_run(program, budget=120)
    short = run_hash(program.sha256, 120, "dtr", None)
    assert path == (tmp_path / "recordings" / f"tiny-dtr-120B-{short}").absolute()
    assert len(short) == 8 and int(short, 16) >= 0
    assert run_hash(program.sha256, 120, "dtr", Interventions(retain=(1,))) != short
    assert run_hash(program.sha256, 121, "dtr", None) != short
    assert default_recording_dir(program, 12, 0.5, "lru").name.startswith("tiny-lru-0.5-")
    # `dtrf run --record ''` records into the default folder, which now exists
    with pytest.raises(RecordingExistsError):
        record_run(program, budget=120, policy="dtr", out_dir=None, scores="victims")
    result, where = record_run(program, ratio=None, budget=120, policy="dtr",
                               out_dir=str(tmp_path / "x"), scores="all",
                               interventions=Interventions())
    assert where == tmp_path / "x" and open_recording(where).has("candidates")


@pytest.mark.parametrize("table, first, second", [
    ("EVENTS", "clock", "depth"), ("DECISIONS", "memory", "request"),
    ("CANDIDATES", "compute", "size"), ("STORAGES", "op_id", "compute"),
    ("TENSORS", "output_index", "size"), ("OPS", "cost", "line"),
])
def test_columns_land_by_name_whatever_their_order(tmp_path, monkeypatch, table, first, second):
    """Swap two same-typed columns in the schema: every column still holds its data."""
    from dataclasses import replace

    from dtrforensics.recorder import schema, writer
    program = tiny_program()
    _, plain = record_run(program, budget=120, out_dir=tmp_path / "plain", scores="all")
    declared = getattr(schema, table)
    cols = list(declared.columns)
    i, j = declared.column_names.index(first), declared.column_names.index(second)
    assert cols[i].type == cols[j].type
    cols[i], cols[j] = cols[j], cols[i]
    monkeypatch.setattr(writer, table, replace(declared, columns=tuple(cols)))
    _, swapped = record_run(program, budget=120, out_dir=tmp_path / "swapped", scores="all")
    a = pq.read_table(plain / declared.file)
    b = pq.read_table(swapped / declared.file)
    assert b.column_names.index(first) == j and b.column_names.index(second) == i
    assert a.num_rows > 0
    for name in declared.column_names:
        assert a.column(name).to_pylist() == b.column(name).to_pylist(), name
    assert a.column(first).to_pylist() != a.column(second).to_pylist()


def test_bad_scores_option():
    with pytest.raises(ValueError, match="scores"):
        Recorder("somewhere", scores="some")


# --- reading --------------------------------------------------------------------------

def test_reader_refuses_a_newer_major_version(tmp_path):
    _, path = record_run(tiny_program(), budget=120, out_dir=tmp_path / "r")
    run_file = path / "run.json"
    run = json.loads(run_file.read_text())
    run["format_version"] = "1.7"
    run["run_sha256"] = run_checksum(run)             # as a newer writer would seal it
    run_file.write_text(json.dumps(run))
    assert open_recording(path).run["format_version"] == "1.7"   # a newer minor is fine
    run["format_version"] = "2.0"
    run_file.write_text(json.dumps(run))
    with pytest.raises(RecordingFormatError, match="format 2.0, newer than .* upgrade"):
        open_recording(path)


def test_find_recordings_walks_folders(tmp_path):
    record_run(tiny_program(), budget=120, out_dir=tmp_path / "a" / "one")
    record_run(tiny_program(), budget=105, out_dir=tmp_path / "b" / "two")
    (tmp_path / "empty").mkdir()
    recs = find_recordings([tmp_path])
    assert [r.run_id for r in recs] == ["one", "two"]
    assert [r.run_id for r in find_recordings(tmp_path / "b" / "two")] == ["two"]
    with pytest.raises(NotARecordingError):
        find_recordings([tmp_path / "missing"])
    with pytest.raises(NotARecordingError, match="not a recording"):
        open_recording(tmp_path / "empty")


def test_format_doc_is_generated():
    assert (REPO / DOC_PATH).read_text(encoding="utf-8") == render_format_doc(), \
        "docs/recording-format.md is stale: run python -m dtrforensics.recorder.schema"


def test_sweep_format_doc_is_generated():
    from dtrforensics.sweep import schema as sweep_schema
    text = (REPO / sweep_schema.DOC_PATH).read_text(encoding="utf-8")
    assert text == sweep_schema.render_sweep_doc(), \
        "docs/sweep-format.md is stale: run python -m dtrforensics.sweep.schema"
    assert all(f"| `{name}` |" in text for name in sweep_schema.RUNS.column_names)


def test_event_timings_are_the_engines_own():
    """The events table documents each kind's timing with the engine's words."""
    from dtrforensics.engine import hooks
    from dtrforensics.recorder.schema import EVENTS, event_timings
    timings = event_timings()
    assert list(timings) == list(hooks.EVENT_KINDS)
    flat = " ".join(hooks.__doc__.split())
    for kind, when in timings.items():
        assert f"- `{kind}`: {when}" in flat
        assert f"`{kind}` {when.rstrip('.')}" in EVENTS.doc


def test_candidate_ranks_break_ties_like_the_scan():
    decision = np.array([0, 0, 0, 0, 1, 1])
    score = np.array([0.5, 0.2, 0.2, np.inf, 1.0, 0.0])
    position = np.array([0, 1, 2, 3, 0, 1])
    # equal minima: the later pool position wins (the scan keeps the last of equals)
    assert candidate_ranks(decision, score, position).tolist() == [3, 2, 1, 4, 2, 1]


# --- crash: SIGKILL mid-recording -------------------------------------------------------

CRASH_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from dtrforensics.engine.replay import replay
    from dtrforensics.recorder.writer import Recorder
    from dtrforensics.trace import parse_file

    log, out, ready = sys.argv[1:]

    class Stalling(Recorder):
        # test hook: after the first batch is written, signal and hang
        def on_events(self, batch):
            super().on_events(batch)
            Path(ready).write_text("go")
            time.sleep(600)

    program = parse_file(log)
    replay(program, budget=120, observers=[Stalling(out, scores="all", rows_per_group=1)])
""")


def test_killed_recording_leaves_only_a_partial_folder(tmp_path):
    log = tmp_path / "tiny.log"
    log.write_text(tiny_log().text(), encoding="utf-8")
    program = tiny_program()
    root = tmp_path / "recs"
    out, ready = root / "run", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", CRASH_SCRIPT, str(log), str(out), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, "the recording process died on its own"
            assert time.monotonic() < deadline, "the recording process never got going"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()
    (partial,) = root.iterdir()
    assert partial.name == f".run.partial-{proc.pid}"
    # the half-written event file is not a valid Parquet file
    assert (partial / "events.parquet").stat().st_size > 0
    with pytest.raises(Exception):
        pq.read_table(partial / "events.parquet")
    # readers skip it with a warning
    with pytest.warns(PartialRecordingWarning, match="unfinished"):
        assert find_recordings([root]) == []
    with pytest.raises(NotARecordingError, match="unfinished"):
        open_recording(partial)
    with pytest.warns(PartialRecordingWarning):
        con = db.connect(root)
    assert con.sql("SELECT count(*) FROM events").fetchall() == [(0,)]
    # a new run in the same place succeeds, and clears the dead process's leftovers
    result, path = record_run(program, budget=120, out_dir=out)
    assert path == out and [p.name for p in root.iterdir()] == ["run"]
    check_consistency(out, result.summary)


def test_show_and_sql_commands(tmp_path):
    _, path = record_run(tiny_program(), budget=105, out_dir=tmp_path / "oom")
    shown = dtrf_process("show", path, columns=120)
    assert shown.returncode == 0, shown.stderr
    for needle in ("oom", "failing allocation", "d (20", "timeline", "pinned", "depth",
                   "OOM at op 5"):
        assert needle in shown.stdout, needle
    as_json = dtrf_process("show", path, "--json", columns=120)
    data = json.loads(as_json.stdout)
    assert data["timeline"]["op_id"] == list(range(6))
    assert data["run"]["outcome"] == "oom"
    missing = dtrf_process("show", tmp_path / "nope", columns=120)
    assert missing.returncode == 2 and "not a recording" in missing.stderr
