"""`dtrf export`: a recording for the viewers people already use, a sweep as a table.

Recordings go to Perfetto / chrome://tracing (`dtrforensics.interop.perfetto`)
or to PyTorch's memory_viz (`dtrforensics.interop.memory_viz`), streamed;
sweep results (`dtrf sweep` folders, or any folder of Parquet results) go to
CSV or Parquet. This module parses options, calls the exporter and reports.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import print_json, reporting_replaced
from .errors import CommandError
from .options import at_least, output_file_or_stdout, refuse_protected

RECORDING_FORMATS = ("perfetto", "memory-viz")
TABLE_FORMATS = ("csv", "parquet")
SUFFIX = {"perfetto": ".perfetto.json", "memory-viz": ".memory_viz.pickle", "csv": ".csv",
          "parquet": ".parquet"}

HELP = """Export SOURCE for another tool.

A recording (`dtrf run --record`) exports as:

* perfetto: Chrome trace-event JSON for ui.perfetto.dev, chrome://tracing or
Perfetto's trace processor (a .gz name is gzip-compressed). Time is the
simulated replay clock: ts = clock ns / 1000 (trace-event microseconds).
Threads: model operators, rematerializations (nested by depth), evictions,
dead frees; counters memory / pinned / pool / budget bytes; flow arrows from
each eviction to the rematerialization that undid it; an OOM instant carrying
the pinned frontier.

* memory-viz: a PyTorch CUDA memory snapshot pickle for pytorch.org/memory_viz
("Active Memory Timeline") or `python -m torch.cuda._memory_viz`. Exact:
sizes, the order of allocations (op outputs, rematerializations) and frees
(evictions, dead frees), the running total (= the recording's memory column),
frames naming the op, tensor and materialization chain. Synthetic: addresses
(a never-reused bump allocator from 0x7f0000000000), segments (one per
allocation: no caching), device 0, stream 0, time_us (simulated clock / 1000).

A sweep folder (`dtrf sweep`), or any folder of Parquet results, exports its
runs table as csv or parquet (sorted by policy, budget, rep).

-o - writes to standard output; the default is SOURCE's name plus a suffix
in the folder recordings/ (made if missing). An existing output file is
replaced, and stderr says so."""

DEFAULT_DIR = Path("recordings")


def register(app: typer.Typer) -> None:
    app.command("export", help=HELP)(export)


def export(
    source: Annotated[Path, typer.Argument(help="A recording folder, or a sweep folder.", show_default=False)],
    fmt: Annotated[str, typer.Option("--format", "-f", help="perfetto or memory-viz (recordings); csv or parquet (sweeps).")],
    output: Annotated[Optional[str], typer.Option("--output", "-o", "--out", callback=output_file_or_stdout, help="Output file ('-' for stdout; default recordings/ and SOURCE's name plus a suffix).", show_default=False)] = None,
    max_nesting: Annotated[int, typer.Option(callback=at_least(0), help="perfetto: levels of nested rematerializations shown (Perfetto keeps at most 512).")] = 500,
    max_frames: Annotated[int, typer.Option(callback=at_least(1), help="memory-viz: innermost materialization levels kept in each stack.")] = 64,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as one JSON object.")] = False,
) -> None:
    if fmt not in RECORDING_FORMATS + TABLE_FORMATS:
        raise CommandError(f"unknown format {fmt!r}; known: "
                           f"{', '.join(RECORDING_FORMATS + TABLE_FORMATS)}")
    if not source.exists():
        raise CommandError(f"no such recording or sweep: {source}")
    if max_nesting < 0 or max_frames < 1:
        raise CommandError("--max-nesting must be >= 0 and --max-frames >= 1")
    out = output if output is not None else str(DEFAULT_DIR / (source.resolve().name + SUFFIX[fmt]))
    if as_json and out == "-":
        raise CommandError("--json prints to stdout: give -o FILE")
    from ..recorder.reader import is_recording
    recording = is_recording(source)
    if fmt in RECORDING_FORMATS and not recording:
        raise CommandError(f"{fmt} exports a recording; {source} is not one (no run.json)")
    if fmt in TABLE_FORMATS and recording:
        raise CommandError(f"{fmt} exports a sweep's runs table; {source} is a recording "
                           "(query its tables with `dtrf sql ... --csv/--parquet`)")
    if output is None:      # the default passes the check an explicit -o passes, first
        refuse_protected(out)
        DEFAULT_DIR.mkdir(exist_ok=True)
    try:
        with reporting_replaced(out):
            result = _export(source, fmt, out, max_nesting, max_frames)
    except IsADirectoryError:
        raise CommandError(f"{out} is a folder: give a file name with -o") from None
    if as_json:
        print_json(result.to_json(), indent=None)
    else:
        print(_describe(result, source), file=sys.stderr)


def _export(source: Path, fmt: str, out: str, max_nesting: int, max_frames: int):
    if fmt in RECORDING_FORMATS:
        return _export_recording(source, fmt, out, max_nesting, max_frames)
    from ..interop.tables import TableExportError, export_table
    try:
        return export_table(source, fmt, out)
    except TableExportError as exc:
        raise CommandError(str(exc)) from None


def _export_recording(source: Path, fmt: str, out: str, max_nesting: int, max_frames: int):
    from ..interop.perfetto import export_perfetto
    from ..interop.plumbing import ExportError
    from ..recorder.schema import RecordingFormatError
    try:
        if fmt == "perfetto":
            return export_perfetto(source, out, max_nesting=max_nesting)
        from ..interop.memory_viz import export_memory_viz
        return export_memory_viz(source, out, max_frames=max_frames)
    except (ExportError, RecordingFormatError) as exc:
        raise CommandError(str(exc)) from None


def _describe(result, source: Path) -> str:
    if result.to_json()["format"] in TABLE_FORMATS:
        return f"wrote {result.rows:,} runs x {result.columns} columns to {result.path}"
    if result.to_json()["format"] == "perfetto":
        hidden = f" + {result.hidden_slices:,} nested too deep to show" \
            if result.hidden_slices else ""
        return (f"wrote {result.trace_events:,} trace events ({result.op_slices:,} ops, "
                f"{_nested(result.remat_slices, source)}{hidden}, max depth "
                f"{result.max_depth}, "
                f"{result.evictions:,} evictions, {result.dead_frees:,} dead frees, "
                f"{result.flows:,} flows) to {result.path}: open it at ui.perfetto.dev")
    return (f"wrote {result.trace_entries:,} trace entries ({result.allocations:,} allocations, "
            f"{result.frees:,} frees, peak {result.peak_bytes:,} B, {result.segments:,} "
            f"segments at the end) to {result.path}: open it at pytorch.org/memory_viz")


def _nested(slices: int, source: Path) -> str:
    """The rematerializations track shows every nested materialization begun; the
    run's `rematerializations` count the ones that computed (an OOM leaves its
    chain unfinished): both are named."""
    from ..recorder.reader import open_recording
    completed = open_recording(source, verify=False).summary["remats"]
    return f"{slices:,} nested materializations begun, {completed:,} rematerializations completed"
