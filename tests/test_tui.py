"""The interactive replay view, driven headlessly with Textual's Pilot: keys move
through the steps, the panels follow (details arrive from thread workers).

On tiny at budget 105 (test_queries): steps 0..6; steps 4 and 5 evict (a, then
c while rematerializing a: step 5 is a remat), step 6 is the OOM allocation of d.
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable, Input

from dtrforensics.analyses.replay_view import ReplaySource
from dtrforensics.recorder.reader import open_recording
from dtrforensics.tui.app import ReplayApp
from dtrforensics.tui.jump import JumpTarget, parse_jump
from dtrforensics.tui.widgets import CandidatesTable, RunStrip, StackView, StepList, StepPanel
from dtrforensics.tui.widgets.run_strip import LABEL


async def settle(app, pilot, timeout: float = 60.0) -> None:
    """Wait until the details of the current step are on screen: loaded, and
    every table's columns sized to them (a DataTable sizes its columns when
    idle; drawn before that, a new score is cut to the old column's width)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while app.status != "ready" or any(t._require_update_dimensions
                                       for t in app.query(DataTable)):
        if loop.time() > end:
            raise AssertionError(f"the view did not settle (status {app.status})")
        await pilot.pause(0.02)


async def eventually(pilot, check, timeout: float = 60.0) -> None:
    """Call `check` until it passes: what a widget draws can trail its state by a
    refresh (a table's lines are cached until it next draws), and a busy machine
    draws late."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if loop.time() > end:
                raise
        await pilot.pause(0.02)


def run_app(recording, script):
    async def main():
        app = ReplayApp(recording)
        async with app.run_test(size=(140, 45)) as pilot:
            await settle(app, pilot)
            await script(app, pilot)
    asyncio.run(main())


def panel(app) -> str:
    return app.query_one(StepPanel).text


def test_step_forward_and_back(forensic_recs):  # noqa: F811
    async def script(app, pilot):
        assert app.index == 0 and "step 0 " in panel(app) and "allocating w" in panel(app)
        await pilot.press("right")
        await settle(app, pilot)
        assert app.index == 1 and "allocating a" in panel(app)
        await pilot.press("right", "right")
        await settle(app, pilot)
        assert app.index == 3
        await pilot.press("left")
        await settle(app, pilot)
        assert app.index == 2 and "allocating b" in panel(app)
        await pilot.press("left", "left", "left")      # clamps at the first step
        await settle(app, pilot)
        assert app.index == 0
        await pilot.press("G")
        await settle(app, pilot)
        assert app.index == 6
    run_app(open_recording(forensic_recs / "tiny105"), script)


def test_jumps_and_details(forensic_recs):  # noqa: F811
    async def script(app, pilot):
        table = app.query_one(CandidatesTable)
        assert table.row_count == 0
        await pilot.press("e")
        await settle(app, pilot)
        assert app.index == 4
        assert "short by 25 B: 1 eviction" in panel(app) and "evict 1 a" in panel(app)
        assert [c.storage for c in table.shown] == [1, 2] and table.row_count == 2
        assert "decision 0" in str(table.border_title)
        await pilot.press("r")
        await settle(app, pilot)
        assert app.index == 5 and "rematerialization" in panel(app)
        assert [lv.tensor for lv in app.query_one(StackView).levels] == ["d", "a"]
        await pilot.press("o")
        await settle(app, pilot)
        assert app.index == 6 and "OUT OF MEMORY" in panel(app)
        assert table.row_count == 0
        await pilot.press("E")
        await settle(app, pilot)
        assert app.index == 5
        await pilot.press("g")
        await settle(app, pilot)
        assert app.index == 0
    run_app(open_recording(forensic_recs / "tiny105"), script)


def test_next_decision_within_a_step(tmp_path):
    # two victims for one allocation: w + a + b hold 90 of 100, c needs 60
    from logdsl import Log

    from dtrforensics.recorder.record import record_run
    log = (Log().const("w", 10).call("a", "f", ["w"], 10, 30).call("b", "f", ["w"], 20, 50)
           .call("c", "f", ["w"], 5, 60).release("a").release("b").release("c"))
    _, path = record_run(log.program("two"), budget=100, out_dir=tmp_path / "two", scores="all")

    async def script(app, pilot):
        await pilot.press("e")
        await settle(app, pilot)
        table = app.query_one(CandidatesTable)
        assert "decision 0" in str(table.border_title)
        await pilot.press("c")
        await settle(app, pilot)
        assert "decision 1" in str(table.border_title)
        assert app.index == 3
    run_app(open_recording(path), script)


# --- the whole run: strip, list, jumps --------------------------------------------------

def reversed_columns(strip) -> set[int]:
    """Columns of the strip's first row drawn in reverse (the cursor)."""
    text = strip.render()
    first = text.plain.index("\n")
    return {s.start - LABEL + k for s in text.spans if "reverse" in str(s.style)
            and s.end <= first for k in range(s.end - s.start)}


