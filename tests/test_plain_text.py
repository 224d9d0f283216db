"""Every value, name and path is printed as text, never read as rich markup: brackets,
`[/tag]`s and `:emoji:` codes show exactly as they are and crash nothing."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from cli import dtrf
from rich.text import Text

from dtrforensics.render.console import console, esc, styled
from dtrforensics.render.tables import FitPanel, FitTable

TRACE = "hole"          # the packaged synthetic trace: 24 ops, always available
HOSTILE = ["[/x]", "[bold red]a[/bold red]", ":cat: :smile:", "a\\", "[link=x]y[/link]",
           "[", "]", "[/]"]


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A folder named `x[` holding `b]`: the path `x[/b]` is a closing tag as markup."""
    root = tmp_path_factory.mktemp("plain")
    (root / "x[" / "b]").mkdir(parents=True)
    return root


def _ok(result) -> None:
    assert result.traceback is None, result.traceback
    assert result.code == 0, (result.code, result.err)


def test_run_record_show_and_sql_on_a_folder_named_as_markup(ws):
    rec = "x[/b]/[bold]r:cat:"
    result = dtrf("run", TRACE, "--ratio", "0.6", "--record", rec, cwd=ws)
    _ok(result)
    assert rec in result.out
    shown = dtrf("show", rec, cwd=ws)
    _ok(shown)
    assert "[bold]r:cat:" in shown.out
    rows = dtrf("sql", "SELECT run_id, path FROM runs", rec, cwd=ws)
    _ok(rows)
    assert "[bold]r:cat:" in rows.out and str((ws / rec).resolve()) in rows.out


def test_sweep_and_sql_on_a_folder_named_as_markup(ws):
    out = "x[/b]/sw"
    result = dtrf("sweep", TRACE, "--from", "0.5", "--to", "1.0", "--step", "0.25", "--jobs", "1",
                  "-o", out, "--no-progress", cwd=ws)
    _ok(result)
    assert out in result.out + result.err
    rows = dtrf("sql", "SELECT DISTINCT sweep_id FROM runs", out, cwd=ws)
    _ok(rows)
    assert "sw" in rows.out


def test_sql_shows_every_value_and_column_name_exactly(ws):
    rec = ws / "x[" / "b]" / "plain"
    _ok(dtrf("run", TRACE, "--ratio", "0.6", "--record", rec))
    columns = ", ".join(f"'{v}' AS \"{v}\"" for v in HOSTILE)
    table = dtrf("sql", f"SELECT {columns}", rec, cwd=ws)
    _ok(table)
    as_csv = dtrf("sql", f"SELECT {columns}", rec, "--csv", cwd=ws)
    assert list(csv.reader(io.StringIO(as_csv.out))) == [HOSTILE, HOSTILE]
    cells = [c.strip() for line in table.out.splitlines() if "│" in line or "┃" in line
             for c in line.strip("│┃ ").replace("┃", "│").split("│")]
    assert cells == HOSTILE + HOSTILE
    settings = dtrf("sql", "SELECT name, value FROM duckdb_settings()", rec, "--limit", "1000",
                    cwd=ws)
    _ok(settings)
    assert "allowed_directories" in settings.out


def test_only_styled_strings_are_markup():
    out = console(file=io.StringIO(), width=200, color_system=None)
    for value in HOSTILE:
        out.print(value)
        out.print(f"path {value}")
        out.print(styled(f"[bold]path[/] {esc(value)}"))
        table = FitTable(title=value)
        table.add_column(value)
        table.add_row(value)
        out.print(table)
        out.print(FitPanel(Text("inside"), title=value))
    text = out.file.getvalue()
    for value in HOSTILE:
        assert f"\npath {value}\n" in f"\n{text}" and text.count(value) >= 7
    assert "[bold]path[/]" not in text
