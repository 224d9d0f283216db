"""The published forensic cases, from recordings of the public traces alone.

- ResNet-32 at 0.104 fails (docs/semantics.md §12): x7984's allocation, 179,830,912
  bytes, 889,795,480 pinned, depth 118, chain rooted at x9012.
- InceptionV4 at 0.2343 completes and at 0.235 fails. The two eviction streams share
  their first 13 entries; the 14th is pressure victim 931 (op 944, the papers'
  operator 945) in one run and dead free 968 (op 944) in the other, which evicts 931
  one op later. The failing run evicted storage 3131 (made by op 2265, the papers'
  2,266) at op 2266, three ops before the failure at op 2269 (2,270), by a decision
  whose runner-up was 932; the completing run evicted 932 there instead and kept
  3131 resident until op 2269.
- LSTM at 0.265 vs 0.264: 5,233 vs 5,236 distinct storages in the eviction stream,
  Jaccard 0.999, 1.33 vs 8.27 evictions per storage (stream convention: 0.265
  makes 1,726 pressure evictions and 5,232 dead frees, 6,958 in all).
Skipped cleanly without the traces. The default suite keeps a representative
subset, one story per analysis: ResNet-32's OOM frontier (and `dtrf oom` on a run
spec) and LSTM 0.265's re-eviction figures; the hand-written logs of
test_forensics_queries.py plant the InceptionV4 divergence (a timing shift
before a divergent choice) in miniature. The full InceptionV4 diff and OOM and
the LSTM 0.265/0.264 comparison replay for tens of seconds each and are marked
slow: `make test-stories` runs them (`make test-full` runs every slow test).
"""

from __future__ import annotations

import pytest
from cli import dtrf
from public import program_or_skip

from dtrforensics.analyses.diff import diff
from dtrforensics.analyses.oom import explain_oom
from dtrforensics.analyses.reevict import reevict
from dtrforensics.recorder.reader import open_recording
from dtrforensics.recorder.record import record_run

pytestmark = pytest.mark.public


def _record(name, ratio, folder, scores="victims"):
    program = program_or_skip(name)
    _, path = record_run(program, ratio=ratio, out_dir=folder, scores=scores)
    return open_recording(path)


# --- ResNet-32 0.104 (fast) -----------------------------------------------------------

def test_resnet32_oom_frontier(tmp_path):
    rec = _record("resnet32", 0.104, tmp_path / "r104")
    r = explain_oom(rec)
    assert (r.tensor, r.request, r.pinned, r.depth, r.budget, r.root_tensor) == \
        ("x7984", 179_830_912, 889_795_480, 118, 1_046_362_631, "x9012")
    assert r.pool_empty and r.chain_from_events
    assert len(r.frontier) == 118 and r.frontier[0].tensor == "x9012"
    assert r.frontier[-1].tensor == "x7984" and r.frontier[-1].op_name == "cudnn_batch_norm"
    mp = rec.summary["max_pinned"]
    assert (r.peak_pinned, r.depth_at_peak_pinned, r.peak_pinned_op_id) == \
        (mp["bytes"], mp["depth"], mp["op_id"])
    assert r.max_depth == rec.summary["max_depth"]


def test_oom_command_records_a_run_spec_once(tmp_path):
    program_or_skip("resnet32")
    args = ["oom", "resnet32@0.104", "--cache", tmp_path / "cache", "--json"]
    first = dtrf(*args)
    out = first.json()
    assert "recording resnet32@0.104" in first.err
    assert (out["tensor"], out["depth"], out["pinned"]) == ("x7984", 118, 889_795_480)
    (folder,) = (tmp_path / "cache").iterdir()
    stamp = (folder / "run.json").stat().st_mtime_ns
    again = dtrf(*args)
    assert again.code == 0 and (folder / "run.json").stat().st_mtime_ns == stamp
    assert "recording" not in again.err


# --- InceptionV4 0.2343 vs 0.235 (slow) --------------------------------------------------

@pytest.fixture(scope="module")
def inception(tmp_path_factory):
    root = tmp_path_factory.mktemp("inception")
    return (_record("inceptionv4", 0.2343, root / "a", scores="all"),
            _record("inceptionv4", 0.235, root / "b", scores="all"))


