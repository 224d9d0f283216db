"""Regime comparison (queries/regime, analyses/regime) on a log whose answer is worked out.

BURST log (tests/logs.py's fan log): w = const 10 (pinned), then x0..x7 = f(w), 10 bytes each, costs
3, 5, 4, 3, 5, 4, 3, 5, all released at the end. Budget 50 holds w and four of
them, so ops 5, 6, 7 and 8 each need one pressure eviction; they take storages
1, 2, 4, 3 (scores cost / (10 x staleness)). Budget 100 never evicts: its
stream is the dead frees at the end (op 8). With 2-op windows the evictions of
the 50-byte run fall in windows [4, 5]: 1, [6, 7]: 2, [8, 9]: 1.

- factor 2, min_excess 1, sustain 1: onset [4, 5] (1 > 0);
- sustain 3: still [4, 5] (three blown windows to the end); sustain 4: none;
- min_excess 2: onset [6, 7];
- drivers from op 4: storages 1, 2, 3, 4 (one eviction each, none in the fast run);
- the blown windows [4, 5] .. [8, 9] make one streak, the regime; its first op
  where the slow run evicts at least once more than the fast run is op 5: the
  onset op, 4 pressure evictions from it to the last op (8) against none;
- the streams part at position 1 (pressure 1 at op 5 against dead 1 at op 8):
  op 5, the onset op itself.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from logs import fan_log
from public import program_or_skip

from dtrforensics.analyses.regime import regime
from dtrforensics.analyses.runs import open_together
from dtrforensics.recorder.reader import open_recording
from dtrforensics.recorder.record import record_run
from dtrforensics.trace import load_trace


@pytest.fixture(scope="module")
def burst(tmp_path_factory):
    root = tmp_path_factory.mktemp("regime")
    program = fan_log().program("burst")
    fast = open_recording(record_run(program, budget=100, out_dir=root / "fast")[1])
    slow = open_recording(record_run(program, budget=50, out_dir=root / "slow")[1])
    return fast, slow


def onset_of(fast, slow, **rule):
    con, ids = open_together([fast, slow])
    try:
        return con.execute("SELECT * FROM regime_onset(?, ?, ?, ?, ?, ?)",
                           [*ids, rule.get("window_ops", 2), rule.get("factor", 2.0),
                            rule.get("min_excess", 1), rule.get("sustain", 1)]).fetchone()
    finally:
        con.close()


def test_eviction_rate_windows(burst):
    report = regime(*burst, window_ops=2, min_excess=1, sustain=1)
    got = [(w.first_op, w.last_op, w.a.evictions, w.b.evictions) for w in report.windows]
    assert got == [(0, 1, 0, 0), (2, 3, 0, 0), (4, 5, 0, 1), (6, 7, 0, 2), (8, 9, 0, 1)]
    assert all(w.a.remats == w.b.remats == 0 for w in report.windows)


def test_onset_rule(burst):
    assert onset_of(*burst)[:5] == ("b", 0, 4, 2, 4)
    assert onset_of(*burst, sustain=3)[3:5] == (2, 4)
    assert onset_of(*burst, sustain=4)[3] is None
    assert onset_of(*burst, min_excess=2)[3:5] == (3, 6)
    assert onset_of(*burst, factor=1.0, min_excess=0)[3:5] == (0, 0)   # every window ties


def test_drivers_and_divergence(burst):
    report = regime(*burst, window_ops=2, min_excess=1, sustain=1)
    assert report.slow == "b" and report.onset.first_op == 4
    assert [(d.storage, d.slow_evictions, d.fast_evictions, d.excess) for d in report.drivers] == [
        (1, 1, 0, 1), (2, 1, 0, 1), (3, 1, 0, 1), (4, 1, 0, 1)]
    assert [d.first_slow_op for d in report.drivers] == [5, 6, 8, 7]
    link = report.divergence
    assert (link.position, link.a_storage, link.b_storage, link.op_id) == (1, 1, 1, 5)
    assert link.ops_before_onset == 0 and link.drivers_among_entries == (1, 1)
    o = report.onset
    assert (o.op, o.regime_last_op, o.regime_slow_evictions, o.regime_fast_evictions) == (5, 8, 4, 0)


def test_identical_runs_have_no_regime(burst):
    fast, _ = burst
    report = regime(fast, fast, window_ops=2)
    assert report.slow is None and report.onset is None and report.drivers == ()
    assert report.divergence is None


def test_bad_rule_is_refused(burst):
    with pytest.raises(ValueError):
        regime(*burst, window_ops=0)
    with pytest.raises(ValueError):
        regime(*burst, factor=0.5)


def test_regime_switch_of_the_embedded_trace_against_the_event_tables(tmp_path):
    """The embedded trace switches regime between 25,288,251 B (1.54x) and one byte
    more (1.14x); every window count equals a count taken from events.parquet."""
    program = load_trace("hole-rnn-seed16")
    fast = open_recording(record_run(program, budget=25_288_252, out_dir=tmp_path / "fast")[1])
    slow = open_recording(record_run(program, budget=25_288_251, out_dir=tmp_path / "slow")[1])
    assert slow.summary["overhead"] > fast.summary["overhead"]
    report = regime(fast, slow, window_ops=3, min_excess=1, sustain=1)
    assert report.slow == "b"
    for side, rec in (("a", fast), ("b", slow)):
        events = pq.read_table(rec.path / "events.parquet").to_pylist()
        for w in report.windows:
            inside = [e for e in events if w.first_op <= e["op_id"] <= w.last_op]
            remats = [e for e in inside if e["kind"] == "compute" and e["remat"]
                      and not e["collateral"]]
            rates = getattr(w, side)
            assert rates.evictions == sum(e["kind"] == "evict" for e in inside)
            assert rates.remats == len(remats)
            assert rates.remat_compute == sum(e["cost"] for e in remats)
    assert sum(w.b.evictions for w in report.windows) == slow.summary["evictions"]
    assert report.onset is not None
    blown = [w.first_op for w in report.windows
             if w.b.evictions >= 2 * w.a.evictions and w.b.evictions - w.a.evictions >= 1]
    streaks: list[list[int]] = []
    for first in blown:
        if streaks and streaks[-1][-1] + 3 == first:
            streaks[-1].append(first)
        else:
            streaks.append([first])
    excess = {w.first_op: w.b.evictions - w.a.evictions for w in report.windows}
    heaviest = max(streaks, key=lambda st: sum(excess[f] for f in st))
    assert report.onset.first_op == heaviest[0]
    per_op = {side: {} for side in ("a", "b")}
    for side, rec in (("a", fast), ("b", slow)):
        for e in pq.read_table(rec.path / "events.parquet").to_pylist():
            if e["kind"] == "evict":
                per_op[side][e["op_id"]] = per_op[side].get(e["op_id"], 0) + 1
    o = report.onset
    assert per_op["b"].get(o.op, 0) >= 2 * per_op["a"].get(o.op, 0)
    assert per_op["b"].get(o.op, 0) - per_op["a"].get(o.op, 0) >= 1
    assert o.regime_slow_evictions == sum(n for op, n in per_op["b"].items()
                                          if o.op <= op <= o.regime_last_op)
    pytest.importorskip("matplotlib")
    from dtrforensics.render.regime_plot import draw
    fig = draw(report)
    (line,) = [a for a in fig.axes[0].get_lines() if a.get_gid() == "onset"]
    assert list(line.get_xdata()) == [o.op, o.op]
    assert "the onset is its first op" in " ".join(fig.get_supxlabel().split())


@pytest.mark.slow
def test_the_lstm_onset_marks_where_the_slow_regimes_evictions_begin(tmp_path):
    """lstm@0.264 (the slow run) makes 38,059 pressure evictions, 28,872 of them in
    the last 63 ops (8000-8062); a blip at ops 7614-7694 (104 against 18) came
    before and is not the regime. The onset must fall after the blip, no later
    than op 8000, and leave nearly all of the slow run's excess after it."""
    program = program_or_skip("lstm")
    fast = open_recording(record_run(program, ratio=0.265, out_dir=tmp_path / "fast")[1])
    slow = open_recording(record_run(program, ratio=0.264, out_dir=tmp_path / "slow")[1])
    per_op = []
    for rec in (fast, slow):
        counts: dict[int, int] = {}
        for e in pq.read_table(rec.path / "events.parquet", columns=["kind", "op_id"]).to_pylist():
            if e["kind"] == "evict":
                counts[e["op_id"]] = counts.get(e["op_id"], 0) + 1
        per_op.append(counts)
    fast_ops, slow_ops = per_op
    assert sum(slow_ops.values()) == 38_059
    assert sum(n for op, n in slow_ops.items() if op >= 8000) == 28_872
    report = regime(fast, slow)
    o = report.onset
    assert report.slow == "b" and 7_694 < o.op <= 8_000
    assert o.first_op <= o.op <= o.last_op
    burst = slow_ops.get(o.op, 0) - fast_ops.get(o.op, 0)
    assert burst >= report.rule.min_excess
    assert not any(slow_ops.get(op, 0) - fast_ops.get(op, 0) >= report.rule.min_excess
                   and slow_ops.get(op, 0) >= 2 * fast_ops.get(op, 0)
                   for op in range(o.first_op, o.op))
    total = sum(slow_ops.values()) - sum(fast_ops.values())
    after = (sum(n for op, n in slow_ops.items() if op >= o.op)
             - sum(n for op, n in fast_ops.items() if op >= o.op))
    assert after >= 0.99 * total


