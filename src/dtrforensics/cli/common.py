"""Plumbing shared by the forensic commands (not a command): run arguments and
the options every one of them takes."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .errors import CommandError
from .kernel_notice import announce_compile

if TYPE_CHECKING:
    from ..recorder.reader import Recording

DEFAULT_CACHE = Path("recordings") / "cache"     # = analyses.runs.DEFAULT_CACHE (tests/test_cli.py)

CacheOption = Annotated[Path, typer.Option(
    help="Where run specs (TRACE@RATIO[:POLICY]) are recorded and reused.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _announce(spec, folder: Path) -> None:
    print(f"recording {spec} into {folder} (once; later runs reuse it)", file=sys.stderr)
    announce_compile()


def open_run(text: str, *, scores: str, cache: Path) -> Recording:
    """A recording argument or run spec -> Recording; user mistakes become CommandError."""
    from ..analyses.runs import RunSpecError, resolve_run
    from ..recorder.reader import NotARecordingError
    from ..recorder.schema import RecordingFormatError
    try:
        return resolve_run(text, scores=scores, cache=cache, on_record=_announce)
    except (RunSpecError, NotARecordingError, RecordingFormatError) as exc:
        raise CommandError(str(exc)) from None


def open_runs(texts: list[str], *, scores: str, cache: Path) -> list[Recording]:
    """Run arguments that must replay one trace: checked before any is recorded."""
    from ..analyses.runs import RunSpecError, check_same_trace
    from ..recorder.reader import NotARecordingError
    from ..recorder.schema import RecordingFormatError
    try:
        check_same_trace(texts)
    except (RunSpecError, NotARecordingError, RecordingFormatError) as exc:
        raise CommandError(str(exc)) from None
    return [open_run(text, scores=scores, cache=cache) for text in texts]


@contextmanager
def reporting_replaced(*paths: str | Path) -> Iterator[None]:
    """Say `replaced PATH` on stderr for each output file that existed before the
    block wrote it (the file is replaced, as asked, but never silently)."""
    existing = [p for p in paths if str(p) != "-" and Path(p).is_file()]
    yield
    for path in existing:
        print(f"replaced {path}", file=sys.stderr)


def require_figures(what: str) -> None:
    """Check before the work that matplotlib imports, since `what` ends by drawing
    figures: a missing optional dependency is one line up front, never a traceback
    after a long sweep that loses the results it would have printed."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"{what} draws figures with matplotlib, which does not import "
                           f"({exc}): pip install 'dtrforensics[plot]'") from None


def print_json(data, *, indent: int | None = 2) -> None:
    """One strict JSON document on stdout."""
    from ..render.jsonout import dumps
    print(dumps(data, indent=indent))


@contextlib.contextmanager
def sweeping(out: Path, banner: str, *, progress: bool):
    """A sweep in progress: the banner and a progress bar on stderr (yields the
    observer); a sweep-store error becomes one line, and Ctrl-C keeps the
    finished runs, says how to resume and exits 130."""
    from ..render.console import err_console
    from ..render.sweep import SweepProgress
    from ..sweep.store import SweepStoreError
    err = err_console()
    err.print(banner)
    observer = SweepProgress(err, enabled=progress and err.is_terminal)
    try:
        with observer:
            yield observer
    except SweepStoreError as exc:
        raise CommandError(str(exc)) from None
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted: finished runs are kept in {out}; rerun the same "
                  f"command (with --out {out}) to resume[/]")
        sys.exit(130)   # typer turns KeyboardInterrupt into a return value main() drops