@pytest.mark.slow
def test_inception_diff_tells_the_published_story(inception):
    a, b = inception
    assert (a.outcome, b.outcome) == ("ok", "oom")
    r = diff(a, b)
    assert r.common_prefix == 13
    d = r.first_divergence
    assert (d.position, d.op_id, d.paper_op) == (14, 944, 945)
    assert (d.a.kind, d.a.victim, d.a.op_id, d.a.paper_op) == ("pressure", 931, 944, 945)
    assert (d.b.kind, d.b.victim, d.b.op_id, d.b.score) == ("dead", 968, 944, None)
    assert d.a.score is not None and d.a.clock == 34_803_136
    assert d.cause == "timing_shift" and "op 945 (paper #946)" in d.explanation
    assert d.a.shortfall > 0 >= d.b.shortfall          # same allocation, only b's fits
    assert d.a.memory == d.b.memory and d.a.request == d.b.request
    assert d.a.rank_in_b.rank == 1                     # b takes 931 at its next decision
    # the first differing choice comes later
    c = r.first_divergent_choice
    assert c.decision == 27 and c.op_id == 1063 and c.op_id > d.op_id
    assert (c.a.victim, c.b.victim) == (1082, 1090)
    # what the failing run lost
    (f,) = r.failures
    assert (f.run, f.op_id, f.paper_op, f.depth, f.pinned) == ("b", 2269, 2270, 187, 2_634_399_100)
    s = f.culprit.storage
    assert (s.storage, s.produced_by_op, s.evicted_op, s.evicted_kind) == \
        (3131, 2265, 2266, "pressure")
    assert f.op_id - s.evicted_op == 3
    assert (s.other_from_op, s.other_to_op) == (2265, 2269)
    assert f.culprit.runner_up == 932
    assert (f.culprit.other_victim, f.culprit.other_victim_op) == (932, 2265)
    assert f.culprit.other_evictions_at_op == 0
    out = r.to_json()
    assert out["first_divergence"]["a"]["victim"] == 931
    assert out["first_divergence"]["b"]["kind"] == "dead"


@pytest.mark.slow
def test_inception_oom(inception):
    r = explain_oom(inception[1])
    assert (r.op_id, r.paper_op, r.op_name, r.depth) == (2269, 2270, "add", 187)
    assert (r.tensor, r.request, r.pinned, r.budget) == \
        ("x39343", 8_388_608, 2_634_399_100, 2_642_657_011)
    assert r.pool_empty and r.chain_from_events
    assert (r.frontier[0].tensor, r.frontier[1].tensor, r.frontier[1].tensor_id,
            r.frontier[1].paper_op) == ("x42293", "x42274", 3131, 2266)
    assert (r.depth_at_peak_pinned, r.max_depth) == (188, 193)


# --- LSTM 0.265 vs 0.264 --------------------------------------------------------------------

def test_lstm_0265_stream_figures(tmp_path):
    rec = _record("lstm", 0.265, tmp_path / "l265")
    (run,) = reevict([rec]).runs
    assert (run.pressure.evictions, run.stream.evictions - run.pressure.evictions) == \
        (1_726, 5_232)
    assert (run.stream.evictions, run.stream.distinct_storages) == (6_958, 5_233)
    assert round(run.stream.mean_per_storage, 2) == 1.33


@pytest.mark.slow
def test_lstm_reeviction_published_figures(tmp_path):
    a = _record("lstm", 0.265, tmp_path / "l265")
    b = _record("lstm", 0.264, tmp_path / "l264")
    r = reevict([a, b])
    ra, rb = r.runs
    # the published figures count the whole stream
    assert (ra.stream.distinct_storages, rb.stream.distinct_storages) == (5_233, 5_236)
    assert (round(ra.stream.mean_per_storage, 2), round(rb.stream.mean_per_storage, 2)) == \
        (1.33, 8.27)
    assert round(r.overlap["stream"].jaccard, 3) == 0.999
    # what the pressure-only view adds: far fewer, far more different storages
    assert (ra.pressure.distinct_storages, rb.pressure.distinct_storages) == (1_255, 4_339)
    assert (round(ra.pressure.mean_per_storage, 2), round(rb.pressure.mean_per_storage, 2)) == \
        (1.38, 8.77)
    assert round(r.overlap["pressure"].jaccard, 3) == 0.289
    assert r.overlap["pressure"].a_in_b == 1.0
