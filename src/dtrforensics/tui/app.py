"""`dtrf replay --tui`: step through a recording allocation by allocation.

Keys: → / n next step, ← / p previous, e / E next / previous eviction,
r / R next / previous rematerialization, o the OOM, g / G first / last step,
c next decision of the step (its victim marked, its candidates shown),
s / S scroll the stack of materializations, j jump to an op or a storage,
l the next page below 140 columns (the check and its candidates, the list of
every step, the candidates and stack; from 140 columns the list is beside
them), q quit. The footer names every key it has room for, and from 80
columns all of them.

On top, the whole run as a strip (memory, pinned bytes, depth) with a cursor on
the current step; the step list scrolls through every allocation check.

The steps come from `analyses.replay_view.ReplaySource`; everything that
queries DuckDB runs in a thread worker (`@work(thread=True)`), results come
back as messages (`tui/messages.py`), so the view never blocks.
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Footer, Input

from ..analyses.replay_view import ReplaySource
from ..recorder.reader import Recording
from .jump import HELP, parse_jump
from .messages import StepDetails, StepsLoaded, StorageFound
from .widgets import CandidatesTable, RunStrip, StackView, StepList, StepPanel

TOP_CANDIDATES = 12
WIDE = 140       # from here the step list sits beside an 80-column check, candidates and stack


class ReplayApp(App):
    TITLE = "dtrf replay"
    AUTO_FOCUS = None           # keys go to the view; the jump box takes focus when opened
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (WIDE, "-wide")]
    CSS = """
    #body { height: 1fr; }
    StepList { width: 60; }
    StepPanel { max-height: 40%; }
    CandidatesTable { height: auto; max-height: 35%; }
    StackView { height: 1fr; min-height: 4; }
    #jump { dock: bottom; display: none; }
    #jump.-open { display: block; }
    Screen.-narrow StepList { display: none; }
    Screen.-narrow.-page-check StackView { display: none; }
    Screen.-narrow.-page-check StepPanel { max-height: 60%; }
    Screen.-narrow.-page-check CandidatesTable { height: 1fr; max-height: 100%; }
    Screen.-narrow.-page-list StepList { display: block; width: 1fr; }
    Screen.-narrow.-page-list #main { display: none; }
    Screen.-narrow.-page-details StepPanel { display: none; }
    Screen.-narrow.-page-details CandidatesTable { max-height: 45%; }
    Screen.-short RunStrip { border: none; height: 4; }
    """
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-short"), (30, "-tall")]
    PAGES = ("check", "list", "details")         # below 140 columns, one at a time
    ENABLE_COMMAND_PALETTE = False               # its footer key would crowd out ours
    # Short descriptions: at 80 columns the footer shows every key that is not hidden.
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("right,n", "step(1)", "next"),
        Binding("left,p", "step(-1)", "prev"),
        Binding("e", "jump('eviction', 1)", "evict"),
        Binding("E", "jump('eviction', -1)", "prev eviction", show=False),
        Binding("r", "jump('remat', 1)", "remat"),
        Binding("R", "jump('remat', -1)", "prev remat", show=False),
        Binding("o", "jump('oom', 1)", "OOM"),
        Binding("g", "go(0)", "first", show=False),
        Binding("G", "go(-1)", "last", show=False),
        Binding("c", "next_decision", "decision"),
        Binding("s", "scroll_stack(1)", "stack"),
        Binding("S", "scroll_stack(-1)", "stack up", show=False),
        Binding("j", "open_jump", "jump"),
        Binding("l", "next_page", "page"),
        Binding("escape", "close_jump", "close", show=False),
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
        self.page = "check"

    def compose(self) -> ComposeResult:
        yield RunStrip(id="strip")
        with Horizontal(id="body"):
            yield StepList(id="steps")
            with Vertical(id="main"):
                yield StepPanel(id="step")
                yield CandidatesTable(id="candidates")
                yield StackView(id="stack")
        yield Input(placeholder=HELP, id="jump")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        run = self.recording.run
        amount = f"ratio {run['ratio']:g}" if run.get("ratio") is not None else f"{run['budget']:,} B"
        self.sub_title = f"{self.recording.run_id}: {run['trace']['name']} {amount} " \
                         f"{run['policy']} ({run['outcome']})"
        self.query_one(RunStrip).border_title = self.sub_title
        self.query_one(StepPanel).border_subtitle = self.sub_title    # when the strip is bare
        self.show_page(self.page)
        self.load_steps()

    def on_resize(self) -> None:
        self.refresh_bindings()          # `l` comes and goes with the 140-column breakpoint

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
            self.query_one(StepPanel).message("no allocation checks in this window")
            return
        self.status = "ready"
        self.query_one(RunStrip).load(self.source.steps, self.recording.run["budget"])
        self.query_one(StepList).load(self.source.steps)
        self.index = 0

    def on_step_details(self, message: StepDetails) -> None:
        if message.index != self.index or message.offset != self.decision_offset:
            return       # the user moved on meanwhile
        step = self.source.steps[message.index]
        self.query_one(StepPanel).show_step(step, len(self.source), message.victims,
                                            message.offset)
        self.query_one(CandidatesTable).show(message.decision, message.candidates)
        self.query_one(StackView).show(message.stack)
        self.status = "ready"

    # -- state

    def watch_index(self, index: int) -> None:
        if self.source is None or not 0 <= index < len(self.source):
            return
        self.decision_offset = 0
        self.status = "loading"
        self.query_one(RunStrip).cursor = index
        self.query_one(StepList).cursor = index
        self.query_one(StepPanel).show_step(self.source.steps[index], len(self.source), None)
        self.load_details(index, 0)

    def on_step_list_chosen(self, message: StepList.Chosen) -> None:
        self.index = message.index

    # -- jumps

    @work(thread=True, exclusive=True, group="jump")
    def find_storage(self, index: int, storage: int) -> None:
        found = self.source.storage_index(index, storage)
        self.post_message(StorageFound(storage, *(found or (None, None))))

    def on_storage_found(self, message: StorageFound) -> None:
        if message.index is None:
            self.notify(f"storage {message.storage} is not evicted or rematerialized "
                        "after this step", timeout=3)
            self.status = "ready"
            return
        step = self.source.steps[message.index]
        self.notify(f"storage {message.storage}: {message.kind} at step {step.step:,} "
                    f"(op {step.op_id})", timeout=3)
        if message.index == self.index:
            self.status = "ready"
        self.index = message.index

    def action_open_jump(self) -> None:
        box = self.query_one("#jump", Input)
        box.add_class("-open")
        box.value = ""
        box.focus()

    def action_close_jump(self) -> None:
        box = self.query_one("#jump", Input)
        box.remove_class("-open")
        self.set_focus(None)

    def on_input_submitted(self, message: Input.Submitted) -> None:
        self.action_close_jump()
        try:
            target = parse_jump(message.value)
        except ValueError as exc:
            self.notify(str(exc), severity="error", timeout=4)
            return
        if not self._has_steps():
            return
        if target.kind == "storage":
            self.status = "loading"
            self.find_storage(self.index, target.number)
            return
        if target.kind == "op":
            found = self.source.op_index(target.number)
        else:                                         # a window's steps are contiguous
            found = target.number - self.source.steps[0].step
            found = found if 0 <= found < len(self.source) else None
        if found is None:
            self.notify(f"no allocation check at or after {target.kind} {target.number} "
                        "in view", timeout=3)
            return
        if target.kind == "op" and self.source.steps[found].op_id != target.number:
            self.notify(f"op {target.number} allocates nothing: op "
                        f"{self.source.steps[found].op_id} is next", timeout=3)
        self.index = found

    def action_next_page(self) -> None:
        self.show_page(self.PAGES[(self.PAGES.index(self.page) + 1) % len(self.PAGES)])

    def show_page(self, page: str) -> None:
        self.page = page
        for name in self.PAGES:
            self.screen.set_class(name == page, f"-page-{name}")

    def action_scroll_stack(self, direction: int) -> None:
        """Below 140 columns the stack is on the details page: go there first."""
        if self.shown_page in ("check", "list"):
            self.show_page("details")
        else:
            self.query_one(StackView).page(direction)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """`l` pages only below 140 columns; from there it leaves the footer."""
        if action == "next_page":
            return self.screen.has_class("-narrow")
        return True

    @property
    def shown_page(self) -> str:
        """The page shown below the strip ('all' from 140 columns)."""
        return self.page if self.screen.has_class("-narrow") else "all"

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
