"""Figure of a sweep: overhead against budget ratio, holes as bands (matplotlib).

Rendering only: the numbers come from `holes.analyze` and `holes.load_points`.
Needs the `plot` extra (matplotlib). Uses the object API (`Figure`), never
pyplot, so nothing global changes and no display is needed.
"""

from __future__ import annotations

import os
from pathlib import Path

from .holes import HolesReport

POLICY_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                  "#bcbd22", "#7f7f7f")
FAIL_COLOUR = "#d62728"
UNRESOLVED_COLOUR = "#ff7f0e"
GIB = float(1 << 30)


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting needs the 'plot' extra: "
                          "pip install 'dtrforensics[plot]'") from None
    return Figure


def draw(report: HolesReport, points: dict[str, list[dict]], *, failure_panel: bool = True):
    """The figure: panel 1 overhead vs ratio per policy, failing ranges as red
    bands (byte-exact in exact mode), unresolved points as orange lines, holes
    annotated; panel 2 (optional) pinned bytes and depth at each OOM."""
    Figure = _figure_class()
    has_oom = any(p["oom_pinned"] is not None for pts in points.values() for p in pts)
    two = failure_panel and has_oom
    fig = Figure(figsize=(11, 7.5 if two else 5.2), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2)) if two else [fig.subplots()]
    ax = axes[0]
    peak = report.trace.peak
    single = len(report.policies) == 1
    for i, pol in enumerate(report.policies):
        colour = POLICY_COLOURS[i % len(POLICY_COLOURS)]
        bad = FAIL_COLOUR if single else colour      # one policy: red; several: their colours
        pts = points.get(pol.policy, [])
        for k, run in enumerate(_ok_runs(pts)):      # a line never crosses a failure
            ax.plot([p["ratio"] for p in run], [p["overhead"] for p in run], ".-",
                    color=colour, lw=1, ms=3, label=f"{pol.policy}: overhead" if k == 0 else None)
        fail = [p for p in pts if p["status"] == "fail"]
        if fail:
            ax.plot([p["ratio"] for p in fail], [0.02 + 0.03 * i] * len(fail), "x",
                    color=bad, ms=4, transform=ax.get_xaxis_transform(),
                    label=f"{pol.policy}: fails")
        for k, (lo, hi) in enumerate(_failure_bands(pol, peak, report)):
            ax.axvspan(lo, hi, color=bad, alpha=0.18 if single else 0.12, lw=0,
                       label=f"{pol.policy}: failing budgets" if k == 0 else None)
        for u in pol.unresolved:
            ax.axvline(u.ratio, color=UNRESOLVED_COLOUR, lw=1, ls="--")
        _annotate_holes(ax, pol, peak, colour)
    if any(p.unresolved for p in report.policies):
        ax.plot([], [], "--", color=UNRESOLVED_COLOUR, label="unresolved (timeout)")
    ax.set_ylabel("overhead (x model compute)")
    ax.set_xlim(report.params.ratio_from, report.params.ratio_to)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    mode = "exact partition" if report.params.exact else "samples"
    ax.set_title(f"{report.trace.name}: overhead against budget ratio ({mode})")
    if two:
        _failure_panel(axes[1], report, points)
    axes[-1].set_xlabel(f"budget ratio (x peak {peak:,} bytes)")
    return fig


def _ok_runs(pts: list[dict]) -> list[list[dict]]:
    """Completing samples in maximal runs not interrupted by a failing sample."""
    runs: list[list[dict]] = [[]]
    for p in pts:
        if p["status"] == "ok":
            runs[-1].append(p)
        elif p["status"] == "fail" and runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _byte_unit(n: float) -> tuple[float, str]:
    for scale, unit in ((GIB, "GiB"), (float(1 << 20), "MiB"), (1024.0, "KiB")):
        if n >= scale:
            return scale, unit
    return 1.0, "bytes"


def _failure_bands(pol, peak: int, report: HolesReport) -> list[tuple[float, float]]:
    """Failing budget ranges as ratios: the certified failing runs in exact
    mode, else the sampled failing runs (below the first success included)."""
    if pol.exact is not None and pol.exact.failure_regions:
        return [(r.lo / peak, (r.hi + 1) / peak) for r in pol.exact.failure_regions]
    bands = []
    fs = pol.first_success.sample
    lo_edge = report.params.ratio_from
    for e in pol.edge_brackets:
        if e.direction == "fail->ok" and fs is not None and e.ok.budget == fs.budget:
            bands.append((lo_edge, e.fail.ratio))
    if fs is None and pol.first_success.samples:
        bands.append((report.params.ratio_from, report.params.ratio_to))
    bands += [(r.lo.ratio, r.hi.ratio) for r in pol.failure_regions]
    return [(lo, hi if hi > lo else lo + (report.params.step or 0) * 0.2) for lo, hi in bands]


def _annotate_holes(ax, pol, peak: int, colour: str) -> None:
    if pol.exact is not None:
        holes = [(r.lo / peak, r.hi / peak) for r in pol.exact.holes]
    else:
        holes = [(r.lo.ratio, r.hi.ratio) for r in pol.failure_regions]
    for k, (lo, hi) in enumerate(holes):
        ax.annotate(f"hole {lo:.5g}-{hi:.5g}", xy=((lo + hi) / 2, 1.0),
                    xycoords=ax.get_xaxis_transform(), xytext=(0, -14 - 12 * (k % 3)),
                    textcoords="offset points", ha="center", fontsize=8, color=FAIL_COLOUR,
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": colour, "lw": 0.5})


def _failure_panel(ax, report: HolesReport, points: dict[str, list[dict]]) -> None:
    depth_ax = ax.twinx()
    scale, unit = _byte_unit(max((p["oom_pinned"] for pts in points.values() for p in pts
                                  if p["oom_pinned"] is not None), default=0))
    for i, pol in enumerate(report.policies):
        colour = POLICY_COLOURS[i % len(POLICY_COLOURS)]
        oom = [p for p in points.get(pol.policy, []) if p["oom_pinned"] is not None]
        if not oom:
            continue
        ax.plot([p["ratio"] for p in oom], [p["oom_pinned"] / scale for p in oom], "o",
                color=colour, ms=3, label=f"{pol.policy}: pinned at OOM")
        depth_ax.plot([p["ratio"] for p in oom], [p["oom_depth"] for p in oom], "^",
                      color=colour, ms=3, alpha=0.5, label=f"{pol.policy}: depth at OOM")
    ax.set_ylabel(f"pinned at failure ({unit})")
    depth_ax.set_ylabel("nesting depth at failure")
    ax.grid(True, alpha=0.3)
    handles = ax.get_legend_handles_labels()
    extra = depth_ax.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left",
              bbox_to_anchor=(1.08, 1), fontsize=8)


def save(fig, stem: str | os.PathLike) -> list[Path]:
    """Write STEM.png and STEM.svg; returns both paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=130)
    fig.savefig(paths[1])
    return paths
