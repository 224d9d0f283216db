"""A plan (`torch.plan.PlanResult`) as its verdict, lines of text, JSON and a figure:
bytes against overhead, DTR's exact curve with its holes shaded, every
checkpointing option a point, the knob a line, the target a vertical."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ..concepts import completes
from .units import fmt_bytes, fmt_count
from .verdict import Verdict

if TYPE_CHECKING:
    from ..torch.plan import DtrMap, HoleMargin, KnobMap, OptionPoint, PlanDiff, PlanResult

HOLE_COLOUR = "#d62728"
BELOW_COLOUR = "#bbbbbb"
OPEN_COLOUR = "#f5deb3"
DTR_COLOUR = "#1f77b4"
KNOB_COLOUR = "#ff7f0e"
OPTION_COLOUR = "#2ca02c"
TARGET_COLOUR = "#444444"
# DTR's numbers in a plan are the engine's replay of the plain (eager) step's log, in
# its cost (flops unless --cost measured): `torch run --compiled` runs DTR on the
# compiled step's joint graph, a different log with its own peak
DTR_THERE = "DTR there (the eager step's log, simulated)"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _b(n: int | None) -> str:
    return "-" if n is None else f"{n:,} B ({fmt_bytes(n)})"


def step_args(result: PlanResult) -> list[str]:
    """The options that rebuild the step (`--batch 4 --set hidden_size=256 ...`)."""
    out: list[str] = []
    for key, value in result.sets.items():
        if key in ("batch", "seq", "image_size"):
            out += [f"--{key.replace('_', '-')}", str(value)]
        elif key == "dtype":
            out += ["--dtype", str(value).removeprefix("torch.")]
        else:
            out += [f"--set={k}={_setting(v)}" for k, v in _flat(key, value)]
    return out


def _flat(key: str, value) -> list[tuple[str, object]]:
    if isinstance(value, dict):
        return [kv for k, v in value.items() for kv in _flat(f"{key}.{k}", v)]
    return [(key, value)]


def _setting(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_setting(v) for v in value) + "]"
    return str(value)


def finish_command(dtr: DtrMap) -> str | None:
    """The command that finishes DTR's map (None: complete)."""
    if dtr.complete:
        return None
    from .sweep import finish_lines
    lines = [line for line in finish_lines(dtr.report) if ": dtrf " in line]
    return lines[0].split(": ", 1)[1] if lines else None


# --- the verdict ----------------------------------------------------------------------------

def plan_verdict(result: PlanResult) -> Verdict:
    """The answer first: for a target, what fits and DTR there; else the map in one line."""
    t, dtr = result.target, result.dtr
    if t is not None:
        if t.cheapest is None:
            head = (f"nothing PyTorch ships fits {_b(t.target)}; {DTR_THERE}: "
                    f"{margin_text(t.dtr)}")
        else:
            head = (f"at {_b(t.target)}: {t.cheapest.label} fits, peak {t.cheapest.peak:,} B at "
                    f"{_x(t.cheapest.overhead)}; {DTR_THERE}: {margin_text(t.dtr)}")
    else:
        head = (f"{result.spec}: peak {_b(result.peak)}, floor {_b(result.floor.floor)}; "
                + (dtr_text(dtr) if dtr is not None else "DTR cannot go below the peak"))
    lines = [dtr_text(dtr)] if t is not None and dtr is not None else []
    if t is not None and t.cheapest is not None and t.cheapest_margin is not None:
        lines.append(f"{t.cheapest.text} at {t.cheapest.peak:,} B as a DTR budget: "
                     f"{margin_text(t.cheapest_margin)}")
    if t is not None:
        lines.append(f"knob meeting the target: {knob_fit_text(t.knob)}"
                     + (knob_grid_text(result.knob, t.knob) if result.knob is not None else ""))
    if result.knob is not None:
        lines.append(knob_text(result.knob))
    if result.inversions:
        d = result.inversions[0]
        lines.append(f"non-monotone: knob {d.low_knob:g} peaks {d.low_peak - d.high_peak:,} B "
                     f"above knob {d.high_knob:g}" + (f"; first differing: {decision_text(d)}"
                                                      if d.first_decision else ""))
    return Verdict(head, tuple(lines[:6]), next_command(result))


def next_command(result: PlanResult) -> str | None:
    """Finish DTR's map when partial; else run DTR at the target for real."""
    if result.dtr is not None and not result.dtr.complete:
        return finish_command(result.dtr)
    t = result.target
    if t is not None and completes(t.dtr.outcome):
        return " ".join(["dtrf", "torch", "run", shlex.quote(result.spec), *map(
            shlex.quote, step_args(result)), "--budget", str(t.target)])
    return None


