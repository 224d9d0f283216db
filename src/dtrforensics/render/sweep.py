"""A sweep as text: live progress on stderr while it runs, then its holes report
(`sweep.holes.HolesReport`) as one panel per policy."""

from __future__ import annotations

from rich.console import Console, Group
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from ..sweep.holes import ExactView, HolesReport, PolicyHoles
from .tables import FitPanel, FitTable
from .units import RatioFormat, fmt_exact_bytes, fmt_overhead, ratio_format

MAX_ROWS = 40


def holes_view(report: HolesReport) -> list:
    """A header line, then one panel per policy."""
    trace = report.trace
    lo, hi = report.range_bytes
    head = (f"[bold]{trace.name}[/] peak {fmt_exact_bytes(trace.peak)}; range ratio "
            f"{report.params.ratio_from:g}-{report.params.ratio_to:g} = bytes {lo:,}-{hi:,}; "
            f"sweep {report.status}")
    return [head] + [_policy_panel(report, p) for p in report.policies]


def _ov(x: float | None) -> str:
    return fmt_overhead(x, 3)


def _shown_ratios(p: PolicyHoles) -> RatioFormat:
    """One format for every sampled ratio a policy's panel shows, so neighbours read apart."""
    shown = [p.first_success.sample, *p.failures_above, *p.unresolved]
    shown += [s for r in p.failure_regions for s in (r.lo, r.hi, r.below, r.above)]
    shown += [s for e in p.edge_brackets for s in (e.ok, e.fail)]
    shown += [s for w in p.regime_switches for s in (w.lo, w.hi)]
    return ratio_format([s.ratio for s in shown if s is not None]
                        + [d.ratio for d in p.disagreements])


def _policy_panel(report: HolesReport, p: PolicyHoles) -> FitPanel:
    peak = report.trace.peak
    parts: list = []
    fmt_ratio = _shown_ratios(p)
    fs = p.first_success
    first = (f"ratio {fmt_ratio(fs.sample.ratio)} ({fs.sample.budget:,} B, overhead {_ov(fs.sample.overhead)})"
             if fs.sample else "[red]none: no sample completes[/]")
    sampled = "first sampled success" if p.exact is not None else "first success"
    parts.append(f"samples {fs.samples}; {sampled} {first}; {fs.failing_below} failing below it")
    if p.failures_above:
        shown = ", ".join(fmt_ratio(s.ratio, s.budget) for s in p.failures_above[:12])
        more = f" (+{len(p.failures_above) - 12})" if len(p.failures_above) > 12 else ""
        parts.append(f"[red]{len(p.failures_above)} failing samples above the first success:[/] "
                     f"{shown}{more}")
    if p.failure_regions:
        t = FitTable(title="failure regions (samples)", title_justify="left")
        for c in ("#", "failing ratios", "failing bytes", "samples", "outcome",
                  "last ok below", "first ok above", "timeouts"):
            t.add_column(c)
        for i, r in enumerate(p.failure_regions, 1):
            t.add_row(str(i), f"{fmt_ratio(r.lo.ratio, r.lo.budget)} - {fmt_ratio(r.hi.ratio, r.hi.budget)}",
                      f"{r.lo.budget:,} - {r.hi.budget:,}", str(r.failing), r.outcomes,
                      f"{fmt_ratio(r.below.ratio, r.below.budget)} ({_ov(r.below.overhead)})",
                      f"{fmt_ratio(r.above.ratio, r.above.budget)} ({_ov(r.above.overhead)})", str(r.timeouts_inside))
        parts.append(t)
    else:
        parts.append("[green]no sample-supported failure region[/]")
    if p.edge_brackets:
        t = FitTable(title="edge brackets", title_justify="left")
        for c in ("edge", "last ok / first ok", "failing sample", "bracket width"):
            t.add_column(c)
        for e in p.edge_brackets[:MAX_ROWS]:
            t.add_row(e.direction, f"{fmt_ratio(e.ok.ratio)} ({e.ok.budget:,} B)",
                      f"{fmt_ratio(e.fail.ratio)} ({e.fail.budget:,} B, {e.fail.outcome})",
                      f"{e.width_bytes:,} B")
        parts.append(t)
    if p.regime_switches:
        t = FitTable(title=f"regime switches (overhead jump > {report.threshold:.0%})",
                  title_justify="left")
        for c in ("from ratio", "to ratio", "overheads", "factor"):
            t.add_column(c)
        for s in p.regime_switches[:MAX_ROWS]:
            t.add_row(fmt_ratio(s.lo.ratio, s.lo.budget), fmt_ratio(s.hi.ratio, s.hi.budget),
                      f"{_ov(s.lo.overhead)} -> {_ov(s.hi.overhead)}", f"{s.factor:.2f} {s.direction}")
        parts.append(t)
    if p.unresolved:
        parts.append("[magenta]unresolved (timeout): "
                     + ", ".join(f"{fmt_ratio(u.ratio, u.budget)}" + (f" rep {u.rep}" if u.rep else "")
                                 for u in p.unresolved[:20]) + "[/]")
    if p.exact is not None:
        parts += _exact_parts(p.exact, peak, report.range_bytes[0])
    if p.reruns or p.disagreements:
        if p.disagreements:
            t = FitTable(title="[red]reruns that disagree[/]", title_justify="left")
            for c in ("ratio", "budget", "rep", "differs in", "outcomes"):
                t.add_column(c)
            for d in p.disagreements:
                t.add_row(fmt_ratio(d.ratio), f"{d.budget:,}", str(d.rep), ", ".join(d.differing),
                          f"{d.outcome_run} / {d.outcome_rerun}")
            parts.append(t)
        else:
            parts.append(f"[green]{p.reruns} reruns in fresh processes, all identical[/]")
    return FitPanel(Group(*parts), title=f"{report.trace.name} · {p.policy}", expand=False)


