"""`dtrf reproduce`: both studies' numbers, ours beside theirs, and their figures."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BriefOption
from .errors import CommandError
from .options import (
    POLICY_HELP,
    SCHEDULER_HELP,
    check_jobs,
    check_policy,
    output_folder,
    seconds,
    sweep_engine,
)

MAP_SECONDS = 600.0    # --findings: each map's wall-clock share of one invocation
RUN_TIMEOUT = 120.0    # --findings: one run's wall-clock limit


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce_command)


def reproduce_command(
    quick: Annotated[bool, typer.Option("--quick", help="Only the claims that need short runs (ResNet-32 and U-Net, about a minute).")] = False,
    out: Annotated[Path, typer.Option("--out", "-o", callback=output_folder, help="Folder for the report (report.md and its figures) and the runs behind it (work/, reused by the next reproduction).")] = Path("recordings") / "reproduce",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: claims [{id, published, ours, verdict, ...}].")] = False,
    findings: Annotated[bool, typer.Option("--findings", help="Instead: answer the studies' open questions with exact maps into OUT/findings.md (maps kept in OUT/work/findings, resumed by the next run); a findings.md there that is more complete (maps certified, claims judged) is kept, and this run's report goes beside it to OUT/findings.partial.md.")] = False,
    map_seconds: Annotated[Optional[float], typer.Option("--map-seconds", callback=seconds, help=f"With --findings: wall-clock seconds each map may run in this invocation (a partial map is resumed next time; default {MAP_SECONDS:g}).")] = None,
    run_timeout: Annotated[Optional[float], typer.Option("--run-timeout", callback=seconds, help=f"With --findings: wall-clock seconds per run; a run that takes longer leaves its budgets uncertified (default {RUN_TIMEOUT:g}).")] = None,
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", callback=check_jobs, help="With --findings: worker processes (default: one per core).")] = None,
    total_seconds: Annotated[Optional[float], typer.Option("--total-seconds", callback=seconds, help="With --findings: finish within this many seconds: the running map stops, maps not reached are read as stored, and findings.md says it is partial (the next run resumes).")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="With --findings: " + SCHEDULER_HELP)] = None,
    policy: Annotated[str, typer.Option(callback=check_policy, help="The policy that stands in for DTR in every claim about DTR (the ablation claims keep their ablations): do the findings hold under it? " + POLICY_HELP)] = "dtr",
    brief: BriefOption = False,
) -> None:
    """Both DTR studies' published numbers beside ours, with a verdict each, and their
    figures in a report.

    Runs the protocol of the two studies (regime switching, feasibility holes) on the
    public traces with dtrforensics' own analyses; verdicts are match, differs,
    sharper (an exact certificate says more than a sample could) and not
    reproducible."""
    if findings:
        if policy != "dtr":
            raise CommandError("--findings maps the built-in policies; --policy goes with the "
                               "claims (drop --findings), or use dtrf compare-policies")
        _findings(out, MAP_SECONDS if map_seconds is None else map_seconds,
                  RUN_TIMEOUT if run_timeout is None else run_timeout, jobs, total_seconds,
                  scheduler)
        return
    if scheduler is not None:
        raise CommandError("--scheduler goes with --findings (the claims' runs are short "
                           "and run here)")
    given = [name for name, value in (("--map-seconds", map_seconds), ("--run-timeout", run_timeout),
                                      ("--jobs", jobs), ("--total-seconds", total_seconds))
             if value is not None]
    if given:
        raise CommandError(f"{', '.join(given)} go{'es' if len(given) == 1 else ''} with "
                           "--findings (the claims' runs take their own times)")
    from ..errors import UserError
    from ..render.console import err_console, wide_console
    from ..render.reproduce import print_reproduction
    from ..render.reproduce_report import write_report
    from ..render.verdict import with_verdict
    from ..render.verdicts import reproduction_verdict
    from ..reproduce.protocol import reproduce
    from ..trace.registry import resolve_trace
    from .common import print_json, require_figures, verdict_first

    _claim_work(out, create=False)
    require_figures("dtrf reproduce")
    for trace in ("resnet32", "unet") + (() if quick else ("lstm", "inceptionv4")):
        try:
            resolve_trace(trace)
        except UserError as exc:
            raise CommandError(f"the reproduction needs the public trace {trace!r}: {exc}") from None
    _claim_work(out)
    err = err_console()
    started = time.perf_counter()
    with err.status("reproducing") as status:
        rep = reproduce(quick=quick, workdir=out / "work", policy=policy,
                        progress=lambda msg: status.update(f"reproducing: {msg}"))
    command = ("dtrf reproduce" + (" --quick" if quick else "")
               + (f" --policy {policy}" if policy != "dtr" else ""))
    path = write_report(rep, out, command=command, wall_seconds=time.perf_counter() - started)
    verdict = reproduction_verdict(rep, str(out))
    if as_json:
        print_json(with_verdict({**rep.to_json(), "report": str(path)}, verdict, brief=brief))
        return
    console = wide_console()
    if not verdict_first(console, verdict, brief=brief):
        print_reproduction(console, rep)
    print(f"report: {path}", file=sys.stderr)


WORK_ENTRIES = frozenset({"recordings", "sweeps", "runs", "findings"})


def _claim_work(out: Path, *, create: bool = True) -> None:
    """OUT/work holds the reproduction's runs: it must be a folder the reproduction
    made (or is making now), never a stranger's `work/` (`-o /` would fill `/work`)."""
    from ..fsutil import claim_folder
    if out.resolve() == Path(out.resolve().anchor):
        raise CommandError(f"-o {out}: the file-system root is no output folder; give a folder "
                           "of the reproduction's own (e.g. recordings/reproduce)")
    claim_folder(out / "work", owner="dtrf reproduce", may_hold=WORK_ENTRIES, create=create)