def dtr_text(dtr: DtrMap) -> str:
    first = ("no success certified" if dtr.first_success is None else
             f"DTR completes from {dtr.first_success:,} B ({_x(dtr.first_overhead)})"
             + ("" if dtr.first_success_exact else ", lower budgets uncertified"))
    holes = fmt_count(len(dtr.holes), "hole") + (
        f" ({sum(h.width for h in dtr.holes):,} B)" if dtr.holes else "")
    state = "map complete" if dtr.complete else f"map partial, {dtr.uncertified_bytes:,} B open"
    return f"{first}, {holes}, {state}"


def margin_text(m: HoleMargin) -> str:
    what = (f"completes at {_x(m.overhead)}" if completes(m.outcome)
            else "uncertified" if m.outcome == "uncertified" else f"fails ({m.outcome})")
    if m.hole is None:
        return f"{what}, no hole" if m.complete else (
            f"{what}, no hole certified so far (the map is partial: more may lie in its open budgets)")
    if not m.complete:
        what += " (the map is partial: the nearest hole certified so far)"
    if m.inside:
        return (f"{what}, inside the hole {m.hole.lo:,}-{m.hole.hi:,} B, {m.distance:,} B "
                "from its nearest edge")
    return f"{what}, {m.distance:,} B from the hole {m.hole.lo:,}-{m.hole.hi:,} B"


def knob_grid_text(k: KnobMap, fit: OptionPoint | None) -> str:
    """What the knob's answer covers: the points recorded, not every knob value."""
    n = fmt_count(len(k.points), "knob point")
    if fit is None:
        return f" (of {n} recorded; a finer --knob-step may find one)"
    return f" (the highest of {n} recorded; a finer --knob-step may find a higher one)"


def knob_fit_text(p: OptionPoint | None) -> str:
    if p is None:
        return "none"
    return f"{p.knob:g} (peak {p.peak:,} B, {_x(p.overhead)})"


def knob_text(k: KnobMap) -> str:
    lo = min(k.points, key=lambda p: p.peak)
    hi = max(k.points, key=lambda p: p.peak)
    unresolved = f", {k.unresolved} wider than {k.tolerance:g}" if k.unresolved else ""
    if k.unresolved and k.stopped:
        unresolved += (f" (refinement stopped at {k.stopped}; the same command again "
                       f"resumes it)")
    return (f"knob ({k.solver}): peak {lo.peak:,} B at {lo.knob:g} to {hi.peak:,} B at "
            f"{hi.knob:g}; {fmt_count(k.changes, 'change')} of plan over "
            f"{fmt_count(len(k.points), 'point')}{unresolved}")


def decision_text(d: PlanDiff) -> str:
    f = d.first_decision
    if f is None:
        return "no forward output saved in one plan and recomputed in the other"
    where = f" in {f.module}" if f.module else ""
    return (f"{f.op} #{f.index}{where} ({f.bytes:,} B) {f.low} at knob {d.low_knob:g}, "
            f"{f.high} at {d.high_knob:g}")


# --- the details ------------------------------------------------------------------------------

def plan_lines(result: PlanResult) -> list[str]:
    """Every number of the plan, one fact a line."""
    fl = result.floor
    out = [f"{result.spec}: plain step peak {_b(result.peak)}, floor {_b(fl.floor)}",
           f"plan folder: {result.folder} ({result.seconds:.1f} s)"]
    out += result.notes
    if result.dtr is not None:
        out += _dtr_lines(result.dtr)
    out.append("options (recorded peak, overhead over the plain step):")
    out += [f"  {o.text:<24} {o.peak:>14,} B  {_x(o.overhead)}  {o.label}" for o in result.options]
    if result.knob is not None:
        out.append(knob_text(result.knob) + ":")
        pts = result.knob.points
        out += [f"  {p.knob:<8g} {p.peak:>14,} B  {_x(p.overhead)}"
                + ("  plan changes" if i and p.plan != pts[i - 1].plan else "")
                for i, p in enumerate(pts)]
    if result.knob is not None and result.knob.inversions:
        out.append(f"non-monotone: a lower knob peaks higher at "
                   f"{fmt_count(result.knob.inversions, 'adjacent pair')} of the knob's points; "
                   f"the {len(result.inversions)} largest diffed")
    for d in result.inversions:
        out += diff_lines(d)
    if result.target is not None:
        out += _target_lines(result)
    return out


