"""The sweep figure (`dtrf plot`): its structure, not its pixels.

On `hole_log()` (test_sweep), peak 536 bytes, DTR fails below 392 B (never
completes there), completes 392..423, fails 424..439 (the hole), completes
from 440; the exact partition's overhead drops from 1.0155x (440..455) to
1.0x at 456, a regime switch for a 1% threshold.
"""

from __future__ import annotations

import dataclasses

import pytest
from sweeps import hole_log

from dtrforensics.sweep import holes, runner
from dtrforensics.sweep.store import SweepParams

pytest.importorskip("matplotlib")
from dtrforensics.render import sweep_plot as plot  # noqa: E402

PEAK = 536


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    log = root / "hole.log"
    log.write_text(hole_log().text())
    runner.run_sweep(str(log), SweepParams(0.3, 1.0, 0.02, exact=True), root / "exact", jobs=1)
    runner.run_sweep(str(log), SweepParams(0.3, 1.0, 0.01), root / "grid", jobs=1)
    runner.run_sweep(str(log), SweepParams(0.3, 1.0, 0.02, policies=("dtr", "lru", "size"),
                                           exact=True), root / "multi", jobs=1)
    runner.run_sweep(str(log), SweepParams(0.3, 1.0, exact=True, max_runs=3), root / "limited",
                     jobs=1)
    return root


def drawn(path, **analyze):
    report = holes.analyze(path, **analyze)
    fig = plot.draw(report, holes.load_points(path))
    fig.canvas.draw()
    return report, fig, fig.axes[0]


def with_gid(ax, gid: str) -> list:
    return [a for a in ax.get_children() if a.get_gid() == gid]


def x_extent(artist) -> tuple[float, float]:
    if hasattr(artist, "get_xdata"):
        return min(artist.get_xdata()), max(artist.get_xdata())
    return artist.get_x(), artist.get_x() + artist.get_width()


def test_exact_figure_styles_holes_apart_from_budgets_below_the_first_success(sweeps):
    _, _, ax = drawn(sweeps / "exact")
    (hole,) = with_gid(ax, "hole")
    assert x_extent(hole) == pytest.approx((424 / PEAK, 440 / PEAK))
    (below,) = with_gid(ax, "below-first-success")
    assert x_extent(below) == pytest.approx((0.3, 392 / PEAK), abs=1 / PEAK)
    assert below.get_hatch() and not hole.get_hatch()
    assert below.get_facecolor()[3] == 0 and hole.get_facecolor()[3] > 0
    (label,) = with_gid(ax, "hole-label")
    assert "424-439 B" in label.get_text()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "dtr: fails below the first success" in legend
    assert any(t.startswith("dtr: hole") for t in legend)


def test_switch_markers_sit_at_the_first_byte_of_the_new_regime(sweeps):
    report, _, ax = drawn(sweeps / "exact", threshold=0.01)
    pol = report.policy("dtr")
    assert len(pol.regime_switches) == 1
    (line,) = with_gid(ax, "switch")
    assert list(line.get_xdata()) == [456 / PEAK] * 2
    starts = {i.lo: i.overhead for i in pol.exact.partition}
    before = next(i for i in pol.exact.partition if i.hi == 455)
    assert starts[456] * 1.01 < before.overhead


def test_samples_never_join_across_a_failure_and_bands_follow_certificates(sweeps):
    _, _, ax = drawn(sweeps / "grid")
    points = holes.load_points(sweeps / "grid")["dtr"]
    failing = [p["ratio"] for p in points if p["status"] == "fail"]
    steps = with_gid(ax, "overhead-step")
    assert len(steps) == 2                     # 392..423 and 440.. (the hole breaks the line)
    for ln in steps:
        xs = sorted(ln.get_xdata())
        assert not any(xs[0] < f < xs[-1] for f in failing)
    # failing samples at 0.73 and 0.80..0.82; the bands reach as far as their certificates
    (below,) = with_gid(ax, "below-first-success")
    assert x_extent(below) == pytest.approx((0.3, 392 / PEAK), abs=1 / PEAK)
    (hole,) = with_gid(ax, "hole")
    assert x_extent(hole) == pytest.approx((424 / PEAK, 440 / PEAK))
    (label,) = with_gid(ax, "hole-label")
    assert label.get_text().startswith(f"hole {424 / PEAK:.6f}-{440 / PEAK:.6f}")


