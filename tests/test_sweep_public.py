"""Sweeps of the public ResNet-32 trace against the reference simulator's results.

Reference facts (../shared/reference/dtr-simrd.jsonl, DTR): ratios 0.095-0.097
and 0.102-0.106 run out of memory, 0.098-0.101 and 0.107-0.115 complete. The
hole between 0.101 and 0.102 starts at exactly 1,024,657,200 bytes (the last
completing budget is 1,024,657,199); a 0.01 grid sees 0.10 (2.22x) and 0.11
(2.08x) complete and, refined or not, never looks inside. Skipped without the
traces or the reference.
"""

from __future__ import annotations

import json

import pytest
from cli import dtrf_process
from public import SKIP_REFERENCE, program_or_skip, reference_lines

from dtrforensics.sweep import holes, runner
from dtrforensics.sweep.store import SweepParams, SweepStore

pytestmark = pytest.mark.public

HOLE_LO = 1_024_657_200


def dtrf(*args):
    return dtrf_process(*args, columns=160)


def test_grid_reproduces_the_reference(tmp_path):
    program_or_skip("resnet32")
    ref = {ln["ratio"]: ln for ln in reference_lines()
           if ln["trace"] == "resnet32" and ln["heuristic"] == "dtr"
           and 0.095 <= ln["ratio"] <= 0.115}
    if len(ref) < 21:
        pytest.skip(SKIP_REFERENCE)
    res = dtrf("sweep", "resnet32", "--from", "0.095", "--to", "0.115", "--step", "0.001",
               "--out", tmp_path / "s", "--json", "--no-progress")
    assert res.returncode == 0, res.stderr
    rows = SweepStore(tmp_path / "s").read_runs().to_pylist()
    assert len(rows) == 21
    for r in rows:
        line = ref[r["ratio"]]
        assert (r["budget"], r["outcome"]) == (line["budget"], line["outcome"]), r["ratio"]
        assert r["overhead"] == line["overhead"] and r["clock"] == line["clock"]
        assert r["victims_sha256"] == line["victims_sha256"]
        if "budget_interval" in line:
            assert [r["interval_lo"], r["interval_hi"]] == line["budget_interval"]
    pol = json.loads(res.stdout)["policies"]["dtr"]
    assert pol["first_sampled_success"]["ratio"] == 0.098
    assert pol["failing_below_first_success"] == 3           # 0.095, 0.096, 0.097
    assert pol["failure_regions"] == [[0.102, 0.106]]
    assert [f["ratio"] for f in pol["failures_above_first_success"]] == [
        0.102, 0.103, 0.104, 0.105, 0.106]
    assert [(s["lo"]["ratio"], s["hi"]["ratio"]) for s in pol["regime_switches"]] == [(0.11, 0.111)]


@pytest.mark.slow
def test_refinement_alone_cannot_see_the_hole(tmp_path):
    program = program_or_skip("resnet32")
    params = SweepParams(0.09, 0.12, 0.01, refine=True)
    runner.run_sweep(program, params, tmp_path / "s")
    rep = holes.analyze(tmp_path / "s").policy("dtr")
    assert rep.failure_regions == [] and rep.failures_above == []
    ok = {round(r["ratio"], 6): r["overhead"] for r in SweepStore(tmp_path / "s").read_runs().to_pylist()}
    assert ok[0.1] == pytest.approx(2.2229, abs=1e-4) and ok[0.11] == pytest.approx(2.0768, abs=1e-4)


@pytest.mark.slow
def test_exact_mode_finds_the_hole_to_the_byte(tmp_path):
    program = program_or_skip("resnet32")
    params = SweepParams(0.10, 0.11, 0.01, refine=True, exact=True, max_runs=3000)
    result = runner.run_sweep(program, params, tmp_path / "s")
    assert result.coverage == {"dtr": 1.0}
    x = holes.analyze(tmp_path / "s").policy("dtr").exact
    assert x.coverage == 1.0 and x.gaps == [] and x.overlaps == []
    hole = x.holes[0]
    assert hole.lo == HOLE_LO and hole.lo_exact and hole.hi_exact
    below = next(m for m in x.merged if m.hi == HOLE_LO - 1)
    assert below.outcome == "ok"
    # above the hole: ok and OOM alternate at least four times within 117 kB
    above = [m for m in x.merged if hole.hi < m.lo <= hole.hi + 117_000]
    switches = sum(a.outcome != b.outcome for a, b in zip(above, above[1:]))
    assert switches >= 7 and {m.outcome for m in above} == {"ok", "oom"}
    assert min(i.hi - i.lo + 1 for i in x.partition) <= 8
