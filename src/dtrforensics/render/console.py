"""Consoles: one place decides how wide output is when it goes to a pipe."""

from __future__ import annotations

import os

from rich.console import Console

PIPE_WIDTH = 200    # columns when stdout is not a terminal and COLUMNS is unset


def wide_console(*, stderr: bool = False) -> Console:
    """A console that does not wrap wide tables at 80 columns in a pipe (no
    terminal, no COLUMNS); on a terminal, the terminal's width."""
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=max(console.width, PIPE_WIDTH))
    return console


def err_console() -> Console:
    """Messages and progress on standard error."""
    return Console(stderr=True)
