"""Figure of a sweep: overhead against budget ratio, failing budgets as bands (matplotlib).

Rendering only: the numbers come from `holes.analyze` and `holes.load_points`;
what is certified comes from the sweep's exact partition (`sweep/exact.py`,
read through `holes.ExactView`). Uses the object API (`Figure`), never pyplot,
so nothing global changes and no display is needed.

What a reader sees, top to bottom:
- the overhead panel: each completing run as a marker at its budget and, where
  the run certifies a budget interval, a step over that interval (adjacent
  certified intervals join, a failure or an uncertified gap breaks the line, so
  nothing zigzags across a regime switch); regime switches as dotted lines at
  the first byte of the new regime (exact) or as a hatched bracket between two
  samples. Only completing runs have a place on this axis. With one policy its
  failing and uncertified budgets shade the panel too; with several they do not
  (one policy's band would cover another's successes).
- the failure strip: one row per policy holding its own failing runs (x) and
  budgets: holes red, budgets below the first success grey hatched (not a hole:
  the budget is simply too small), failures up to the top of the range and
  those of a policy with no success in the range pale,
  and uncertified budgets (the run limit, a timeout, the resolution) hatched
  "xx" and labelled as such, never left blank. The title says "exact partition"
  only when every budget of the range is certified.
- (optional) at each OOM, the pinned bytes (filled circles) and the nesting
  depth (hollow triangles, right axis), told apart by marker and colour.
Hole labels never overlap: the widest holes are labelled on the plot, the rest
are listed in the legend. Artists carry gids ("overhead-step", "hole",
"below-first-success", "fails-everywhere", "fails-to-top", "fails-open", "uncertified",
"fails", "switch", "hole-label", "oom-pinned", "oom-depth") so tests can find them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..concepts import STATUS_FAIL, STATUS_OK
from ..fsutil import atomic_path
from ..recorder.record import policy_label
from ..sweep.holes import HolesReport, PolicyHoles

POLICY_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                  "#bcbd22", "#7f7f7f")
POLICY_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
POLICY_DASHES = ("-", "--", "-.", ":")      # equal overheads of two policies stay visible
FAIL_COLOUR = "#d62728"
BELOW_COLOUR = "#7f7f7f"
SWITCH_COLOUR = "#444444"
UNRESOLVED_COLOUR = "#ff7f0e"
UNCERTIFIED_COLOUR = "#b8860b"
DEPTH_COLOUR = "#ff7f0e"
GIB = float(1 << 30)
DPI = 130
LABEL_ROWS = 3                  # rows of hole labels under the top of the panel
LABEL_ROW_PT = 26               # vertical distance between rows (points)
HEADROOM = 0.75                 # extra y range above the data, as a fraction of its span
LISTED_MAX = 12                 # holes listed in the legend; the rest are counted
THIN = 0.004                    # a band narrower than this fraction of the x range gets a line


@dataclass(frozen=True)
class HoleMark:
    """One hole to label: where it is (ratio units) and its texts."""
    policy: str
    lo: float
    hi: float
    width: float                # what ranks labels: bytes (exact) or ratio span (samples)
    label: str                  # on the plot (two lines)
    listed: str                 # in the legend (one line)
    colour: str


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting needs the 'plot' extra: "
                          "pip install 'dtrforensics[plot]'") from None
    return Figure


def draw(report: HolesReport, points: dict[str, list[dict]], *, failure_panel: bool = True):
    """The figure: the overhead panel per policy with regime switches and
    labelled holes, the failure strip (a row per policy), and (optional) pinned
    bytes and depth at each OOM."""
    Figure = _figure_class()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    n = len(report.policies)
    has_oom = any(p["oom_pinned"] is not None for pts in points.values() for p in pts)
    two = failure_panel and has_oom
    rows = [3.0, 0.35 + 0.25 * n] + ([2.0] if two else [])
    fig = Figure(figsize=(11, (7.5 if two else 5.2) + 0.3 * n), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), 1, sharex=True, height_ratios=rows)
    ax, strip = axes[0], axes[1]
    peak = report.trace.peak
    single = n == 1
    marks: list[HoleMark] = []
    for i, pol in enumerate(report.policies):
        colour = POLICY_COLOURS[i % len(POLICY_COLOURS)]
        bad = FAIL_COLOUR if single else colour      # one policy: red; several: their colours
        pts = points.get(pol.policy, [])
        _draw_overhead(ax, pol.policy, pts, report, colour, i)
        fail = [p for p in pts if p["status"] == STATUS_FAIL]
        if fail:
            strip.plot([p["ratio"] for p in fail], [i] * len(fail), "x", color=bad, ms=5,
                       ls="none", gid="fails", label=f"{pol.policy}: failing run")
        row = Row(strip, i, n, ax if single else None)
        _draw_failing_budgets(row, pol, pts, report, bad, BELOW_COLOUR if single else colour)
        _draw_uncertified(row, pol, report)
        _draw_switches(ax, pol, pts, report, SWITCH_COLOUR if single else colour)
        for u in pol.unresolved:
            for where in (ax, strip):
                where.axvline(u.ratio, color=UNRESOLVED_COLOUR, lw=1, ls="--")
        marks += [m if single else replace(m, label=f"{pol.policy}: {m.label}")
                  for m in _hole_marks(pol, pts, report, bad)]
    if any(p.unresolved for p in report.policies):
        ax.plot([], [], "--", color=UNRESOLVED_COLOUR, label="unresolved (timeout)")
    ax.set_ylabel("overhead (x model compute)\ncompleting runs only")
    ax.set_xlim(report.params.ratio_from, report.params.ratio_to)
    _leave_headroom(ax)
    ax.grid(True, alpha=0.3)
    strip.set_yticks(range(n), [policy_label(p.policy) for p in report.policies], fontsize=7)
    strip.set_ylim(n - 0.5, -0.5)
    strip.set_ylabel("fails", rotation=0, ha="right", va="center")
    strip.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{report.trace.name}: overhead against budget ratio\n{_mode(report)}",
                 fontsize=10)
    if two:
        _failure_panel(axes[2], report, points)
    axes[-1].set_xlabel(f"budget ratio (x peak {peak:,} bytes)")
    _place_hole_labels(fig, ax, marks, report, strip)
    return fig


def _mode(report: HolesReport) -> str:
    """'exact partition' only when every budget of the range is certified for every policy."""
    views = [p.exact for p in report.policies if p.exact is not None]
    if not report.params.exact or not views:
        return "samples"
    if all(not v.gaps for v in views):
        return "exact partition"
    from .sweep import ended_text
    worst = min(views, key=lambda v: v.coverage)
    reasons = sorted({g.reason for v in views for g in v.gaps})
    return (f"exact, {worst.coverage:.2%} of the range certified; uncertified budgets "
            f"hatched ({', '.join(reasons)})\nsweep ended: {ended_text(report)}")


# --- overhead -------------------------------------------------------------------------

def _certified_steps(pts: list[dict], report: HolesReport) -> list[tuple[list, list]]:
    """Polylines (x, y) over the certified intervals of completing runs; adjacent
    intervals join into one step line, anything else breaks it."""
    lo_b, hi_b = report.range_bytes
    peak = report.trace.peak
    intervals = sorted({(max(p["interval_lo"], lo_b),
                         min(hi_b if p["interval_hi"] is None else p["interval_hi"], hi_b),
                         p["overhead"])
                        for p in pts if p["status"] == STATUS_OK and p["interval_lo"] is not None
                        and p["interval_lo"] <= hi_b
                        and (p["interval_hi"] is None or p["interval_hi"] >= lo_b)})
    lines: list[tuple[list, list]] = []
    last_hi = None
    for lo, hi, overhead in intervals:
        if last_hi is None or lo != last_hi + 1:
            lines.append(([], []))
        xs, ys = lines[-1]
        xs += [lo / peak, (hi + 1) / peak]
        ys += [overhead, overhead]
        last_hi = hi
    return lines


def _draw_overhead(ax, policy: str, pts: list[dict], report: HolesReport, colour: str,
                   i: int) -> None:
    """Policy `i`'s completing runs: its colour, marker and dash (two policies of
    equal overhead still read as two)."""
    dash = POLICY_DASHES[i % len(POLICY_DASHES)]
    for k, (xs, ys) in enumerate(_certified_steps(pts, report)):
        ax.plot(xs, ys, ls=dash, color=colour, lw=1.2 + 0.6 * (i == 0), gid="overhead-step",
                label=f"{policy}: overhead (certified interval)" if k == 0 else None)
    ok = [p for p in pts if p["status"] == STATUS_OK]
    ax.plot([p["ratio"] for p in ok], [p["overhead"] for p in ok],
            POLICY_MARKERS[i % len(POLICY_MARKERS)], color=colour, ms=2.5 + 1.5 * (i > 0),
            mfc=colour if i == 0 else "none", ls="none",
            label=f"{policy}: sampled run" if ok else None)


def _leave_headroom(ax) -> None:
    """Room above the data for the hole labels."""
    lo, hi = ax.get_ylim()
    span = hi - lo if hi > lo else max(abs(hi), 1.0) * 0.1
    ax.set_ylim(lo - 0.04 * span, hi + span * HEADROOM)


# --- failing budgets and switches -----------------------------------------------------

@dataclass(frozen=True)
class Row:
    """Where one policy's budget bands go: its row `index` of the failure strip
    (of `rows`), and the whole overhead panel too when it is the only policy."""
    strip: object
    index: int
    rows: int
    panel: object | None


def _band(row: Row, lo: float, hi: float, x_span: float, gid: str, label: str | None,
          **style) -> None:
    top = 1 - row.index / row.rows
    targets = [(row.strip, {"ymin": top - 1 / row.rows, "ymax": top})]
    if row.panel is not None:
        targets.insert(0, (row.panel, {}))
    for k, (ax, extent) in enumerate(targets):
        ax.axvspan(lo, hi, lw=0, gid=gid, label=label if k == 0 else None, **extent, **style)
        if hi - lo < THIN * x_span:            # too thin to see as a band
            ax.axvline((lo + hi) / 2, lw=0.8, color=style.get("color", style.get("ec")), gid=gid,
                       **extent)


def _labeller(pol: PolicyHoles):
    labelled: set[str] = set()

    def once(key: str, text: str) -> str | None:
        if key in labelled:
            return None
        labelled.add(key)
        return f"{pol.policy}: {text}"
    return once


def _draw_failing_budgets(row: Row, pol: PolicyHoles, pts: list[dict], report: HolesReport,
                          bad: str, below: str) -> None:
    """Holes red; failing budgets with no success below them grey hatched;
    failing budgets up to the top of the range pale; failing budgets beside
    uncertified ones lighter still."""
    peak = report.trace.peak
    span = report.params.ratio_to - report.params.ratio_from
    once = _labeller(pol)
    below_style = {"fc": "none", "ec": below, "hatch": "///", "alpha": 0.6}
    for lo, hi, kind in _failing_ranges(pol, pts, report):
        lo_r, hi_r = (lo / peak, (hi + 1) / peak) if pol.exact is not None else (lo, hi)
        if kind == "hole":
            _band(row, lo_r, hi_r, span, "hole", once("hole", "hole (fails, completes below "
                                                      "and above)"), color=bad, alpha=0.22)
        elif kind == "below":
            _band(row, lo_r, hi_r, span, "below-first-success",
                  once("below", "fails below the first success"), **below_style)
        elif kind == "none":
            _band(row, lo_r, hi_r, span, "fails-everywhere",
                  once("none", "fails, no success in the range"), color=bad, alpha=0.08)
        elif kind == "top":
            _band(row, lo_r, hi_r, span, "fails-to-top",
                  once("top", "fails, no success above in range"), color=bad, alpha=0.08)
        else:
            _band(row, lo_r, hi_r, span, "fails-open",
                  once("open", "fails (certified), beside uncertified budgets"),
                  color=bad, alpha=0.12)


def _draw_uncertified(row: Row, pol: PolicyHoles, report: HolesReport) -> None:
    """Budgets the exact walk has not certified, hatched and named by why."""
    if pol.exact is None:
        return
    peak = report.trace.peak
    span = report.params.ratio_to - report.params.ratio_from
    once = _labeller(pol)
    for g in pol.exact.gaps:
        _band(row, g.lo / peak, (g.hi + 1) / peak, span, "uncertified",
              once(g.reason, f"uncertified ({g.reason}): outcome unknown"),
              fc="none", ec=UNCERTIFIED_COLOUR, hatch="xx", alpha=0.7)


def _failing_ranges(pol: PolicyHoles, pts: list[dict],
                    report: HolesReport) -> list[tuple[float, float, str]]:
    """(lo, hi, kind) of failing budgets: bytes in exact mode, else ratios (the
    failing samples widened to their certificates); kind 'hole', 'below' (below
    the first success), 'none' (no success anywhere in the range), 'top' (up to
    the top of the range) or 'open' (above the first success with uncertified
    budgets beside it)."""
    if pol.exact is not None:
        first = pol.exact.first_success(report.range_bytes[0])
        return [(r.lo, r.hi, "hole" if r.hole else "none" if first is None
                 else "below" if r.hi < first
                 else "top" if r.hi >= report.range_bytes[1] else "open")
                for r in pol.exact.failure_regions]
    out: list[tuple[float, float, str]] = []
    fs = pol.first_success.sample
    lo_b = report.range_bytes[0]
    for e in pol.edge_brackets:
        if e.direction == "fail->ok" and fs is not None and e.ok.budget == fs.budget:
            out.append((*_certified(pts, lo_b, e.fail.budget, report), "below"))
    if fs is None and pol.first_success.samples:
        out.append((report.params.ratio_from, report.params.ratio_to, "none"))
    out += [(*_certified(pts, r.lo.budget, r.hi.budget, report), "hole")
            for r in pol.failure_regions]
    step_w = (report.params.step or 0) * 0.2
    return [(lo, hi if hi > lo else lo + step_w, kind) for lo, hi, kind in out]


def _certified(pts: list[dict], lo: int, hi: int, report: HolesReport) -> tuple[float, float]:
    """Ratio extent of the failing samples with budgets in [lo, hi], widened to
    their certified intervals (clipped to the swept range)."""
    peak = report.trace.peak
    lo_b, hi_b = report.range_bytes
    inside = [p for p in pts if p["status"] == STATUS_FAIL and lo <= p["budget"] <= hi]
    first = min([p["budget"] for p in inside] + [p["interval_lo"] for p in inside
                                                 if p["interval_lo"] is not None])
    last = max([p["budget"] for p in inside] + [p["interval_hi"] for p in inside
                                                if p["interval_hi"] is not None])
    return max(first, lo_b) / peak, (min(last, hi_b) + 1) / peak


def switch_positions(pol: PolicyHoles, pts: list[dict], peak: int) -> list[tuple[float, float]]:
    """Where each regime switch lies, in ratio units: between the two runs'
    certified intervals, (x, x) at the first byte of the new regime when they
    touch; without certificates, between the two samples."""
    by_budget = {p["budget"]: p for p in pts}
    out = []
    for s in pol.regime_switches:
        lo, hi = by_budget.get(s.lo.budget), by_budget.get(s.hi.budget)
        if (lo is not None and hi is not None and lo["interval_hi"] is not None
                and hi["interval_lo"] is not None):
            out.append(((lo["interval_hi"] + 1) / peak, hi["interval_lo"] / peak))
        else:
            out.append((s.lo.ratio, s.hi.ratio))
    return out


def _draw_switches(ax, pol: PolicyHoles, pts: list[dict], report: HolesReport,
                   colour: str) -> None:
    """Exact: a dotted line where two certified intervals touch (none across
    uncertified budgets); samples: a hatched bracket between the two samples."""
    label = f"{pol.policy}: regime switch (overhead x{1 + report.threshold:g} or more)"
    span = report.params.ratio_to - report.params.ratio_from
    drawn = 0
    for lo, hi in switch_positions(pol, pts, report.trace.peak):
        if pol.exact is not None and hi > lo:
            continue                       # uncertified budgets between: drawn as such
        style = {"label": label if not drawn else None, "gid": "switch"}
        drawn += 1
        if hi - lo < THIN * span:          # exact
            ax.axvline(lo, color=colour, lw=1, ls=":", **style)
        else:
            ax.axvspan(lo, hi, fc="none", ec=colour, hatch="..", lw=0.5, **style)


# --- hole labels ----------------------------------------------------------------------

def _ratio_digits(edges: list[float], lo: int = 4, hi: int = 9) -> int:
    """Fewest decimals (>= lo) that tell every distinct edge apart."""
    distinct = set(edges)
    for d in range(lo, hi + 1):
        if len({f"{e:.{d}f}" for e in distinct}) == len(distinct):
            return d
    return hi


def _hole_marks(pol: PolicyHoles, pts: list[dict], report: HolesReport,
                colour: str) -> list[HoleMark]:
    peak = report.trace.peak
    if pol.exact is not None:
        holes = pol.exact.holes
        d = _ratio_digits([e / peak for r in holes for e in (r.lo, r.hi)], lo=6)
        out = []
        for r in holes:
            ratios = (f"{r.lo / peak:.{d}f}" if r.lo == r.hi
                      else f"{r.lo / peak:.{d}f}-{r.hi / peak:.{d}f}")
            where = f"{r.lo:,} B" if r.lo == r.hi else f"{r.lo:,}-{r.hi:,} B"
            width = r.hi - r.lo + 1
            out.append(HoleMark(pol.policy, r.lo / peak, (r.hi + 1) / peak, width,
                                f"hole {ratios}\n{where}",
                                f"{where} ({width:,} B)", colour))
        return out
    extents = [_certified(pts, r.lo.budget, r.hi.budget, report) for r in pol.failure_regions]
    d = _ratio_digits([e for x in extents for e in x], lo=6)
    out = []
    for r, (lo, hi) in zip(pol.failure_regions, extents):
        n = f"{r.failing} failing sample{'s' if r.failing != 1 else ''}, certified"
        ratios = f"{lo:.{d}f}-{hi:.{d}f}"
        out.append(HoleMark(pol.policy, lo, hi, r.above.ratio - r.below.ratio,
                            f"hole {ratios}\n{n}", f"{ratios} ({n})", colour))
    return out


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _place_hole_labels(fig, ax, marks: list[HoleMark], report: HolesReport, strip) -> None:
    """Label the widest holes where their labels fit (no overlap, inside the
    panel); list the others in the legend. Placing depends on the layout, the
    layout on the legend: repeat until the listed set stops growing."""
    ranked = sorted(marks, key=lambda m: -m.width)
    listed: list[HoleMark] = []
    placed: list = []
    while True:
        _legend(ax, strip, listed, report)
        fig.draw_without_rendering()
        for ann in placed:
            ann.remove()
        placed, missed = _try_labels(fig, ax, [m for m in ranked if m not in listed])
        if not missed:
            return
        listed += missed


def _try_labels(fig, ax, marks: list[HoleMark]) -> tuple[list, list[HoleMark]]:
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    boxes, placed, missed = [], [], []
    for m in marks:
        for row in range(LABEL_ROWS):
            ann = ax.annotate(m.label, xy=((m.lo + m.hi) / 2, 1.0),
                              xycoords=ax.get_xaxis_transform(),
                              xytext=(0, -6 - LABEL_ROW_PT * row), textcoords="offset points",
                              ha="center", va="top", fontsize=7, color=m.colour,
                              linespacing=1.1, gid="hole-label",
                              bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": m.colour,
                                    "lw": 0.5})
            box = ann.get_window_extent(renderer)
            if (frame.x0 <= box.x0 and box.x1 <= frame.x1
                    and not any(_overlaps(box, b) for b in boxes)):
                boxes.append(box)
                placed.append(ann)
                break
            ann.remove()
        else:
            missed.append(m)
    return placed, missed


def _legend(ax, strip, listed: list[HoleMark], report: HolesReport) -> None:
    """One legend beside the overhead panel for it and the failure strip."""
    from matplotlib.patches import Patch
    handles, labels = ax.get_legend_handles_labels()
    seen = set(labels)
    for h, lab in zip(*strip.get_legend_handles_labels()):
        if lab not in seen:
            handles.append(h)
            labels.append(lab)
            seen.add(lab)
    if len(report.policies) > 1:
        handles, labels = _by_policy_then_kind(handles, labels, report)
    if listed:
        handles.append(Patch(visible=False))
        labels.append("holes too close to label:")
        for m in sorted(listed, key=lambda m: m.lo)[:LISTED_MAX]:
            handles.append(Patch(color=m.colour, alpha=0.4))
            labels.append(m.listed if len(report.policies) == 1 else f"{m.policy}: {m.listed}")
        if len(listed) > LISTED_MAX:
            handles.append(Patch(visible=False))
            labels.append(f"... and {len(listed) - LISTED_MAX} more (dtrf holes SWEEP)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)


def _by_policy_then_kind(handles: list, labels: list[str], report: HolesReport):
    """Several policies: one entry per policy (its colour), then one grey entry per
    kind of mark, instead of every policy's every kind ("POLICY: kind" labels)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    out_h = [Line2D([], [], color=POLICY_COLOURS[i % len(POLICY_COLOURS)], lw=2,
                    ls=POLICY_DASHES[i % len(POLICY_DASHES)],
                    marker=POLICY_MARKERS[i % len(POLICY_MARKERS)],
                    mfc=POLICY_COLOURS[i % len(POLICY_COLOURS)] if i == 0 else "none")
             for i, _ in enumerate(report.policies)]
    out_l = [policy_label(pol.policy) for pol in report.policies]
    kinds: dict[str, object] = {}
    for handle, label in zip(handles, labels):
        kind = label.rpartition(": ")[2]
        if kind in kinds:
            continue
        if isinstance(handle, Line2D):
            kinds[kind] = Line2D([], [], color="grey", marker=handle.get_marker(),
                                 linestyle=handle.get_linestyle(), lw=handle.get_linewidth(),
                                 ms=handle.get_markersize())
        else:
            filled = handle.get_fill() and handle.get_facecolor()[3] > 0
            kinds[kind] = Patch(facecolor="grey" if filled else "none", edgecolor="grey",
                                hatch=handle.get_hatch(), alpha=handle.get_alpha())
    return out_h + list(kinds.values()), out_l + list(kinds)


