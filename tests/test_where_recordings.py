"""Module paths, phases and source lines in recordings, their SQL and the
`queries/` that sum by module: on hand-written logs whose where-file is written
here, so every answer is known; the 2020-style logs without one get nulls."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pyarrow.parquet as pq
from cli import dtrf
from logdsl import Log
from logs import placed, w

from dtrforensics import db
from dtrforensics.engine.replay import Interventions
from dtrforensics.recorder.record import record_run
from dtrforensics.rows import fetch_dicts
from dtrforensics.trace.cache import load_program


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


def _queries(*paths):
    con = db.connect(list(paths))
    db.install_queries(con)
    return con


def test_pinned_by_module_sums_the_frontier_at_the_oom_by_module(tmp_path):
    program = placed(*frontier_log(), tmp_path / "f.log")
    result, path = record_run(program, budget=139, out_dir=tmp_path / "r")
    assert result.summary.outcome == "oom"
    con = _queries(path)
    try:
        rows = fetch_dicts(con, "SELECT * FROM pinned_by_module ORDER BY bytes DESC, module")
        (memory,) = con.execute("SELECT memory FROM events WHERE kind = 'oom'").fetchone()
    finally:
        con.close()
    # w, a and b are resident and locked, each made in its own module
    assert {r["module"]: r["bytes"] for r in rows} == {"block.0": 40, "block.1": 40, "embed": 10}
    assert sum(r["bytes"] for r in rows) == memory == 90
    assert {r["module"]: r["constant_bytes"] for r in rows}["embed"] == 10
    assert {r["module"]: r["largest_storage"] for r in rows} == {"embed": 0, "block.0": 1,
                                                                 "block.1": 2}


def backward_log() -> tuple[Log, list]:
    """Three forward ops, then three backward ops reading them again: under
    pressure, forward storages are evicted and rebuilt in backward."""
    log = (Log().const("w", 10)
           .call("a", "f", ["w"], 10, 40).call("b", "f", ["a"], 20, 40)
           .call("c", "f", ["b"], 30, 40).backward()
           .call("d", "g", ["c", "a"], 5, 40).release("c")
           .call("e", "g", ["d", "b"], 5, 40).release("d")
           .call("g", "h", ["e", "a"], 5, 40)
           .release("a").release("b").release("e").release("g"))
    return log, [w("embed", None), w("block.0"), w("block.1"), w("block.2"),
                 w("block.2", "backward"), w("block.1", "backward"), w("block.0", "backward")]


def test_work_by_module_counts_evictions_and_remats_where_the_model_made_them(tmp_path):
    program = placed(*backward_log(), tmp_path / "b.log")
    result, path = record_run(program, budget=130, out_dir=tmp_path / "r")
    summary = result.summary
    assert summary.evictions > 0 and summary.remats > 0
    con = _queries(path)
    try:
        rows = fetch_dicts(con, "SELECT * FROM work_by_module")
    finally:
        con.close()
    # the same tally from the raw events, through the program's own where-file
    expected = defaultdict(Counter)
    for e in pq.read_table(path / "events.parquet").to_pylist():
        if e["kind"] == "evict":
            op = int(program.tensor_op[e["storage_id"]])
            key = (program.op_where(op), program.op_where(op, "phase"))
            expected[key].update(evictions=1, evicted_bytes=e["bytes"])
        elif e["kind"] == "compute" and e["remat"]:
            op = int(program.tensor_op[e["tensor_id"]])
            key = (program.op_where(op), program.op_where(op, "phase"))
            expected[key].update(remats=0 if e["collateral"] else 1, remat_compute=e["cost"])
    got = {(r["module"], r["phase"]): {k: r[k] for k in ("evictions", "evicted_bytes", "remats",
                                                         "remat_compute") if r[k]} for r in rows}
    assert got == {k: {n: v for n, v in c.items() if v} for k, c in expected.items()}
    assert sum(r["evictions"] for r in rows) == summary.evictions
    assert sum(r["remats"] for r in rows) == summary.remats
    assert sum(r["remat_compute"] for r in rows) == summary.remat_compute
    assert {r["module"] for r in rows} <= {"block.0", "block.1", "block.2"}


def wide_log() -> tuple[Log, list]:
    """Three forward outputs of w, read one by one in backward: at 150 B the first
    backward op needs room, and `dtr` evicts b (block.1's) first."""
    log = (Log().const("w", 10).call("a", "f", ["w"], 10, 40).call("b", "f", ["w"], 20, 40)
           .call("c", "f", ["w"], 30, 40).backward().call("d", "g", ["a"], 5, 40).release("a")
           .call("e", "g", ["b", "d"], 5, 40).release("b").release("d")
           .call("g", "g", ["c", "e"], 5, 40).release("c").release("e").release("g"))
    return log, [w("embed", None), w("block.0", line=3), w("block.1", line=4),
                 w("block.2", line=5), w("block.0", "backward", 3),
                 w("block.1", "backward", 4), w("block.2", "backward", 5)]


def test_modules_at_divergence_name_where_each_run_first_frees_otherwise(tmp_path):
    program = placed(*wide_log(), tmp_path / "b.log")
    _, a = record_run(program, budget=150, out_dir=tmp_path / "a")
    # b's first victim is forced to be c (block.2's)
    _, b = record_run(program, budget=150, out_dir=tmp_path / "b",
                      interventions=Interventions(force=((3, 0),)))
    con = _queries(a, b)
    try:
        first = fetch_dicts(con, "SELECT * FROM first_divergence('a', 'b')")
        rows = fetch_dicts(con, "SELECT * FROM modules_at_divergence('a', 'b', 2)")
    finally:
        con.close()
    position = first[0]["position"]
    assert position == 1
    heads = {r["side"]: r for r in rows if r["position"] == position}
    for side in first:
        op = int(program.tensor_op[side["storage_id"]])
        assert heads[side["side"]]["storage_id"] == side["storage_id"]
        assert heads[side["side"]]["module"] == program.op_where(op)
        assert heads[side["side"]]["source"] == program.op_where(op, "source")
    assert all(position <= r["position"] < position + 2 for r in rows)
    assert len(rows) == 4
    assert (heads["a"]["module"], heads["b"]["module"]) == ("block.1", "block.2")


def _oom_text(report) -> str:
    from rich.console import Console

    from dtrforensics.render.oom import oom_view
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    console.print(oom_view(report))
    return console.export_text()


def test_oom_names_the_failing_ops_module_and_what_fills_memory_by_module(tmp_path):
    from dtrforensics.analyses.oom import explain_oom
    from dtrforensics.recorder.reader import open_recording
    program = placed(*frontier_log(), tmp_path / "f.log")
    _, path = record_run(program, budget=139, out_dir=tmp_path / "r")
    report = explain_oom(open_recording(path))
    assert (report.tensor_module, report.tensor_phase, report.tensor_source) == \
        ("head", "forward", "model.py:5")
    assert [(m.module, m.bytes) for m in report.by_module] == \
        [("block.0", 40), ("block.1", 40), ("embed", 10)]
    assert [(s.storage_id, s.module) for s in report.largest_storages] == \
        [(1, "block.0"), (2, "block.1"), (0, "embed")]
    assert report.to_json()["tensor_module"] == "head"
    text = _oom_text(report)
    assert "in head" in text and "model.py:5" in text and "by module" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_oom_of_a_log_without_a_where_file_prints_nothing_new(tmp_path):
    from dtrforensics.analyses.oom import explain_oom
    from dtrforensics.recorder.reader import open_recording
    log, _ = frontier_log()
    _, path = record_run(log.program("plain"), budget=139, out_dir=tmp_path / "r")
    report = explain_oom(open_recording(path))
    assert report.tensor_module is None and not report.has_where
    text = _oom_text(report)
    assert "module" not in text and "source" not in text


def test_explain_of_a_log_without_a_where_file_adds_nothing(tmp_path):
    from logs import PLANTED_BUDGET as BUDGET
    from logs import planted
    from rich.console import Console

    from dtrforensics.analyses.explain import explain
    from dtrforensics.render.explain import fixes_table
    found = explain(planted(), budget=BUDGET, record_root=None, jobs=1)
    assert found.fixes and found.where == {} and found.failing_module is None
    data = found.to_json()
    assert data["where"] == {} and all(f["modules"] == [None] for f in data["fixes"])
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(fixes_table(found))
    assert "module" not in console.export_text()


def test_diff_names_the_divergent_victims_modules_and_nothing_without_a_where_file(tmp_path):
    from rich.console import Console

    from dtrforensics.analyses.diff import diff
    from dtrforensics.recorder.reader import open_recording
    from dtrforensics.render.diff import print_diff
    log, where = wide_log()
    force = Interventions(force=((3, 0),))
    texts = {}
    for name, program in (("placed", placed(log, where, tmp_path / "w.log")),
                          ("plain", log.program("plain"))):
        _, a = record_run(program, budget=150, out_dir=tmp_path / name / "a")
        _, b = record_run(program, budget=150, out_dir=tmp_path / name / "b",
                          interventions=force)
        report = diff(open_recording(a), open_recording(b))
        console = Console(width=80, record=True, file=open("/dev/null", "w"))
        print_diff(report, console)
        texts[name] = (report, console.export_text())
    report, text = texts["placed"]
    d = report.first_divergence
    assert (d.a.module, d.b.module) == ("block.1", "block.2")
    assert (d.a.source, d.b.source) == ("model.py:4", "model.py:5")
    assert [(e.run, e.module) for e in report.divergent_entries][:1] == [("a", "block.1")]
    assert "block.2" in text and "by module" in text
    report, text = texts["plain"]
    assert report.first_divergence.a.module is None and report.divergent_entries == ()
    assert "module" not in text and "source" not in text


def test_reevict_sums_work_by_module_and_names_the_modules_of_the_top_storages(tmp_path):
    from rich.console import Console

    from dtrforensics.analyses.reevict import reevict
    from dtrforensics.recorder.reader import open_recording
    from dtrforensics.render.reevict import reevict_view
    log, where = backward_log()
    out = {}
    for name, program in (("placed", placed(log, where, tmp_path / "b.log")),
                          ("plain", log.program("plain"))):
        result, path = record_run(program, budget=130, out_dir=tmp_path / name)
        report = reevict([open_recording(path)])
        console = Console(width=80, record=True, file=open("/dev/null", "w"))
        console.print(reevict_view(report, top=5))
        out[name] = (result.summary, report.runs[0], console.export_text())
    summary, run, text = out["placed"]
    assert sum(m.evictions for m in run.by_module) == summary.evictions
    assert sum(m.remat_compute for m in run.by_module) == summary.remat_compute
    assert all(t.module == placed_module(where, t.op_id) for t in run.pressure.top)
    assert "by module" in text and "block.1" in text
    _, run, text = out["plain"]
    assert run.by_module == () and all(t.module is None for t in run.pressure.top)
    assert "module" not in text


def placed_module(where: list, op_id: int) -> str | None:
    return where[op_id][0]


def test_an_imported_log_keeps_its_where_file(tmp_path):
    from dtrforensics.trace.registry import import_traces
    from dtrforensics.trace.where import where_path
    folder = tmp_path / "mine"
    folder.mkdir()
    placed(*frontier_log(), folder / "f.log")
    result = import_traces(folder, tmp_path / "store")
    (target,) = result.imported
    assert where_path(target).read_text() == where_path(folder / "f.log").read_text()
    assert load_program(target, cache=False).op_where(3) == "head"


def _module_track(events: list) -> list[tuple[float, list[str]]]:
    """(ts, open scopes after the events at ts) along the modules track."""
    stack, states = [], []
    for e in events:
        if e.get("tid") != 5 or e["ph"] not in "BE":
            continue
        stack = stack + [e["name"]] if e["ph"] == "B" else stack[:-1]
        if states and states[-1][0] == e["ts"]:
            states[-1] = (e["ts"], stack)
        else:
            states.append((e["ts"], stack))
    return states


def test_perfetto_shows_module_scopes_as_nested_slices_around_the_ops(tmp_path):
    from dtrforensics.interop.perfetto import export_perfetto
    log, where = backward_log()
    for name, program in (("placed", placed(log, where, tmp_path / "b.log")),
                          ("plain", log.program("plain"))):
        _, path = record_run(program, budget=130, out_dir=tmp_path / name)
        export_perfetto(path, tmp_path / f"{name}.json")
    events = json.loads((tmp_path / "placed.json").read_text())["traceEvents"]
    states = _module_track(events)
    assert states and states[-1][1] == []                   # every scope closed
    assert [e["ts"] for e in events if e.get("tid") == 5 and "ts" in e] == \
        sorted(e["ts"] for e in events if e.get("tid") == 5 and "ts" in e)
    ops = [e for e in events if e.get("tid") == 1 and e["ph"] == "X" and "op_id" in e["args"]]
    checked = 0
    for op in ops:
        module, chain, phase, _ = where[op["args"]["op_id"]]
        if phase is None:
            continue
        scopes = [s for ts, s in states if ts <= op["ts"]][-1]
        assert scopes == [phase, *chain.split(" > ")], op["args"]["op_id"]
        checked += 1
    assert checked >= 6
    plain = json.loads((tmp_path / "plain.json").read_text())["traceEvents"]
    assert not [e for e in plain if e.get("tid") == 5]


def test_replay_names_each_allocations_module_and_each_victims(tmp_path):
    from dtrforensics.analyses.replay_view import replay_window
    from dtrforensics.recorder.reader import open_recording
    log, where = backward_log()
    program = placed(log, where, tmp_path / "b.log")
    _, path = record_run(program, budget=130, out_dir=tmp_path / "r")
    view = replay_window(open_recording(path))
    victims = [v for s in view.steps for v in s.victims]
    assert victims
    for s in view.steps:
        assert s.module == where[s.tensor_op_id][0]
    for v in victims:
        assert v.module == where[int(program.tensor_op[v.victim])][0]
    _, plain = record_run(log.program("plain"), budget=130, out_dir=tmp_path / "p")
    view = replay_window(open_recording(plain))
    assert all(s.module is None and all(v.module is None for v in s.victims)
               for s in view.steps)


def test_the_replay_tui_shows_modules_of_allocations_and_victims(tmp_path):
    from dtrforensics.analyses.replay_view import ReplaySource
    from dtrforensics.recorder.reader import open_recording
    from dtrforensics.render.units import score_format
    from dtrforensics.tui.widgets.step_list import step_line
    from dtrforensics.tui.widgets.step_panel import step_items, victim_line
    log, where = backward_log()
    program = placed(log, where, tmp_path / "b.log")
    _, path = record_run(program, budget=130, out_dir=tmp_path / "r")
    source = ReplaySource(open_recording(path))
    try:
        index = next(i for i, s in enumerate(source.steps) if s.evictions)
        step, victims = source.steps[index], source.victims(index)
    finally:
        source.close()
    assert step.module == where[step.tensor_op_id][0]
    assert step.module in step_line(step).plain
    assert f"in {step.module}" in step_items(step, 1, victims)[1].plain
    for v in victims:
        module = where[int(program.tensor_op[v.victim])][0]
        assert v.module == module
        assert f"of {module}" in victim_line(v, score_format([v.score]), False).plain


def test_memory_viz_frames_carry_the_module_and_source_line(tmp_path):
    import pickle

    from dtrforensics.interop.memory_viz import export_memory_viz
    log, where = backward_log()
    for name, program in (("placed", placed(log, where, tmp_path / "b.log")),
                          ("plain", log.program("plain"))):
        _, path = record_run(program, budget=130, out_dir=tmp_path / name)
        export_memory_viz(path, tmp_path / f"{name}.pickle")
    snapshot = pickle.loads((tmp_path / "placed.pickle").read_bytes())
    frames = [f for e in snapshot["device_traces"][0] for f in e["frames"]
              if f["name"].split(": ")[0] in {"block.0", "block.1", "block.2", "embed"}]
    assert frames and all(f["filename"] == "model.py" for f in frames
                          if not f["name"].startswith("embed"))
    by_op = {w[0]: w[3] for w in where if w[3]}
    assert all(f"{f['filename']}:{f['line']}" == by_op[f["name"].split(": ")[0]]
               for f in frames if f["filename"] == "model.py")
    plain = pickle.loads((tmp_path / "plain.pickle").read_bytes())
    assert not [f for e in plain["device_traces"][0] for f in e["frames"]
                if f["filename"] == "model.py" or f["name"].startswith("block")]


def test_a_where_file_that_is_not_one_is_one_error_naming_it(tmp_path):
    import pytest

    from dtrforensics.trace.parser import TraceError
    from dtrforensics.trace.where import where_path
    log, where = frontier_log()
    path = tmp_path / "f.log"
    placed(log, where, path)
    good = json.loads(where_path(path).read_text())
    bad = [{**good, "version": 99}, {**good, "strings": "embed"},
           {**good, "ops": {**good["ops"], "module": [0]}},
           {**good, "ops": {**good["ops"], "phase": [99, 99, 99, 99]}}, [1, 2]]
    for data in bad:
        where_path(path).write_text(json.dumps(data))
        with pytest.raises(TraceError, match="f.log.where.json"):
            load_program(path, cache=False)


def test_a_where_file_that_is_a_fifo_or_a_folder_is_refused_without_blocking(tmp_path):
    import os

    import pytest

    from dtrforensics.trace.parser import TraceError
    from dtrforensics.trace.where import where_path
    log, _ = frontier_log()
    path = tmp_path / "f.log"
    path.write_text(log.text())
    side = where_path(path)
    os.mkfifo(side)
    with pytest.raises(TraceError, match="not a regular file"):
        load_program(path, cache=False)
    side.unlink()
    side.mkdir()
    with pytest.raises(TraceError, match="where.json"):
        load_program(path, cache=False)


def test_intervene_names_where_the_storages_it_changes_were_made(tmp_path, monkeypatch):
    """`intervene` names the module, phase and source line of each storage its
    interventions name (text and --json); a log without a where-file prints nothing
    new."""
    monkeypatch.chdir(tmp_path)
    placed(*frontier_log(), tmp_path / "f.log")
    done = dtrf("intervene", "f.log", "--budget", "200", "--retain", "1,2", "--json")
    assert json.loads(done.out)["where"] == {
        "1": {"module": "block.0", "phase": "forward", "source": "model.py:3"},
        "2": {"module": "block.1", "phase": "forward", "source": "model.py:4"}}
    text = dtrf("intervene", "f.log", "--budget", "200", "--retain", "1,2").out
    assert "storage 1: made in block.0 (forward) at model.py:3" in text
    assert "the storages named are made in block.0, block.1" in text
    (tmp_path / "plain.log").write_text(frontier_log()[0].text())
    plain = dtrf("intervene", "plain.log", "--budget", "200", "--retain", "1,2", "--json")
    assert json.loads(plain.out)["where"] == {}
    assert "made in" not in dtrf("intervene", "plain.log", "--budget", "200", "--retain", "1").out
