"""The `dtrf` command: a thin layer that parses arguments, calls analyses, renders.

Each command family lives in its own module with a `register(app)` function;
`COMMAND_MODULES` lists them in the order they appear in `--help`.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import typer

from ..errors import EXIT_INTERRUPTED, UserError
from .errors import report_user_error

COMMAND_MODULES = (
    "demo_cmd",
    "run_cmd",
    "record_cmd",
    "diff_cmd",
    "oom_cmd",
    "replay_cmd",
    "reevict_cmd",
    "intervene_cmd",
    "sweep_cmd",
    "export_cmd",
    "traces_cmd",
    "synth_cmd",
)

app = typer.Typer(
    name="dtrf",
    help="Forensic analysis of Dynamic Tensor Rematerialization (DTR): replay traces "
    "exactly as the reference simulator, record every decision, diff executions, "
    "explain OOMs and sweep budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    importlib.import_module(f"{__package__}.{_module}").register(app)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning is one `warning:` line, like an error (no source line)."""
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def main() -> None:
    """Console entry point. Usage errors exit 2 (click reports them); every
    `UserError` (and an OSError on a path) becomes one line and its exit code
    (see `dtrforensics.errors`); anything else is a bug and keeps its traceback."""
    warnings.showwarning = _show_warning
    try:
        app()
    except (UserError, OSError) as exc:
        sys.exit(report_user_error(exc))
    except KeyboardInterrupt:
        print("Aborted.", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)

if __name__ == "__main__":
    main()
