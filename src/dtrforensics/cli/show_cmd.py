"""`dtrf show`: a recording's run summary and its per-op timeline."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import BriefOption, JsonOption, print_json, verdict_first
from .errors import CommandError
from .options import at_least


def register(app: typer.Typer) -> None:
    app.command("show")(show)


def show(
    recording: Annotated[str, typer.Argument(help="A recording folder.")],
    as_json: JsonOption = False,
    width: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Timeline width in columns (default: the terminal's).")] = None,
    brief: BriefOption = False,
) -> None:
    """A recording's run summary and a per-op timeline of memory, pinned bytes and depth."""
    from ..analyses.timeline import op_timeline
    from ..recorder.reader import open_recording
    from ..recorder.schema import RecordingFormatError
    try:
        rec = open_recording(recording)
    except RecordingFormatError as exc:
        raise CommandError(str(exc)) from None
    from ..render.verdict import with_verdict
    from ..render.verdicts import run_verdict
    timeline = op_timeline(rec)
    verdict = run_verdict(rec.summary, recording)
    if as_json:
        print_json(with_verdict({"recording": str(rec.path), "run": rec.run,
                                 "timeline": {k: v.tolist() for k, v in timeline.items()}},
                                verdict, brief=brief))
        return
    from ..render.console import wide_console
    from ..render.panels import summary_panel
    from ..render.recording import LABEL_WIDTH, SCALE_WIDTH, timeline_panel

    console = wide_console()
    if verdict_first(console, verdict, brief=brief):
        return
    cols = (width or console.width) - LABEL_WIDTH - SCALE_WIDTH - 10
    run = rec.run
    names = rec.table("ops").column("name").to_pylist()
    extra = [("trace", f"{run['trace']['name']}  sha256 {run['trace']['sha256']}"),
             ("policy / scores", f"{run['policy']} / {run['scores']}"),
             ("recorded", f"{run['started_at']} → {run['finished_at']}")]
    console.print(summary_panel(rec.summary, lambda op: names[op] if op < len(names) else "?",
                                title=rec.run_id, extra=extra))
    oom = rec.summary.get("oom")
    console.print(timeline_panel(timeline, run["budget"], oom["op_id"] if oom else None,
                                 max(cols, 10)))
