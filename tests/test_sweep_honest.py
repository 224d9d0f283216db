"""Partial sweeps say exactly what they know (issue 27): every summary line and
JSON field of `holes` and `compare-policies` is checked against the certified
partition rebuilt here from the stored rows, byte by byte, and against the
truth (a replay at every budget of the range)."""

from __future__ import annotations

import json
import shlex

import pytest
from cli import dtrf
from rich.console import Console
from sweeps import hole_log

from dtrforensics.engine.replay import replay
from dtrforensics.render.sweep import print_holes
from dtrforensics.sweep import holes, runner
from dtrforensics.sweep.store import SweepParams, SweepStore

LO, HI = 160, 536      # floor(0.3 x 536), the peak: the range 0.3-1.0 of hole_log


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "hole.log"
    path.write_text(hole_log().text())
    return str(path)


@pytest.fixture(scope="module")
def truth():
    """The outcome of every budget of the range, by the engine."""
    program = hole_log().program()
    return {b: replay(program, budget=b).summary.outcome == "ok" for b in range(LO, HI + 1)}


def certified(path) -> dict[int, bool]:
    """byte -> completes, for every byte of the range a stored certificate covers."""
    out: dict[int, bool] = {}
    for r in SweepStore(path).read_runs().to_pylist():
        if r["rep"] or r["interval_lo"] is None:
            continue
        hi = HI if r["interval_hi"] is None else min(r["interval_hi"], HI)
        for b in range(max(r["interval_lo"], LO), hi + 1):
            assert out.setdefault(b, r["status"] == "ok") == (r["status"] == "ok")
    return out


def text_of(path, width=200) -> str:
    console = Console(record=True, width=width)
    print_holes(console, holes.analyze(path))
    return console.export_text()


def check_report(path, truth) -> dict:
    """Every claim of the report at `path` against the certificates and the truth."""
    cert = certified(path)
    uncertified = [b for b in range(LO, HI + 1) if b not in cert]
    pol = holes.analyze(path).to_json()["policies"]["dtr"]
    first, c = pol["first_success"], pol["certainty"]
    oks = [b for b, ok in cert.items() if ok]
    true_first = min(b for b, ok in truth.items() if ok)
    assert c["uncertified_bytes"] == len(uncertified)
    assert c["complete"] == (not uncertified)
    text = text_of(path)
    if not oks:
        assert first["budget"] is None and first["exact"] == (not uncertified)
        assert first["uncertified_below_bytes"] == len(uncertified)
        assert "first success: none certified yet" in text
        assert "holes: none can be told" in text
    else:
        f = min(oks)
        below = [b for b in uncertified if b < f]
        assert first["budget"] == f and truth[f]
        assert first["uncertified_below_bytes"] == len(below)
        assert first["lowest_possible"] == (below[0] if below else f)
        assert first["below_range"] == (f == LO)
        assert first["exact"] == (not below and f != LO)
        assert first["lowest_possible"] <= true_first <= f
        if first["exact"]:
            assert true_first == f
            assert f"first success: {f:,} B" in text and "exact (all budgets below" in text
        else:
            assert f"first success: between {first['lowest_possible']:,} B" in text
            assert f"{len(below):,} B below it uncertified" in text
        above = [b for b in uncertified if b > f]
        assert c["uncertified_above_first_success_bytes"] == len(above)
    # regions: failing bytes certified as such, edges certified exactly when said
    regions = pol.get("failure_regions_bytes_detail", [])
    for r in regions:
        assert all(not cert[b] for b in range(r["lo"], r["hi"] + 1) if b in cert)
        assert r["lo_certified"] == cert.get(r["lo"] - 1, False)
        assert r["hi_certified"] == cert.get(r["hi"] + 1, False)
        for side, end, step in (("lo", LO, -1), ("hi", HI, 1)):
            edge = r[f"{side}_edge"]
            nxt = r[side] + step
            assert edge == ("exact" if cert.get(nxt) else
                            f"range-{'start' if side == 'lo' else 'end'}" if r[side] == end
                            else "open")
            if edge == "open":
                assert nxt not in cert
        if r["hole"]:                       # a hole claimed is a hole
            assert any(truth[b] for b in range(LO, r["lo"]))
            assert any(truth[b] for b in range(r["hi"] + 1, HI + 1))
    holes_found = [[r["lo"], r["hi"]] for r in regions if r["hole"]]
    if uncertified:
        assert ("to finish" in text or "to certify" in text) and "no hole:" not in text
        if oks:
            assert ("among the certified budgets" in text
                    or "every budget above it certified" in text)
    else:
        assert "to finish" not in text and "to certify" not in text
        assert holes_found == [[424, 439]] and "1 hole: every budget of the range" in text
    return pol