def _dtr_lines(dtr: DtrMap) -> list[str]:
    lo, hi = dtr.range_bytes
    out = [f"DTR ({dtr.policy}) over {lo:,}-{hi:,} B: {dtr_text(dtr)}; sweep {dtr.sweep}"]
    out += [f"  hole {h.lo:,}-{h.hi:,} B ({h.width:,} B; edges {h.lo_edge}/{h.hi_edge})"
            for h in dtr.holes]
    if not dtr.complete:
        from .sweep import ended_text, finish_lines
        out.append(f"  partial: {ended_text(dtr.report)}")
        out += [f"  {line}" for line in finish_lines(dtr.report)]   # as `dtrf holes` says them
    return out


def diff_lines(d: PlanDiff) -> list[str]:
    out = [f"non-monotone: knob {d.low_knob:g} peaks at {d.low_peak:,} B, knob {d.high_knob:g} "
           f"at {d.high_peak:,} B (+{d.low_peak - d.high_peak:,} B at the lower knob)",
           f"  first differing decision: {decision_text(d)}",
           f"  forward outputs saved only at {d.low_knob:g}: {d.saved_only_low}, only at "
           f"{d.high_knob:g}: {d.saved_only_high}",
           f"  partitioner: {len(d.nodes_recomputed_low)} forward nodes saved at {d.high_knob:g} "
           f"are recomputed at {d.low_knob:g} ({_names(d.nodes_recomputed_low)}), "
           f"{len(d.nodes_recomputed_high)} the other way ({_names(d.nodes_recomputed_high)})",
           f"  why: {d.why}"]
    for knob, view in ((d.low_knob, d.low_at_peak), (d.high_knob, d.high_at_peak)):
        out.append(f"  alive at the peak of knob {knob:g} ({view.peak:,} B), by module:")
        out += [f"    {m.module} ({m.phase}): {m.bytes:,} B" for m in view.top]
    return out


def _names(names: list[str], most: int = 6) -> str:
    if not names:
        return "none"
    return ", ".join(names[:most]) + (f", ... {len(names) - most} more" if len(names) > most else "")


def _target_lines(result: PlanResult) -> list[str]:
    t = result.target
    out = [f"target {_b(t.target)}:"]
    if t.cheapest is None:
        out.append("  no option fits")
    else:
        out.append(f"  cheapest that fits: {t.cheapest.text} ({t.cheapest.label}), peak "
                   f"{t.cheapest.peak:,} B, {_x(t.cheapest.overhead)}, "
                   f"{t.target - t.cheapest.peak:,} B under the target")
        out.append(f"  its peak as a DTR budget: {margin_text(t.cheapest_margin)}")
    out.append(f"  DTR at the target: {margin_text(t.dtr)}")
    out.append(f"  knob meeting the target: {knob_fit_text(t.knob)}"
               + (knob_grid_text(result.knob, t.knob) if result.knob is not None else ""))
    out.append(f"  fitting: {', '.join(o.text for o in t.fits) or 'none'}")
    return out


def plan_json(result: PlanResult) -> dict:
    doc = result.to_json()
    doc["finish"] = finish_command(result.dtr) if result.dtr is not None else None
    return doc


# --- the figure -------------------------------------------------------------------------------

