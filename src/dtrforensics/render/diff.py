"""A diff of two executions (`analyses.diff.DiffReport`) as rich tables and panels."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from ..analyses.diff import DiffReport, Divergence, Failure, Rank, Side
from .labels import op_label, run_label, short_source
from .tables import FitPanel, FitTable
from .units import ScoreFormat, fmt_bytes, fmt_exact_bytes, score_format


def print_diff(report: DiffReport, out: Console,
               roles: tuple[str, str] = ("control", "test")) -> None:
    """Runs, shared prefix, first divergence and choice, aftermath, failures.
    `roles` name what runs a and b are (an intervention's diff: baseline and
    intervention)."""
    out.print(_runs_table(report, roles))
    out.print(_prefix_line(report))
    first, choice = report.first_divergence, report.first_divergent_choice
    # the same two entries are often both: one panel then says so
    both = first is not None and choice is not None and (first.a, first.b) == (choice.a, choice.b)
    if first is not None:
        title = "First divergence of the eviction streams" + (
            ", and first divergent choice" if both else "")
        out.print(_divergence_panel(title, first, report, choice if both else None))
    if choice is None:
        out.print(f"Every pressure decision agrees ({report.common_choices:,} in common).")
    elif not both:
        out.print(_divergence_panel("First divergent choice", choice, report))
    if report.divergent_entries:
        out.print(Text("From the divergence on: what each run frees, by module",
                       style="italic"))
        out.print(_divergent_table(report))
    if report.aftermath is not None:
        out.print(_aftermath_table(report))
    for failure in report.failures:
        out.print(_failure_panel(failure, report))


def _runs_table(r: DiffReport, roles: tuple[str, str]) -> FitTable:
    t = FitTable(title="Runs", title_justify="left")
    for col in ("", "run", "budget", "outcome", "pressure", "dead", "stream entries", "scores"):
        t.add_column(col, justify="right" if col in ("pressure", "dead", "stream entries")
                     else "left")
    for ref, role in ((r.a, f"a ({roles[0]})"), (r.b, f"b ({roles[1]})")):
        t.add_row(role, f"{ref.run_id}\n{run_label(ref.trace, ref.ratio, ref.budget, ref.policy)}", fmt_exact_bytes(ref.budget),
                  ref.outcome, f"{ref.evictions:,}", f"{ref.dead_frees:,}",
                  f"{ref.stream_entries:,}", ref.scores)
    return t


def _prefix_line(r: DiffReport) -> Text:
    if r.first_divergence is None:
        return Text(f"The eviction streams are identical ({r.common_prefix:,} entries).",
                    style="bold green")
    return Text(f"The eviction streams share their first {r.common_prefix:,} entries "
                f"(same storage, same kind); entry {r.common_prefix + 1:,} differs.",
                style="bold")


def _entry(side: Side) -> str:
    if side.kind is None:
        return "(stream ended)"
    what = "pressure victim" if side.kind == "pressure" else "dead free"
    text = f"{what} {side.victim}"
    if side.tensor:
        text += f" ({side.tensor}, {fmt_bytes(side.bytes)})"
    return text


def _rank(rank: Rank | None, fmt_score: ScoreFormat) -> str:
    if rank is None:
        return "-"
    if rank.decision is None:
        return f"run {rank.run}: no decision"
    where = f"run {rank.run} decision {rank.decision}"
    if rank.in_pool is None:
        return f"{where}: unknown (no candidate scores)"
    if not rank.in_pool:
        return f"{where}: not a candidate"
    total = f"/{rank.candidates}" if rank.candidates else ""
    return f"{where}: rank {rank.rank}{total}, score {fmt_score(rank.score)}"


def _divergence_panel(title: str, d: Divergence, r: DiffReport,
                      also: Divergence | None = None) -> Panel:
    """The two runs' entries at a divergence; `also`: the first divergent choice
    when it is the same two entries (its decision and cause join the panel)."""
    t = FitTable(show_header=True, box=None, padding=(0, 2))
    fmt = score_format(x for side in (d.a, d.b) for x in (
        side.score, side.runner_up_score,
        *(r.score for r in (side.rank_in_a, side.rank_in_b) if r is not None)))
    t.add_column("", style="bold")
    t.add_column("a")
    t.add_column("b")
    rows = [
        ("entry", _entry(d.a), _entry(d.b)),
        *_where_rows(d),
        ("at", op_label(d.a.op_id, d.a.op_name), op_label(d.b.op_id, d.b.op_name)),
        ("stream position", _opt(d.a.stream_position), _opt(d.b.stream_position)),
        ("decision", _opt(d.a.decision), _opt(d.b.decision)),
        ("score", fmt(d.a.score), fmt(d.b.score)),
        ("runner-up", _runner(d.a, fmt), _runner(d.b, fmt)),
        ("rank in a", _rank(d.a.rank_in_a, fmt), _rank(d.b.rank_in_a, fmt)),
        ("rank in b", _rank(d.a.rank_in_b, fmt), _rank(d.b.rank_in_b, fmt)),
        ("clock", _opt(d.a.clock), _opt(d.b.clock)),
        ("depth", _opt(d.a.depth), _opt(d.b.depth)),
        ("allocation", _alloc(d.a), _alloc(d.b)),
        ("memory", fmt_exact_bytes(d.a.memory), fmt_exact_bytes(d.b.memory)),
        ("budget", fmt_exact_bytes(d.a.budget), fmt_exact_bytes(d.b.budget)),
        ("short at check start", _shortfall(d.a.shortfall), _shortfall(d.b.shortfall)),
        ("pool", _pool(d.a), _pool(d.b)),
    ]
    for row in rows:
        t.add_row(*row)
    where = f"position {d.position:,}" if d.decision is None else f"decision {d.decision:,}"
    if also is not None:
        where += f", decision {also.decision:,}"
    head = Text(f"{where}, {op_label(d.op_id, d.op_name)}", style="bold")
    cause = Text(f"cause: {d.explanation}", style="yellow")
    if also is not None and also.explanation != d.explanation:
        cause.append(f"\nas a choice: {also.explanation}")
    return FitPanel(Group(head, t, cause), title=title, title_align="left", expand=False)


def _where_rows(d: Divergence) -> list[tuple[str, str, str]]:
    """The victims' modules and source lines, when the log says (a where-file)."""
    rows = []
    if d.a.module or d.b.module:
        rows.append(("module", d.a.module or "-", d.b.module or "-"))
    if d.a.source or d.b.source:
        rows.append(("source", short_source(d.a.source) or "-", short_source(d.b.source) or "-"))
    return rows


