"""The interactive replay view, driven headlessly with Textual's Pilot: keys move
through the steps, the panels follow (details arrive from thread workers).

On tiny at budget 105 (test_queries): steps 0..6; steps 4 and 5 evict (a, then
c while rematerializing a: step 5 is a remat), step 6 is the OOM allocation of d.
"""

from __future__ import annotations

import asyncio


from dtrforensics.recorder.reader import open_recording
from dtrforensics.tui.app import ReplayApp
from dtrforensics.tui.widgets import CandidatesTable, StackView, StepPanel


async def settle(app, pilot, timeout: float = 10.0) -> None:
    """Wait until the details of the current step are on screen."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while app.status != "ready":
        if loop.time() > end:
            raise AssertionError(f"the view did not settle (status {app.status})")
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
