"""A recording at a glance: a per-op timeline of memory, pinned bytes, depth,
evictions and remats as sparklines; and query results as a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .tables import FitTable
from .units import fmt_bytes

SPARK = " ▁▂▃▄▅▆▇█"
LABEL_WIDTH = 10
SCALE_WIDTH = 24
NUMERIC_TYPES = ("BIGINT", "INTEGER", "DOUBLE", "HUGEINT", "SMALLINT", "TINYINT", "FLOAT",
                 "UBIGINT", "UINTEGER")


def bucket_max(values: np.ndarray, width: int) -> np.ndarray:
    """Max of each of `width` consecutive slices (one slice per value if it fits)."""
    values = np.asarray(values)
    if len(values) <= width:
        return values
    edges = np.linspace(0, len(values), width + 1).astype(np.int64)[:-1]
    return np.maximum.reduceat(values, edges)


def sparkline(values: np.ndarray, top: float) -> str:
    """One character per value, 8 levels from 0 to `top`; any positive value shows."""
    if top <= 0:
        return " " * len(values)
    levels = np.ceil(np.asarray(values, dtype=np.float64) / top * 8).clip(0, 8).astype(int)
    return "".join(SPARK[i] for i in levels)


def timeline_panel(t: dict[str, np.ndarray], budget: int, oom_op: int | None, width: int) -> Panel:
    """Sparklines of the per-op series, `width` columns wide, with an op axis."""
    n = len(t["op_id"])
    if n == 0:
        return Panel("no ops ran", title="timeline", expand=False)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", width=LABEL_WIDTH, no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(style="dim", no_wrap=True)
    for label, values, top, scale in (
        ("memory", t["memory_max"], budget, f"0..budget {fmt_bytes(budget)}"),
        ("pinned", t["pinned_max"], budget, f"0..budget {fmt_bytes(budget)}"),
        ("depth", t["depth_max"], int(t["depth_max"].max()), f"0..{int(t['depth_max'].max())}"),
        ("evictions", t["evictions"], int(t["evictions"].max()), f"0..{int(t['evictions'].max())}"),
        ("remats", t["remats"], int(t["remats"].max()), f"0..{int(t['remats'].max())}"),
    ):
        grid.add_row(label, Text(sparkline(bucket_max(values, width), top), style="cyan"), scale)
    cols = min(n, width)
    first, last = f"op {int(t['op_id'][0])}", f"op {int(t['op_id'][-1])}"
    grid.add_row("", Text(first.ljust(max(cols - len(last), len(first) + 1)) + last, style="dim"), "")
    if oom_op is not None:
        where = min(int(np.searchsorted(t["op_id"], oom_op)) * cols // n, cols - 1)
        tag = f"▲ OOM at op {oom_op}"
        if where + len(tag) > cols:
            tag = f"OOM at op {oom_op} ▲"
            where = max(where - len(tag) + 1, 0)
        grid.add_row("", Text(" " * where + tag, style="red"), "")
    per = "op" if n <= width else f"{n / cols:.1f} ops (max of each)"
    return Panel(grid, title=f"timeline: {n:,} ops, one column per {per}", expand=False)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value)
    return shown_escaped(str(value))


# C0 and C1 control characters and DEL: a TAB would split a value, a CR hide what
# precedes it, a newline look like two rows and an ESC reach the terminal raw.
_CONTROLS = {c: repr(chr(c))[1:-1] for c in [*range(0x20), *range(0x7f, 0xa0)]}


def shown_escaped(text: str) -> str:
    """`text` with its control characters written as escapes (`\\t`, `\\r`, `\\n`,
    `\\x1b`): the table view only; CSV, JSON and Parquet keep values exact."""
    return text.translate(_CONTROLS)


def result_table(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]) -> FitTable:
    """Query rows under (name, SQL type) columns; numbers right-aligned."""
    table = FitTable(show_lines=False)
    for name, type_ in columns:
        is_num = type_ in NUMERIC_TYPES or type_.startswith("DECIMAL")
        table.add_column(name, justify="right" if is_num else "left", overflow="fold")
    for row in rows:
        table.add_row(*map(_cell, row))
    return table
