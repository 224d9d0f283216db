"""Interop: recordings open in Perfetto (trace-event JSON) and PyTorch's memory_viz.

Validators:
* Perfetto: `check_trace_events`, a structural check against the Chrome
  trace-event format (no downloaded viewer binary)
  (required fields per phase, ts never decreasing per track, balanced B/E,
  properly nested X, every flow id paired and bound) that also rebuilds the
  slices, instants, counters and flows the way a viewer reads them, so the
  tests can "query" it.
* memory_viz: PyTorch's `torch.cuda._memory_viz` functions and CLI read the
  pickle whenever torch is installed (`make test` installs it), and
  `active_memory_timeline` ports the viewer's own accounting
  (MemoryViz.js `process_alloc_data`).
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli import dtrf
from logdsl import Log
from logs import tiny_program
from public import program_or_skip

from dtrforensics.engine.replay import replay
from dtrforensics.interop.memory_viz import export_memory_viz
from dtrforensics.interop.perfetto import TID_EVICT, TID_FREE, TID_OPS, TID_REMAT, export_perfetto
from dtrforensics.recorder.reader import Recording, open_recording
from dtrforensics.recorder.record import record_run
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import parse_lines

SYNTH = SynthSpec(kind="resnet", depth=6, width=2, seed=3, tuple_prob=0.5, view_prob=0.3)


def synth_program():
    return parse_lines(generate(SYNTH).splitlines(keepends=True), "<synth>", "synth")


def pins_program():
    """`a` stays live to the end but is evicted on the way: the final pin has to
    rematerialize it at depth 1 (a top-level rematerialization)."""
    return (Log().const("w", 10).call("a", "conv", ["w"], 10, 40)
            .call("b", "conv", ["w"], 20, 40).call("c", "conv", ["b"], 30, 40).release("b")
            .call("d", "conv", ["c"], 30, 40).release("c")).program("pins")


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    """name -> recording folder: the hand-made tiny log (ok, oom, thrashed), a
    final pin that rematerializes, and a generated ResNet-style log with tuple
    ops, zero-byte outputs and views (ok with collateral remats; oom at depth 48)."""
    root = tmp_path_factory.mktemp("interop")
    tiny, synth = tiny_program(), synth_program()
    out = {}
    for name, program, kw in (("tiny-ok", tiny, {"budget": 120}),
                              ("tiny-oom", tiny, {"budget": 105}),
                              ("tiny-thrashed", tiny, {"budget": 120, "thrash_factor": 1.0}),
                              ("pins", pins_program(), {"budget": 100}),
                              ("synth-ok", synth, {"ratio": 0.5}),
                              ("synth-oom", synth, {"ratio": 0.4})):
        _, out[name] = record_run(program, out_dir=root / name, **kw)
    return out


ALL = ("tiny-ok", "tiny-oom", "tiny-thrashed", "pins", "synth-ok", "synth-oom")


# --- a trace-event reader: schema check + what a viewer rebuilds -------------------------

def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def load_trace_events(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.loads(fh.read(), parse_constant=_reject_constant)


REQUIRED = {"B": ("ts", "tid", "name"), "E": ("ts", "tid"), "X": ("ts", "dur", "tid", "name"),
            "i": ("ts", "tid", "name", "s"), "C": ("ts", "name", "args"),
            "s": ("ts", "tid", "id", "cat", "name"), "f": ("ts", "tid", "id", "cat", "name", "bp"),
            "M": ("name", "args")}


def check_trace_events(doc: dict) -> dict:
    """Validate a trace-event document and return what a viewer builds from it:
    slices (with their nesting level per thread), instants, counters, flows,
    thread names."""
    assert isinstance(doc["traceEvents"], list)
    slices, instants, counters, names = [], [], defaultdict(list), {}
    flows = defaultdict(dict)
    last_ts = {}
    stacks = defaultdict(list)          # B/E per thread: indexes into slices
    open_x = defaultdict(list)          # X end times per thread
    previous = {}                       # last slice/instant event per thread
    for n, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        assert ph in REQUIRED, (n, e)
        assert isinstance(e.get("pid"), int), (n, e)
        for key in REQUIRED[ph]:
            assert key in e, (n, key, e)
        if ph == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index"), e
            if e["name"].endswith("_name"):
                assert isinstance(e["args"]["name"], str) and e["args"]["name"]
                names[(e["pid"], e.get("tid"))] = e["args"]["name"]
            continue
        ts = e["ts"]
        assert isinstance(ts, (int, float)) and math.isfinite(ts) and ts >= 0, e
        assert abs(ts * 1000 - round(ts * 1000)) < 1e-6, e     # whole nanoseconds
        if ph == "C":
            key = ("C", e["pid"], e["name"])
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
            for series, value in e["args"].items():
                counters[f"{e['name']} {series}"].append((ts, value))
        elif ph == "i" and e["s"] != "t":
            assert e["s"] in ("p", "g"), e
            key = ("p", e["pid"])
            instants.append(e)
        else:
            key = ("t", e["pid"], e["tid"])
        assert ts >= last_ts.get(key, 0), ("ts decreases on a track", n, e)
        last_ts[key] = ts
        thread = (e["pid"], e.get("tid"))
        if ph == "B":
            slices.append({**e, "level": len(stacks[thread]), "dur": None})
            stacks[thread].append(len(slices) - 1)
        elif ph == "E":
            assert stacks[thread], ("E without B", n, e)
            s = slices[stacks[thread].pop()]
            assert ts >= s["ts"], e
            s["dur"] = (round(ts * 1000) - round(s["ts"] * 1000)) / 1000
            s["args"] = {**s.get("args", {}), **e.get("args", {})}
        elif ph == "X":
            assert e["dur"] >= 0
            ends = open_x[thread]                 # in ns: whole numbers, exact
            begin, end = round(ts * 1000), round((ts + e["dur"]) * 1000)
            while ends and ends[-1] <= begin:
                ends.pop()
            if ends:
                assert end <= ends[-1], ("X overlaps its parent", n, e)
            slices.append({**e, "level": len(ends) + len(stacks[thread])})
            ends.append(end)
        elif ph == "i" and e["s"] == "t":
            instants.append(e)
        elif ph == "s":
            prev = previous.get(thread)
            assert prev is not None and prev["ph"] == "i" and prev["ts"] == ts, \
                ("flow start not bound to an instant", n, e)
            assert "s" not in flows[e["id"]], ("flow id started twice", e)
            flows[e["id"]]["s"] = (e, prev)
        elif ph == "f":
            assert e["bp"] == "e", e
            prev = previous.get(thread)
            if stacks[thread]:
                bound = slices[stacks[thread][-1]]
            else:
                assert prev is not None and prev["ph"] == "X" and prev["ts"] == ts, \
                    ("flow end not bound to a slice", n, e)
                bound = prev
            assert "f" not in flows[e["id"]], ("flow id ended twice", e)
            flows[e["id"]]["f"] = (e, bound)
        if ph in ("B", "X"):
            previous[thread] = slices[-1]
        elif ph == "i" and e["s"] == "t":
            previous[thread] = e
    for thread, stack in stacks.items():
        assert not stack, ("unbalanced B/E", thread)
    for flow_id, ends in flows.items():
        assert set(ends) == {"s", "f"}, ("unpaired flow", flow_id)
        (s, _), (f, _) = ends["s"], ends["f"]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"]) and f["ts"] >= s["ts"]
    return {"slices": slices, "instants": instants, "counters": dict(counters),
            "flows": dict(flows), "names": names}


def _doc(*events) -> dict:
    return {"traceEvents": [{"pid": 1, **e} for e in events]}


@pytest.mark.parametrize("doc, why", [
    (_doc({"ph": "B", "ts": 1, "tid": 1, "name": "a"}), "unbalanced B/E"),
    (_doc({"ph": "E", "ts": 1, "tid": 1}), "E without B"),
    (_doc({"ph": "i", "ts": 5, "tid": 1, "name": "a", "s": "t"},
          {"ph": "i", "ts": 4, "tid": 1, "name": "b", "s": "t"}), "ts decreases"),
    (_doc({"ph": "X", "ts": 0, "dur": 10, "tid": 1, "name": "a"},
          {"ph": "X", "ts": 5, "dur": 10, "tid": 1, "name": "b"}), "overlaps its parent"),
    (_doc({"ph": "i", "ts": 1, "tid": 1, "name": "e", "s": "t"},
          {"ph": "s", "ts": 1, "tid": 1, "id": 7, "cat": "c", "name": "n"}), "unpaired flow"),
    (_doc({"ph": "s", "ts": 1, "tid": 1, "id": 7, "cat": "c", "name": "n"}), "not bound"),
    (_doc({"ph": "X", "ts": 1, "tid": 1, "name": "a"}), "dur"),
    (_doc({"ph": "Q", "ts": 1, "tid": 1}), "Q"),
])
def test_trace_event_validator_rejects_malformed_traces(doc, why):
    """The structural validator the Perfetto tests rely on fails where a viewer would."""
    with pytest.raises((AssertionError, KeyError)) as caught:
        check_trace_events(doc)
    assert why in repr(caught.value)


def on(model: dict, tid: int, kind: str = "slices") -> list[dict]:
    return [e for e in model[kind] if e.get("tid") == tid and e.get("s", "t") == "t"]


def expected_counts(path: Path) -> dict:
    rec = open_recording(path)
    ev = rec.table("events").to_pydict()
    n = len(ev["kind"])
    return {
        "materialize_nested": sum(1 for i in range(n)
                                  if ev["kind"][i] == "materialize" and ev["depth"][i] > 1),
        # storages brought back (a view's recomputation brings back nothing)
        "remat_storages": sum(1 for i in range(n) if ev["kind"][i] == "compute"
                              and ev["remat"][i] and ev["tensor_id"][i] == ev["storage_id"][i]),
        "top_level": sum(1 for i in range(n)
                         if ev["kind"][i] == "materialize" and ev["depth"][i] == 1),
    }


def perfetto_model(path: Path, out: Path) -> tuple[dict, object]:
    result = export_perfetto(path, out)
    return check_trace_events(load_trace_events(out)), result


# --- Perfetto --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_perfetto_matches_recording(recs, tmp_path, name):
    path = recs[name]
    rec = open_recording(path)
    s = rec.summary
    model, result = perfetto_model(path, tmp_path / "t.json")
    counts = expected_counts(path)
    # the "queries": eviction count and peak memory are the recording's
    evictions = [e for e in model["instants"] if e["cat"] == "evict"]
    assert len(evictions) == result.evictions == s["evictions"]
    assert [e["args"]["storage"] for e in evictions] == rec.table("decisions")["victim"].to_pylist()
    assert max(v for _, v in model["counters"]["memory bytes"]) == s["peak_memory"]
    assert {v for _, v in model["counters"]["budget bytes"]} == {rec.run["budget"]}
    assert len([e for e in model["instants"] if e["cat"] == "free_dead"]) == s["dead_frees"]
    # tracks
    ops, remats = on(model, TID_OPS), on(model, TID_REMAT)
    assert sum(sl["args"].get("ops", 1) for sl in ops) == counts["top_level"] == result.op_slices
    assert len(remats) == counts["materialize_nested"] == result.remat_slices
    assert all(sl["ph"] == "X" for sl in ops) and all(sl["ph"] == "B" for sl in remats)
    assert all(sl["args"]["depth"] == sl["level"] + 2 for sl in remats)
    assert max((sl["level"] for sl in remats), default=-2) + 2 == max(s["max_depth"], 1) \
        or s["max_depth"] == 1
    names = rec.table("ops")["name"].to_pylist()
    for sl in ops + remats:
        if "ops" in sl["args"]:     # consecutive zero-cost ops
            assert sl["dur"] == 0 and sl["args"]["ops"] > 1
            assert sl["args"]["paper_ops"] == [i + 1 for i in sl["args"]["op_ids"]]
            assert sl["name"] in (f"{names[sl['args']['op_ids'][0]]} x{sl['args']['ops']}",
                                  f"{sl['args']['ops']} zero-cost ops")
            continue
        assert sl["args"]["paper_op"] == sl["args"]["op_id"] + 1
        assert sl["name"] == names[sl["args"]["op_id"]]
    assert sum(1 for sl in remats if not sl["args"].get("oom")) + \
        sum(sl["args"].get("ops", 1) for sl in ops
            if sl["args"]["remat"] and not sl["args"].get("oom")) == s["remats"]
    assert model["names"][(1, TID_REMAT)] == "rematerializations"
    # flows: one per storage brought back, from its eviction to the slice computing it
    assert len(model["flows"]) == counts["remat_storages"] == result.flows
    tensors = rec.table("tensors").to_pydict()
    storage_of = dict(zip(tensors["name"], tensors["storage_id"]))
    for flow in model["flows"].values():
        (_, evicted), (_, remat) = flow["s"], flow["f"]
        assert evicted["ts"] <= remat["ts"]
        assert evicted["args"]["flow"] == flow["s"][0]["id"]
        back = {storage_of[t] for t in [remat["args"]["tensor"], *remat["args"]["collateral"]]}
        assert evicted["args"]["storage"] in back
    # the OOM
    ooms = [e for e in model["instants"] if e["cat"] == "oom"]
    if rec.outcome == "oom":
        (oom,) = ooms
        assert oom["args"]["frontier"] == rec.run["frontier"]
        assert oom["args"]["oom"] == s["oom"]
        failed = [sl for sl in ops + remats if sl["args"].get("oom")]
        assert len(failed) == s["oom"]["depth"] == len(rec.run["frontier"]["frontier"])
        assert all(round((sl["ts"] + sl["dur"]) * 1000) == round(oom["ts"] * 1000)
                   for sl in failed)
    else:
        assert not ooms


def test_perfetto_tiny_exact(recs, tmp_path):
    model, _ = perfetto_model(recs["tiny-ok"], tmp_path / "t.json")
    ops = on(model, TID_OPS)
    assert [(sl["name"], sl["ts"], sl["dur"], sl["args"]["outputs"]) for sl in ops] == [
        ("constant", 0.001, 0.0, ["w"]), ("conv", 0.001, 0.01, ["a"]),
        ("conv", 0.011, 0.02, ["b"]), ("relu", 0.031, 0.005, ["x"]),
        ("conv", 0.036, 0.03, ["c"]), ("batch_norm", 0.066, 0.05, ["d"])]
    assert ops[-1]["args"]["inputs"] == ["a", "b"]
    (remat,) = on(model, TID_REMAT)
    assert (remat["name"], remat["ts"], remat["dur"], remat["args"]["tensor"],
            remat["args"]["depth"], remat["args"]["for_op"]) == ("conv", 0.066, 0.01, "a", 2, 5)
    evictions = on(model, TID_EVICT, "instants")
    assert [(e["name"], e["ts"], e["args"]["for_tensor"], e["args"]["runner_up_tensor"],
             e["args"]["score"]) for e in evictions] == [
        ("evict a", 0.036, "c", "b", 0.01), ("evict c", 0.066, "a", None, "inf")]
    assert [e["name"] for e in on(model, TID_FREE, "instants")] == ["free x", "free a", "free b"]
    (flow,) = model["flows"].values()
    assert flow["s"][1] is evictions[0] and flow["f"][1]["args"]["tensor"] == "a"
    memory = [v for _, v in model["counters"]["memory bytes"]]
    assert max(memory) == 110 and memory[-2:] == [70, 30]
    assert [v for _, v in model["counters"]["budget bytes"]] == [120, 120]


def test_perfetto_top_level_remat_and_unfinished(recs, tmp_path):
    model, _ = perfetto_model(recs["pins"], tmp_path / "p.json")
    pin = [sl for sl in on(model, TID_OPS) if sl["args"]["remat"]]
    assert [(sl["cat"], sl["name"], sl["args"]["tensor"], sl["ts"]) for sl in pin] == [
        ("remat", "conv", "a", 0.091)]
    (flow,) = model["flows"].values()
    assert flow["f"][1] is pin[0] and flow["s"][1]["name"] == "evict a"
    model, _ = perfetto_model(recs["tiny-thrashed"], tmp_path / "t.json")
    (last,) = [sl for sl in on(model, TID_OPS) if "unfinished" in sl["args"]]
    assert (last["name"], last["args"]["unfinished"]) == ("batch_norm", "thrashed")


def test_perfetto_caps_nesting(recs, tmp_path):
    """Perfetto keeps 512 nested slices a track: deeper materializations are left out
    of the rematerializations track, and the deepest slice shown says so."""
    path = recs["synth-oom"]
    full, result = perfetto_model(path, tmp_path / "full.json")
    capped = export_perfetto(path, tmp_path / "capped.json", max_nesting=10)
    model = check_trace_events(load_trace_events(tmp_path / "capped.json"))
    remats, all_remats = on(model, TID_REMAT), on(full, TID_REMAT)
    assert max(sl["level"] for sl in remats) == 9 and max(sl["level"] for sl in all_remats) > 9
    assert len(remats) + capped.hidden_slices == len(all_remats) == result.remat_slices
    deepest = [sl for sl in remats if sl["level"] == 9]
    assert max(sl["args"].get("hidden_levels", 0) for sl in deepest) == \
        max(sl["level"] for sl in all_remats) - 9
    for sl in deepest:
        sl["args"].pop("hidden_levels", None)
    assert [sl for sl in all_remats if sl["level"] < 10] == remats
    kept = {f for f, ends in full["flows"].items() if ends["f"][1].get("level", 0) < 10}
    assert set(model["flows"]) == kept and capped.flows == len(kept)
    assert model["counters"] == full["counters"]


def test_perfetto_streams_in_batches(recs, tmp_path, monkeypatch):
    """Row-group batches of any size give the same file, and the big tables are
    never read whole."""
    path = recs["synth-oom"]
    export_perfetto(path, tmp_path / "a.json")
    real = Recording.table

    def refuse(self, name):
        assert name not in ("events", "decisions", "candidates"), f"{name} read whole"
        return real(self, name)

    monkeypatch.setattr(Recording, "table", refuse)
    export_perfetto(path, tmp_path / "b.json", batch_rows=7)
    export_perfetto(path, tmp_path / "c.json.gz", batch_rows=1000)
    export_memory_viz(path, tmp_path / "a.pickle", batch_rows=7)
    monkeypatch.undo()
    export_memory_viz(path, tmp_path / "b.pickle")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert gzip.decompress((tmp_path / "c.json.gz").read_bytes()) == \
        (tmp_path / "a.json").read_bytes()
    assert (tmp_path / "a.pickle").read_bytes() == (tmp_path / "b.pickle").read_bytes()


# --- memory_viz --------------------------------------------------------------------------

def load_snapshot(path: Path) -> dict:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def check_running_total(path: Path, snapshot: dict) -> int:
    """Replay the trace entries along the recording's events: the allocated total
    is the `memory` column at every event (at a compute: once its outputs are
    allocated). Returns the final total."""
    ev = open_recording(path).table("events").to_pydict()
    by_seq = defaultdict(list)
    for e in snapshot["device_traces"][0]:
        by_seq[e["seq"]].append(e)
    total = 0
    delta = {"alloc": 1, "free_completed": -1}
    for i, kind in enumerate(ev["kind"]):
        group = by_seq.pop(i, [])
        if kind == "compute" and not ev["collateral"][i]:
            total += sum(e["size"] for e in group if e["action"] == "alloc")
            assert total == ev["memory"][i], i
            total -= sum(e["size"] for e in group if e["action"] == "free_completed")
            continue
        if not (kind == "compute"):
            assert total == ev["memory"][i], (i, kind)
        total += sum(delta.get(e["action"], 0) * e["size"] for e in group)
    assert not by_seq
    return total


def active_memory_timeline(snapshot: dict, device: int = 0) -> list[int]:
    """The totals memory_viz's "Active Memory Timeline" draws: a port of MemoryViz.js
    (annotate_snapshot's free_requested + free_completed -> free, then
    process_alloc_data's pairing of allocations and frees by address)."""
    trace = []
    for e in snapshot["device_traces"][device]:
        if (e["action"] == "free_completed" and trace and trace[-1]["action"] == "free_requested"
                and trace[-1]["addr"] == e["addr"]):
            trace[-1] = {**trace[-1], "action": "free"}
            continue
        trace.append(e)
    elements, actions, initially, addr_to_alloc = [], [], [], {}
    for e in trace:
        if e["action"] == "alloc":
            elements.append(e)
            addr_to_alloc[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in ("free", "free_completed"):
            if e["addr"] in addr_to_alloc:
                actions.append(addr_to_alloc.pop(e["addr"]))
            else:
                elements.append(e)
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for seg in snapshot["segments"]:
        if seg["device"] != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in addr_to_alloc:
                elements.append({"size": b["requested_size"]})
                initially.append(len(elements) - 1)
            addr += b["size"]
    current = set(initially)
    total = sum(elements[i]["size"] for i in initially)
    totals = [total]
    for i in actions:
        if i in current:
            current.remove(i)
            total -= elements[i]["size"]
        else:
            current.add(i)
            total += elements[i]["size"]
        totals.append(total)
    return totals


@pytest.mark.parametrize("name", ALL)
def test_memory_viz_matches_recording(recs, tmp_path, name):
    path = recs[name]
    rec = open_recording(path)
    result = export_memory_viz(path, tmp_path / "m.pickle")
    snap = load_snapshot(tmp_path / "m.pickle")
    assert set(snap) == {"segments", "device_traces"} and len(snap["device_traces"]) == 1
    final = check_running_total(path, snap)
    totals = active_memory_timeline(snap)
    assert max(totals) == rec.summary["peak_memory"] == result.peak_bytes
    assert totals[0] == 0 and totals[-1] == final == result.final_bytes
    assert sum(b["requested_size"] for seg in snap["segments"] for b in seg["blocks"]) == final
    entries = snap["device_traces"][0]
    assert result.trace_entries == len(entries)
    for e in entries:
        assert e["stream"] == 0 and e["frames"] and all(
            set(f) == {"filename", "line", "name"} for f in e["frames"])
        if e["action"] != "oom":
            assert e["addr"] % 512 == 0 and e["size"] > 0
    allocs = [e for e in entries if e["action"] == "alloc"]
    assert len({e["addr"] for e in allocs}) == len(allocs) == result.allocations
    ooms = [e for e in entries if e["action"] == "oom"]
    if rec.outcome == "oom":
        (oom,) = ooms
        assert oom["size"] == rec.summary["oom"]["request"]
        assert oom["device_free"] == rec.run["budget"] - rec.summary["oom"]["memory"]
        assert len(oom["frames"]) == 1 + min(rec.summary["oom"]["depth"], 64)
    else:
        assert not ooms


def test_memory_viz_tiny_frames(recs, tmp_path):
    export_memory_viz(recs["tiny-ok"], tmp_path / "m.pickle")
    entries = load_snapshot(tmp_path / "m.pickle")["device_traces"][0]
    remat = [e for e in entries if e["action"] == "alloc" and e["seq"] == 22]
    assert [[f["name"] for f in e["frames"]] for e in remat] == [[
        "remat a (storage 1, 40 B)", "op 1 (paper #2) conv: remat a [depth 2]",
        "op 5 (paper #6) batch_norm: compute d [depth 1]"]]
    assert remat[0]["frames"][1]["line"] == 4          # the op's line in the log
    evict = [e for e in entries if e["action"] == "free_completed" and e["seq"] == 16]
    assert evict[0]["frames"][0]["name"] == \
        "evict a (storage 1, 40 B): decision 0 of dtr, room for c"
    assert [e["action"] for e in entries if e["seq"] == 16] == [
        "free_requested", "free_completed", "segment_free"]


def test_memory_viz_deep_chain_is_capped(recs, tmp_path):
    export_memory_viz(recs["synth-oom"], tmp_path / "m.pickle", max_frames=8)
    snap = load_snapshot(tmp_path / "m.pickle")
    deepest = max(snap["device_traces"][0], key=lambda e: len(e["frames"]))
    names = [f["name"] for f in deepest["frames"]]
    assert len(names) == 1 + 8 and "levels omitted" in names[-2] and "[depth 1]" in names[-1]


def test_memory_viz_read_by_torch(recs, tmp_path):
    mv = pytest.importorskip("torch.cuda._memory_viz")
    for name in ("tiny-oom", "synth-ok"):
        path = recs[name]
        s = open_recording(path).summary
        export_memory_viz(path, tmp_path / f"{name}.pickle")
        snap = load_snapshot(tmp_path / f"{name}.pickle")
        final = check_running_total(path, snap)
        stats = mv.segsum(copy.deepcopy(snap))
        assert f"segments: {len(snap['segments'])}" in stats and "total_free: 0.0B" in stats
        text = mv.trace(copy.deepcopy(snap))
        assert text.startswith("Device 0") and "cudaMalloc" in text and "del " in text
        assert ("raise OutOfMemoryError" in text) == (s["outcome"] == "oom")
        lines = mv.memory(copy.deepcopy(snap), format_flamegraph=lambda text: text)
        active = [ln for ln in lines.splitlines() if ";active_allocated;" in ln]
        assert sum(int(ln.rsplit(" ", 1)[1]) for ln in active) == final
        assert all("paper #" in ln for ln in active)
        mv.segments(copy.deepcopy(snap), format_flamegraph=lambda text: text)
        for html in (mv.trace_plot(copy.deepcopy(snap)), mv.segment_plot(copy.deepcopy(snap))):
            assert "snapshot.pickle" in html
        unfreed = mv.filter_alloc_free_pairs(copy.deepcopy(snap))["device_traces"][0]
        assert sum(e["size"] for e in unfreed if e["action"] == "alloc") == final
    # and its command line reads the file
    proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats",
                           str(tmp_path / "tiny-oom.pickle")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "total_allocated: 90.0B" in proc.stdout


# --- the command ---------------------------------------------------------------------------

def export(*args, cwd=None):
    return dtrf("export", *args, cwd=cwd)


def test_cli_exports_recordings(recs, tmp_path):
    path = recs["tiny-oom"]
    out = export(path, "--format", "perfetto", "-o", tmp_path / "t.json.gz", "--json").json()
    assert (out["format"], out["evictions"], out["outcome"]) == ("perfetto", 2, "oom")
    check_trace_events(load_trace_events(tmp_path / "t.json.gz"))
    res = export(path, "-f", "memory-viz", "-o", "-")
    assert res.code == 0
    assert pickle.loads(res.out_bytes)["segments"]
    res = export(path, "-f", "memory-viz", cwd=tmp_path)
    assert res.code == 0 and res.out == ""
    assert (tmp_path / "recordings" / "tiny-oom.memory_viz.pickle").is_file()
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_errors(recs, tmp_path):
    for args, message in (
            ((recs["tiny-ok"], "-f", "csv"), "is a recording"),
            ((tmp_path, "-f", "perfetto"), "is not one"),
            ((tmp_path / "nope", "-f", "perfetto"), "no such"),
            ((recs["tiny-ok"], "-f", "svg"), "unknown format"),
            ((recs["tiny-ok"], "-f", "perfetto", "-o", "-", "--json"), "--json"),
            ((tmp_path, "-f", "csv"), "neither a sweep")):
        res = export(*args)
        assert res.refused(message), (args, res.err)


@pytest.fixture()
def sweep_dir(tmp_path):
    """A sweep folder of the tiny trace at three budgets, written by the sweep store."""
    from dtrforensics.sweep.store import (
        Point,
        SweepParams,
        SweepStore,
        TraceInfo,
        row_from_summary,
    )
    program = tiny_program()
    store = SweepStore(tmp_path / "sweep", flush_rows=2)
    store.open_or_create(SweepParams(ratio_from=0.5, ratio_to=1.0, step=0.25),
                         TraceInfo("tiny", "", "<tiny>", 150, 105), (75, 150))
    for budget in (150, 105, 120):
        summary = replay(program, budget=budget).summary
        store.append(row_from_summary(Point("dtr", budget, 0, budget / 150, "grid"), summary))
        store.maybe_flush()
    store.flush()
    return tmp_path / "sweep"


def test_cli_exports_sweeps(sweep_dir, tmp_path):
    res = export(sweep_dir, "-f", "csv", "-o", "-")
    assert res.code == 0, res.err
    rows = res.out.splitlines()
    assert rows[0].split(",")[:3] == ['"policy"', '"budget"', '"rep"']
    assert [r.split(",")[1] for r in rows[1:]] == ["105", "120", "150"]
    res = export(sweep_dir, "-f", "parquet", "-o", tmp_path / "runs.parquet", "--json")
    assert json.loads(res.out)["rows"] == 3
    table = pq.read_table(tmp_path / "runs.parquet")
    assert table["outcome"].to_pylist() == ["oom", "ok", "ok"]
    # any folder of Parquet results
    loose = tmp_path / "loose"
    loose.mkdir()
    pq.write_table(pa.table({"budget": [2, 1], "x": ["b", "a"]}), loose / "one.parquet")
    pq.write_table(pa.table({"budget": [3], "x": ["c"]}), loose / "two.parquet")
    res = export(loose, "-f", "csv", "-o", "-")
    assert res.out.splitlines()[1:] == ["1,\"a\"", "2,\"b\"", "3,\"c\""]


# --- ResNet-32 at ratio 0.104: the deep recursive OOM ------------------------------------------

@pytest.mark.public
def test_resnet32_exports(tmp_path):
    program = program_or_skip("resnet32")
    _, path = record_run(program, ratio=0.104, out_dir=tmp_path / "r")
    rec = open_recording(path)
    s = rec.summary
    assert (s["outcome"], s["max_depth"]) == ("oom", 124)
    model, result = perfetto_model(path, tmp_path / "r.json")
    assert len([e for e in model["instants"] if e["cat"] == "evict"]) == s["evictions"] == 326
    assert max(v for _, v in model["counters"]["memory bytes"]) == s["peak_memory"]
    remats = on(model, TID_REMAT)
    assert max(sl["level"] for sl in remats) + 2 == s["max_depth"]     # a 123-slice stack
    (oom,) = [e for e in model["instants"] if e["cat"] == "oom"]
    assert len(oom["args"]["frontier"]["frontier"]) == s["oom"]["depth"] == 118
    assert len(model["flows"]) == result.flows == expected_counts(path)["remat_storages"]
    export_memory_viz(path, tmp_path / "r.pickle")
    snap = load_snapshot(tmp_path / "r.pickle")
    final = check_running_total(path, snap)
    assert max(active_memory_timeline(snap)) == s["peak_memory"]
    assert final == s["oom"]["memory"]


@pytest.mark.slow
def test_lstm_exports_stream(tmp_path):
    """A long run (200k events, depth 893): both exports stay consistent, and
    the rematerializations track is capped below Perfetto's nesting limit."""
    program = program_or_skip("lstm")
    _, path = record_run(program, ratio=0.264, out_dir=tmp_path / "r")
    s = open_recording(path).summary
    model, result = perfetto_model(path, tmp_path / "l.json.gz")
    assert result.max_depth == s["max_depth"] > 500 and result.hidden_slices > 0
    assert max(sl["level"] for sl in on(model, TID_REMAT)) == 499
    assert len([e for e in model["instants"] if e["cat"] == "evict"]) == s["evictions"]
    assert max(v for _, v in model["counters"]["memory bytes"]) == s["peak_memory"]
    export_memory_viz(path, tmp_path / "l.pickle")
    snap = load_snapshot(tmp_path / "l.pickle")
    check_running_total(path, snap)
    assert max(active_memory_timeline(snap)) == s["peak_memory"]
