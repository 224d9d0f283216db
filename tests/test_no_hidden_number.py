"""No number hidden on a narrow terminal (render/tables.py and every command's output).

A table is drawn when it fits the console and becomes `key: value` lines when it
does not; either way every number of the data (bytes, run ids, ratios) appears
whole: never folded across lines, never cut short with "…". The commands are
run on the embedded trace (traces/hole-rnn-seed16.log, whose exact hole spans
25,177,836 - 25,233,075 B: tests/test_edges.py) at 60, 80 and 120 columns and
their text is checked against the numbers of their own --json output.
"""

from __future__ import annotations

import io
import re

import pytest
from cli import dtrf
from rich.console import Console
from rich.panel import Panel

from dtrforensics.render.tables import FitTable

WIDTHS = (40, 60, 80, 120)
HOLE_BUDGET = "hole@25200000B"      # inside the hole: OOM
OK_BUDGET = "hole@25177835B"        # one byte below it: completes


def rendered(renderable, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, record=True)
    console.print(renderable)
    return console.export_text()


def whole(number: str, text: str) -> bool:
    """`number` appears in `text` with no digit, comma or point glued to either side."""
    return re.search(rf"(?<![\d.])(?<!\d,){re.escape(number)}(?!\d|,\d)", text) is not None


def assert_whole(numbers, text: str) -> None:
    assert "…" not in text
    missing = [n for n in numbers if not whole(n, text)]
    assert not missing, f"cut or missing: {missing}\n{text}"


def wide_table() -> tuple[FitTable, list[str]]:
    t = FitTable(title="failing budgets")
    for col in ("first byte", "last byte", "width", "run"):
        t.add_column(col, justify="right")
    rows = [(1_024_657_200, 1_069_656_159, "resnet32-dtr-1024657200B-4ca4f164"),
            (981_111_552, 981_111_807, "resnet32-dtr-0.0975146-0fdd7328")]
    numbers = []
    for lo, hi, run in rows:
        cells = [f"{lo:,}", f"{hi:,}", f"{hi - lo + 1:,}", run]
        t.add_row(*cells)
        numbers += cells
    return t, numbers


@pytest.mark.parametrize("width", WIDTHS)
def test_every_number_whole_at_any_width(width):
    table, numbers = wide_table()
    assert_whole(numbers, rendered(table, width))
    inside, _ = wide_table()
    assert_whole(numbers, rendered(Panel(inside), width))


def test_a_table_that_fits_is_drawn_and_one_that_does_not_becomes_lines():
    table, _ = wide_table()
    wide = rendered(table, 200)
    assert "first byte ┃" in wide and "first byte:" not in wide
    narrow = rendered(table, 60)
    assert "┃" not in narrow
    assert "  first byte: 1,024,657,200   last byte: 1,069,656,159" in narrow.splitlines()


def test_lines_pack_pairs_without_splitting_one():
    table, _ = wide_table()
    for line in rendered(table, 60).splitlines():
        assert len(line) <= 60
        assert not line.rstrip().endswith(":"), line


def test_elastic_columns_wrap_and_rigid_ones_keep_the_table():
    t = FitTable()
    t.add_column("budget", justify="right")
    t.add_column("note", overflow="fold")
    t.add_row("1,024,657,199", "the last budget that completes before the hole opens")
    text = rendered(t, 40)
    assert "budget ┃" in text and whole("1,024,657,199", text)


def test_row_headings_and_continuation_rows():
    t = FitTable(heading=True)
    for col in ("step", "allocation", "request"):
        t.add_column(col)
    t.add_row("615", "x8972 ← constant_pad_nd", "42.88 MiB")
    t.add_row("", "↳ evict 291 x8198 (85.75 MiB) score 2.75357e-09", "")
    lines = rendered(t, 50).splitlines()
    assert lines[0].startswith("step 615") and "request: 42.88 MiB" in "\n".join(lines)
    assert lines[-1].strip() == "↳ evict 291 x8198 (85.75 MiB) score 2.75357e-09"


