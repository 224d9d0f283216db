"""Consoles: one place decides how wide output is when it goes to a pipe, and
that nothing drawn is cut (`wrapping.py`)."""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

from .wrapping import KeptText

PIPE_WIDTH = 200    # columns when stdout is not a terminal and COLUMNS is unset


class KeptConsole(Console):
    """A console whose every text wraps by `wrapping.divide` and whose lines are
    never cropped at the edge (a word wider than the terminal is printed whole)."""

    def render_str(self, text: str, **kwargs) -> Text:
        return KeptText.of(super().render_str(text, **kwargs))

    def render(self, renderable, options=None):
        if isinstance(renderable, Text) and not isinstance(renderable, KeptText):
            renderable = KeptText.of(renderable)
        return super().render(renderable, options)

    def print(self, *objects, crop: bool = False, **kwargs) -> None:
        super().print(*objects, crop=crop, **kwargs)


def console(*, stderr: bool = False, **kwargs) -> Console:
    """The console every command prints through."""
    return KeptConsole(stderr=stderr, **kwargs)


def wide_console(*, stderr: bool = False) -> Console:
    """A console that does not wrap wide tables at 80 columns in a pipe (no
    terminal, no COLUMNS); on a terminal, the terminal's width."""
    out = console(stderr=stderr)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = console(stderr=stderr, width=max(out.width, PIPE_WIDTH))
    return out


def err_console() -> Console:
    """Messages and progress on standard error."""
    return console(stderr=True)