# --- the failure panel ----------------------------------------------------------------

def _byte_unit(n: float) -> tuple[float, str]:
    for scale, unit in ((GIB, "GiB"), (float(1 << 20), "MiB"), (1024.0, "KiB")):
        if n >= scale:
            return scale, unit
    return 1.0, "bytes"


def _failure_panel(ax, report: HolesReport, points: dict[str, list[dict]]) -> None:
    """Pinned bytes at each OOM (filled circles, left axis) and nesting depth
    there (hollow triangles, right axis): one policy draws them in two colours,
    several in their colours, the markers telling the series apart."""
    from matplotlib.ticker import MaxNLocator
    depth_ax = ax.twinx()
    scale, unit = _byte_unit(max((p["oom_pinned"] for pts in points.values() for p in pts
                                  if p["oom_pinned"] is not None), default=0))
    single = len(report.policies) == 1
    for i, pol in enumerate(report.policies):
        colour = POLICY_COLOURS[i % len(POLICY_COLOURS)]
        oom = [p for p in points.get(pol.policy, []) if p["oom_pinned"] is not None]
        if not oom:
            continue
        ax.plot([p["ratio"] for p in oom], [p["oom_pinned"] / scale for p in oom], "o",
                color=colour, ms=3.5, ls="none", gid="oom-pinned",
                label=f"{pol.policy}: pinned at OOM ({unit}, left)")
        depth_colour = DEPTH_COLOUR if single else colour
        depth_ax.plot([p["ratio"] for p in oom], [p["oom_depth"] for p in oom], "^",
                      mfc="none", mec=depth_colour, mew=1.0, ms=5, ls="none", gid="oom-depth",
                      label=f"{pol.policy}: depth at OOM (right)")
    ax.set_ylabel(f"pinned at failure ({unit})", color=POLICY_COLOURS[0] if single else "black")
    depth_ax.set_ylabel("nesting depth at failure", color=DEPTH_COLOUR if single else "black")
    depth_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    # both axes from 0, the depths drawn lower than the pinned bytes, so the two
    # series of one failing run never sit on one spot
    top = max((p["oom_pinned"] for pts in points.values() for p in pts
               if p["oom_pinned"] is not None), default=0) / scale
    deepest = max((p["oom_depth"] for pts in points.values() for p in pts
                   if p["oom_depth"] is not None), default=0)
    ax.set_ylim(0, top * 1.25 or 1)
    depth_ax.set_ylim(0, deepest * 2.2 or 1)
    ax.grid(True, alpha=0.3)
    handles = ax.get_legend_handles_labels()
    extra = depth_ax.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left",
              bbox_to_anchor=(1.08, 1), fontsize=7)


def figure_paths(stem: str | os.PathLike) -> list[Path]:
    """The files `save` writes for STEM: STEM.png and STEM.svg."""
    stem = Path(stem)
    return [stem.with_suffix(".png"), stem.with_suffix(".svg")]


def save(fig, stem: str | os.PathLike, metadata: dict[str, str] | None = None) -> list[Path]:
    """Write STEM.png and STEM.svg, each whole or not at all (atomically), into
    STEM's folder, which must exist (`fsutil.require_parent`); returns both paths.
    metadata: text fields both files carry (matplotlib's `metadata`; see
    `figure_files`)."""
    paths = figure_paths(stem)
    for path, options in zip(paths, ({"dpi": DPI, "format": "png"}, {"format": "svg"})):
        with atomic_path(path) as tmp:
            fig.savefig(tmp, **options, metadata=metadata)
    return paths
