"""`dtrf replay --tui`: step through a recording allocation by allocation.

Keys: → / n next step, ← / p previous, e / E next / previous eviction,
r / R next / previous rematerialization, o the OOM, g / G first / last step,
c next decision of the step (its candidates), q quit.

The steps come from `analyses.replay_view.ReplaySource`; everything that
queries DuckDB runs in a thread worker (`@work(thread=True)`), results come
back as messages (`tui/messages.py`), so the view never blocks.
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Footer, Header

from ..analyses.replay_view import ReplaySource
from ..recorder.reader import Recording
from .messages import StepDetails, StepsLoaded
from .widgets import CandidatesTable, StackView, StepPanel

TOP_CANDIDATES = 12


class ReplayApp(App):
    TITLE = "dtrf replay"
    CSS = """
    #details { height: 1fr; }
    CandidatesTable { width: 3fr; }
    StackView { width: 2fr; }
    """
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("right,n", "step(1)", "next"),
        Binding("left,p", "step(-1)", "previous"),
        Binding("e", "jump('eviction', 1)", "next eviction"),
        Binding("E", "jump('eviction', -1)", "prev eviction", show=False),
        Binding("r", "jump('remat', 1)", "next remat"),
        Binding("R", "jump('remat', -1)", "prev remat", show=False),
        Binding("o", "jump('oom', 1)", "OOM"),
        Binding("g", "go(0)", "first", show=False),
        Binding("G", "go(-1)", "last", show=False),
        Binding("c", "next_decision", "next decision"),
        Binding("q", "quit", "quit"),
    ]

    index: reactive[int] = reactive(-1, init=False)

    def __init__(self, recording: Recording, ops: tuple[int, int] | None = None):
        super().__init__()
        self.recording = recording
        self.ops = ops
        self.source: ReplaySource | None = None
        self.decision_offset = 0
        self.status = "loading"

    def compose(self) -> ComposeResult:
        yield Header()
        yield StepPanel(id="step")
        with Horizontal(id="details"):
            yield CandidatesTable(id="candidates")
            yield StackView(id="stack")
        yield Footer()

    def on_mount(self) -> None:
        run = self.recording.run
        amount = f"ratio {run['ratio']:g}" if run.get("ratio") is not None else f"{run['budget']:,} B"
        self.sub_title = f"{self.recording.run_id}: {run['trace']['name']} {amount} " \
                         f"{run['policy']} ({run['outcome']})"
        self.load_steps()

    def on_unmount(self) -> None:
        if self.source is not None:
            self.source.close()

    # -- workers

    @work(thread=True, exclusive=True, group="load")
    def load_steps(self) -> None:
        source = ReplaySource(self.recording, self.ops)
        self.source = source
        self.post_message(StepsLoaded(len(source)))

    @work(thread=True, exclusive=True, group="details")
    def load_details(self, index: int, offset: int) -> None:
        source = self.source
        victims = source.victims(index)
        decision = None
        if victims:
            decision = victims[min(offset, len(victims) - 1)].decision
        candidates = source.candidates(decision, TOP_CANDIDATES) if decision is not None else []
        stack = source.stack(index)
        self.post_message(StepDetails(index, offset, victims, decision, candidates, stack))

    # -- messages

    def on_steps_loaded(self, message: StepsLoaded) -> None:
        if message.count == 0:
            self.status = "empty"
            self.query_one(StepPanel).update("no allocation checks in this window")
            return
        self.status = "ready"
        self.index = 0

    def on_step_details(self, message: StepDetails) -> None:
        if message.index != self.index or message.offset != self.decision_offset:
            return       # the user moved on meanwhile
        step = self.source.steps[message.index]
        self.query_one(StepPanel).show(step, len(self.source), message.victims)
        self.query_one(CandidatesTable).show(message.decision, message.candidates)
        self.query_one(StackView).show(message.stack)
        self.status = "ready"

    # -- state

    def watch_index(self, index: int) -> None:
        if self.source is None or not 0 <= index < len(self.source):
            return
        self.decision_offset = 0
        self.status = "loading"
        self.query_one(StepPanel).show(self.source.steps[index], len(self.source), None)
        self.load_details(index, 0)

    # -- actions

    def _has_steps(self) -> bool:
        return self.source is not None and len(self.source) > 0 and self.index >= 0

    def action_step(self, delta: int) -> None:
        if self._has_steps():
            self.index = max(0, min(len(self.source) - 1, self.index + delta))

    def action_go(self, where: int) -> None:
        if self._has_steps():
            self.index = where if where >= 0 else len(self.source) - 1

    def action_jump(self, what: str, direction: int) -> None:
        if not self._has_steps():
            return
        found = (self.source.next_index(self.index, what) if direction > 0
                 else self.source.prev_index(self.index, what))
        if found is None:
            self.notify(f"no {'next' if direction > 0 else 'previous'} {what}", timeout=2)
        else:
            self.index = found

    def action_next_decision(self) -> None:
        if not self._has_steps():
            return
        step = self.source.steps[self.index]
        if step.evictions > 1:
            self.decision_offset = (self.decision_offset + 1) % step.evictions
            self.status = "loading"
            self.load_details(self.index, self.decision_offset)
