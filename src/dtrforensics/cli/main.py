"""The `dtrf` command: a thin layer that parses arguments, calls analyses, renders.

Each command family lives in its own module with a `register(app)` function;
`COMMAND_MODULES` lists them in the order they appear in `--help`.
"""

from __future__ import annotations

import importlib
import sys

import typer

from .errors import UserError, report_user_error

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
    "torch_cmd",
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


def main() -> None:
    """Console entry point. Usage errors exit 2 (click reports them); user errors
    (bad trace file, unknown name, bad option value) become one line and exit 2."""
    try:
        app()
    except UserError as exc:
        report_user_error(exc)
        sys.exit(2)
    except KeyboardInterrupt:
        print("Aborted.", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
