"""Consoles: one place decides how wide output is when it goes to a pipe, that
nothing drawn is cut (`wrapping.py`), and that text prints as it is.

Our consoles read a string as rich markup (`[bold]`, `[dim]...[/]`) only when
it is `Styled`, made with `styled(...)` by the code that wrote the tags; every
other string -- a path, a name, a query's value, an error message -- prints
exactly, brackets and colons included (no `MarkupError` from a folder named
`x[/b]`, no `[bold red]a[/bold red]` shown as `a`, no `:cat:` as an emoji). A
value put into a styled string goes through `esc`."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from .wrapping import KeptText

PIPE_WIDTH = 200    # columns when stdout is not a terminal and COLUMNS is unset


class Styled(str):
    """A string that is rich markup on purpose: the only strings our consoles
    parse for `[style]` tags."""


def styled(markup: str) -> Styled:
    """`markup` to be read as rich markup; every value in it must have gone
    through `esc` (`styled(f"[dim]wrote {esc(path)}[/]")`)."""
    return Styled(markup)


def esc(value: object) -> str:
    """`value` as text that markup shows exactly as it is."""
    return escape(str(value))


class KeptConsole(Console):
    """A console whose every text wraps by `wrapping.divide`, whose lines are
    never cropped at the edge (a word wider than the terminal is printed whole),
    and which reads markup only in a `Styled` string (see above)."""

    def render_str(self, text: str, *, markup: bool | None = None, emoji: bool | None = None,
                   **kwargs) -> Text:
        markup = isinstance(text, Styled) and markup is not False
        return KeptText.of(super().render_str(text, markup=markup, emoji=False, **kwargs))

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