@pytest.mark.parametrize("max_runs", [1, 2, 3, 5, 8])
def test_partial_exact_sweeps_claim_only_what_is_certified(log, truth, tmp_path, max_runs):
    runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True, max_runs=max_runs), tmp_path / "s",
                     jobs=1)
    check_report(tmp_path / "s", truth)


def test_partial_sampled_and_gridded_sweeps(log, truth, tmp_path):
    runner.run_sweep(log, SweepParams(0.3, 1.0, 0.1), tmp_path / "grid", jobs=1)
    pol = check_report(tmp_path / "grid", truth)
    assert pol["first_sampled_success"]["budget"] >= pol["first_success"]["budget"]
    text = text_of(tmp_path / "grid")
    assert "--exact" in text.split("to certify every budget")[1]
    runner.run_sweep(log, SweepParams(0.3, 1.0, 0.1, exact=True, max_runs=2), tmp_path / "both",
                     jobs=1)
    check_report(tmp_path / "both", truth)


def test_the_walk_answers_the_question_first(log, truth, tmp_path):
    """Extended one run at a time, the sweep certifies the first success (392 B)
    and everything above it, the hole 424-439 B included, while budgets below
    it are still uncertified (hole_log has 9 OOM executions below its first
    success and 6 executions from it up)."""
    out = tmp_path / "s"
    for max_runs in range(1, 40):
        runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True, max_runs=max_runs), out, jobs=1)
        pol = check_report(out, truth)
        if pol["first_success"]["budget"] == 392 and not pol["certainty"][
                "uncertified_above_first_success_bytes"]:
            break
    else:
        pytest.fail("the first success was never certified with everything above it")
    assert not pol["first_success"]["exact"] and pol["first_success"]["uncertified_below_bytes"]
    assert [[r["lo"], r["hi"]] for r in pol["failure_regions_bytes_detail"] if r["hole"]] == [
        [424, 439]]


def test_the_finish_command_finishes_the_sweep(log, truth, tmp_path):
    out = tmp_path / "s"
    runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True, max_runs=2), out, jobs=1)
    for _ in range(5):
        line = next((ln for ln in text_of(out, width=400).splitlines() if "to finish" in ln), None)
        if line is None:
            break
        args = shlex.split(line[line.index("dtrf "):])[1:]
        res = dtrf(*args, "--jobs", "1", "--no-progress")
        assert res.code == 0, res.err
    else:
        pytest.fail("five finishing commands did not finish the sweep")
    pol = check_report(out, truth)
    assert pol["first_success"]["exact"] and pol["certainty"]["complete"]


def test_compare_policies_says_what_is_certified(log, truth, tmp_path):
    res = dtrf("compare-policies", log, "--policy", "dtr,no-size", "--from", "0.3", "--to", "1.0",
               "--exact", "--max-runs", "3", "--jobs", "1", "-o", tmp_path / "c", "--json",
               "--no-progress")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    cert = certified_policy(tmp_path / "c", "dtr")
    dtr = next(p for p in doc["policies"] if p["policy"] == "dtr")
    f = min(b for b, ok in cert.items() if ok)
    below = [b for b in range(LO, f) if b not in cert]
    assert dtr["first_success"] == f and dtr["uncertified_below_bytes"] == len(below)
    assert dtr["first_success_exact"] == (not below and f != LO)
    assert not doc["complete"] and "--max-runs 6" in doc["finish"]
    # never a span over budgets some policy has no certificate for
    for span in doc["dominance"]:
        for b in (span["lo"], span["hi"]):
            assert b in cert
    text = dtrf("compare-policies", log, "--policy", "dtr,no-size", "--from", "0.3", "--to",
                "1.0", "--exact", "--max-runs", "3", "--jobs", "1", "-o", tmp_path / "c",
                "--no-progress").out
    assert "no hole;" not in text and "to finish" in text
    if not dtr["first_success_exact"]:
        assert "first success between" in text and f"({f:,} B)" in text


