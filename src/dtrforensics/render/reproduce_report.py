"""The reproduction's report: a markdown page with the verdict table and the figures.

Rendering only: every number and every curve comes from the `Reproduction`
(its claims and the `material` the protocol kept). Figures use matplotlib's
object API and are written as PNG beside `report.md`.
"""

from __future__ import annotations

from pathlib import Path

from ..concepts import completes
from ..fsutil import atomic_path
from ..reproduce.protocol import Reproduction

FIGURE_DPI = 110
MIB = float(1 << 20)     # the one unit convention (render/units.py)


def _figure(width: float = 11, height: float = 5.2):
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), layout="constrained")


def sweep_figure(report):
    from ..sweep.holes import load_points
    from .sweep_plot import draw
    return draw(report, load_points(report.path))


def overhead_figure(report, title: str):
    """Overhead against budget ratio for every policy of a grid sweep: each sample a
    marker joined by steps (no line zigzags between regimes), on a log axis so two
    regimes 6x apart both read; failures on a strip of their own below, a row per
    policy, so no failure is given an overhead."""
    from ..sweep.holes import load_points
    from .sweep_plot import POLICY_COLOURS, POLICY_MARKERS
    points = load_points(report.path)
    fig = _figure(11, 5.2 + 0.3 * len(points))
    ax, strip = fig.subplots(2, 1, sharex=True, height_ratios=(3, 0.35 + 0.25 * len(points)))
    for i, (policy, pts) in enumerate(points.items()):
        ok = [p for p in pts if completes(p["outcome"]) and p["overhead"]]
        colour = POLICY_COLOURS[i % len(POLICY_COLOURS)]
        for run in _between_failures(pts):
            ax.plot([p["ratio"] for p in run], [p["overhead"] for p in run], color=colour,
                    drawstyle="steps-mid", lw=0.8, alpha=0.6)
        ax.plot([p["ratio"] for p in ok], [p["overhead"] for p in ok],
                POLICY_MARKERS[i % len(POLICY_MARKERS)], color=colour, ms=4,
                mfc=colour if i == 0 else "none", label=policy)
        failed = [p["ratio"] for p in pts if not completes(p["outcome"])]
        strip.plot(failed, [i] * len(failed), "x", color=colour, ls="none", gid="fails")
    ax.set_yscale("log")
    strip.set_yticks(range(len(points)), list(points), fontsize=7)
    strip.set_ylim(len(points) - 0.5, -0.5)
    strip.set_ylabel("fails", rotation=0, ha="right", va="center")
    strip.grid(True, axis="x", alpha=0.3)
    strip.set_xlabel(f"budget ratio (x peak {report.trace.peak:,} bytes)")
    ax.set_ylabel("overhead (x model compute, log scale)\ncompleting runs only")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper right")
    return fig