def _findings(out: Path, map_seconds: float, run_timeout: float, jobs: int | None,
              total_seconds: float | None, scheduler: str | None) -> None:
    """`--findings`: run or resume the maps with progress on stderr (a bar on a
    terminal, a line per map and every few seconds elsewhere), write findings.md;
    `total_seconds` counts from here, less a compile of the kernel."""
    started = time.perf_counter()
    from .. import validate
    from ..recorder.reader import refuse_inside_recording
    from ..render.console import err_console
    from ..render.reproduce_findings import place_findings
    from ..reproduce.findings import findings

    validate.positive(map_seconds, "--map-seconds")
    validate.positive(run_timeout, "--run-timeout")
    if jobs is not None:
        validate.jobs(jobs)
    if total_seconds is not None:
        validate.positive(total_seconds, "--total-seconds")
    if scheduler is not None:   # an empty address is refused, as by dtrf sweep
        sweep_engine(None, scheduler)
    refuse_inside_recording(out / "findings.md")
    _claim_work(out)
    from .kernel_notice import announce_compile
    compiling = time.perf_counter()
    announce_compile(sharing=True)
    started += time.perf_counter() - compiling     # a compile is not the command's time
    err = err_console()
    work = out / "work" / "findings"
    print(f"findings: mapping into {work}"
          + (f" on the Dask cluster at {scheduler}" if scheduler else "")
          + (f" for at most {total_seconds:g} s" if total_seconds else ""), file=sys.stderr)
    with (_bar(err, map_seconds) if err.is_terminal else _lines()) as show:
        result = findings(work, map_seconds=map_seconds, run_timeout=run_timeout, jobs=jobs,
                          scheduler=scheduler, progress=show, on_estimate=_say_estimate,
                          total_seconds=None if total_seconds is None else
                          total_seconds - (time.perf_counter() - started))
    command = (f"dtrf reproduce --findings -o {out} --map-seconds {map_seconds:g} "
               f"--run-timeout {run_timeout:g}"
               + (f" --total-seconds {total_seconds:g}" if total_seconds else ""))
    placed = place_findings(result, out, command=command,
                            wall_seconds=time.perf_counter() - started)
    if placed.replaced:
        print(f"replaced {placed.path}", file=sys.stderr)
    if placed.kept is not None:
        print(f"findings: {placed.kept} is more complete ({placed.theirs.describe()}) than "
              f"this run ({placed.ours.describe()}) and is left as it is; this run's "
              f"report is beside it, {placed.path}", file=sys.stderr)
    print(f"findings: {placed.path}" + (" (partial: the time ran out; the next run resumes)"
                                        if result.out_of_time else ""), file=sys.stderr)


def _say_estimate(spec, estimate) -> None:
    """A long map's cost, on stderr before it runs."""
    from ..render.sweep import estimate_line
    if estimate.long:
        print(estimate_line(estimate, prefix=f"{spec.name} {spec.policy_name} "
                                             f"{spec.ratio_from:g}-{spec.ratio_to:g}: "),
              file=sys.stderr, flush=True)


LINE_SECONDS = 10.0     # a running map's progress line, at most this often


@contextlib.contextmanager
def _lines():
    from ..render.reproduce_findings import progress_line
    last: dict = {}

    def show(p) -> None:
        now = time.monotonic()
        if p.state == "running" and now - last.get(p.index, -LINE_SECONDS) < LINE_SECONDS:
            return
        last[p.index] = now
        print(progress_line(p), file=sys.stderr, flush=True)
    yield show


@contextlib.contextmanager
def _bar(console, map_seconds: float):
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from ..render.wrapping import kept_progress as Progress
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("maps", total=None)

        def show(p) -> None:
            left = (p.total - p.index) * map_seconds + max(0.0, p.limit - p.seconds)
            here = (f"~{p.seconds / p.coverage - p.seconds:,.0f} s to finish" if p.coverage > 0
                    else "starting")
            bar.update(task, total=p.total, completed=p.index - (p.state == "running"),
                       description=f"{p.spec.name} {p.spec.policy_name} {p.spec.ratio_from:g}-"
                                   f"{p.spec.ratio_to:g}: {p.coverage:.1%} certified ({here}); "
                                   f"at most {left / 60:,.0f} min left")
        yield show
