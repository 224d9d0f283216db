"""A panel of text items that scrolls: each item (a stack level, a victim, a
line of the check) is wrapped to the panel's width where the terminal output
wraps (`render/wrapping.py`: never inside a number or a number and its unit),
and only the lines on screen are rendered, so a stack 900 levels deep or a step
with hundreds of victims costs what the screen shows."""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...render.wrapping import KeptText


def line_strip(widget: ScrollView, text: Text | None, width: int) -> Strip:
    """One line of a lazily drawn scroll view: `text` in the widget's style,
    scrolled sideways and cut to `width` (None: a blank line)."""
    base = widget.rich_style
    if text is None:
        return Strip.blank(width, base)
    scroll_x = widget.scroll_offset.x
    segments = Segment.apply_style(text.render(widget.app.console), base)
    return Strip(list(segments)).crop_extend(scroll_x, scroll_x + width, base)


class WrappedLines(ScrollView, can_focus=False):
    """`show(items)` replaces the items; `page(+1 / -1)` scrolls a screenful;
    `reveal(i)` scrolls item i into view; `in_view()` says which items show."""

    DEFAULT_CSS = """
    WrappedLines {
        overflow-x: hidden; scrollbar-gutter: stable;
        scrollbar-size-vertical: 1; scrollbar-size-horizontal: 0;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.items: list[Text] = []
        self._lines: list[Text] = []
        self._first: list[int] = []        # the first wrapped line of each item
        self._width = -1

    def show(self, items: list[Text]) -> None:
        self.items = list(items)
        self._width = -1
        self._wrap(self.scrollable_content_region.width)
        self.scroll_to(y=0, animate=False, immediate=True)
        self.refresh(layout=True)
        self.scrolled()

    def _wrap(self, width: int) -> None:
        if width == self._width or width <= 0:
            return
        lines: list[Text] = []
        first: list[int] = []
        for item in self.items:
            first.append(len(lines))
            lines.extend(KeptText.of(item).wrap(self.app.console, width))
        self._lines, self._first, self._width = lines, first, width
        self.virtual_size = Size(width, len(lines))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._wrap(width - self.styles.scrollbar_size_vertical)
        return len(self._lines)

    def on_resize(self) -> None:
        self._wrap(self.scrollable_content_region.width)
        self.scrolled()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.scrolled()

    def scrolled(self) -> None:
        """Called when the lines in view may have changed (titles follow)."""

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        return line_strip(self, self._lines[index] if index < len(self._lines) else None,
                          self.scrollable_content_region.width)

    def in_view(self) -> range:
        """The items with a line on screen (empty when there are none)."""
        if not self.items:
            return range(0)
        top = round(self.scroll_offset.y)
        bottom = top + max(1, self.scrollable_content_region.height)
        shown = [i for i, start in enumerate(self._first)
                 if start < bottom and self._end(i) > top]
        return range(shown[0], shown[-1] + 1) if shown else range(0)

    def _end(self, item: int) -> int:
        return self._first[item + 1] if item + 1 < len(self._first) else len(self._lines)

    def page(self, direction: int) -> None:
        height = self.scrollable_content_region.height
        step = height - 1 if height > 4 else max(1, height)     # one line of overlap
        self.scroll_to(y=self.scroll_offset.y + direction * step, animate=False,
                       immediate=True)

    def reveal(self, item: int) -> None:
        if 0 <= item < len(self._first):
            start = self._first[item]
            self.scroll_to_region(Region(0, start, 1, self._end(item) - start),
                                  animate=False, immediate=True, force=True)