def _divergent_table(r: DiffReport) -> FitTable:
    """Each run's first entries from the divergence on, with their modules."""
    t = FitTable(box=None, padding=(0, 1, 0, 0))
    for col in ("run", "entry", "frees", "module"):
        t.add_column(col, justify="right" if col == "entry" else "left")
    for e in r.divergent_entries:
        t.add_row(e.run, f"{e.position:,}",
                  f"{'victim' if e.kind == 'pressure' else 'dead'} {e.storage} "
                  f"({fmt_bytes(e.bytes)})",
                  (e.module or "-") + (f" ({e.phase})" if e.phase else ""))
    return t


def _opt(x) -> str:
    return "-" if x is None else (f"{x:,}" if isinstance(x, int) else str(x))


def _runner(side: Side, fmt_score: ScoreFormat) -> str:
    if side.runner_up is None:
        return "-"
    return f"{side.runner_up} ({fmt_score(side.runner_up_score)})"


def _alloc(side: Side) -> str:
    if side.request is None:
        return "-"
    return f"{side.alloc_tensor} ({fmt_exact_bytes(side.request)})"


def _shortfall(x: int | None) -> str:
    if x is None:
        return "-"
    return f"{x:,} B short" if x > 0 else f"fits, {-x:,} B to spare"


def _pool(side: Side) -> str:
    if side.pool_size is None:
        return "-"
    return f"{side.pool_size:,} storages, {fmt_bytes(side.pool_bytes)}"


