"""A sweep as text: live progress on stderr while it runs, then its holes report
(`sweep.holes.HolesReport`) as one panel per policy."""

from __future__ import annotations

import shlex

from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from ..concepts import completes
from ..sweep.holes import Certainty, ExactRegion, ExactView, HolesReport, PolicyHoles
from ..sweep.store import SweepParams
from .console import esc, styled
from .tables import FitPanel, FitTable
from .units import RatioFormat, fmt_count, fmt_exact_bytes, fmt_overhead, fmt_ratio, ratio_format
from .wrapping import kept_progress, shell_wrap

MAX_ROWS = 40
GAP_REASONS = {"run-limit": "the walk has not reached",
               "timeout": "holding timed-out runs",
               "below-resolution": "narrower than --resolution"}


def ended_text(report: HolesReport) -> str:
    """What ended the sweep, in words (`HolesReport.ended`)."""
    params = report.params
    return {
        "range-certified": "every budget of the range certified",
        "run-limit": f"the walk stopped at its run limit, --max-runs {params.max_runs:,} "
                     "per policy",
        "time-limit": "stopped at its time limit (--max-seconds)",
        "samples-run": "every sample run (budgets between samples are not certified)",
        "gaps-open": "the walk ran to its end; the gaps left hold timed-out runs or are "
                     f"narrower than --resolution {params.resolution:,} B",
        "interrupted": "interrupted (an error or Ctrl-C)",
        "killed": "killed (its process is gone)",
        "running": "still running",
    }[report.ended]


def holes_view(report: HolesReport) -> list:
    """A header (the trace, the range, what ended the sweep), then one panel per policy."""
    trace = report.trace
    lo, hi = report.range_bytes
    head = Text.assemble((trace.name, "bold"), f": peak {fmt_exact_bytes(trace.peak)}; range "
                         f"{report.params.ratio_from:g}-{report.params.ratio_to:g} of peak = "
                         f"{lo:,}-{hi:,} B\nsweep ended: {ended_text(report)}")
    return [head] + [_policy_panel(report, p) for p in report.policies]


def print_holes(console: Console, report: HolesReport) -> None:
    """The report, then what to run to finish it: each command on one line,
    never wrapped (a terminal folds it; a copy is whole)."""
    console.print(*holes_view(report))
    print_commands(console, finish_lines(report))


def print_commands(console: Console, lines: list[str]) -> None:
    """Each `what: dtrf ...` line at the console's width, the command continued
    with ` \\` (pasted into a shell, the lines run it whole)."""
    for line in lines:
        head, sep, command = line.partition(": dtrf ")
        parts = shell_wrap(head + ":", "dtrf " + command, console.width) if sep else [line]
        for part in parts:
            console.print(Text(part), soft_wrap=True)


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


def _at(budget: int, peak: int) -> str:
    return f"{budget:,} B (ratio {fmt_ratio(budget / peak)})"


def first_success_line(c: Certainty, peak: int) -> str:
    """The first success as far as the certificates settle it, never more."""
    f = c.first_success
    if f.budget is None:
        if f.exact:
            return "first success: none, every budget of the range is certified to fail"
        return (f"first success: none certified yet; {f.uncertified_below_bytes:,} B of the "
                f"range uncertified (from {f.lowest_possible:,} B) may hold it")
    if f.below_range:
        return (f"first success: at or below the range's lowest budget {_at(f.budget, peak)}, "
                "which completes (a lower --from finds it)")
    if f.exact:
        return (f"first success: {_at(f.budget, peak)}, exact (all budgets below it "
                f"certified to fail), overhead {_ov(f.overhead)}")
    return (f"first success: between {_at(f.lowest_possible, peak)} and {_at(f.budget, peak)} "
            f"(certified to complete, overhead {_ov(f.overhead)}); "
            f"{f.uncertified_below_bytes:,} B below it uncertified")


def holes_line(c: Certainty) -> str:
    """How many holes the certificates show, and whether uncertified budgets could
    hold more."""
    holes = c.holes
    if c.first_success.budget is None:
        return "holes: none can be told (no certified success)"
    found = "no hole" if holes == 0 else fmt_count(holes, "hole")
    if c.complete:
        return f"{found}: every budget of the range certified"
    if c.uncertified_above_bytes == 0:
        return (f"{found} above the first certified success (every budget above it certified); "
                f"{c.uncertified_bytes:,} B below it uncertified")
    return (f"{found} among the certified budgets; {c.uncertified_above_bytes:,} B above the "
            "first certified success are uncertified and may hold " + ("one" if not holes else "more"))


