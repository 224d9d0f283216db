"""How `dtrf` reports an error: one line on stderr and the error's exit code.

The hierarchy lives in the library (`dtrforensics.errors`); this module is the
one place that turns it into exit codes. An operating-system error on a path
(permission denied, no such directory, disk full) is the user's to fix too.
"""

from __future__ import annotations

import sys

from ..errors import EXIT_USER, UserError, one_line


class CommandError(UserError):
    """A command-level problem worth one clear line, not a traceback."""


def describe(exc: BaseException) -> str:
    """One line: the message, with an OSError's file and reason spelled out."""
    if isinstance(exc, OSError) and not isinstance(exc, UserError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename is not None else ""
        return one_line(f"{where}{exc.strerror}")
    return one_line(str(exc)) or type(exc).__name__


def exit_code(exc: BaseException) -> int:
    return exc.exit_code if isinstance(exc, UserError) else EXIT_USER


def report_user_error(exc: BaseException) -> int:
    """Print `error: ...` and return the exit code for `exc`."""
    print(f"error: {describe(exc)}", file=sys.stderr)
    return exit_code(exc)
