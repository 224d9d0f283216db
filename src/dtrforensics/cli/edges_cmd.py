"""`dtrf edges SWEEP`: both sides of every edge of a sweep, and the comparison that decides it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import DEFAULT_CACHE, BriefOption, CacheOption, JsonOption, print_json, verdict_first
from .errors import CommandError
from .options import at_least, positive


def register(app: typer.Typer) -> None:
    app.command("edges")(edges_command)


def edges_command(
    sweep: Annotated[Path, typer.Argument(help="A sweep folder (dtrf sweep ... --out).")],
    policy: Annotated[Optional[str], typer.Option(help="The sweep's policy to look at (default: its first).")] = None,
    threshold: Annotated[Optional[float], typer.Option(callback=positive, help="Overhead jump that makes a regime edge (default: the sweep's --overhead-jump).")] = None,
    max_edges: Annotated[int, typer.Option(callback=at_least(1), help="Diff at most this many edges, in budget order.")] = 20,
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Both sides of every edge of a sweep (outcome or regime changes): the budget
    comparison that decides it, to the byte, and the first divergent victim.

    An edge is a pair of adjacent certified intervals (an exact sweep) or adjacent
    samples whose outcome or regime differs. Both sides are recorded once into the
    cache and reused."""
    from ..analyses.edges import edges
    from ..render.console import err_console, wide_console
    from ..render.edges import edges_view
    from ..render.verdict import with_verdict
    from ..render.verdicts import edges_verdict

    if max_edges < 1:
        raise CommandError("--max-edges must be at least 1")
    if threshold is not None and not 0 < threshold < float("inf"):
        raise CommandError("--threshold must be a positive number")
    if not sweep.is_dir():
        raise CommandError(f"no such sweep folder: {sweep}")
    err = err_console()
    with err.status("finding edges") as status:
        try:
            report = edges(sweep, policy=policy, threshold=threshold, max_edges=max_edges,
                           cache=cache, on_edge=lambda i, n: status.update(
                               f"recording and comparing both sides of edge {i} of {n}"))
        except KeyError as exc:
            raise CommandError(f"the sweep has no policy {exc}") from None
    verdict = edges_verdict(report)
    if as_json:
        print_json(with_verdict(report.to_json(), verdict, brief=brief))
        return
    out = wide_console()
    if not verdict_first(out, verdict, brief=brief):
        out.print(edges_view(report))