def _aftermath_table(r: DiffReport) -> FitTable:
    am = r.aftermath
    if am.reconverge_op is not None:
        caption = f"The histories re-converge from {op_label(am.reconverge_op)} to the end."
    else:
        caption = ("The histories never re-converge"
                   + (f" (last difference at {op_label(am.last_difference)})."
                      if am.last_difference is not None else "."))
    t = FitTable(title=f"Aftermath from {op_label(am.from_op)}, {am.window_ops:,} ops per window "
                    "(a / b)", title_justify="left", caption=caption, caption_justify="left")
    for col in ("ops", "evictions", "dead frees", "remats", "pinned max", "memory max", "depth",
                "same"):
        t.add_column(col, justify="left" if col in ("ops", "same") else "right")
    for w in am.windows:
        t.add_row(f"{w.first_op}..{w.last_op}", _pair(w, "evictions"), _pair(w, "dead_frees"),
                  _pair(w, "remats"), _pair(w, "pinned_max", fmt_bytes),
                  _pair(w, "memory_max", fmt_bytes), _pair(w, "depth_max"),
                  "yes" if w.same_stream else "no")
    return t


def _num(x) -> str:
    return f"{x:,}"


def _pair(window, field, fmt=_num) -> str:
    return f"{_ended(window.a, field, fmt)} / {_ended(window.b, field, fmt)}"


def _ended(stats, field, fmt) -> str:
    value = getattr(stats, field)
    if stats.ops == 0:
        return "ended"
    return "-" if value is None else fmt(value)


def _failure_panel(f: Failure, r: DiffReport) -> Panel:
    other = "a" if f.run == "b" else "b"
    lines = [Text(
        f"Run {f.run} failed at {op_label(f.op_id, f.op_name)} allocating {f.tensor} "
        f"({fmt_exact_bytes(f.request)}) at depth {f.depth}, with {fmt_exact_bytes(f.pinned)} "
        f"pinned (short by {f.shortfall:,} B of a {f.budget:,} B budget once nothing was left "
        "to evict).", style="bold red")]
    lines.append(Text(
        f"The failing operator needed {f.needed_missing:,} storages (its arguments and the "
        f"frontier's) that were not resident when it began; run {other} kept "
        f"{len(f.kept_by_other):,} of them resident."))
    c = f.culprit
    if c is not None:
        s = c.storage
        before = f.op_id - s.evicted_op
        text = (f"Earliest: storage {s.storage} ({s.tensor}, {fmt_exact_bytes(s.bytes)}, made by "
                f"{op_label(s.produced_by_op)}), evicted at {op_label(s.evicted_op)}, "
                f"{before} op{'s' if before != 1 else ''} before the failure")
        if s.evicted_decision is not None:
            fmt = score_format((c.score, c.runner_up_score))
            text += (f", by decision {s.evicted_decision} (score {fmt(c.score)}, runner-up "
                     f"{c.runner_up} at {fmt(c.runner_up_score)}) making room for "
                     f"{c.alloc_tensor}")
        text += (f". Run {other} kept it resident from {op_label(s.other_from_op)} to "
                 + (op_label(s.other_to_op) if s.other_to_op is not None else "the end")
                 + f" and made {c.other_evictions_at_op} eviction"
                 + ("s" if c.other_evictions_at_op != 1 else "") + f" at {op_label(s.evicted_op)}")
        if c.other_victim is not None:
            text += (f"; its decision {s.evicted_decision} evicted {c.other_victim} at "
                     f"{op_label(c.other_victim_op)}, making room for {c.other_victim_alloc}")
        lines.append(Text(text + "."))
        if len(f.kept_by_other) > 1:
            rest = ", ".join(f"{n.storage} (op {n.evicted_op})" for n in f.kept_by_other[1:8])
            more = len(f.kept_by_other) - 8
            lines.append(Text(f"Also kept by run {other}: {rest}"
                              + (f" and {more} more" if more > 0 else "")))
    return FitPanel(Group(*lines), title=f"Failure of run {f.run}", title_align="left",
                 expand=False)