def test_strip_cursor_follows_stepping(forensic_recs):  # noqa: F811
    async def script(app, pilot):
        strip = app.query_one(RunStrip)
        width = strip.content_region.width - LABEL
        seen = []
        for index in range(7):
            if index:
                await pilot.press("right")
                await settle(app, pilot)
            assert strip.cursor == index == app.query_one(StepList).cursor
            cols = reversed_columns(strip)
            assert cols == set(strip.buckets(width).columns_of(index))
            assert f"step {index} op" in strip.render().plain.splitlines()[-1]
            seen.append(min(cols))
        assert seen == sorted(seen) and len(set(seen)) == 7      # left to right, apart
        assert strip.buckets(width).oom[-1] and not any(strip.buckets(width).oom[:seen[-1]])
    run_app(open_recording(forensic_recs / "tiny105"), script)


async def jump(app, pilot, text: str) -> None:
    await pilot.press("j")
    box = app.query_one("#jump", Input)
    assert box.has_focus and box.display
    box.value = text
    await pilot.press("enter")
    await settle(app, pilot)
    assert not box.display


def test_jump_lands_on_the_op_and_the_storage(forensic_recs):  # noqa: F811
    # tiny105: storage 1 (a) is evicted at step 4 and rematerialized at step 5;
    # storage 4 (c) is evicted at step 5; storage 2 (b) is never evicted
    async def script(app, pilot):
        await jump(app, pilot, "op 3")
        assert app.index == 3 and app.source.steps[3].op_id == 3
        await jump(app, pilot, "#5")                 # the papers' op 5 is op 4
        assert app.index == 4
        await jump(app, pilot, "g")                  # not a jump: an error, no move
        assert app.index == 4
        await jump(app, pilot, "step 2")
        assert app.index == 2
        await jump(app, pilot, "step 7")             # past the last step: no move
        assert app.index == 2
        await pilot.press("g")
        await settle(app, pilot)
        await jump(app, pilot, "s 1")
        assert app.index == 4 and [v.victim for v in app.source.victims(4)] == [1]
        await jump(app, pilot, "storage 1")
        assert app.index == 5 and app.source.steps[5].remat and app.source.steps[5].tensor == "a"
        await pilot.press("g")
        await settle(app, pilot)
        await jump(app, pilot, "s 4")
        assert app.index == 5 and [v.victim for v in app.source.victims(5)] == [4]
        await jump(app, pilot, "s 2")
        assert app.index == 5
    run_app(open_recording(forensic_recs / "tiny105"), script)


def test_parse_jump():
    assert parse_jump("460") == parse_jump("op 460") == JumpTarget("op", 460)
    assert parse_jump(" #461 ") == JumpTarget("op", 460)
    assert parse_jump("s 612") == parse_jump("storage 612") == JumpTarget("storage", 612)
    assert parse_jump("step 1,200") == JumpTarget("step", 1200)
    for bad in ("", "x 3", "op", "op x", "#0", "s -1"):
        with pytest.raises(ValueError):
            parse_jump(bad)


def test_narrow_screen_pages_through_check_list_and_details(forensic_recs):  # noqa: F811
    async def main():
        app = ReplayApp(open_recording(forensic_recs / "tiny105"))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(app, pilot)
            steps, panel_w = app.query_one(StepList), app.query_one(StepPanel)
            assert app.shown_page == "check" and not steps.display and panel_w.display
            await pilot.press("l")
            await pilot.pause()
            assert app.shown_page == "list" and steps.display
            assert not app.query_one("#main").display
            assert steps.region.width == 80
            await pilot.press("l")
            await pilot.pause()
            assert app.shown_page == "details" and not steps.display and not panel_w.display
            assert app.query_one(CandidatesTable).region.width == 80
            await pilot.press("l")
            await pilot.pause()
            assert app.shown_page == "check"
    asyncio.run(main())


