"""Wrapping never breaks a number, digest, path or number-unit pair (render/wrapping.py).

Every command that has `--json` runs on the embedded trace (hole-rnn-seed16,
peak 27,446,976 B, an exact hole 25,177,836 - 25,233,075 B) at 200 columns, where
nothing needs to wrap, and at 60, 80 and 120. What its JSON holds (byte counts
as the text writes them, digests, paths, run ids) and what its wide text shows
as a number with its unit must then appear whole at every width: on one line,
with no digit glued on either side.
"""

from __future__ import annotations

import json
import re

import pytest
from cli import dtrf
from rich.text import Text

from dtrforensics.render.console import console
from dtrforensics.render.wrapping import divide

WIDTHS = (60, 80, 120)
WIDE = 200
HOLE = "hole@25200000B"         # inside the hole: OOM
OK = "hole@25177835B"           # one byte below it: completes
PAIR = re.compile(r"(?<![\w.,-])(?:Σ )?-?\d[\d,]*(?:\.\d+)? (?:B|KiB|MiB|GiB|ns|us|ms|s)(?!\w)")

WALL = re.compile(r"\d+\.\d+ (?:s|ms)")

COMMANDS = {
    "run": ["run", "hole", "--budget", "25200000"],
    "show": ["show", "rec"],
    "diff": ["diff", OK, HOLE],
    "oom": ["oom", HOLE],
    "replay": ["replay", HOLE],
    "regime": ["regime", "hole@25288252B", "hole@25288251B", "--window", "2"],
    "reevict": ["reevict", OK, HOLE],
    "intervene": ["intervene", "hole", "--budget", "25200000", "--retain", "3"],
    "explain": ["explain", "hole", "--budget", "25200000"],
    "holes": ["holes", "sweep"],
    "edges": ["edges", "sweep", "--max-edges", "1"],     # each edge is drawn alike
    "compare-policies": ["compare-policies", "hole", "--from", "0.9172", "--to", "0.9215",
                         "--exact", "--policy", "dtr,lru", "--jobs", "1", "-o", "cmp",
                         "--no-progress"],
    "traces list": ["traces", "list"],
    "traces info": ["traces", "info", "hole"],
    "synth": ["synth", "rnn", "-o", "synth.log"],
}


