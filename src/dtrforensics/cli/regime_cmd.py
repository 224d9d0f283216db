"""`dtrf regime A B`: where one run's evictions blow up, which storages drive it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (
    DEFAULT_CACHE,
    BriefOption,
    CacheOption,
    JsonOption,
    open_runs,
    print_json,
    reporting_replaced,
    require_figures,
    verdict_first,
)
from .errors import CommandError
from .options import RUN_SPEC_TRUST, at_least, number, output_file

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def register(app: typer.Typer) -> None:
    app.command("regime")(regime_command)


def regime_command(
    control: Annotated[str, typer.Argument(help="Run a: a recording, or TRACE@RATIO[:POLICY]. " + RUN_SPEC_TRUST)],
    test: Annotated[str, typer.Argument(help="Run b, of the same trace. " + RUN_SPEC_TRUST)],
    window: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Ops per window (default: 100 windows over the longer run).")] = None,
    factor: Annotated[float, typer.Option(callback=number(1.0), help="Onset rule: the slow run evicts at least this many times as often as the fast run.")] = 2.0,
    min_excess: Annotated[int, typer.Option(callback=at_least(0), help="Onset rule: and at least this many more pressure evictions.")] = 10,
    sustain: Annotated[int, typer.Option(callback=at_least(1), help="Onset rule: for this many windows in a row.")] = 1,
    top: Annotated[int, typer.Option(callback=at_least(0), help="Drivers listed.")] = 10,
    windows: Annotated[bool, typer.Option("--windows", help="Also list every window's evictions and rematerializations.")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", "-o", "--out", callback=output_file, help="Write the evictions-per-window figure here (.png or .svg).")] = None,
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Compare two runs in different regimes: evictions per op window, the onset of the
    slow regime, the storages that drive it, the link to the first divergence.

    For example lstm@0.265 against lstm@0.264. The onset is the first window from
    which the slow run evicts at least --factor times as often as the fast run and
    --min-excess more, --sustain windows in a row; drivers are the storages it
    evicts more often than the fast run from the onset on."""
    from ..analyses.regime import regime
    from ..analyses.runs import RunSpecError
    from ..render.console import wide_console
    from ..render.regime import regime_view
    from ..render.verdict import with_verdict
    from ..render.verdicts import regime_verdict

    if window is not None and window < 1:
        raise CommandError("--window must be at least 1 op")
    if not factor >= 1 or factor == float("inf"):
        raise CommandError("--factor must be a finite number >= 1")
    if min_excess < 0 or sustain < 1 or top < 0:
        raise CommandError("--min-excess and --top must be >= 0, --sustain >= 1")
    if plot is not None and plot.suffix not in FIGURE_SUFFIXES:
        raise CommandError(f"--plot: give a .png, .svg or .pdf file, not {plot}")
    if plot is not None and not plot.parent.is_dir():
        raise CommandError(f"--plot: no such folder {plot.parent}")
    if plot is not None:
        require_figures("dtrf regime --plot")
    a, b = open_runs([control, test], scores="victims", cache=cache)
    try:
        report = regime(a, b, window_ops=window, factor=factor, min_excess=min_excess,
                        sustain=sustain, top=top)
    except RunSpecError as exc:
        raise CommandError(str(exc)) from None
    if plot is not None:
        from ..fsutil import atomic_path
        from ..render.regime_plot import draw
        with reporting_replaced(plot), atomic_path(plot) as tmp:
            draw(report).savefig(tmp, dpi=110, format=plot.suffix.lstrip("."))
    verdict = regime_verdict(report, control, test)
    if as_json:
        print_json(with_verdict(report.to_json(), verdict, brief=brief))
        return
    out = wide_console()
    if not verdict_first(out, verdict, brief=brief):
        out.print(regime_view(report, windows=windows))
    if plot is not None:
        wide_console(stderr=True).print(f"figure: {plot}")
