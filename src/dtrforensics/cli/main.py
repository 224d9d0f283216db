"""The `dtrf` command: a thin layer that parses arguments, calls analyses, renders.

Each command family lives in its own module with a `register(app)` function.
`COMMANDS` names every command, its module and its one-line help, so that
`dtrf --help` lists them without importing a single one: a command's module
(and the engine, DuckDB, Arrow, Textual or matplotlib behind it) is imported
only when that command runs or shows its own help.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from typing import Any

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError
from typer.core import TyperCommand, TyperGroup

from ..errors import EXIT_INTERRUPTED, EXIT_USER, UserError, one_line
from .errors import report_user_error

HELP = ("Forensic analysis of Dynamic Tensor Rematerialization (DTR): replay traces "
        "exactly as the reference simulator, record every decision, diff executions, "
        "explain OOMs and sweep budgets.")

GLOSSARY = "Terms: docs/glossary.md"     # every --help ends with it

# name -> (module under cli/, one-line help shown by `dtrf --help`), in --help order;
# a group spread over several modules names them joined by "+".
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo_cmd", "Find, explain and fix a feasibility hole, end to end, on the embedded trace."),
    "run": ("run_cmd", "Replay TRACE under a memory budget exactly as the reference DTR simulator."),
    "sql": ("sql_cmd", "Run SQL over recordings (one `run_id` column tells them apart) or sweep folders (one `sweep_id` column)."),
    "show": ("show_cmd", "A recording's run summary and a per-op timeline of memory, pinned bytes and depth."),
    "diff": ("diff_cmd", "Compare two executions of one trace: first divergence of the eviction streams, first divergent choice, aftermath, and what a failing run lost."),
    "oom": ("oom_cmd", "Explain an OOM: the chain of in-progress materializations down to the failing allocation, the bytes each level holds locked, and proof the pool was empty."),
    "replay": ("replay_cmd", "Replay a recording allocation by allocation: request, memory, budget, pinned and pool bytes at each check, and every victim with its score and runner-up."),
    "regime": ("regime_cmd", "Compare two runs in different regimes: evictions per op window, the onset of the slow regime, the storages that drive it, the link to the first divergence."),
    "reevict": ("reevict_cmd", "Re-eviction figures (evictions per storage, concentration, collateral remats), each over pressure victims alone and over the whole eviction stream."),
    "intervene": ("intervene_cmd", "Run TRACE at a budget three times: baseline, with the intervention, and a control (same code path, nothing changed) that must reproduce the baseline."),
    "explain": ("explain_cmd", "For a failing run, find the single changes that turn the failure into a completion: retaining a storage the failing frontier needed, or forcing another victim at the first divergent choice against a nearby completing budget or at one of the last decisions; singles first, then retained pairs."),
    "sweep": ("sweep_cmd", "Replay TRACE over a range of budgets, in parallel, resumably; then map its holes."),
    "holes": ("holes_cmd", "Feasibility holes, edges, timeouts and regime switches of a sweep."),
    "edges": ("edges_cmd", "Both sides of every edge of a sweep (outcome or regime changes): the budget comparison that decides it, to the byte, and the first divergent victim."),
    "compare-policies": ("compare_policies_cmd", "Several eviction policies over one budget range: holes, first success, overheads, regime switches, and which policy is best where, with a figure."),
    "plot": ("plot_cmd", "Overhead against budget ratio per policy, failing budgets and holes marked."),
    "export": ("export_cmd", "Export SOURCE for another tool."),
    "traces": ("traces_cmd", "List, inspect, fetch and import DTR traces."),
    "torch": ("torch_cmd+torch_run_cmd+torch_plan_cmd", "Record DTR logs from your own PyTorch models."),
    "synth": ("synth_cmd", "Write a seeded synthetic DTR log (the public logs' exact format) and print a one-line summary: ops, tensors, unconstrained peak and model compute."),
    "reproduce": ("reproduce_cmd", "Both DTR studies' published numbers beside ours, with a verdict each, and their figures in a report."),
}


@functools.cache
def load_command(name: str) -> Any:
    """The real click command behind `name`: its module registers on a scratch app.
    Made once per process: a process that runs several commands (the Python API's
    callers, the suite) built each one's options again on every run, about 50 ms."""
    modules, _ = COMMANDS[name]
    scratch = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    for module in modules.split("+"):
        importlib.import_module(f"{__package__}.{module}").register(scratch)
    command = typer.main.get_command(scratch)
    if isinstance(command, TyperGroup) and name in command.commands:
        command = command.commands[name]
    for each in [command, *getattr(command, "commands", {}).values()]:
        each.epilog = GLOSSARY
    return command


