"""`dtrf reproduce`: both studies' numbers, ours beside theirs, and their figures."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce_command)


def reproduce_command(
    quick: Annotated[bool, typer.Option("--quick", help="Only the claims that need short runs (ResNet-32 and U-Net, about a minute).")] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the report (report.md and its figures) and the runs behind it (work/, reused by the next reproduction).")] = Path("recordings") / "reproduce",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: claims [{id, published, ours, verdict, ...}].")] = False,
) -> None:
    """Both DTR studies' published numbers beside ours, with a verdict each, and their
    figures in a report.

    Runs the protocol of the two studies (regime switching, feasibility holes) on the
    public traces with dtrforensics' own analyses; verdicts are match, differs,
    sharper (an exact certificate says more than a sample could) and not
    reproducible."""
    from ..render.console import err_console, wide_console
    from ..render.reproduce import print_reproduction
    from ..render.reproduce_report import write_report
    from ..reproduce.protocol import reproduce
    from ..trace.registry import resolve_trace
    from .common import print_json
    from ..errors import UserError
    from .errors import CommandError

    for trace in ("resnet32", "unet") + (() if quick else ("lstm", "inceptionv4")):
        try:
            resolve_trace(trace)
        except UserError as exc:
            raise CommandError(f"the reproduction needs the public trace {trace!r}: {exc}") from None
    from ..recorder.reader import refuse_inside_recording
    refuse_inside_recording(out / "report.md")
    err = err_console()
    started = time.perf_counter()
    with err.status("reproducing") as status:
        rep = reproduce(quick=quick, workdir=out / "work",
                        progress=lambda msg: status.update(f"reproducing: {msg}"))
    command = "dtrf reproduce" + (" --quick" if quick else "")
    path = write_report(rep, out, command=command, wall_seconds=time.perf_counter() - started)
    if as_json:
        print_json({**rep.to_json(), "report": str(path)})
        return
    print_reproduction(wide_console(), rep)
    print(f"report: {path}", file=sys.stderr)