def sweep_command(source: str, params: SweepParams, path, *, max_runs: int | None = None,
                  exact: bool | None = None, command: str = "sweep") -> str:
    """The `dtrf` command that resumes (extends) the sweep in `path` as given."""
    p = params
    exact = p.exact if exact is None else exact
    args = ["dtrf", command, source, "--from", repr(p.ratio_from), "--to", repr(p.ratio_to)]
    default = SweepParams(p.ratio_from, p.ratio_to)
    if p.step is not None:
        args += ["--step", repr(p.step)]
    if p.policies != default.policies or command != "sweep":
        args += ["--policy", ",".join(p.policies)]
    for name in ("interior", "seed", "min_step", "overhead_jump", "resolution", "repeats",
                 "timeout"):
        value = getattr(p, name)
        if value != getattr(default, name):
            args += [f"--{name.replace('_', '-')}", repr(value)]
    if p.refine:
        args.append("--refine")
    if exact:
        args.append("--exact")
        args += ["--max-runs", str(max_runs or p.max_runs)]
    args += ["--out", str(path)]
    return " ".join(shlex.quote(a) for a in args)


def next_max_runs(report: HolesReport) -> int:
    """The run limit to finish with: twice the last when the walk ran to its limit
    (how many more it needs is not known before they run), the same when the
    sweep was cut short (stopped for time, interrupted, killed)."""
    limit = report.params.max_runs
    return 2 * limit if report.ended == "run-limit" else limit


def finish_lines(report: HolesReport, command: str = "sweep") -> list[str]:
    """What to run to settle what the certificates leave open (nothing if complete)."""
    open_ = [p for p in report.policies if p.certain is not None and not p.certain.complete]
    if not open_:
        return []
    source, params = report.trace.source, report.params
    if not params.exact:
        return ["to certify every budget (the samples are kept): "
                + sweep_command(source, params, report.path, exact=True, command=command)]
    reasons = {g.reason for p in open_ for g in p.certain.gaps}
    lines = []
    if "run-limit" in reasons:
        why = (f"the walk stopped at --max-runs {params.max_runs:,}"
               if report.ended == "run-limit" else ended_text(report))
        lines.append(f"to finish ({why}; nothing is run again): " + sweep_command(
            source, params, report.path, max_runs=next_max_runs(report), command=command))
        lines.append("(how many runs are left is known only as they run: repeat it until "
                     "it says complete)")
    if "timeout" in reasons:
        lines.append("gaps holding timed-out runs stay open: a longer --timeout is another "
                     "sweep (another --out)")
    if "below-resolution" in reasons:
        lines.append(f"gaps narrower than --resolution {params.resolution:,} B stay open "
                     "(--resolution 1 certifies them)")
    return lines


def _policy_panel(report: HolesReport, p: PolicyHoles) -> FitPanel:
    peak = report.trace.peak
    parts: list = []
    fmt_ratio = _shown_ratios(p)
    fs = p.first_success
    first = (f"ratio {fmt_ratio(fs.sample.ratio)} ({fs.sample.budget:,} B, overhead {_ov(fs.sample.overhead)})"
             if fs.sample else "[red]none: no sample completes[/]")
    parts.append(styled(f"samples {fs.samples:,}; first sampled success {first}; "
                        f"{fs.failing_below:,} failing below it"))
    if p.failures_above:
        shown = ", ".join(fmt_ratio(s.ratio, s.budget) for s in p.failures_above[:12])
        more = (f" and {len(p.failures_above) - 12:,} more (--json lists every one)"
                if len(p.failures_above) > 12 else "")
        parts.append(styled(f"[red]{len(p.failures_above):,} failing samples above the first "
                            f"success:[/] {shown}{more}"))
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
        failing = fs.failing_below + len(p.failures_above)
        parts.append("no failing sample" if not failing else
                     f"{fmt_count(failing, 'failing sample')}, none with a completing sample "
                     "on both sides (no hole among the samples)")
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
        parts.append(styled("[magenta]unresolved (timeout): "
                            + ", ".join(f"{fmt_ratio(u.ratio, u.budget)}"
                                        + (f" rep {u.rep}" if u.rep else "")
                                        for u in p.unresolved[:20]) + "[/]"))
    if p.exact is not None:
        parts += _exact_parts(p.exact, peak)
    if p.certain is not None:
        parts.append(Text(first_success_line(p.certain, peak)))
        parts.append(Text(holes_line(p.certain)))
    if p.reruns or p.disagreements:
        if p.disagreements:
            t = FitTable(title=styled("[red]reruns that disagree[/]"), title_justify="left")
            for c in ("ratio", "budget", "rep", "differs in", "outcomes"):
                t.add_column(c)
            for d in p.disagreements:
                t.add_row(fmt_ratio(d.ratio), f"{d.budget:,}", str(d.rep), ", ".join(d.differing),
                          f"{d.outcome_run} / {d.outcome_rerun}")
            parts.append(t)
        else:
            parts.append(styled(f"[green]{p.reruns} reruns in fresh processes, all identical[/]"))
    return FitPanel(Group(*parts), title=f"{report.trace.name} · {p.policy}", expand=False)


def region_kind(r: ExactRegion) -> str:
    if r.hole:
        return "hole"
    if r.below_status is None:
        return "below first certified success"
    return "top of range" if r.above_status is None else "-"


