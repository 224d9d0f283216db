"""Plumbing shared by the forensic commands (not a command): run arguments and
the options every one of them takes."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .. import validate
from .errors import CommandError
from .kernel_notice import announce_compile
from .options import output_folder

if TYPE_CHECKING:
    from ..recorder.reader import Recording

DEFAULT_CACHE = Path("recordings") / "cache"     # = analyses.runs.DEFAULT_CACHE (tests/test_cli.py)

CacheOption = Annotated[Path, typer.Option(
    callback=output_folder, help="Where run specs (TRACE@RATIO[:POLICY]) are recorded and reused.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
BriefOption = Annotated[bool, typer.Option("--brief", help=(
    "Print only the verdict the output opens with: what happened, the numbers that decide "
    "it and the next command to run (at most 8 lines of 80 columns); with --json, only "
    "{\"verdict\": ...}."))]
RecordRoot = Annotated[str, typer.Option(
    callback=output_folder, help="Where the runs are recorded (reused when present); '' to not record.")]


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


def trace_of(text: str, rec: Recording) -> str:
    """The trace of a run argument as a next command names it: a run spec's
    trace as the user wrote it, else the recording's trace file."""
    if "@" in str(text) and not Path(text).exists():
        return str(text).rpartition("@")[0]
    trace = rec.run["trace"]
    return trace.get("source") or trace["name"]


def budget_args(ratio: float | None, budget: int | None) -> dict:
    """`--ratio` or `--budget`, exactly one, as an analysis's keyword argument."""
    validate.budget_or_ratio(budget, ratio)
    return {"ratio": ratio} if ratio is not None else {"budget": budget}


def run_flags(ratio: float | None, budget: int | None, policy: str) -> list[str]:
    """`--ratio R` or `--budget B`, and `--policy P` unless dtr: the run as a next
    command (explain, intervene) names it."""
    flags = ["--ratio", str(ratio)] if ratio is not None else ["--budget", str(budget)]
    return flags + (["--policy", policy] if policy != "dtr" else [])


def require_control(matches: bool | None) -> None:
    """A control that does not reproduce the plain run makes every comparison void."""
    if matches is False:
        from ..errors import NotDeterministicError
        raise NotDeterministicError("the control (the intervention code path with nothing "
                                    "changed) did not reproduce the plain run")


@contextmanager
def reporting_replaced(*paths: str | Path | None) -> Iterator[None]:
    """Say `replaced PATH` on stderr for each output file (or recording folder) that
    existed before the block and was written by it (the file is replaced, as asked, but
    never silently), also when the block then fails, and for each one that appeared
    during the block (another command's) and was then replaced by an atomic write of
    this one (`fsutil.replacements`). None and `-` (stdout) are skipped."""
    from ..fsutil import replacements
    before = {p: (_identity(p), replacements(p)) for p in paths if p is not None and str(p) != "-"}
    try:
        yield
    finally:
        for path, (was, renamed) in before.items():
            if (was is not None and _identity(path) != was) or replacements(path) > renamed:
                print(f"replaced {path}", file=sys.stderr)


def log_files(log: str | Path | None) -> tuple[Path, ...]:
    """The files writing a DTR log to `log` may replace: the log and its where-file
    (`trace/where.py`); none for no log."""
    if log is None:
        return ()
    from ..trace.where import where_path
    return Path(log), where_path(log)


def _identity(path: str | Path) -> tuple | None:
    """What changes when a file is replaced or written, or a folder replaced (a
    recording's, by `--overwrite`: a new folder takes its place), links followed;
    None: no file or folder."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return st.st_dev, st.st_ino
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def require_figures(what: str) -> None:
    """Check before the work that matplotlib imports, since `what` ends by drawing
    figures: a missing optional dependency is one line up front, never a traceback
    after a long sweep that loses the results it would have printed."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"{what} draws figures with matplotlib, which does not import "
                           f"({exc}): pip install 'dtrforensics[plot]'") from None


def verdict_first(console, verdict, *, brief: bool) -> bool:
    """Draw `verdict` at the top of the output; True when --brief asked for it
    alone (the command prints nothing more)."""
    from ..render.verdict import print_verdict
    print_verdict(console, verdict, brief=brief)
    return brief


def print_json(data, *, indent: int | None = 2) -> None:
    """One strict JSON document on stdout."""
    from ..render.jsonout import dumps
    print(dumps(data, indent=indent))


@contextlib.contextmanager
def sweeping(out: Path, banner: str, *, progress: bool):
    """A sweep in progress: the banner and a progress bar on stderr (yields the
    observer); a sweep-store error becomes one line, and Ctrl-C keeps the
    finished runs, says how to resume and exits 130."""
    from ..render.console import err_console, esc, styled
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
        err.print(styled(f"[yellow]interrupted: finished runs are kept in {esc(out)}; rerun "
                         f"the same command (with --out {esc(out)}) to resume[/]"))
        sys.exit(130)   # typer turns KeyboardInterrupt into a return value main() drops


def report_sweep(sweep_dir: Path, policy: str | None, threshold: float | None, as_json: bool,
                 brief: bool = False) -> None:
    """A sweep folder's map (`dtrf holes`), its verdict first, as text or JSON
    (`brief`: the verdict alone); reruns or certificates that disagree exit 3
    after it is shown."""
    from ..render.sweep import print_holes
    from ..render.verdicts import holes_verdict
    from ..sweep.holes import analyze
    from ..sweep.store import SweepStoreError
    policies = [p for p in policy.split(",") if p] if policy else None
    try:
        report = analyze(sweep_dir, threshold=threshold, policies=policies)
    except (SweepStoreError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    verdict = holes_verdict(report)
    if as_json:
        from ..render.jsonout import dumps
        from ..render.verdict import with_verdict
        typer.echo(dumps(with_verdict(report.to_json(), verdict, brief=brief), indent=1))
    else:
        from ..render.console import console
        out = console()
        if not verdict_first(out, verdict, brief=brief):
            print_holes(out, report)
    bad = [p.policy for p in report.policies
           if p.disagreements or (p.exact is not None and p.exact.overlaps)]
    if bad:
        from ..errors import NotDeterministicError
        raise NotDeterministicError(f"reruns or certificates disagree for {', '.join(bad)}: "
                                    "the replay is not deterministic")
