"""Figure of a regime comparison: evictions and rematerialization per op window.

Rendering only: the numbers come from `analyses.regime.regime`. Two panels
share the op axis: pressure evictions per window and rematerialization
compute per window, both runs drawn as steps (counts span orders of magnitude,
so the y axes are symmetric-log). The slow regime is shaded from its onset op
to its end, the onset op drawn as a line, and the first divergence of the
eviction streams marked; the caption says how the onset is defined. Uses
matplotlib's object API (`Figure`), never pyplot.
"""

from __future__ import annotations

import textwrap

from ..analyses.regime import RegimeReport
from .regime import onset_rule

CONTROL_COLOUR = "#1f77b4"
TEST_COLOUR = "#d62728"
ONSET_COLOUR = "#ff7f0e"


def _label(run) -> str:
    budget = f"{run.budget:,} B" + (f" (ratio {run.ratio})" if run.ratio is not None else "")
    overhead = f"{run.overhead:.4f}x" if run.overhead is not None else run.outcome
    return f"{run.label}: {budget}, {overhead}"


def draw(report: RegimeReport):
    """The figure for `report` (a matplotlib Figure, not yet saved)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting needs the 'plot' extra: "
                          "pip install 'dtrforensics[plot]'") from None
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    end = max(report.a.last_op, report.b.last_op) + 1      # the last window may be short
    edges = [w.first_op for w in report.windows] + [min(report.windows[-1].last_op + 1, end)] \
        if report.windows else []
    for run, colour in ((report.a, CONTROL_COLOUR), (report.b, TEST_COLOUR)):
        side = run.label
        evictions = [getattr(w, side).evictions or 0 for w in report.windows]
        compute = [(getattr(w, side).remat_compute or 0) / 1e6 for w in report.windows]
        if evictions:
            top.stairs(evictions, edges, color=colour, lw=1.4, label=_label(run))
            bottom.stairs(compute, edges, color=colour, lw=1.4, label=_label(run))
    for ax in (top, bottom):
        ax.set_yscale("symlog", linthresh=10)
        ax.grid(alpha=0.3)
        o = report.onset
        if o is not None:
            ax.axvspan(o.op, o.regime_last_op + 1, color=ONSET_COLOUR, alpha=0.2, lw=0,
                       gid="regime", label=(f"slow regime, ops {o.op:,}-{o.regime_last_op:,}: "
                                            f"{o.regime_slow_evictions:,} evictions against "
                                            f"{o.regime_fast_evictions:,}" if ax is top else None))
            ax.axvline(o.op, color=ONSET_COLOUR, lw=1.5, gid="onset",
                       label=f"onset (op {o.op:,})" if ax is top else None)
        if report.divergence is not None:
            ax.axvline(report.divergence.op_id, color="black", lw=1, ls="--",
                       label=(f"streams part (op {report.divergence.op_id})"
                              if ax is top else None))
    top.set_ylabel(f"pressure evictions per {report.rule.window_ops} ops")
    bottom.set_ylabel(f"rematerialization ms per {report.rule.window_ops} ops")
    bottom.set_xlabel("op id")
    top.legend(loc="upper left", fontsize=8)
    slow = {"a": report.a, "b": report.b}.get(report.slow or "")
    fig.suptitle("Regime comparison" + (f": run {slow.label} is the slow regime" if slow else ""))
    fig.supxlabel("\n".join(textwrap.wrap(onset_rule(report.rule), 150)), fontsize=7,
                  ha="left", x=0.01)
    return fig