def figure(result: PlanResult, *, ratio_axis: bool = False):
    """Bytes (MiB) against overhead: DTR's certified curve, its holes shaded red,
    what it fails below its first success grey, uncertified budgets tan; every
    option a labelled point, the knob a line through its points (labelled by
    knob), the target a vertical."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from .sweep_plot import DPI, _figure_class
    fig = _figure_class()(figsize=(11, 6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    mib = float(1 << 20)
    if result.dtr is not None:
        _draw_dtr(ax, result.dtr, mib)
        every = result.options + (result.knob.points if result.knob is not None else [])
        right = max([o.peak for o in every] + [result.peak])
        if right > result.peak:        # above the plain peak DTR evicts nothing
            ax.plot([result.peak / mib, right / mib], [1.0, 1.0], ":", color=DTR_COLOUR, lw=1.5,
                    label="DTR above the plain step's peak (nothing evicted)")
    _draw_options(ax, result, mib)
    if result.knob is not None:
        _draw_knob(ax, result.knob, mib)
    if result.target is not None:
        ax.axvline(result.target.target / mib, color=TARGET_COLOUR, ls="--", lw=1.2,
                   label=f"target {result.target.target:,} B")
        pick = result.target.cheapest
        if pick is not None:
            ax.plot([pick.peak / mib], [pick.overhead], "o", ms=15, mfc="none",
                    mec=TARGET_COLOUR, mew=1.5, label=f"cheapest that fits: {pick.text}")
    ax.axvline(result.floor.floor / mib, color="#888888", ls=":", lw=1,
               label=f"floor {result.floor.floor:,} B")
    ax.set_xlabel("bytes (MiB): a DTR budget, or an option's recorded peak")
    ax.set_ylabel("overhead (simulated " + ("op times" if result.cost == "measured" else "flops")
                  + " over the plain step's)")
    ax.set_title(f"{result.spec}: DTR against PyTorch's checkpointing at the same bytes")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    return fig


def _draw_dtr(ax, dtr: DtrMap, mib: float) -> None:
    xs, ys = [], []
    for span in dtr.curve:
        if completes(span.outcome) and span.overhead is not None:
            xs += [span.lo / mib, (span.hi + 1) / mib]
            ys += [span.overhead, span.overhead]
        else:
            xs.append(float("nan"))
            ys.append(float("nan"))
    ax.plot(xs, ys, color=DTR_COLOUR, lw=1.5, label=f"DTR ({dtr.policy}), exact")
    if dtr.first_success is not None and dtr.first_overhead is not None:
        ax.plot([dtr.first_success / mib], [dtr.first_overhead], "D", color=DTR_COLOUR, ms=6,
                label="DTR's first success")
        ax.annotate(f"{dtr.first_success:,} B, {dtr.first_overhead:.2f}x",
                    (dtr.first_success / mib, dtr.first_overhead), textcoords="offset points",
                    xytext=(-10, 8), ha="right", fontsize=8, color=DTR_COLOUR)
    lo, hi = dtr.range_bytes
    least = (hi - lo) / 400           # a hole narrower than this is drawn this wide, to show
    for k, h in enumerate(dtr.holes):
        pad = max(0.0, least - (h.hi + 1 - h.lo)) / 2
        ax.axvspan((h.lo - pad) / mib, (h.hi + 1 + pad) / mib, color=HOLE_COLOUR, alpha=0.25,
                   lw=0, label="DTR hole (fails between completions; drawn at least "
                   "1/400 of the axis wide)" if k == 0 else None)
    if dtr.first_success is not None and dtr.first_success > lo:
        ax.axvspan(lo / mib, dtr.first_success / mib, color=BELOW_COLOUR, alpha=0.35, lw=0,
                   label="DTR fails below its first success" if dtr.first_success_exact
                   else "DTR fails or uncertified below its first success")
    for k, gap in enumerate(dtr.report.policy(dtr.policy).certain.gaps):
        if dtr.first_success is None or gap.lo > dtr.first_success:
            ax.axvspan(gap.lo / mib, (gap.hi + 1) / mib, color=OPEN_COLOUR, alpha=0.6, lw=0,
                       label="uncertified (map partial)" if k == 0 else None)


def _draw_options(ax, result: PlanResult, mib: float) -> None:
    for k, o in enumerate(result.options):
        ax.plot([o.peak / mib], [o.overhead], "o", color=OPTION_COLOUR, ms=7,
                label="checkpointing option (recorded)" if k == 0 else None)
        ax.annotate(o.text, (o.peak / mib, o.overhead), textcoords="offset points",
                    xytext=(5, 6), fontsize=8, color=OPTION_COLOUR)


def _draw_knob(ax, knob: KnobMap, mib: float) -> None:
    pts = knob.points
    ax.plot([p.peak / mib for p in pts], [p.overhead for p in pts], "-s", color=KNOB_COLOUR,
            ms=4, lw=1, label=f"torch.compile knob ({knob.solver}), recorded")
    shown: set[tuple[int, float]] = set()
    for i, p in enumerate(pts):
        key = (p.peak, round(p.overhead, 3))
        if key in shown or (0 < i < len(pts) - 1 and p.plan == pts[i - 1].plan):
            continue
        shown.add(key)
        ax.annotate(f"{p.knob:g}", (p.peak / mib, p.overhead), textcoords="offset points",
                    xytext=(4, -11), fontsize=7, color=KNOB_COLOUR)


def save_figure(fig, path) -> None:
    """Write the figure to `path` atomically, its format from the suffix (.png, .svg, .pdf)."""
    from pathlib import Path

    from ..fsutil import atomic_path
    from .sweep_plot import DPI
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format=fmt)
