"""Tables that never hide a number.

A `FitTable` is drawn as a table when it fits the console, and otherwise as
plain `key: value` lines, one block per row, so no byte count, run id or ratio
is ever folded, cut or elided with "…". Its columns never wrap, except the
ones added with `overflow="fold"` (prose, paths): those are *elastic* and
absorb a narrow console down to `ELASTIC_MIN` columns each, or down to their
longest unbreakable word (`wrapping.py`). A `FitPanel` likewise drops its border
when what it holds would be cut by it.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.panel import Panel
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from .console import Styled

UNBOUNDED = 1 << 20     # columns to measure a table's natural width in
ELASTIC_MIN = 12        # narrowest an elastic column may become


class FitTable(Table):
    """A `rich.table.Table` that falls back to `key: value` lines when it does not fit.

    In the lines form each row is a block of `header: value` pairs, as many to a
    line as fit, a pair never split. A table whose first column has no header
    (or made with `heading=True`) heads each block with that column's cell, and
    a row whose first cell is empty continues the block above it, its cells
    written without keys (the victims under a replay step). A headerless table
    (`show_header=False`) gives one `first cell: other cells` line per row."""

    def __init__(self, *args, heading: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.heading = heading

    def add_column(self, header="", footer="", *, overflow="ellipsis", no_wrap=False,
                   **kwargs) -> None:
        super().add_column(header, footer, overflow=overflow,
                           no_wrap=no_wrap or overflow != "fold", **kwargs)

    def fits(self, console: Console, options: ConsoleOptions) -> bool:
        """True when the rigid columns at their natural width, and the elastic ones
        at `ELASTIC_MIN` (or less if narrower), fit `options.max_width`."""
        wide = options.update_width(UNBOUNDED)
        needed = self._extra_width
        for column in self.columns:
            width = self._measure_column(console, wide, column)
            needed += (max(min(width.maximum, ELASTIC_MIN), width.minimum) if not column.no_wrap
                       else width.maximum)
        return needed <= options.max_width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.fits(console, options):
            yield from super().__rich_console__(console, options)
        else:
            yield from self.lines(console, options.max_width)

    def lines(self, console: Console, width: int) -> Iterable[Text]:
        """The table as `key: value` lines at most `width` wide (a single pair may
        be wider): title, one block per row, caption."""
        if self.title:
            yield _text(console, self.title, style="bold")
        headers = [_text(console, c.header).plain.replace("\n", " ") for c in self.columns]
        columns = [list(c.cells) for c in self.columns]
        headed = bool(headers) and (self.heading or not headers[0])
        for r in range(max((len(c) for c in columns), default=0)):
            cells = [_one_line(_text(console, col[r])) if r < len(col) else Text()
                     for col in columns]
            if not self.show_header:
                label, *rest = [c for c in cells if c.plain.strip()] or [Text()]
                yield Text.assemble("  ", label, ": ", Text("  ").join(rest))
            elif headed and not cells[0].plain.strip():
                yield Text.assemble("  ", Text("  ").join(c for c in cells if c.plain.strip()))
            elif headed:
                head = Text.assemble(f"{headers[0]} " if headers[0] else "", cells[0],
                                     style="bold")
                yield from _packed(list(zip(headers[1:], cells[1:])), width, head)
            else:
                if r:
                    yield Text("")
                yield from _packed(list(zip(headers, cells)), width)
        if self.caption:
            yield _text(console, self.caption, style="dim")


def _packed(pairs: list[tuple[str, Text]], width: int, head: Text | None = None,
            gap: str = "   ") -> Iterable[Text]:
    """`header: value` pairs (empty values left out), as many to a line as fit
    `width`, after `head` on the first line when given."""
    line = head.copy() if head is not None else Text("  ")
    filled = bool(line.plain.strip())
    for header, cell in pairs:
        if not cell.plain.strip():
            continue
        pair = Text.assemble(f"{header}: " if header else "", cell)
        if filled and len(line) + len(gap) + len(pair) > width:
            yield line
            line, filled = Text("  "), False
        if filled:
            line.append(gap)
        line.append_text(pair)
        filled = True
    if filled:
        yield line


def _text(console: Console, cell, style: str = "") -> Text:
    """A cell as text: markup strings rendered, `Text` kept, anything else by str()."""
    if isinstance(cell, Text):
        text = cell.copy()
    elif isinstance(cell, str):
        text = console.render_str(cell)
    else:
        text = Text(str(cell))
    if style:
        text.stylize(style)
    return text


def _one_line(text: Text) -> Text:
    """A multi-line cell on one line, its lines joined by ' · '."""
    parts = [p for p in text.split("\n") if p.plain.strip()]
    return Text(" · ").join(parts) if len(parts) > 1 else text


def _as_text(title):
    """A panel's title: a plain string as a `Text` (rich would read it as markup)."""
    return Text(title) if isinstance(title, str) and not isinstance(title, Styled) else title


class FitPanel(Panel):
    """A `rich.panel.Panel` drawn without its border (its title as a bold line
    above its content) when a line of its content would be wider than the inside
    of the border: a word that cannot be broken is never cut by the frame. Its
    title prints as it is unless `Styled` (rich reads a panel's string title as
    markup itself, not through the console)."""

    def __init__(self, *args, title=None, subtitle=None, **kwargs) -> None:
        super().__init__(*args, title=_as_text(title), subtitle=_as_text(subtitle), **kwargs)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        inner = options.update_width(max(1, options.max_width - 4))
        lines = Segment.split_lines(console.render(self.renderable, inner))
        if all(Segment.get_line_length(line) <= inner.max_width for line in lines):
            yield from super().__rich_console__(console, options)
            return
        if self.title:
            yield _text(console, self.title, style="bold")
        yield self.renderable