def test_starts_on_a_large_recording_without_blocking(tmp_path, monkeypatch):
    """The steps load in a worker: while they load the view answers keys; then
    every allocation check is in the list and the strip, and the last is reachable."""
    import threading

    from sweeps import chain_log

    from dtrforensics.analyses import replay_view
    from dtrforensics.recorder.record import record_run
    from dtrforensics.tui import app as app_module
    _, path = record_run(chain_log(4000).program("big"), budget=12_000,
                         out_dir=tmp_path / "big", scores="victims")
    rec = open_recording(path)
    checks = len(replay_view.ReplaySource(rec))
    assert checks > 4000
    gate = threading.Event()

    class GatedSource(replay_view.ReplaySource):
        def __init__(self, *args, **kwargs):
            gate.wait(60)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(app_module, "ReplaySource", GatedSource)

    async def main():
        app = ReplayApp(rec)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.1)
            assert app.status == "loading"
            assert "loading" in app.query_one(RunStrip).render().plain
            await pilot.press("j")                      # the view answers while loading
            assert app.query_one("#jump", Input).has_focus
            await pilot.press("escape")
            gate.set()
            await settle(app, pilot, timeout=60)
            steps = app.query_one(StepList)
            assert len(steps.steps) == checks == steps.virtual_size.height
            await pilot.press("G")
            await settle(app, pilot, timeout=30)
            assert app.index == checks - 1 == app.query_one(RunStrip).cursor
            top = steps.scroll_offset.y
            assert top <= checks - 1 < top + steps.scrollable_content_region.height
    asyncio.run(main())


# --- every level, every digit, every key (80 and 160 columns) ----------------------------

def deep_log(n: int = 40):
    """A chain a0..a(n-1), a second chain that pushes every a out, one large
    allocation that evicts several storages at once, then an op on a(n-1):
    rebuilding it rebuilds the whole chain, each level inside the last."""
    from logdsl import Log
    log = Log().const("w", 10)
    for chain in "ab":
        prev = "w"
        for i in range(n):
            log.call(f"{chain}{i}", "f", [prev], 5, 10)
            prev = f"{chain}{i}"
    log.call("big", "h", ["w"], 5, 50).release("big")
    return log.call("z", "g", [f"a{n - 1}", "w"], 5, 10)


@pytest.fixture(scope="module")
def deep_rec(tmp_path_factory):
    from dtrforensics.recorder.record import record_run
    _, path = record_run(deep_log().program("deep"), budget=80, scores="all",
                         out_dir=tmp_path_factory.mktemp("deep") / "deep80")
    return open_recording(path)


def run_at(recording, size, script):
    async def main():
        app = ReplayApp(recording)
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            await script(app, pilot)
    asyncio.run(main())


async def go_to(app, pilot, index: int) -> None:
    await jump(app, pilot, f"step {app.source.steps[index].step}")
    assert app.index == index


def strip_lines(widget, rows: int) -> list[str]:
    """The text a widget draws on its first `rows` lines (border excluded)."""
    return [widget.render_line(y).text for y in range(rows)]


def test_the_stack_shows_every_level_and_scrolls(deep_rec):
    source = ReplaySource(deep_rec)
    deepest = max(range(len(source)), key=lambda i: source.steps[i].depth)

    async def script(app, pilot):
        await go_to(app, pilot, deepest)
        stack = app.query_one(StackView)
        depth = app.source.steps[deepest].depth
        assert depth >= 30 and len(stack.levels) == depth == len(stack.items)
        await pilot.press("s")                      # narrow: s opens the stack's page first
        await pilot.pause()
        assert app.shown_page == "details" and stack.display
        seen = stack.in_view()
        assert seen.start == 0 and 3 <= len(seen) < depth
        assert str(stack.border_title) == f"stack d1-d{len(seen)} of {depth} (s/S scroll)"
        lines = strip_lines(stack, len(seen))
        assert lines[0].lstrip().startswith("d1 ") and f"d{len(seen)} " in lines[-1]
        pages = 0
        while stack.in_view().stop < depth:
            before = stack.in_view()
            await pilot.press("s")
            await pilot.pause()
            assert stack.in_view().start > before.start     # a page further, never stuck
            pages += 1
            assert pages < depth
        height = stack.scrollable_content_region.height
        assert f"d{depth} " in strip_lines(stack, height)[-1]       # the innermost level
        assert str(stack.border_title).startswith(f"stack d{stack.levels[stack.in_view().start].depth}-d{depth} of")
        await pilot.press("S")
        await pilot.pause()
        assert stack.in_view().stop < depth
    run_at(deep_rec, (80, 24), script)