def cli(cwd, width: int, args: list[str]):
    return dtrf(*args, cwd=cwd, columns=width).ok()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A sweep across the hole and a recording inside it."""
    root = tmp_path_factory.mktemp("wrap")
    cli(root, WIDE, ["sweep", "hole", "--from", "0.9172", "--to", "0.9215", "--exact",
                     "--jobs", "1", "-o", "sweep", "--no-progress"])
    cli(root, WIDE, ["run", "hole", "--budget", "25200000", "--record", "rec"])
    return root


def leaves(doc) -> list:
    if isinstance(doc, dict):
        return [x for v in doc.values() for x in leaves(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in leaves(v)]
    return [doc]


def candidates(doc) -> set[str]:
    """What a text may show of a JSON document: integers of four digits and more
    (grouped by commas, as the text writes bytes, and bare), digests, paths and
    run ids (strings with no space of at least 12 characters)."""
    out: set[str] = set()
    for v in leaves(doc):
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1000:
            out |= {f"{v:,}", str(v)}
        elif isinstance(v, str) and len(v) >= 12 and " " not in v:
            out.add(v)
    return out


def whole(token: str, text: str) -> bool:
    return re.search(rf"(?<![\w.,/-]){re.escape(token)}(?![\w/]|[.,]\d)", text) is not None


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_number_digest_and_path_is_whole_at_any_width(folder, name):
    args = COMMANDS[name]
    doc = json.loads(cli(folder, WIDE, [*args, "--json"]))
    wide = cli(folder, WIDE, args)
    shown = {c for c in candidates(doc) if whole(c, wide)}
    # What changes between runs (wall times) is left out: a pair must read alike in
    # three runs, and a time of a few milliseconds is not taken even then.
    pairs = set(PAIR.findall(wide))
    for _ in range(2):
        pairs &= set(PAIR.findall(cli(folder, WIDE, args)))
    shown |= {p for p in pairs if not WALL.fullmatch(p)}
    assert shown, f"{name}: the text shows nothing of its JSON\n{wide}"
    for width in WIDTHS:
        text = cli(folder, width, args)
        assert "…" not in text
        cut = sorted(t for t in shown if not whole(t, text))
        assert not cut, f"{name} at {width} columns cuts {cut}\n{text}"


def test_continued_indented_lines_stay_indented():
    line = "  ↳ evict 291 x8198 (85.75 MiB) score 2.75357e-09 runner-up 3.1e-09 x8199"
    offsets = divide(line, 40, hang=4)
    parts = [line[a:b] for a, b in zip([0, *offsets], [*offsets, len(line)])]
    assert "".join(parts) == line and len(parts) > 1
    assert "(85.75 MiB)" in "".join(p for p in parts if "85.75" in p)
    out = console(width=40, record=True, file=open("/dev/null", "w"), color_system=None)
    out.print(Text(line))
    lines = out.export_text().splitlines()
    assert lines[0].startswith("  ↳ evict") and all(x.startswith("    ") for x in lines[1:])


def test_a_word_wider_than_the_terminal_is_printed_whole():
    digest = "946d63b6607c1acbc131541db7fc9d359515dd9f895dcbb0cb662fa591f95172"
    out = console(width=40, record=True, file=open("/dev/null", "w"), color_system=None)
    out.print(f"victims sha256: {digest}")
    assert digest in out.export_text().splitlines()


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def test_stderr_wraps_at_columns_and_never_inside_a_number(monkeypatch):
    """Everything on stderr (here an error line) goes through one writer that wraps
    at COLUMNS, at a space that splits no number; with no terminal and no
    COLUMNS the line is left whole (a pipe cuts nothing)."""
    args = ("run", "hole", "--budget", "99999999999999999999")
    monkeypatch.delenv("COLUMNS", raising=False)
    whole = dtrf(*args).err.strip()
    assert whole.count("\n") == 0 and len(whole) > 40
    monkeypatch.setenv("COLUMNS", "40")
    res = dtrf(*args)
    assert res.code == 2
    lines = res.err.strip().splitlines()
    assert len(lines) > 1 and all(len(ln) <= 40 for ln in lines), lines
    assert " ".join(" ".join(lines).split()) == whole
    numbers = NUMBER.findall(whole)
    assert numbers and all(n in ln for n in numbers
                           for ln in [next(ln for ln in lines if n[:4] in ln)])


def test_say_wraps_plain_lines_and_keeps_numbers_whole(capsys, monkeypatch):
    from dtrforensics.render.lines import say, wrap_line
    line = ("wrote my.log: rnn seed 16, 120 ops, 177 tensors, peak 143,519,120 B "
            "(136.87 MiB), model compute 23,636,232 ns (23.636 ms)")
    monkeypatch.setenv("COLUMNS", "80")
    say(line)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(len(ln) <= 80 for ln in out)
    assert "143,519,120 B" in out[0] and "23,636,232 ns" in out[1]
    assert out[1].startswith("  ")
    for width in range(20, 90, 7):
        parts = wrap_line(line, width).splitlines()
        assert " ".join(" ".join(parts).split()) == line
        for token in NUMBER.findall(line):
            assert any(re.search(rf"(?<![\d,.]){re.escape(token)}(?![\d,.]?\d)", p)
                       for p in parts), (width, token, parts)


def test_progress_bars_keep_their_totals_whole_at_80_columns():
    """A sweep's progress bar at 80 columns with a long note: rich would shrink
    every column alike and cut `1000/1000` to `100…`; the note gives way."""
    import io

    from dtrforensics.render.sweep import SweepProgress
    buf = io.StringIO()
    out = console(file=buf, width=80, force_terminal=True, color_system=None)
    with SweepProgress(out, True) as bar:
        bar.stage("exact", 1000, 520)
        bar.progress.update(bar.task, completed=1000,
                            note="520 stored, 12 ok 3 fail 1 unresolved")
    last = buf.getvalue().split("\x1b[2K")[-1]
    assert "1000/1000" in last and "…" not in last, repr(last)
    assert all(len(ln) <= 80 for ln in re.sub(r"\x1b\[[\d;?]*[A-Za-z]", "", last).splitlines())


def test_a_finish_command_wraps_into_lines_a_shell_runs_whole(tmp_path):
    """The command that finishes a sweep, at 80 columns: no line over 80 (the
    terminal cut `--max-runs 4,000` mid-number), and the lines, pasted into a
    shell, are the command printed on one line at 200 columns."""
    import shlex
    cli(tmp_path, WIDE, ["sweep", "hole", "--from", "0.5", "--to", "1.0", "--exact",
                         "--max-runs", "3", "--jobs", "1", "-o", "sw", "--no-progress"])
    wide = next(ln for ln in cli(tmp_path, WIDE, ["holes", "sw"]).splitlines()
                if "to finish" in ln)
    narrow = cli(tmp_path, 80, ["holes", "sw"]).splitlines()
    start = next(i for i, ln in enumerate(narrow) if "to finish" in ln)
    end = next(i for i in range(start, len(narrow)) if not narrow[i].endswith(" \\"))
    block = narrow[start:end + 1]
    assert len(block) > 1 and all(len(ln) <= 80 for ln in block), block
    pasted = "\n".join(block)
    pasted = pasted[pasted.index("dtrf "):].replace("\\\n", "")
    assert shlex.split(pasted) == shlex.split(wide[wide.index("dtrf "):])


def test_colour_codes_take_no_column_and_stay():
    """A coloured message on a terminal (rich writes colour codes) wraps by what
    shows; a live bar's cursor codes are left alone."""
    from dtrforensics.render.lines import wrap_line
    line = ("\x1b[33mwarning:\x1b[0m budget 1,234,567 B is below the floor of "
            "\x1b[1m9,876,543 B\x1b[0m, what every run holds at once at the end of the step")
    parts = wrap_line(line, 40).split("\n")
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", p) for p in parts]
    assert len(parts) > 1 and all(len(p) <= 40 for p in shown), shown
    assert any("1,234,567 B" in p for p in shown) and any("9,876,543 B" in p for p in shown)
    assert " ".join("".join(parts).split()) == " ".join(line.split())
    redraw = "\x1b[2K\x1b[1A" + "x " * 60
    assert wrap_line(redraw, 40) == redraw