def test_dtrf_regime_command_on_byte_specs(tmp_path):
    """Run specs in bytes reach the exact regime switch of the embedded trace."""
    import json

    from cli import dtrf_process
    cmd = ["regime", "hole-rnn-seed16@25288252B", "hole-rnn-seed16@25288251B", "--window", "2",
           "--min-excess", "1", "--json", "--plot", tmp_path / "regime.png"]
    proc = dtrf_process(*cmd, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["a"]["budget"], doc["b"]["budget"]) == (25_288_252, 25_288_251)
    assert doc["slow"] == "b" and doc["onset"]["first_op"] == 22
    assert (tmp_path / "regime.png").read_bytes()[:4] == b"\x89PNG"
    text = dtrf_process(*cmd[:-3], cwd=tmp_path, columns=200).stdout
    assert "Onset: op 23 (paper #24)," in text              # both numberings, as everywhere
    assert "made by linear op 4): 1 eviction against 0 (+1)" in text
    assert "streak of >= 1 blown window with" in text and "window(s)" not in text
    bad = dtrf_process(*cmd[:1], "hole-rnn-seed16@12.5B", "hole@1", cwd=tmp_path)
    assert bad.returncode == 2 and "not a budget in bytes" in bad.stderr


def test_regime_figure_is_never_written_inside_a_recording(tmp_path):
    from cli import dtrf_process
    rec = record_run(fan_log().program("burst"), budget=100, out_dir=tmp_path / "rec")[1]
    proc = dtrf_process("regime", rec, rec, "--plot", rec / "fig.png", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert not (rec / "fig.png").exists()
