"""`dtrf reproduce --findings`: maps run, resumed and read into findings.md.

End to end on the embedded trace with a planted hole (`hole`, 0.9173-0.9193
of peak): every grid outcome and every certified region is checked against
direct replays; a second invocation reuses the stored maps; a run with no time
left writes what is stored and says what is missing.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from dtrforensics.engine.replay import replay
from dtrforensics.render.reproduce_findings import render
from dtrforensics.reproduce import findings as F
from dtrforensics.reproduce.findings import judge as J
from dtrforensics.reproduce.findings import plan as P
from dtrforensics.reproduce.findings import read as R
from dtrforensics.reproduce.findings import run as RUN
from dtrforensics.sweep.holes import ExactInterval, ExactRegion
from dtrforensics.sweep.store import SweepStore
from dtrforensics.trace import load_trace

WINDOW = (0.90, 0.93)


def _region(lo, hi, hole=True):
    return ExactRegion(lo, hi, 1, "oom", 0, "ok", "ok", True, True, hole)


def test_fringes_group_regions_closer_than_the_resolution():
    peak = 1_000_000                      # resolution: 1,000 bytes
    regions = [_region(100, 200), _region(700, 710), _region(5000, 5001), _region(5500, 5600)]
    fringes = R.fringes(regions, peak)
    assert [(f.lo, f.hi, f.regions) for f in fringes] == [(100, 710, 2), (5000, 5600, 2)]
    assert R.fringes(regions[:1], peak) == []


def test_switches_along_a_partition():
    part = [ExactInterval(0, 9, "ok", 1.1), ExactInterval(10, 19, "oom", None),
            ExactInterval(20, 29, "ok", 1.2), ExactInterval(30, 39, "ok", 3.0),
            ExactInterval(50, 59, "oom", None)]          # a gap before 50: no switch there
    regime, feasible = R.switches(part)
    assert feasible == 2
    assert regime == [(30, 1.2, 3.0)]
    doubled = [ExactInterval(0, 9, "ok", 1.5), ExactInterval(10, 19, "ok", 3.0)]
    assert R.switches(doubled) == ([], 0)       # doubling exactly is no switch (concepts.DOUBLING)


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    work = tmp_path_factory.mktemp("findings")
    result = F.findings(work, map_seconds=600, run_timeout=None, jobs=1, traces=("hole",),
                        zoo=(), ratio_range=WINDOW)
    return work, result


def test_grid_outcomes_are_the_replays(mapped):
    _, f = mapped
    program = load_trace("hole")
    grid = f.grids["hole"]
    assert grid.unresolved == 0 and grid.planned == 4
    for ratio, budget, outcome in grid.as_grid():
        assert replay(program, budget=budget).summary.outcome == outcome


def test_grid_runs_get_the_studies_limit_and_maps_the_given_one(mapped):
    """run_timeout=None (unlimited) applies to the exact maps; the studies' grid
    gets their own 20-minute limit per run, so its timeouts compare with theirs."""
    work, f = mapped
    def timeout(spec):
        return SweepStore(_folder(work, spec)).params.timeout
    assert timeout(f.grids["hole"].spec) == P.STUDY_RUN_LIMIT == 1200
    assert timeout(f.public["hole"].spec) is None


def test_the_map_certifies_the_planted_hole(mapped):
    work, f = mapped
    program = load_trace("hole")
    m = f.public["hole"]
    assert m.complete and m.coverage == 1.0
    (hole,) = m.holes
    for budget, outcome in ((hole.lo - 1, "ok"), (hole.lo, "oom"), (hole.hi, "oom"),
                            (hole.hi + 1, "ok")):
        assert replay(program, budget=budget).summary.outcome == outcome
        assert m.outcome_at(budget) == outcome
    assert m.feasibility_switches == 2
    # every ablation and every window around the hole got its own map
    assert {p for _, p in f.ablations} == set(P.ABLATIONS)
    assert [(k.trace, k.policy) for k in f.knobs] == [("hole", p) for p in P.knob_policies(work)]
    assert f.knobs[0].map.spec.ratio_from < hole.lo / m.peak < f.knobs[0].map.spec.ratio_to
    assert f.knobs[0].map.complete and f.knobs[0].survives in (True, False)


def test_the_report_lists_byte_edges(mapped):
    _, f = mapped
    text = render(f, command="dtrf reproduce --findings", wall_seconds=1.0)
    (hole,) = f.public["hole"].holes
    assert f"{hole.lo:,}-{hole.hi:,}" in text
    assert "Incomplete" not in text and "Partial" not in text


def test_region_edges_say_which_side_is_open():
    from types import SimpleNamespace

    from dtrforensics.render.reproduce_findings import _edges
    m = SimpleNamespace(range_bytes=(100, 999))
    def region(lo, hi, lo_exact, hi_exact, gap=0):
        return ExactRegion(lo, hi, 1, "oom", gap, None, "ok", lo_exact, hi_exact, False)
    assert _edges(m, region(200, 300, True, True)) == "exact"
    assert _edges(m, region(100, 300, False, True)) == "below: range start, above: exact"
    assert _edges(m, region(150, 999, False, False, gap=7)) == \
        "below: open, above: range end; 7 B inside uncertified"


def test_a_second_invocation_reuses_the_maps(mapped):
    work, f = mapped
    ledger = json.loads((work / "seconds.json").read_text())
    again = F.findings(work, map_seconds=600, run_timeout=None, jobs=1, traces=("hole",),
                       zoo=(), ratio_range=WINDOW)
    assert json.loads((work / "seconds.json").read_text()) == ledger
    assert again.public["hole"].partition == f.public["hole"].partition


def test_no_time_left_writes_what_is_stored(tmp_path):
    f = F.findings(tmp_path, map_seconds=600, run_timeout=None, jobs=1, traces=("hole",),
                   zoo=(), ratio_range=WINDOW, total_seconds=1e-9)
    m = f.public["hole"]
    assert not m.complete and m.executions == 0
    assert f.grids["hole"].unresolved == 4
    assert f.out_of_time and "Incomplete" in render(f, command="x", wall_seconds=0.0)
    from dtrforensics.render.reproduce_findings import _partial
    assert _partial(m) == "hole dtr 0.0%"       # one public map per trace and policy
    knob = replace(m, spec=replace(m.spec, group="knob", ratio_from=0.91, ratio_to=0.92))
    assert _partial(knob) == "hole dtr 0.91-0.92 0.0%"


def test_bad_time_options_are_one_error_line(tmp_path):
    from cli import dtrf_process
    proc = dtrf_process("reproduce", "--findings", "--map-seconds", "0", "-o", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --map-seconds must be > 0, got 0.0"]
    assert not (tmp_path / "findings.md").exists()


def test_claims_on_unfinished_grids_are_incomplete_not_differing():
    grids = {t: R.GridFindings(P.MapSpec(t, "dtr", *P.RANGE, "grid", step=P.GRID_STEP), 1000,
                               [], 0.0) for t in P.CONFIRMATORY}
    f = R.Findings(grids=grids, settings={"run_timeout": 120.0})
    claims = {c.id: c for c in J.open_claims(f)}
    assert set(claims) == {"grid_0.01.no_hole", "grid_0.01.timeouts"}
    assert {c.verdict for c in claims.values()} == {J.INCOMPLETE}
    assert claims["grid_0.01.timeouts"].ours.startswith(f"{56 * 6} of {56 * 6}")
    assert "after a limit of 1200 s (the studies' own) per run" in claims[
        "grid_0.01.timeouts"].note
    grids["unet"] = replace(grids["unet"], run_limit=120.0)   # a grid stored by an older version
    claims = {c.id: c for c in J.open_claims(replace(f, grids=grids))}
    assert "after a limit of 120 s or 1200 s per run" in claims["grid_0.01.timeouts"].note


def _folder(work, spec):
    return work / RUN.MAPS_DIR / spec.key(load_trace(spec.trace).sha256)


def test_a_map_made_with_another_spelling_of_its_policy_file_is_set_aside(mapped, tmp_path):
    """A knob map stored under another spelling of the policy file's path (the
    working folder moved) is renamed FOLDER.stale; its own stays."""
    import shutil
    work, f = mapped
    knob = next(k for k in f.knobs if k.policy.endswith(":" + P.MIN_EVICTEE_SIZE))
    spec = knob.map.spec
    kept, moved = tmp_path / "kept", tmp_path / "moved"
    for copy in (kept, moved):
        shutil.copytree(_folder(work, spec), copy)
    RUN._set_aside_if_other_policy(kept, spec)
    assert kept.is_dir() and not kept.with_name("kept.stale").exists()
    doc = json.loads((moved / "sweep.json").read_text())
    doc["params"]["policies"] = ["/elsewhere/knobs.py:dtr_min_1mib"]
    (moved / "sweep.json").write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="made with /elsewhere/knobs.py:dtr_min_1mib, not "
                      ".*set aside as moved.stale"):
        RUN._set_aside_if_other_policy(moved, spec)
    assert not moved.exists() and moved.with_name("moved.stale").is_dir()


def test_maps_are_keyed_by_content_not_by_where_the_policy_file_is(tmp_path):
    """The same policy file in two places keys one map; another content, another
    trace or other parameters key another."""
    sha = load_trace("hole").sha256
    a, b = tmp_path / "a" / "knobs.py", tmp_path / "b" / "knobs.py"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(P.KNOBS_FILE.read_bytes())
    spec = P.MapSpec("hole", f"{a}:dtr_min_1mib", 0.9, 0.93, "knob")
    assert spec.key(sha) == replace(spec, policy=f"{b}:dtr_min_1mib").key(sha)
    b.write_text(b.read_text() + "\n# edited\n")
    keys = {spec.key(sha), replace(spec, policy=f"{b}:dtr_min_1mib").key(sha),
            spec.key("0" * 64), replace(spec, ratio_to=0.94).key(sha)}
    assert len(keys) == 4
    assert spec.key(sha).startswith("hole-knobs.dtr_min_1mib-0.9-0.93-")
    # the working folder holds the policy file under its content hash
    (copy,) = {p.rpartition(":")[0] for p in P.knob_policies(tmp_path) if ":" in p}
    assert copy.startswith(str(tmp_path.resolve())) and P.policy_identity(
        f"{copy}:x") == P.policy_identity(f"{a}:x")


def test_a_map_stored_under_its_unkeyed_name_is_adopted(mapped, tmp_path):
    """A map an earlier version stored as NAME-POLICY-FROM-TO is moved to its
    content key and resumed, not run again."""
    import shutil
    import warnings
    work, first = mapped
    shutil.copytree(work, tmp_path / "work")
    spec = first.public["hole"].spec
    folder = _folder(tmp_path / "work", spec)
    unkeyed = folder.with_name(folder.name.rsplit("-", 1)[0])
    folder.rename(unkeyed)
    with warnings.catch_warnings():        # the copied knob maps name the first folder's file
        warnings.simplefilter("ignore")
        again = F.findings(tmp_path / "work", map_seconds=600, run_timeout=None, jobs=1,
                           traces=("hole",), zoo=(), ratio_range=WINDOW, total_seconds=1e-9)
    assert folder.is_dir() and not unkeyed.exists()
    assert again.public["hole"].partition == first.public["hole"].partition


def test_the_deadline_stops_a_running_map(tmp_path):
    """A map whose deadline has come when it starts stops at once: the sweep is
    left resumable (interrupted, or stopped by run_sweep's own deadline), not
    complete."""
    import time
    spec = P.MapSpec("hole", "dtr", *WINDOW, "public")
    shares = []
    assert RUN._run_until(load_trace("hole"), spec, None, tmp_path / "m", time.monotonic(),
                          jobs=1, report=shares.append)
    store = SweepStore(tmp_path / "m")
    assert not store.exists() or store.read_doc()["status"] in ("interrupted", "stopped")


def test_when_the_time_is_up_no_map_runs_and_the_report_says_partial(tmp_path, monkeypatch):
    """The clock jumps past the deadline once the grid is mapped: no later map
    runs, each is read as stored, and findings.md says it is partial."""
    import time
    real, jump = time.monotonic, [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real() + jump[0])
    seen = []

    def progress(p):
        seen.append((p.spec.group, p.state))
        if p.spec.group == "grid" and p.state == "done":
            jump[0] = 10_000.0
    f = F.findings(tmp_path, map_seconds=600, run_timeout=None, jobs=1, traces=("hole",),
                   zoo=(), ratio_range=WINDOW, total_seconds=1_000, progress=progress)
    assert f.out_of_time and f.grids["hole"].unresolved == 0
    assert {s for g, s in seen if g != "grid"} == {"out of time"}
    assert f.public["hole"].executions == 0 and not f.knobs      # no hole known: no window
    assert all(m.executions == 0 for m in f.ablations.values())
    text = render(f, command="x", wall_seconds=0.0)
    assert "**Partial**: the 1000 s of this invocation ran out" in text


def _window_grid(failing: set[int], unresolved: set[int] = frozenset()) -> R.GridFindings:
    """The InceptionV4 window's 0.0001 grid with the k-th points failing (or unresolved)."""
    spec = P.MapSpec("inceptionv4", "dtr", *P.INCEPTION_WINDOW, "window", step=P.WINDOW_STEP)
    peak = 10**10
    points = []
    planned = round((P.INCEPTION_WINDOW[1] - P.INCEPTION_WINDOW[0]) / P.WINDOW_STEP) + 1
    for k in range(planned):
        ratio = round(P.INCEPTION_WINDOW[0] + k * P.WINDOW_STEP, 6)
        points.append({"ratio": ratio, "budget": int(ratio * peak), "wall_seconds": 1.0,
                       "status": "unresolved" if k in unresolved else "done",
                       "outcome": "oom" if k in failing else "ok"})
    assert planned == 511
    return R.GridFindings(spec, peak, points, 0.0)


def test_the_window_claims_are_read_off_its_grid():
    at = lambda r: round((r - P.INCEPTION_WINDOW[0]) / P.WINDOW_STEP)  # noqa: E731
    failing = {at(0.2526), at(0.2527), at(0.2200), at(0.2301), at(0.2302)}   # 3 regions: 6 switches
    claims = {c.id: c for c in J.open_claims(R.Findings(window_grid=_window_grid(failing)))}
    region, switches = claims["inceptionv4.failure_region_0.2526"], \
        claims["inceptionv4.switches_0.209_0.26"]
    assert (region.ours, region.verdict) == ("0.2526-0.2527", "match")
    assert (switches.ours, switches.verdict) == ("6", "match")
    assert switches.note == "5 failing grid points in 3 runs (oom 5)"
    fewer = {c.id: c for c in J.open_claims(R.Findings(window_grid=_window_grid(failing - {
        at(0.2200)})))}
    assert (fewer["inceptionv4.switches_0.209_0.26"].ours,
            fewer["inceptionv4.switches_0.209_0.26"].verdict) == ("4", "differs")
    open_grid = R.Findings(window_grid=_window_grid(failing, unresolved={at(0.24)}),
                           settings={"map_seconds": 60.0, "run_timeout": 120.0,
                                     "range": P.RANGE})
    claims = {c.id: c for c in J.open_claims(open_grid)}
    assert claims["inceptionv4.switches_0.209_0.26"].verdict == J.INCOMPLETE
    assert "1 of 511 grid points without an outcome" in claims[
        "inceptionv4.switches_0.209_0.26"].note
    assert "0.0001 grid over InceptionV4 0.209-0.26" in render(
        open_grid, command="x", wall_seconds=0.0)


def _gap_grid(points) -> R.GridFindings:
    rows = [{"budget": b, "rep": 0, "status": "unresolved" if s is None else "done",
             "interval_lo": lo, "interval_hi": hi, "wall_seconds": s or 1200.0}
            for b, lo, hi, s in points]
    return R.GridFindings(P.MapSpec("t", "dtr", *P.RANGE, "grid", step=P.GRID_STEP), 10_000,
                          rows, 0.0)


def test_what_a_partial_map_has_left_is_read_off_the_grid_points_in_its_gaps():
    """Gap 1,000-1,999 holds two grid points: executions 100 B wide taking 2 s and
    50 B wide taking 1 s, each standing for half the gap: 5 + 10 executions,
    5 x 2 + 10 x 1 s. Gap 5,000-5,099 holds none: the nearest point (at 4,000,
    timed out) leaves its 100 B unknown."""
    from dtrforensics.sweep.holes import ExactGap
    spec = P.MapSpec("t", "dtr", *P.RANGE, "public")
    gaps = [ExactGap(1000, 1999, 0, "run-limit"), ExactGap(5000, 5099, 0, "run-limit")]
    m = R.MapFindings(spec, 10_000, (0, 9_999), 0.89, 40, False, 1.0, [], [], [], 0, gaps, [],
                      2.0)
    grid = _gap_grid([(1200, 1150, 1249, 2.0), (1700, 1690, 1739, 1.0), (4000, None, None, None),
                      (100, 0, 999, 0.5)])
    left = R.remaining(m, grid)
    assert (left.executions, left.run_seconds, left.unknown_bytes) == (15, 20.0, 100)
    report = render(R.Findings(public={"t": replace(m, remaining=left)},
                               settings={"map_seconds": 1.0, "run_timeout": 1.0,
                                         "range": P.RANGE}), command="x", wall_seconds=0.0)
    assert "t dtr 89.0%: about 15 executions left, 20 s of replay, and 100 B with grid " \
        "points that timed out" in report
    assert "rough extrapolation" in report
    assert R.remaining(replace(m, complete=True), grid) is None


def test_what_is_left_counts_unbounded_executions_once_and_rounds_once():
    """An ok point whose execution runs to the top of the axis (no upper bound) is one
    execution for its share, not a timeout; three timed-out points in a 100 B gap
    leave all 100 B unknown."""
    from dtrforensics.sweep.holes import ExactGap
    spec = P.MapSpec("t", "dtr", *P.RANGE, "public")
    top = R.MapFindings(spec, 10_000, (0, 9_999), 0.5, 1, False, 1.0, [], [], [], 0,
                        [ExactGap(5000, 9999, 0, "run-limit")], [], 1.0)
    left = R.remaining(top, _gap_grid([(6000, 5000, None, 3.0)]))
    assert (left.executions, left.run_seconds, left.unknown_bytes) == (1, 3.0, 0)
    narrow = replace(top, gaps=[ExactGap(100, 199, 0, "timeout")])
    left = R.remaining(narrow, _gap_grid([(110, None, None, None), (120, None, None, None),
                                          (130, None, None, None)]))
    assert (left.executions, left.unknown_bytes) == (0, 100)


def test_a_map_not_started_is_all_gap(tmp_path):
    """When the time ran out before a map started, its whole range is one gap, and
    what it has left is read off the grid like any other gap."""
    f = F.findings(tmp_path, map_seconds=600, run_timeout=None, jobs=1,
                   traces=("hole",), zoo=(), ratio_range=WINDOW, total_seconds=1e-9)
    m = f.public["hole"]
    assert [(g.lo, g.hi) for g in m.gaps] == [m.range_bytes]
    grid = _gap_grid([(m.range_bytes[0], m.range_bytes[0], m.range_bytes[0] + 9, 1.0)])
    assert R.remaining(m, grid).executions == math.ceil((m.range_bytes[1] - m.range_bytes[0] + 1)
                                                        / 10)


def test_the_zoo_is_recorded_and_mapped_over_its_own_range(tmp_path):
    pytest.importorskip("torch")
    f = F.findings(tmp_path, map_seconds=600, run_timeout=None, jobs=1, traces=(), zoo=("mlp",),
                   zoo_range=(0.95, 1.0))
    m = f.zoo[("mlp", "dtr")]
    assert (m.spec.ratio_from, m.spec.ratio_to) == (0.95, 1.0) and m.complete
    program = load_trace(str(tmp_path / "zoo" / "mlp.log"))
    for budget in (m.range_bytes[0], m.range_bytes[1]):
        assert m.outcome_at(budget) == replay(program, budget=budget).summary.outcome
    assert "mapped under DTR over 0.95-1" in render(f, command="x", wall_seconds=0.0)


def test_a_map_stopped_by_its_time_is_stopped_not_interrupted(tmp_path, monkeypatch):
    """A map's time runs out in the middle of its runs: run_sweep's own deadline
    stops it (status "stopped", what finished stored, no interrupt of the main
    thread), and the same call later finishes it."""
    import time

    from dtrforensics.sweep import backends
    fast = backends.run_point

    def slow(*args):               # the map's runs outlast its time
        time.sleep(0.3)
        return fast(*args)

    monkeypatch.setattr(backends, "run_point", slow)
    spec = P.MapSpec("hole", "dtr", *WINDOW, "public")
    assert RUN._run_until(load_trace("hole"), spec, None, tmp_path / "m",
                          time.monotonic() + 0.5, jobs=1, report=lambda share: None)
    store = SweepStore(tmp_path / "m")
    assert store.read_doc()["status"] == "stopped" and len(store.read_runs()) > 0
    monkeypatch.setattr(backends, "run_point", fast)
    assert not RUN._run_until(load_trace("hole"), spec, None, tmp_path / "m",
                              time.monotonic() + 600, jobs=1, report=lambda share: None)
    assert SweepStore(tmp_path / "m").read_doc()["status"] == "complete"


def test_a_less_complete_run_never_replaces_the_findings_there(tmp_path, monkeypatch):
    """`dtrf reproduce --findings -o OUT` with a fresh working folder and little
    time (the README's command over a shipped docs/): the complete findings.md
    there stays byte for byte, this run's report goes to findings.partial.md and
    stderr says where; a run as complete replaces findings.md and says so."""
    import shutil

    from cli import dtrf as run

    from dtrforensics.render.reproduce_findings import completeness

    whole = F.findings

    def on_the_embedded_trace(work, **kw):
        return whole(work, **{**kw, "traces": ("hole",), "zoo": (), "ratio_range": (0.99, 1.0)})

    monkeypatch.setattr(F, "findings", on_the_embedded_trace)
    monkeypatch.chdir(tmp_path)

    def dtrf(*args: str):
        res = run("reproduce", "--findings", "-o", "docs", "--jobs", "1", *args)
        assert res.code == 0, (res.err, res.traceback)
        return res.err

    (tmp_path / "docs").mkdir()
    assert "replaced" not in dtrf()
    shipped = (tmp_path / "docs" / "findings.md").read_text()
    done = completeness(shipped)
    assert done.complete and set(done.shares) == done.complete
    shutil.rmtree(tmp_path / "docs" / "work")          # a fresh clone: no maps stored
    said = " ".join(dtrf("--total-seconds", "0.001").split())
    assert (tmp_path / "docs" / "findings.md").read_text() == shipped
    partial = tmp_path / "docs" / "findings.partial.md"
    assert "Partial" in partial.read_text()
    assert f"docs/findings.md is more complete ({done.describe()})" in said
    assert "this run's report is beside it, docs/findings.partial.md" in said
    assert "replaced docs/findings.md" not in said
    again = " ".join(dtrf("--total-seconds", "0.001").split())
    assert "replaced docs/findings.partial.md" in again
    assert "replaced docs/findings.md" in dtrf()      # as complete: it replaces, and says so
    assert not completeness(partial.read_text()).covers(completeness(shipped))


def test_completeness_counts_maps_certified_and_claims_judged():
    from dtrforensics.render.reproduce_findings import completeness
    from dtrforensics.reproduce import claims as C
    grids = {t: R.GridFindings(P.MapSpec(t, "dtr", *P.RANGE, "grid", step=P.GRID_STEP), 1000,
                               [], 0.0) for t in P.CONFIRMATORY}
    f = R.Findings(grids=grids, settings={"run_timeout": 120.0, "map_seconds": 1.0,
                                          "range": P.RANGE})
    f.claims = J.open_claims(f)
    before = completeness(render(f, command="x", wall_seconds=0.0))
    assert before.judged == 0 and not before.shares
    f.claims = [replace(c, verdict=C.MATCH) for c in f.claims[:1]] + f.claims[1:]
    after = completeness(render(f, command="x", wall_seconds=0.0))
    assert after.judged == 1 and after.covers(before) and not before.covers(after)