def test_crowded_holes_are_labelled_without_overlap_or_listed(sweeps):
    report = holes.analyze(sweeps / "exact")
    pol = report.policy("dtr")
    micro = [dataclasses.replace(pol.exact.holes[0], lo=b, hi=b + (k % 3))
             for k, b in enumerate(range(442, 520, 4))]
    exact = dataclasses.replace(pol.exact, failure_regions=[*pol.exact.failure_regions, *micro])
    report = dataclasses.replace(report, policies=[dataclasses.replace(pol, exact=exact)])
    fig = plot.draw(report, holes.load_points(sweeps / "exact"))
    fig.savefig(sweeps / "crowded.png")
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    labels = with_gid(ax, "hole-label")
    boxes = [a.get_window_extent(renderer) for a in labels]
    assert 1 <= len(labels) < len(micro) + 1
    for i, a in enumerate(boxes):
        assert frame.x0 <= a.x0 and a.x1 <= frame.x1
        assert not any(a.overlaps(b) for b in boxes[i + 1:])
    texts = [a.get_text() for a in labels]
    assert "hole" in texts[0] and "424-439 B" in texts[0]          # the widest first
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    listed = legend[legend.index("holes too close to label:") + 1:]
    more = listed.pop()                        # "... and N more (dtrf holes SWEEP)"
    assert len(listed) == plot.LISTED_MAX
    assert len(labels) + len(listed) + int(more.split()[2]) == len(micro) + 1
    shown = texts + listed
    for r in micro:                  # a hole shown is named by its own byte edges
        edge = f"{r.lo:,} B" if r.lo == r.hi else f"{r.lo:,}-{r.hi:,} B"
        assert sum(edge in s for s in shown) <= 1, edge
    assert sum(any(f"{r.lo:,}" in s for s in shown) for r in micro) == len(shown) - 1
    assert len(set(shown)) == len(shown)


def test_several_policies_keep_their_marks_apart(sweeps):
    from matplotlib.colors import to_hex
    report, _, ax = drawn(sweeps / "multi")
    colour = {pol.policy: plot.POLICY_COLOURS[i] for i, pol in enumerate(report.policies)}
    switches = with_gid(ax, "switch")
    assert len(switches) == sum(len(p.regime_switches) for p in report.policies) > 0
    boundaries = {name: {i.lo for i in report.policy(name).exact.partition} for name in colour}
    for line in switches:
        (name,) = [n for n, c in colour.items() if to_hex(line.get_color()) == c]
        assert round(line.get_xdata()[0] * PEAK) in boundaries[name]
    labels = [a.get_text() for a in with_gid(ax, "hole-label")]
    assert labels and all(t.split(":")[0] in colour for t in labels)
    # the legend names each policy once, then each kind of mark once
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:len(colour)] == list(colour)
    kinds = legend[len(colour):legend.index("holes too close to label:")
                   if "holes too close to label:" in legend else None]
    assert "regime switch (overhead x1.25 or more)" in kinds and "sampled run" in kinds
    assert len(kinds) == len(set(kinds)) and not any(k.startswith(tuple(colour)) for k in kinds)


