"""`dtrf plot`: a sweep's figure, PNG and SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import reporting_replaced
from .errors import CommandError
from .options import output_file


def register(app: typer.Typer) -> None:
    app.command("plot")(plot_cmd)


def plot_cmd(
    sweep_dir: Annotated[Path, typer.Argument(metavar="SWEEP", help="A sweep folder (made by dtrf sweep).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", callback=output_file, help="Output path without suffix (default SWEEP/plot): writes .png and .svg.")] = None,
    policy: Annotated[Optional[str], typer.Option(help="Only these policies (comma-separated).")] = None,
    failure_panel: Annotated[bool, typer.Option(help="Second panel: pinned bytes and depth at each OOM.")] = True,
) -> None:
    """Overhead against budget ratio per policy, failing budgets and holes marked."""
    from ..sweep.holes import analyze, load_points
    from ..sweep.store import SweepStoreError
    try:
        from ..render.sweep_plot import draw, figure_paths, save
        report = analyze(sweep_dir, policies=[p for p in policy.split(",") if p] if policy else None)
        fig = draw(report, load_points(sweep_dir), failure_panel=failure_panel)
    except (SweepStoreError, ValueError, ImportError) as exc:
        raise CommandError(str(exc)) from None
    base = out if out is not None else Path(sweep_dir) / "plot"
    with reporting_replaced(*figure_paths(base)):
        paths = save(fig, base)
    for path in paths:
        print(path)