def _between_failures(pts: list[dict]) -> list[list[dict]]:
    """The completing samples in budget order, split wherever a sample fails (a
    line never bridges a failure)."""
    runs: list[list[dict]] = [[]]
    for p in sorted(pts, key=lambda p: p["budget"]):
        if completes(p["outcome"]) and p["overhead"]:
            runs[-1].append(p)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def frontier_figure(oom):
    """The pinned frontier of an OOM: bytes locked by each level of the chain of
    in-progress materializations, accumulated from the root down, against the budget."""
    fig = _figure(11, 4.8)
    ax = fig.subplots()
    depths = [lv.depth for lv in oom.frontier]
    ax.fill_between(depths, [lv.cumulative_bytes / MIB for lv in oom.frontier], step="post",
                    alpha=0.35, color="#9467bd", label="locked by the chain (cumulative)")
    ax.axhline(oom.pinned / MIB, color="#9467bd", lw=1, ls=":",
               label=f"pinned at the failure {oom.pinned:,} B (the chain and storages pinned for good)")
    ax.axhline(oom.budget / MIB, color="black", lw=1, label=f"budget {oom.budget:,} B")
    ax.axhline((oom.memory + oom.request) / MIB, color="#d62728", lw=1, ls="--",
               label=f"memory + request {oom.memory + oom.request:,} B")
    ax.set_xlabel(f"level of the chain of materializations (1 = the top-level op's tensor, "
                  f"{oom.depth} = the failing allocation)")
    ax.set_ylabel("MiB")
    ax.set_title(f"{oom.trace} at {oom.budget:,} B: the pinned frontier of the OOM at op "
                 f"{oom.paper_op} (paper numbering), depth {oom.depth}")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def retention_figure(material: dict, budget: int | None = None):
    """Pinned bytes per op for the failing run, the run with one storage retained,
    and the control (same code path, nothing retained)."""
    fig = _figure()
    ax = fig.subplots()
    styles = {"baseline": ("#d62728", "-", 2.5), "intervention": ("#2ca02c", "-", 1.2),
              "control": ("black", ":", 1.2)}
    for label, rows in material["timelines"].items():
        colour, ls, lw = styles[label]
        ops = [r["op_id"] + 1 for r in rows if r["pinned_max"] is not None]
        pinned = [r["pinned_max"] / MIB for r in rows if r["pinned_max"] is not None]
        ax.plot(ops, pinned, ls=ls, lw=lw, color=colour, marker=".", ms=2,
                label=f"{label} ({len(rows)} ops started)")
    if budget is not None:
        ax.axhline(budget / MIB, color="grey", lw=1, label="budget")
    ax.set_xlabel("operator (paper numbering)")
    ax.set_ylabel("most pinned MiB at an allocation check")
    ax.set_title(f"Retaining storage {material['storage']}: the failure disappears; "
                 "the control retraces the failing run")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def _figures(rep: Reproduction) -> list[tuple[str, str, object]]:
    """(file stem, caption, figure) for every figure the material allows."""
    from .regime_plot import draw as regime_draw
    m = rep.material
    out = []
    if "lstm_grid" in m:
        out.append(("lstm-overhead", "LSTM: overhead against budget ratio, DTR and its "
                    "ablations; DTR alternates between two regimes",
                    overhead_figure(m["lstm_grid"], "LSTM, budget step 0.001: the overhead of "
                                    "DTR and of its three ablations")))
    if "resnet32_map" in m:
        out.append(("resnet32-feasibility", "ResNet-32: the certified feasibility map with "
                    "its hole", sweep_figure(m["resnet32_map"])))
    if "resnet32_oom" in m:
        out.append(("resnet32-frontier", "ResNet-32 at 0.104: the pinned frontier of the OOM",
                    frontier_figure(m["resnet32_oom"])))
    if "resnet32_retention" in m:
        budget = m["resnet32_oom"].budget if "resnet32_oom" in m else None
        out.append(("resnet32-retention", "ResNet-32 at 0.104: the retention and its control",
                    retention_figure(m["resnet32_retention"], budget)))
    if "inceptionv4_regime" in m:
        out.append(("inceptionv4-divergence", "InceptionV4, 0.2343 against 0.235: evictions "
                    "per op window and where the streams part",
                    regime_draw(m["inceptionv4_regime"])))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def write_report(rep: Reproduction, out_dir: Path, *, command: str,
                 wall_seconds: float) -> Path:
    """Write `report.md` and its PNG figures into `out_dir`; returns the report's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = rep.counts()
    lines = [
        "# Reproduction of the DTR regime-switching and feasibility-hole studies",
        "",
        f"Command: `{command}`  ",
        f"Wall time: {wall_seconds:,.0f} s ({'quick subset' if rep.quick else 'full protocol'}; "
        "recordings and sweeps already in the working folder are reused, not rerun)  ",
        "Verdicts: " + ", ".join(f"{v} {n}" for v, n in counts.items()),
        "",
        "Every value under *ours* is computed by dtrforensics' own analyses on the public "
        "traces; the studies number operators from 1 and take budgets as "
        "floor(ratio x peak).",
        "",
        "| claim | published | ours | verdict |",
        "|---|---|---|---|",
    ]
    lines += [f"| {_cell(c.text)} | {_cell(c.published)} | {_cell(c.ours)} | {c.verdict} |"
              for c in rep.claims]
    noted = [c for c in rep.claims if c.note]
    if noted:
        lines += ["", "## Notes", ""] + [f"- **{c.id}** ({c.verdict}): {_cell(c.note)}"
                                         for c in noted]
    figures = _figures(rep)
    if figures:
        lines += ["", "## Figures", ""]
        for stem, caption, fig in figures:
            with atomic_path(out_dir / f"{stem}.png") as tmp:
                fig.savefig(tmp, dpi=FIGURE_DPI, format="png")
            lines += [f"### {caption}", "", f"![{caption}]({stem}.png)", ""]
    path = out_dir / "report.md"
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
