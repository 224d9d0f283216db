"""`dtrf holes`: the map of a sweep folder (`dtrf sweep -o DIR`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BriefOption, report_sweep
from .options import positive


def register(app: typer.Typer) -> None:
    app.command("holes")(holes_cmd)


def holes_cmd(
    sweep_dir: Annotated[Path, typer.Argument(metavar="SWEEP", help="A sweep folder (made by dtrf sweep).")],
    policy: Annotated[Optional[str], typer.Option(help="Only these policies (comma-separated).")] = None,
    threshold: Annotated[Optional[float], typer.Option(callback=positive, help="Overhead jump for a regime switch (default: the sweep's --overhead-jump).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    brief: BriefOption = False,
) -> None:
    """Feasibility holes, edges, timeouts and regime switches of a sweep."""
    report_sweep(sweep_dir, policy, threshold, as_json, brief)
