"""The hindsight search on screen: the failure, the nearby completion, the changes
that complete the run, and what the search did not try."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..analyses.explain import Attempt, Explanation
from ..concepts import OOM
from .console import esc, styled
from .tables import FitTable
from .units import fmt_count, fmt_overhead

KIND_LABEL = {"retain": "retain", "force_victim": "force victim"}


def change_text(attempt: Attempt) -> str:
    """The `dtrf intervene` flags of the change: '--force-victim 290@185'."""
    return " ".join(attempt.change.args())


def _ops(attempt: Attempt) -> str:
    return ",".join(map(str, attempt.change.evicted_at_op))


def fixes_table(found: Explanation) -> FitTable:
    """The changes that turn the failure into a completion (as `dtrf intervene`
    flags), with the op of the eviction each undoes and how many ops that came
    before the failure."""
    failing_op = found.baseline["oom"]["op_id"]
    rows = [(change_text(a), _ops(a),
             ",".join(str(failing_op - op) for op in a.change.evicted_at_op),
             fmt_overhead(a.summary["overhead"]), str(a.summary["max_depth"]),
             f"{a.summary['max_pinned']['bytes']:,}") for a in found.fixes]
    columns = ("change", "evicted\nat op", "ops\nbefore", "overhead", "max\ndepth",
               "peak pinned")
    if found.where:          # the log said where its ops ran: the storages' modules
        rows = [(*row, ", ".join(m or "-" for m in found.modules_of(a.change)))
                for row, a in zip(rows, found.fixes)]
        columns += ("module",)
    return _table(f"changes that complete the run (failure at op {failing_op})", columns, rows)


def _table(title: str | None, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> FitTable:
    table = FitTable(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def attempts_table(found: Explanation) -> FitTable:
    """Every change tried, with the op of the eviction it undoes."""
    rows = [(change_text(a), _ops(a), a.summary["outcome"], fmt_overhead(a.summary["overhead"]),
             str(a.summary["max_depth"])) for a in found.attempts]
    return _table(None, ("change", "evicted at op", "outcome", "overhead", "max depth"), rows)


def nearby_text(found: Explanation) -> str:
    """Where the failing run and the nearby completing one part."""
    near = found.nearby
    if near is None:
        return "Nearby completion: none found; no forced victim at a divergent choice."
    head = (f"Nearby completion: {near.budget:,} B (ratio {near.ratio:.6f}, "
            f"{fmt_overhead(near.overhead)}), found in {near.probes} runs; ")
    if near.decision is None:
        return head + (f"the failing run's {near.common_choices} decisions are all the "
                       f"completing run's too: no divergent choice to change.")
    forced = next((f for f in found.forced if f.decision == near.decision), None)
    where = f" (op {forced.op_id})" if forced else ""
    text = (head + f"the first divergent choice is decision {near.decision}{where}: the "
            f"failing run evicts {near.failing_victim}, the completing run "
            f"{near.completing_victim if near.completing_victim is not None else 'nothing'}")
    if near.victim_in_pool is False:
        text += ", which was not a candidate of the failing run there"
    return text + "."


def coverage_text(found: Explanation) -> str:
    """What the search tried and what it did not: singles by kind, combinations."""
    singles = [r for r in found.rounds if r.size == 1]
    by_kind = ", ".join(f"{KIND_LABEL[r.kind]} {r.tried:,} of {r.candidates:,}" for r in singles)
    text = (f"Tried {fmt_count(len(found.attempts), 'change')}: singles "
            f"{sum(r.tried for r in singles):,} of {sum(r.candidates for r in singles):,} "
            f"({by_kind}), {found.singles_untried:,} untried")
    for r in (r for r in found.rounds if r.size > 1 and r.candidates):
        reached = " (never reached)" if not r.tried else ""
        text += f"; retained sets of {r.size}: {r.tried:,} of {r.candidates:,}{reached}"
    stopped = {"exhausted": "Every candidate change was tried.",
               "max_attempts": f"Stopped at --max-attempts {found.max_attempts}.",
               "first": "Stopped after the fixes asked for (--first)."}
    return text + ". " + stopped[found.stopped]


def print_explanation(found: Explanation, console: Console, *, reproduce: str) -> None:
    """The whole screen; `reproduce` is the `dtrf intervene` command line a fix's
    flags complete."""
    base = found.baseline
    if base["outcome"] != OOM:
        console.print(f"The run does not fail (outcome {base['outcome']}): nothing to explain.")
        return
    module = f" in {escape(found.failing_module)}" if found.failing_module else ""
    console.print(styled(
                  f"Baseline: [bold red]oom[/] at op {base['oom']['op_id']} allocating "
                  f"{esc(base['oom']['tensor'])}{module} at depth {base['oom']['depth']}; "
                  f"{fmt_count(len(found.candidates), 'retention candidate')}, "
                  f"{fmt_count(len(found.forced), 'forced victim')}."))
    if found.forced or found.nearby:
        console.print(nearby_text(found))
    if found.fixes:
        console.print(fixes_table(found))
        console.print(f"Reproduce a fix: {reproduce} {change_text(found.fixes[0])}")
    else:
        console.print(styled("[yellow]No tried change completes the run.[/]"))
    console.print(coverage_text(found))
    console.print(styled("Controls: " + ("every control and rerun reproduced the failure "
                                         "exactly." if found.control_matches else
                                         "[bold red]a control or a rerun did not reproduce "
                                         "the failure[/]")))
    console.print(styled(f"[dim]{esc(found.note)}[/]"))