def test_a_run_limited_map_hatches_and_names_what_it_has_not_certified(sweeps):
    report, fig, ax = drawn(sweeps / "limited", threshold=0.01)
    view = report.policy("dtr").exact
    assert view.gaps and any(g.reason == "run-limit" for g in view.gaps)
    assert "exact partition" not in ax.get_title() and "certified" in ax.get_title()
    strip = fig.axes[1]
    for where in (ax, strip):
        bands = sorted(x_extent(a) for a in with_gid(where, "uncertified")
                       if not hasattr(a, "get_xdata"))
        want = sorted((g.lo / PEAK, (g.hi + 1) / PEAK) for g in view.gaps)
        assert [x for b in bands for x in b] == pytest.approx([x for w in want for x in w])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "dtr: uncertified (run-limit): outcome unknown" in legend
    gaps = [(g.lo / PEAK, (g.hi + 1) / PEAK) for g in view.gaps]
    for line in with_gid(ax, "switch"):       # never a switch drawn across uncertified budgets
        x = line.get_xdata()[0]
        assert not any(lo < x < hi for lo, hi in gaps)


def test_failing_runs_sit_on_their_own_strip_never_on_the_overhead_axis(sweeps):
    report, fig, ax = drawn(sweeps / "grid")
    strip = fig.axes[1]
    assert with_gid(ax, "fails") == []
    (marks,) = with_gid(strip, "fails")
    failing = [p["ratio"] for p in holes.load_points(sweeps / "grid")["dtr"]
               if p["status"] == "fail"]
    assert sorted(marks.get_xdata()) == sorted(failing) and set(marks.get_ydata()) == {0}
    drawn_overheads = [y for a in ax.get_lines() for y in a.get_ydata()
                       if a.get_gid() != "switch"]
    completed = {p["overhead"] for p in holes.load_points(sweeps / "grid")["dtr"]
                 if p["status"] == "ok"}
    assert set(drawn_overheads) <= completed      # no made-up overhead for a failure


def test_each_policy_keeps_its_regions_to_its_own_row(sweeps):
    report, fig, ax = drawn(sweeps / "multi")
    strip = fig.axes[1]
    n = len(report.policies)
    assert not [a for a in ax.patches if a.get_gid() in ("hole", "below-first-success")]
    colours = {plot.POLICY_COLOURS[i]: i for i in range(n)}
    from matplotlib.colors import to_hex
    rows = [a for a in strip.patches if a.get_gid() in ("hole", "below-first-success")]
    assert rows
    for band in rows:
        colour = band.get_edgecolor() if band.get_hatch() else band.get_facecolor()
        i = colours[to_hex(colour[:3])]
        y0, y1 = band.get_y(), band.get_y() + band.get_height()
        top = 1 - i / n                       # row i, top to bottom, in axes fraction
        assert (y0, y1) == pytest.approx((top - 1 / n, top))
    markers = {line.get_marker() for line in ax.get_lines() if line.get_linestyle() == "None"}
    assert len(markers) == n                   # one marker per policy


def test_pinned_bytes_and_depth_at_an_oom_differ_in_marker_and_colour(sweeps):
    _, fig, _ = drawn(sweeps / "grid")
    (pinned,) = [a for ax in fig.axes for a in ax.get_lines() if a.get_gid() == "oom-pinned"]
    (depth,) = [a for ax in fig.axes for a in ax.get_lines() if a.get_gid() == "oom-depth"]
    assert pinned.get_marker() != depth.get_marker()
    assert pinned.get_markeredgecolor() != depth.get_markeredgecolor()


@pytest.mark.parametrize("exact", [True, False])
def test_a_range_where_nothing_completes_is_not_called_below_a_first_success(tmp_path, exact):
    """hole_log first completes at 392 B (0.731 of its peak): below 0.7 every
    budget fails, and with no success there is no 'first success' to be below."""
    log = tmp_path / "hole.log"
    log.write_text(hole_log().text())
    runner.run_sweep(str(log), SweepParams(0.3, 0.7, 0.05, exact=exact), tmp_path / "s", jobs=1)
    report, fig, ax = drawn(tmp_path / "s")
    assert report.policy("dtr").certain.first_success.budget is None
    (band,) = with_gid(ax, "fails-everywhere")
    assert x_extent(band) == pytest.approx((0.3, 0.7), abs=2 / PEAK)
    assert not with_gid(ax, "below-first-success")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "dtr: fails, no success in the range" in legend
    assert not any("below the first success" in t for t in legend)