def _exact_parts(x: ExactView, peak: int, range_lo: int) -> list:
    first = x.first_success(range_lo)
    fmt_ratio = ratio_format([e / peak for r in x.failure_regions for e in (r.lo, r.hi)]
                             + ([first / peak] if first is not None else []))
    parts: list = [f"exact: {x.coverage:.4%} of the range certified "
                   f"({x.certified_bytes:,} of {x.range_bytes:,} bytes), "
                   f"{len(x.partition)} distinct executions, {len(x.merged)} runs of equal outcome",
                   "first certified success: " + ("none yet" if first is None else
                                                  f"{first:,} B (ratio {fmt_ratio(first / peak)})")]
    if x.failure_regions:
        t = FitTable(title="failing budgets (exact)", title_justify="left")
        for c in ("first byte", "last byte", "width", "ratios", "executions", "edges", "kind"):
            t.add_column(c)
        for r in x.failure_regions:
            edges = ("exact" if r.lo_exact and r.hi_exact else
                     f"{'exact' if r.lo_exact else 'open'}/{'exact' if r.hi_exact else 'open'}")
            kind = "hole" if r.hole else ("below first success" if r.below_status is None
                                          else "top of range" if r.above_status is None else "-")
            t.add_row(f"{r.lo:,}", f"{r.hi:,}", f"{r.hi - r.lo + 1:,}",
                      f"{fmt_ratio(r.lo / peak)} - {fmt_ratio(r.hi / peak)}", str(r.intervals), edges, kind)
        parts.append(t)
    t = FitTable(title="partition (adjacent equal outcomes merged)", title_justify="left")
    for c in ("from byte", "to byte", "width", "outcome", "executions", "min overhead"):
        t.add_column(c)
    for m in x.merged[:MAX_ROWS]:
        t.add_row(f"{m.lo:,}", f"{m.hi:,}", f"{m.hi - m.lo + 1:,}", m.outcome, str(m.intervals),
                  _ov(m.overhead))
    if len(x.merged) > MAX_ROWS:
        t.add_row("...", f"{len(x.merged) - MAX_ROWS} more (--json)", "", "", "", "")
    parts.append(t)
    if x.gaps:
        by_reason: dict[str, list] = {}
        for g in x.gaps:
            by_reason.setdefault(g.reason, []).append(g)
        parts.append("[yellow]uncertified: " + "; ".join(
            f"{len(gs)} gaps {reason} ({sum(g.width for g in gs):,} bytes)"
            for reason, gs in by_reason.items()) + "[/]")
    if x.overlaps:
        parts.append(f"[red]{len(x.overlaps)} overlapping certificates[/]")
    return parts


class SweepProgress:
    """Progress bar with ETA on stderr: one task per stage, coverage in exact mode."""

    def __init__(self, console: Console, enabled: bool):
        self.enabled = enabled
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description:<14}"), BarColumn(),
            MofNCompleteColumn(), TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False,
            disable=not enabled)
        self.task = None
        self.counts = {"ok": 0, "fail": 0, "unresolved": 0}
        self.exact = False

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def stage(self, name: str, todo: int, skipped: int) -> None:
        self.counts = {"ok": 0, "fail": 0, "unresolved": 0}
        self.exact = name == "exact"
        note = f"{skipped} stored" if skipped else ""
        total = 1000 if self.exact else todo
        self.task = self.progress.add_task(name, total=total, note=note)

    def grow(self, n: int) -> None:
        if self.task is not None and not self.exact:
            task = self.progress.tasks[-1]
            self.progress.update(self.task, total=(task.total or 0) + n)

    def finished(self, row: dict) -> None:
        self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        c = self.counts
        note = f"ok {c['ok']} fail {c['fail']}" + (f" timeout {c['unresolved']}"
                                                    if c["unresolved"] else "")
        if self.exact:
            self.progress.update(self.task, note=f"{sum(c.values())} runs, " + note)
        else:
            self.progress.update(self.task, advance=1, note=note)

    def coverage(self, fractions: dict[str, float]) -> None:
        if self.task is not None and fractions:
            mean = sum(fractions.values()) / len(fractions)
            self.progress.update(self.task, completed=int(mean * 1000),
                                 description=f"exact {mean:6.1%}")