def _exact_parts(x: ExactView, peak: int) -> list:
    parts: list = [f"exact: {x.coverage:.4%} of the range certified "
                   f"({x.certified_bytes:,} of {x.range_bytes:,} bytes), "
                   f"{len(x.partition)} distinct executions, {len(x.merged)} stretches of one outcome"]
    fmt_ratio = ratio_format([e / peak for r in x.failure_regions for e in (r.lo, r.hi)])
    if x.failure_regions:
        t = FitTable(title="failing budgets (exact)", title_justify="left")
        for c in ("first byte", "last byte", "width", "ratios", "executions", "edges", "kind"):
            t.add_column(c)
        for r in x.failure_regions:
            edges = f"{r.lo_edge}/{r.hi_edge}"
            if r.gap_bytes:
                edges += f", {r.gap_bytes:,} B inside uncertified"
            t.add_row(f"{r.lo:,}", f"{r.hi:,}", f"{r.hi - r.lo + 1:,}",
                      f"{fmt_ratio(r.lo / peak)} - {fmt_ratio(r.hi / peak)}", str(r.intervals),
                      edges, region_kind(r))
        parts.append(t)
    t = FitTable(title="partition (adjacent equal outcomes merged)", title_justify="left")
    for c in ("from byte", "to byte", "width", "outcome", "executions", "min overhead"):
        t.add_column(c)
    for m in x.merged[:MAX_ROWS]:
        t.add_row(f"{m.lo:,}", f"{m.hi:,}", f"{m.hi - m.lo + 1:,}", m.outcome, str(m.intervals),
                  _ov(m.overhead) if completes(m.outcome) else "-")
    if len(x.merged) > MAX_ROWS:
        t.add_row("...", f"{len(x.merged) - MAX_ROWS} more (--json)", "", "", "", "")
    parts.append(t)
    if x.gaps:
        by_reason: dict[str, list] = {}
        for g in x.gaps:
            by_reason.setdefault(g.reason, []).append(g)
        parts.append(styled("[yellow]uncertified: " + "; ".join(
            f"{fmt_count(len(gs), 'gap')} {esc(GAP_REASONS.get(reason, reason))} "
            f"({sum(g.width for g in gs):,} bytes)" for reason, gs in by_reason.items()) + "[/]"))
    if x.overlaps:
        parts.append(styled(f"[red]{len(x.overlaps)} overlapping certificates[/]"))
    return parts


class SweepProgress:
    """Progress bar with ETA on stderr: one task per stage, coverage in exact mode."""

    def __init__(self, console: Console, enabled: bool):
        self.enabled = enabled
        self.progress = kept_progress(
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

    def estimated(self, estimate) -> None:
        """A long sweep says what it will cost before it spends it."""
        if estimate.long:
            self.progress.console.print(estimate_line(estimate), highlight=False,
                                        soft_wrap=True)

    def notice(self, text: str) -> None:
        """What the sweep waits for: one line, as it starts waiting."""
        self.progress.console.print(text, highlight=False, markup=False)

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


def duration(seconds: float) -> str:
    """A rough duration: '0.4 s', '40 s', '12 min', '3.5 h', '9.2 days'; a nonzero
    time never reads as zero ('under 0.1 s')."""
    if seconds <= 0:
        return "0 s"
    if seconds < 0.05:
        return "under 0.1 s"
    if seconds < 9.5:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


def cpu_time(seconds: float) -> str:
    """CPU time in words, in hours from an hour on: '12 min of CPU', '4,171 CPU-hours'
    (never in scientific notation)."""
    hours = seconds / 3600
    if hours < 1:
        return f"{duration(seconds)} of CPU"
    return f"{hours:,.1f} CPU-hours" if hours < 100 else f"{hours:,.0f} CPU-hours"


ESTIMATE_WIDTH = 80     # the estimate is wrapped to this many columns


def estimate_line(est, workers: tuple[int, ...] = (), prefix: str = "") -> str:
    """The estimate in words, after `prefix`: executions, CPU time, and about how
    long on the sweep's workers at the parallelism its calibration achieved (and
    on each of `workers`, with a core each), with what the estimate was
    calibrated from; wrapped at `ESTIMATE_WIDTH` columns."""
    import textwrap
    kind = "distinct executions" if est.exact else "runs"
    runs = ("" if round(est.runs) == round(est.executions) else
            f"; --max-runs stops this sweep after about {est.runs:,.0f} runs"
            if est.capped else f"; this sweep makes about {est.runs:,.0f} runs")
    ns = sorted(set(workers) - {est.workers})
    on = ", ".join([f"{duration(est.wall_seconds(n))} on {n} free worker{'s' * (n > 1)}"
                    for n in ns] + [f"{duration(est.wall_seconds())} on this sweep's "
                                    f"{est.workers} worker{'s' * (est.workers > 1)}"])
    text = (f"{prefix}estimate: about {est.executions:,.0f} {kind} in the range{runs}, "
            f"{cpu_time(est.cpu_seconds)}: about {on} "
            f"(calibrated from {est.sample_runs:,} runs in {duration(est.sample_seconds)}"
            + (f"; {est.cut} of its walks cut short for time: a rougher estimate" if est.cut else "")
            + ")")
    return textwrap.fill(text, ESTIMATE_WIDTH, subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False)
