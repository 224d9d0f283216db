"""Errors a user can fix (bad file, unknown trace, bad option): message, exit code 2."""

from __future__ import annotations

import sys

from ..trace.parser import TraceError


class CommandError(Exception):
    """A command-level problem worth one clear line, not a traceback."""


UserError = (TraceError, CommandError, FileNotFoundError)


def report_user_error(exc: BaseException) -> None:
    print(f"error: {exc}", file=sys.stderr)