def certified_policy(path, policy) -> dict[int, bool]:
    out: dict[int, bool] = {}
    for r in SweepStore(path).read_runs().to_pylist():
        if r["policy"] != policy or r["rep"] or r["interval_lo"] is None:
            continue
        hi = HI if r["interval_hi"] is None else min(r["interval_hi"], HI)
        for b in range(max(r["interval_lo"], LO), hi + 1):
            out[b] = r["status"] == "ok"
    return out


def test_the_header_says_what_ended_the_sweep(log, truth, tmp_path):
    """"sweep complete" was said of a walk cut by its run limit: the header and
    the JSON now name what ended it, and "every budget certified" only when the
    certificates cover the range."""
    import time

    def ended(path) -> tuple[str, str]:
        header = text_of(path).splitlines()[1]
        return holes.analyze(path).to_json()["ended"], header

    runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True, max_runs=3), tmp_path / "cut", jobs=1)
    assert certified(tmp_path / "cut").keys() != set(range(LO, HI + 1))
    assert ended(tmp_path / "cut") == (
        "run-limit", "sweep ended: the walk stopped at its run limit, --max-runs 3 per policy")
    assert "sweep complete" not in text_of(tmp_path / "cut")

    runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True), tmp_path / "all", jobs=1)
    assert certified(tmp_path / "all").keys() == set(range(LO, HI + 1))
    assert ended(tmp_path / "all") == ("range-certified",
                                       "sweep ended: every budget of the range certified")

    runner.run_sweep(log, SweepParams(0.3, 1.0, 0.1), tmp_path / "grid", jobs=1)
    assert ended(tmp_path / "grid")[0] == "samples-run"

    runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True), tmp_path / "late", jobs=1,
                     deadline=time.monotonic())
    assert ended(tmp_path / "late") == (
        "time-limit", "sweep ended: stopped at its time limit (--max-seconds)")

    res = dtrf("compare-policies", log, "--policy", "dtr,no-size", "--from", "0.3", "--to", "1.0",
               "--exact", "--max-runs", "3", "--jobs", "1", "-o", tmp_path / "c", "--json",
               "--no-progress")
    assert json.loads(res.out)["ended"] == "run-limit"
    text = dtrf("compare-policies", log, "--policy", "dtr,no-size", "--from", "0.3", "--to",
                "1.0", "--exact", "--max-runs", "3", "--jobs", "1", "-o", tmp_path / "c",
                "--no-progress").out
    assert "sweep ended: the walk stopped at its run limit, --max-runs 3 per policy" in text


def test_listed_samples_and_gaps_say_how_many_more(log, tmp_path):
    """A list cut for length says how many it leaves out and where they all are;
    gaps are counted in words that say why they are open."""
    runner.run_sweep(log, SweepParams(0.79, 0.82, 0.001), tmp_path / "grid", jobs=1)
    pol = holes.analyze(tmp_path / "grid").to_json()["policies"]["dtr"]
    above = len(pol["failures_above_first_success"])
    assert above > 12
    text = " ".join(text_of(tmp_path / "grid").replace("│", " ").split())
    assert f"{above} failing samples above the first success:" in text
    assert f"and {above - 12} more (--json lists every one)" in text and "(+" not in text
    runner.run_sweep(log, SweepParams(0.3, 1.0, exact=True, max_runs=2), tmp_path / "cut",
                     jobs=1)
    gaps = holes.analyze(tmp_path / "cut").policy("dtr").exact.gaps
    text = " ".join(text_of(tmp_path / "cut").replace("│", " ").split())
    noun = "gap" if len(gaps) == 1 else "gaps"
    assert f"uncertified: {len(gaps)} {noun} the walk has not reached (" in text
