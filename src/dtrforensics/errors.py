"""The errors a user can cause and fix, each with the exit code the CLI gives it.

Every problem a user can fix -- a bad option value, a missing, corrupt or
foreign file, an operation refused to protect data -- is a `UserError`. The
`dtrf` command maps the whole hierarchy once (`cli/main.py`): the message as
one line on stderr and the class's `exit_code`, never a traceback. Anything
else escaping a command is a bug in dtrforensics (exit 1, with a traceback).

Exit codes (also in the README):

    0   success
    1   a bug in dtrforensics (an unexpected exception)
    2   a user error: bad option, missing or corrupt input, refused operation
    3   the replay is not deterministic (a rerun or a control disagreed)
    130 interrupted (Ctrl-C)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USER = 2
EXIT_NOT_DETERMINISTIC = 3
EXIT_INTERRUPTED = 130


def one_line(text: str) -> str:
    """`text` as the one line an error is printed in: its lines joined by spaces
    (a library's message over several lines, a path with a newline in it)."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


class UserError(Exception):
    """A problem the user can fix; the message says what is wrong and where."""

    exit_code = EXIT_USER


class OptionError(UserError, ValueError):
    """An option or argument value that cannot describe what was asked."""


class DataError(UserError):
    """An input file or folder that is missing, corrupt or not what it claims to be."""


class RefusedError(UserError):
    """An operation refused because it could destroy or alter data."""


class NotDeterministicError(UserError):
    """Two executions that must be identical (a rerun, a control) are not."""

    exit_code = EXIT_NOT_DETERMINISTIC


class PolicyError(UserError):
    """A policy from a file that cannot be loaded or compiled, or whose score
    failed (raised, NaN, negative) during a replay: the message names the file
    and line, and the decision where it happened."""


class ClusterError(UserError):
    """The cluster a sweep runs on cannot be reached, or was lost while it ran:
    the runs finished before are kept and the same command resumes the sweep."""