def test_scores_keep_every_digit_at_80_columns(deep_rec):
    """Each candidate's score is drawn whole on the check page and the details
    page, and every column of the table fits the screen."""
    from dtrforensics.render.units import score_format
    source = ReplaySource(deep_rec)
    evicting = next(i for i, s in enumerate(source.steps) if s.evictions and not s.oom)

    async def script(app, pilot):
        await go_to(app, pilot, evicting)
        table = app.query_one(CandidatesTable)
        assert table.row_count >= 2
        fmt = score_format(c.score for c in table.shown)

        def drawn_whole():
            width = table.scrollable_content_region.width
            assert sum(col.get_render_width(table) for col in table.columns.values()) <= width
            rows = min(table.row_count, table.scrollable_content_region.height - 1)
            assert rows >= 2
            for c, line in zip(table.shown, strip_lines(table, rows + 1)[1:]):
                assert f" {fmt(c.score)} " in line and f" {c.storage} " in line

        for page in ("check", "details"):
            assert app.shown_page == page
            await eventually(pilot, drawn_whole)
            await pilot.press("l", "l")
            await settle(app, pilot)
    run_at(deep_rec, (80, 24), script)


def test_candidates_drawn_before_the_table_is_idle_keep_every_digit(deep_rec):
    """A busy machine may draw the table between its rows' arrival and its next
    idle moment, when a DataTable sizes automatic columns; what it drew then it
    kept, a score cut to its header's width ('0.016' for 0.0166667), until its
    rows changed again. The table is drawn here at once, with no idle moment."""
    from dtrforensics.render.units import score_format
    from dtrforensics.tui.app import TOP_CANDIDATES

    async def script(app, pilot):
        source = app.source
        evicting = next(i for i, s in enumerate(source.steps) if s.evictions and not s.oom)
        decision = source.victims(evicting)[0].decision
        candidates = source.candidates(decision, TOP_CANDIDATES)
        fmt = score_format(c.score for c in candidates)
        assert any(len(fmt(c.score)) > len("score") for c in candidates)
        table = app.query_one(CandidatesTable)
        table.show(decision, candidates)
        lines = strip_lines(table, 3)[1:]
        for c, line in zip(candidates, lines):
            assert f" {fmt(c.score)} " in line and f" {c.storage} " in line
    run_at(deep_rec, (80, 24), script)


def test_the_footer_names_jump_page_and_quit_at_80_columns(deep_rec):
    from textual.widgets._footer import FooterKey

    async def keys_on_screen(app, pilot, width):
        await pilot.pause()
        return {k.key: k.region for k in app.query(FooterKey)
                if k.display and k.region.width and k.region.right <= width}

    async def narrow(app, pilot):
        shown = await keys_on_screen(app, pilot, 80)
        assert {"j", "l", "q", "s", "c", "o", "e", "r"} <= set(shown)

    async def wide(app, pilot):
        shown = await keys_on_screen(app, pilot, 160)
        assert {"j", "q", "s"} <= set(shown) and "l" not in shown     # no pages to turn
    run_at(deep_rec, (80, 24), narrow)
    run_at(deep_rec, (160, 48), wide)


def test_the_current_decision_stays_in_view(deep_rec):
    source = ReplaySource(deep_rec)
    busiest = max(range(len(source)), key=lambda i: source.steps[i].evictions)
    victims = source.steps[busiest].evictions

    async def script(app, pilot):
        await go_to(app, pilot, busiest)
        panel_w = app.query_one(StepPanel)
        assert victims >= 4 and len(panel_w.victims) == victims
        first_victim = len(panel_w.items) - victims
        assert len(panel_w.in_view()) < len(panel_w.items)          # it does not all fit
        for k in range(victims):
            assert f"decision {k + 1} of {victims}" in str(panel_w.border_title)
            assert first_victim + k in panel_w.in_view()
            assert panel_w.items[first_victim + k].plain.lstrip().startswith("▶")
            table = app.query_one(CandidatesTable)
            assert f"decision {panel_w.victims[k].decision:,}" in str(table.border_title)
            await pilot.press("c")
            await settle(app, pilot)
            await pilot.pause()
    run_at(deep_rec, (80, 24), script)