def test_headerless_table_gives_key_value_lines():
    t = FitTable(show_header=False)
    t.add_column("field")
    t.add_column("value")
    t.add_row("peak memory", "26.18 MiB (27,446,976 B) after op 17 linear_backward" * 2)
    text = rendered(t, 40)
    assert text.startswith("  peak memory: ") and whole("27,446,976", text)


# --- the commands -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A working folder with an exact sweep across the embedded trace's hole."""
    root = tmp_path_factory.mktemp("narrow")
    res = cli(root, 120, "sweep", "hole", "--from", "0.9172", "--to", "0.9215", "--exact",
              "--jobs", "1", "-o", "sweep")
    assert res.code == 0, res.err
    return root


def cli(cwd, width: int, *args: str):
    return dtrf(*args, cwd=cwd, columns=width)


def numbers_of(folder, *args: str) -> dict:
    return cli(folder, 200, *args, "--json").json()


@pytest.fixture(scope="module")
def edges_doc(folder):
    return numbers_of(folder, "edges", "sweep")


def test_edges_keep_every_byte(folder, edges_doc):
    budgets = [f"{e[side]['budget']:,}" for e in edges_doc["edges"]
               for side in ("below", "above")]
    assert len(budgets) >= 6
    assert_whole(budgets, cli(folder, 60, "edges", "sweep").out)


@pytest.mark.parametrize("width", (60, 80, 120))
def test_holes_keep_every_byte(folder, edges_doc, width):
    outcome_edges = [f"{e[side]['budget']:,}" for e in edges_doc["edges"]
                     if e["kind"] == "outcome" for side in ("below", "above")]
    holes = cli(folder, width, "holes", "sweep").out
    assert_whole(["25,177,836", "25,233,075", "55,240"] + outcome_edges, holes)


# 60 columns hides the most; test_wrapping.py runs these commands at 60, 80 and 120 too.
@pytest.mark.parametrize("width", (60, pytest.param(80, marks=pytest.mark.slow)))
def test_run_replay_oom_diff_keep_every_number(folder, width):
    run = numbers_of(folder, "run", "hole", "--budget", "25200000")
    text = cli(folder, width, "run", "hole", "--budget", "25200000").out
    assert_whole([f"{run['budget']:,}", f"{run['oom']['request']:,}",
                  f"{run['oom']['pinned']:,}"] + [f"{b:,}" for b in run["budget_interval"]], text)
    diff = numbers_of(folder, "diff", OK_BUDGET, HOLE_BUDGET)
    text = cli(folder, width, "diff", OK_BUDGET, HOLE_BUDGET).out
    runs = [diff["a"]["run_id"], diff["b"]["run_id"]]
    assert_whole(runs + [f"{diff['a']['budget']:,}", f"{diff['b']['budget']:,}"], text)
    replay = numbers_of(folder, "replay", HOLE_BUDGET)
    text = cli(folder, width, "replay", HOLE_BUDGET).out
    assert_whole([replay["run_id"], f"{replay['budget']:,}"]
                 + [f"{s['step']:,}" for s in replay["steps"]], text)
    oom = numbers_of(folder, "oom", HOLE_BUDGET)
    text = cli(folder, width, "oom", HOLE_BUDGET).out
    assert_whole([f"{oom[k]:,}" for k in ("request", "budget", "memory", "pinned", "shortfall")],
                 text)


def test_replay_says_which_moment_its_shortfall_is(folder):
    text = cli(folder, 80, "replay", HOLE_BUDGET).out
    assert "short at start" in text and "before any eviction" in " ".join(text.split())
    assert re.search(r"short at start: [+-]?\d[\d.]* (B|KiB|MiB)", text)
    oom = cli(folder, 80, "oom", HOLE_BUDGET).out
    assert "after the pool drained" in " ".join(oom.split())


def test_reevict_keeps_run_ids_and_counts(folder):
    doc = numbers_of(folder, "reevict", OK_BUDGET, HOLE_BUDGET)
    text = cli(folder, 60, "reevict", OK_BUDGET, HOLE_BUDGET).out
    assert_whole([r["run_id"] for r in doc["runs"]]
                 + [f"{r['budget']:,}" for r in doc["runs"]], text)
