"""`dtrf traces ...`: list, inspect, fetch and import traces."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from ..trace import registry
from .errors import CommandError
from .options import check_timeout

traces_app = typer.Typer(
    help="List, inspect, fetch and import DTR traces.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    app.add_typer(traces_app, name="traces")


def _load(path: Path):
    # TraceError propagates: main() prints `error: file:line: problem`, exit code 2.
    from ..trace.cache import load_program_with_status
    return load_program_with_status(path)


def _resolve(spec: str) -> Path:
    try:
        return registry.resolve_trace(spec)
    except registry.TraceNotFoundError as exc:
        raise CommandError(str(exc)) from None


def _print_json(data: Any) -> None:
    from .common import print_json
    print_json(data)


def _short_path(path: str) -> str:
    """The path relative to the current directory or home, when that is shorter."""
    full = Path(path)
    options = [path]
    for base, prefix in ((Path.cwd(), ""), (Path.home(), "~/")):
        try:
            options.append(prefix + os.path.relpath(full, base))
        except ValueError:
            pass
    return min(options, key=len)


def _missing_hint(missing: list[str]) -> str:
    return (f"{len(missing)} public trace(s) not found ({', '.join(missing)}): run "
            "`dtrf traces fetch`, or `dtrf traces import PATH` with a folder or logs.zip.")


# --- commands ---------------------------------------------------------------------

@traces_app.command("list")
def list_traces(as_json: JsonOption = False) -> None:
    """Every trace found, with its size, unconstrained peak and single-op bottleneck."""
    from ..analyses.traces import summarize
    from ..render.console import console as Console
    from ..render.console import esc, styled, wide_console
    from ..render.tables import FitTable
    from ..render.units import fmt_bytes, fmt_ns
    from ..trace.parser import TraceError
    rows: list[dict[str, Any]] = []
    for entry in registry.available_traces():
        try:
            program, _ = _load(entry.path)
        except TraceError as exc:
            rows.append({"name": entry.name, "path": str(entry.path), "origin": entry.origin,
                         "error": str(exc)})
            continue
        row = summarize(program, entry.path)
        row["origin"] = entry.origin
        rows.append(row)
    missing = registry.missing_public()
    if as_json:
        _print_json({"traces": rows, "missing_public": missing,
                     "searched": [str(p) for p in registry.search_dirs()]})
        return
    console = wide_console()
    table = FitTable(title="Traces")
    # Numbers never wrap; the op and path columns absorb a narrow terminal.
    for header, justify, wrap in (("name", "left", False), ("ops", "right", False),
                                  ("tensors", "right", False), ("storages", "right", False),
                                  ("peak", "right", False), ("model compute", "right", False),
                                  ("bottleneck", "right", False),
                                  ("bottleneck op", "left", True), ("path", "left", True)):
        table.add_column(header, justify=justify, no_wrap=not wrap, overflow="fold",
                         min_width=12 if wrap else None)
    for row in rows:
        if "error" in row:
            table.add_row(row["name"], *[""] * 7, styled(f"[red]{esc(row['error'])}[/red]"))
            continue
        op = row["bottleneck_op"]
        table.add_row(
            row["name"], f"{row['ops']:,}", f"{row['tensors']:,}", f"{row['storages']:,}",
            fmt_bytes(row["peak_bytes"]), fmt_ns(row["model_compute_ns"]),
            fmt_bytes(row["bottleneck_bytes"]), f"{op['name']} (op {op['id']})",
            _short_path(row["path"]),
        )
    if rows:
        console.print(table)
    else:
        console.print("No traces found.")
    if missing:
        Console(stderr=True).print(styled(f"[yellow]{esc(_missing_hint(missing))}[/yellow]"),
                                   soft_wrap=True)


@traces_app.command("info")
def info(
    name: Annotated[str, typer.Argument(help="Short name (lstm, densenet, ...) or a .log path.")],
    as_json: JsonOption = False,
) -> None:
    """Details of one trace: op counts, backward ops, constants, hashes, cache status."""
    from ..analyses.traces import describe
    from ..render.console import console as Console
    from ..render.console import esc, styled
    from ..render.floor import floor_lines
    from ..render.tables import FitTable
    from ..render.units import fmt_bytes, fmt_ns
    from ..trace.cache import CACHE_HIT, CACHE_MISS, CACHE_REBUILT
    path = _resolve(name)
    program, status = _load(path)
    data = describe(program, path, status)
    if as_json:
        _print_json(data)
        return
    console = Console()
    table = FitTable(title=f"Trace {data['name']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    verified = {None: "not a published log", True: "matches the published SHA-256",
                False: "[red]differs from the published SHA-256 "
                       f"{esc(data['published_sha256'])}[/red]"}[data["verified"]]
    cache_words = {CACHE_HIT: "hit", CACHE_MISS: "miss (parsed, now cached)",
                   CACHE_REBUILT: "corrupt entry replaced"}.get(status, "not cached")
    peak_op, bott = data["peak_op"], data["bottleneck_op"]
    for field, value in (
        ("path", data["path"]),
        ("sha256", styled(f"{esc(data['sha256'])} ({verified})")),
        ("file size", fmt_bytes(data["file_bytes"])),
        ("ops", f"{data['ops']:,} ({data['constants']:,} constants, "
                f"{data['backward_ops']:,} backward, {data['distinct_op_names']} distinct names)"),
        ("tensors", f"{data['tensors']:,}"),
        ("storages", f"{data['storages']:,}"),
        ("commands", f"{data['commands']:,}"),
        ("peak memory", f"{fmt_bytes(data['peak_bytes'])} ({data['peak_bytes']:,} B)"
                        + (f" after op {peak_op['id']} {peak_op['name']}" if peak_op else "")),
        ("model compute", f"{fmt_ns(data['model_compute_ns'])} ({data['model_compute_ns']:,} ns)"),
        ("single-op bottleneck", f"{fmt_bytes(data['bottleneck_bytes'])} "
                                 f"({data['bottleneck_bytes']:,} B) at op {bott['id']} "
                                 f"(paper #{bott['paper_id']}) {bott['name']}"),
        ("floor", "\n".join(floor_lines(data["floor"], lead=""))),
        ("cache", f"{cache_words}: {data['cache']['path']}"),
    ):
        table.add_row(field, value)
    console.print(table)
    ops = FitTable(title="Most frequent ops (constants excluded)")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    for item in data["top_ops"]:
        ops.add_row(item["name"], f"{item['count']:,}")
    console.print(ops)


def _report_import(result: registry.ImportResult, console, err) -> None:
    from ..render.console import esc, styled
    for path in result.imported:
        console.print(f"imported {path}", soft_wrap=True)
    for path in result.unchanged:
        console.print(f"already present {path}", soft_wrap=True)
    for message in result.warnings:
        err.print(styled(f"[yellow]warning:[/yellow] {esc(message)}"), soft_wrap=True)
    for message in result.refused:
        err.print(styled(f"[red]{esc(message)}[/red]"), soft_wrap=True)
    if not result.ok:
        raise CommandError(f"{len(result.refused)} file(s) refused; the others were imported")


@traces_app.command("fetch")
def fetch(
    timeout: Annotated[float, typer.Option(callback=check_timeout, help="Seconds to wait for the server.")]
    = registry.FETCH_TIMEOUT,
) -> None:
    """Download the public DTR traces (logs.zip of uwsampl/dtr-prototype), verify, install."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from ..render.console import console as Console
    from ..render.wrapping import kept_progress as Progress

    err = Console(stderr=True)
    dest = registry.user_trace_dir()
    bar = Progress(TextColumn("logs.zip"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), console=err, transient=True)
    task = bar.add_task("download", total=None)

    def progress(done: int, total: int | None) -> None:
        if not bar.live.is_started:       # shown once the server answers
            bar.start()
        bar.update(task, completed=done, total=total)

    try:
        result = registry.fetch(dest, timeout=timeout, progress=progress)
    except registry.TraceStoreError as exc:
        raise CommandError(str(exc)) from None
    finally:
        if bar.live.is_started:
            bar.stop()
    _report_import(result, Console(), err)
    Console().print(f"public traces are in {dest / registry.PUBLIC_SUBDIR}", soft_wrap=True)


@traces_app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(help="A folder (searched recursively) or a zip of logs.")],
) -> None:
    """Copy traces into the user trace directory, verifying the published ones."""
    from ..render.console import console as Console
    from ..render.console import esc, styled
    err = Console(stderr=True)
    try:
        result = registry.import_traces(path)
    except registry.TraceStoreError as exc:
        raise CommandError(str(exc)) from None
    _report_import(result, Console(), err)
    missing = registry.missing_public()
    if missing:
        err.print(styled(f"[yellow]{esc(_missing_hint(missing))}[/yellow]"), soft_wrap=True)