class LazyCommand(TyperCommand):
    """Stands in for a command in the listing; loads the real one when used."""

    def __init__(self, name: str, short_help: str):
        super().__init__(name=name, callback=None, params=[], help=short_help,
                         short_help=short_help)
        self._real: Any = None

    def real(self) -> Any:
        if self._real is None:
            self._real = load_command(self.name)
        return self._real

    def make_context(self, info_name, args, parent=None, **extra):
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def shell_complete(self, ctx, incomplete):
        return self.real().shell_complete(ctx, incomplete)


class LazyGroup(TyperGroup):
    """The `dtrf` group: lists `COMMANDS` and hands out `LazyCommand`s."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.commands.update({name: LazyCommand(name, short_help)
                              for name, (_, short_help) in COMMANDS.items()})


app = typer.Typer(cls=LazyGroup, name="dtrf", help=HELP, invoke_without_command=True,
                  epilog=GLOSSARY, rich_markup_mode=None, add_completion=False,
                  pretty_exceptions_enable=False)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__
        print(f"dtrf {__version__}")
        raise typer.Exit()


@app.callback()
def _dtrf(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """Bare `dtrf` prints its help and succeeds: asking what there is is no error."""
    if ctx.invoked_subcommand is None:
        print(ctx.get_help())
        raise typer.Exit()


# Packages a command may import that an install can lack, and what to install.
_INSTALL = {"torch": "'dtrforensics[torch]'", "dask": "'dtrforensics[dask]'",
            "distributed": "'dtrforensics[dask]'", "perfetto": "'dtrforensics[interop]'"}


def _missing_package(exc: ImportError) -> str | None:
    """The `error:` line for an import that failed outside dtrforensics (an
    optional package or a broken install), or None for a bug of ours. A
    re-raised ImportError still carries the original as its context."""
    found: BaseException | None = exc
    while found is not None and not getattr(found, "name", None):
        found = found.__cause__ or found.__context__
    missing = (getattr(found, "name", None) or "").partition(".")[0]
    if missing == "dtrforensics" or (not missing and "pip install" not in str(exc)):
        return None
    if not missing:
        return str(exc)
    return (f"this command needs the {missing} package, which cannot be imported "
            f"({found}): pip install {_INSTALL.get(missing, missing)}")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning is one `warning:` line, like an error (no source line)."""
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def main() -> None:
    """Console entry point. A usage error (click's: a bad value, an unknown option or
    command) is one `error:` line and exit 2, like every
    `UserError` (and an OSError on a path) becomes one line and its exit code
    (see `dtrforensics.errors`), and so does a package the install lacks;
    anything else is a bug and keeps its traceback."""
    warnings.showwarning = _show_warning
    from ..render.lines import wrapped_stderr
    with wrapped_stderr():
        _main()


def _usage_line(exc: ClickException) -> str:
    """A click usage error (a bad or missing value, an unknown option or command)
    as one line: the command, what is wrong, and where the help is."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "dtrf"
    what = one_line(exc.format_message()).rstrip(".")
    return f"{path}: {what[:1].lower()}{what[1:]} (see '{path} --help')"


def _main() -> None:
    try:
        code = app(standalone_mode=False)     # click's own 4-line usage report is not ours
        if isinstance(code, int) and code:      # typer.Exit(code) comes back as its code
            sys.exit(code)
    except NoArgsIsHelpError as exc:          # `dtrf traces`: its help, as before
        exc.show()
        sys.exit(exc.exit_code)
    except ClickException as exc:
        print(f"error: {_usage_line(exc)}", file=sys.stderr)
        sys.exit(EXIT_USER)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except (UserError, OSError) as exc:
        sys.exit(report_user_error(exc))
    except ImportError as exc:
        line = _missing_package(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(EXIT_USER)
    except KeyboardInterrupt:
        print("Aborted.", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
