"""`dtrf demo`: the headline story, end to end, on the embedded synthetic trace.

Sweep the budget and find a feasibility hole with byte-exact edges; diff the
runs on both sides of its lower edge; show the OOM frontier; find the
retention that prevents it; save the figure. With the public traces present,
the same story on ResNet-32. `run_demo` returns the key findings so the test
suite can check the demo never silently rots.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .options import check_jobs, output_folder

if TYPE_CHECKING:
    from rich.console import Console

EMBEDDED = "hole"
EMBEDDED_RANGE = (0.90, 0.93, 0.002)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)


def demo_command(
    out: Annotated[Path, typer.Option("--out", "-o", callback=output_folder, help="Where the demo's sweeps, recordings and figures go.")] = Path("recordings/demo"),
    public: Annotated[bool, typer.Option(help="Continue with ResNet-32 when the public traces are present.")] = True,
    jobs: Annotated[int, typer.Option(callback=check_jobs, help="Worker processes for sweeps and searches.")] = 2,
) -> None:
    """Find, explain and fix a feasibility hole, end to end, on the embedded trace."""
    from ..render.console import console
    from .kernel_notice import announce_compile
    announce_compile()
    run_demo(console(), out, public=public, jobs=jobs)


def _section(console: Console, title: str) -> None:
    """A rule with the title in it, or above the title when the title would be cut."""
    from rich.rule import Rule
    from rich.text import Text
    console.print()
    if len(title) + 6 <= console.width:
        console.print(Rule(Text(title, style="bold")))
    else:
        console.print(Rule())
        console.print(Text(title, style="bold"))


def run_demo(console: Console, out: Path, *, public: bool = True, jobs: int = 2) -> dict:
    """The story on the embedded trace (and ResNet-32 when found); returns the key
    findings (hole edges, first divergence, OOM, fixes) so tests can check them."""
    from ..render.console import esc, styled
    from ..trace.registry import TraceNotFoundError, resolve_trace
    started = time.perf_counter()
    out = Path(out)
    console.print(styled("[bold]dtrforensics demo[/]: budgets a hair apart, deterministically "
                         "different runs. Everything below is computed now, offline."))
    findings = {"embedded": _story(console, EMBEDDED, EMBEDDED_RANGE, out / EMBEDDED, jobs)}
    if public:
        try:
            resolve_trace("resnet32")
        except TraceNotFoundError:
            console.print(styled("\n[dim]Public traces not found: set DTRF_TRACES or run "
                                 "`dtrf traces fetch` to see the same story on ResNet-32.[/]"))
        else:
            findings["resnet32"] = _story(console, "resnet32", (0.095, 0.115, 0.001),
                                          out / "resnet32", jobs, exact=False)
    _section(console, "Your turn")
    from ..render.wrapping import shell_wrap
    console.print(f"The same steps one command each, on the embedded log `{EMBEDDED}`; put "
                  "the path of a DTR log of your own (the dtr-prototype logging format) "
                  f"where they say {EMBEDDED}:")
    (out / "yours").mkdir(exist_ok=True)   # the demo's own: its commands' outputs go there
    for command, comment in your_turn(findings["embedded"], out):
        for part in shell_wrap("", command, console.width - 2):   # pasted, they run whole
            console.print(f"  {part}", soft_wrap=True, highlight=False, markup=False)
        console.print(styled(f"      [dim]# {esc(comment)}[/]"), soft_wrap=True, highlight=False)
    findings["seconds"] = time.perf_counter() - started
    console.print(styled(f"\n[dim]demo finished in {findings['seconds']:.1f} s; outputs under "
                         f"{esc(out)}/[/]"))
    return findings


def your_turn(story: dict, out: Path) -> list[tuple[str, str]]:
    """The demo's steps as commands to run, at the embedded story's own budgets
    (a completing one just below its hole and a failing one at its lower edge)."""
    lo, hi, step = EMBEDDED_RANGE
    hole = story.get("hole") or {}
    ok, fail = hole.get("ok_below", lo), hole.get("fail_lo", hi)
    log, recording = EMBEDDED, Path(out) / "yours" / f"{EMBEDDED}-{fail:g}"
    return [
        (f"dtrf traces info {log}", "peak memory and model compute"),
        (f"dtrf sweep {log} --from {lo} --to {hi} --step {step} --refine "
         f"-o {Path(out) / 'yours' / 'sweep'}", "map holes"),
        (f"dtrf diff {log}@{ok:g} {log}@{fail:g}", "first divergent victim"),
        (f"dtrf oom {log}@{fail:g}", "the pinned frontier of a failure"),
        (f"dtrf explain {log} --ratio {fail:g}", "which retention prevents it"),
        (f"dtrf run {log} --ratio {fail:g} --record {recording}", "record every decision"),
        (f"dtrf show {recording}", "the recording's summary and timeline"),
        (f'dtrf sql "SELECT kind, count(*) FROM events GROUP BY 1" {recording}',
         "SQL over its tables"),
        (f"dtrf export {recording} --format perfetto -o {recording}.perfetto.json",
         "open in ui.perfetto.dev"),
    ]


def _story(console: Console, trace: str, grid: tuple[float, float, float], out: Path,
           jobs: int, exact: bool = True) -> dict:
    from ..analyses.diff import diff
    from ..analyses.explain import explain
    from ..analyses.oom import explain_oom
    from ..analyses.runs import RunSpec, record_spec
    from ..render import sweep_plot
    from ..render.console import esc, styled
    from ..render.diff import print_diff
    from ..render.explain import attempts_table
    from ..render.oom import oom_view
    from ..render.sweep import holes_view
    from ..render.units import fmt_exact_bytes
    from ..sweep import holes as sweep_holes
    from ..sweep.runner import run_sweep
    from ..sweep.store import SweepParams
    from ..trace import load_trace
    from ..trace.registry import resolve_trace

    program = load_trace(trace)
    lo, hi, step = grid
    _section(console, f"1. Sweep {trace}: budget ratio {lo}-{hi}, step {step}"
                      + (", plus the exact certificate walk" if exact else ""))
    params = SweepParams(lo, hi, step, exact=exact, max_runs=400)
    run_sweep(str(resolve_trace(trace)), params, out / "sweep", jobs=jobs)
    report = sweep_holes.analyze(out / "sweep")
    for part in holes_view(report):
        console.print(part)
    dtr = report.policy("dtr")
    if not dtr.failure_regions:
        console.print(styled("[yellow]No hole in this range.[/]"))
        return {"hole": None}
    region = dtr.failure_regions[0]
    ok_below, failing = region.below, region.lo
    hole = {"ok_below": ok_below.ratio, "fail_lo": region.lo.ratio, "fail_hi": region.hi.ratio,
            "ok_above": region.above.ratio}
    if dtr.exact is not None and dtr.exact.holes:
        h = dtr.exact.holes[0]
        hole["bytes"] = [h.lo, h.hi]
        console.print(f"Byte-exact: every budget from {h.lo:,} to {h.hi:,} bytes fails "
                      f"({h.hi - h.lo + 1:,} bytes wide); certified coverage "
                      f"{dtr.exact.coverage:.1%} of the range.")
    figure = sweep_plot.save(sweep_plot.draw(report, sweep_holes.load_points(out / "sweep")),
                             out / "hole")
    console.print(f"Figure: {', '.join(str(p) for p in figure)}")

    _section(console, f"2. Diff: {trace}@{ok_below.ratio:g} (ok) vs {trace}@{failing.ratio:g} (oom)")
    cache = out / "runs"
    rec_ok = record_spec(RunSpec(trace, ok_below.ratio), scores="all", cache=cache)
    rec_fail = record_spec(RunSpec(trace, failing.ratio), scores="all", cache=cache)
    report_diff = diff(rec_ok, rec_fail)
    print_diff(report_diff, console)

    _section(console, f"3. The OOM at {trace}@{failing.ratio:g}: the pinned frontier")
    oom = explain_oom(rec_fail)
    console.print(oom_view(oom))

    _section(console, "4. Which retention prevents it? (hindsight search, with controls)")
    found = explain(program, ratio=failing.ratio, max_attempts=8, max_combo=1, jobs=jobs,
                    kinds=("retain",), record_root=out / "explain", stop_after_fixes=1)
    console.print(attempts_table(found))
    console.print(styled(("Control: the failure reproduces exactly without the retention. "
                          if found.control_matches else "[red]Control mismatch.[/] ")
                         + f"[dim]{esc(found.note)}[/]"))
    fixes = [list(a.retain) for a in found.fixes]
    if fixes:
        first = found.fixes[0].summary
        console.print(f"Retaining storage {fixes[0][0]} completes the run at "
                      f"{first['overhead']:.4f}x overhead, peak pinned "
                      f"{fmt_exact_bytes(first['max_pinned']['bytes'])}.")
    return {"hole": hole, "common_prefix": report_diff.common_prefix,
            "first_divergence": report_diff.to_json().get("first_divergence"),
            "oom": {"tensor": oom.tensor, "depth": oom.depth, "pinned": oom.pinned},
            "fixes": fixes, "figure": [str(p) for p in figure]}
