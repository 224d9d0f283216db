"""`dtr_backend`: a torch.compile backend running the engine's schedule at a budget.

`torch.compile(step, backend=dtr_backend(budget=BYTES, policy="dtr"))`: for
each graph dynamo captures, AOTAutograd traces the joint forward-backward
graph; the partition function writes it as a DTR log (`joint.py`), replays it
with the engine at the budget (`schedule.plan`), refuses a budget the
schedule cannot meet (`BudgetNotMet`: the failing op, its module, the
frontier, the shortfall), lowers the schedule into the forward and backward
graphs (`lowering.py`) and hands them to the nop compiler (`aot_eager`'s: no
C compiler). Dynamo's guards recompile (and so re-plan) when shapes change;
each compiled graph is planned alone, with the whole budget.

With `checking=True` the lowered graphs carry a `dtr_check` node at every
allocation check of the schedule, and run under `LiveStorages`, which counts
the bytes of every storage the step holds alive (its inputs, the tangents,
every output of an op in the graphs) with the executor's count
(`storages.Storages`: weak references, a storage's death is PyTorch's); each
check compares that count with the engine's memory there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import validate
from ..engine.frontier import Frontier
from .joint import JointLog, NotExpressibleError, capture_joint
from .lowering import CheckPoints, Lowered, lower
from .recorder import RecordError, output_tensors
from .schedule import Plan, plan
from .storages import Storages


class BudgetNotMet(RecordError):
    """The engine's schedule runs out of memory at the budget: refused when compiling."""

    def __init__(self, message: str, frontier: Frontier | None):
        super().__init__(message)
        self.frontier = frontier


class LiveStorages(TorchDispatchMode):
    """The bytes of the step's storages PyTorch holds alive, counted by the
    executor's count (`storages.Storages`: weak references, a death is
    PyTorch's), fed with every output of an op that runs under this mode;
    `stats.peak_live` is the largest the count was."""

    def __init__(self, stats):
        super().__init__()
        self.count = Storages(stats)

    @property
    def live(self) -> int:
        return self.count.live

    def track(self, t) -> None:
        if isinstance(t, torch.Tensor):
            self.count.track(t.untyped_storage())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in output_tensors(out):
            self.count.track(t.untyped_storage())
        return out


@dataclass
class CheckReport:
    """What a checking run measured at each allocation check of its schedule."""

    checks: int = 0
    mismatches: int = 0
    first_mismatch: str | None = None
    over_budget: int = 0
    peak_live: int = 0
    measured: list[int] = field(default_factory=list)


@dataclass
class CompiledGraph:
    """One graph dynamo captured: its joint log, schedule and lowered graphs."""

    joint: JointLog
    schedule: Plan
    lowered: Lowered
    budget: int
    checks: list[CheckReport] = field(default_factory=list)

    @property
    def summary(self):
        return self.schedule.result.summary


class _Checker:
    """Compares a `LiveStorages` count with the engine's memory at each check."""

    def __init__(self, graph: CompiledGraph):
        self.graph = graph
        self.report = CheckReport()
        self.live = LiveStorages(self.report)

    def __call__(self, index: int) -> None:
        expected = self.graph.lowered.check_memory[index]
        live = self.live.live
        r = self.report
        r.checks += 1
        r.measured.append(live)
        if live != expected and r.first_mismatch is None:
            r.first_mismatch = f"allocation check {index}: live {live:,} bytes, engine memory {expected:,}"
        if live != expected:
            r.mismatches += 1
        if live > self.graph.budget:
            r.over_budget += 1


def _boxed(gm: torch.fx.GraphModule, state: dict, phase: str):
    """The nop compiler of `aot_eager`, run under the checker where one is active."""
    from torch._dynamo.backends.debugging import boxed_nop
    run = boxed_nop(gm, [])

    def call(args):
        checker = state.get("checker")
        if checker is None:
            return run(args)
        # the forward's inputs are the step's; the backward's are the saved values
        # (counted where the forward made them; a random op's generator state is
        # bookkeeping, not counted) and the tangents autograd made
        for t in args if phase == "forward" else args[state["graph"].lowered.saved:]:
            checker.live.track(t)
        previous, CheckPoints.hook = CheckPoints.hook, checker
        try:
            with checker.live:
                return run(args)
        finally:
            CheckPoints.hook = previous
            if phase == "backward":
                state["checker"] = None
                state["graph"].checks.append(checker.report)

    call._boxed_call = True
    return call


class DtrBackend:
    """The backend object `dtr_backend` returns; `graphs` lists what it compiled."""

    def __init__(self, budget: int | None, ratio: float | None, policy, checking: bool,
                 log_path=None):
        validate.budget_or_ratio(budget, ratio, validate.ARGUMENTS)
        self.budget, self.ratio, self.policy = budget, ratio, policy
        self.checking, self.log_path = checking, log_path
        self.graphs: list[CompiledGraph] = []

    def __call__(self, gm, example_inputs, **kwargs):
        from torch._dynamo.backends.common import aot_autograd
        state: dict = {}

        def partition(joint_gm, joint_inputs, *, num_fwd_outputs, **_):
            graph = self.plan_graph(joint_gm, joint_inputs, num_fwd_outputs)
            state["graph"] = graph
            return graph.lowered.forward, graph.lowered.backward

        def fw_compiler(g, _inputs):
            return _boxed(g, state, "forward")

        def bw_compiler(g, _inputs):
            return _boxed(g, state, "backward")

        compiled = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                partition_fn=partition, keep_inference_input_mutations=True)
        inner = compiled(gm, example_inputs, **kwargs)
        if not self.checking:
            return inner

        def checked(*args):
            if "graph" in state:
                state["checker"] = _Checker(state["graph"])
            return inner(*args)
        return checked

    def plan_graph(self, joint_gm, joint_inputs, num_fwd_outputs: int) -> CompiledGraph:
        joint = capture_joint(joint_gm, joint_inputs, num_fwd_outputs)
        if self.log_path is not None:
            joint.write(self.log_path)
        program = joint.program
        budget = self.budget if self.budget is not None else \
            int(self.ratio * _peak(program))
        schedule = plan(program, budget, self.policy)
        summary = schedule.result.summary
        if summary.outcome != "ok":
            raise _not_met(joint, schedule, budget)
        lowered = lower(joint, schedule.events, checking=self.checking)
        graph = CompiledGraph(joint, schedule, lowered, budget)
        self.graphs.append(graph)
        return graph


def _peak(program) -> int:
    from ..engine.baseline import baseline
    return int(baseline(program).peak)


def _not_met(joint: JointLog, schedule: Plan, budget: int) -> Exception:
    summary = schedule.result.summary
    program = joint.program
    if summary.outcome != "oom" or summary.oom is None:
        return BudgetNotMet(f"the engine's schedule at {budget:,} bytes ends {summary.outcome}, "
                            "not ok: nothing to lower", schedule.frontier)
    f = schedule.frontier
    op = summary.oom.op_id
    levels = []
    if f is not None:
        for lv in f.levels:
            module = joint.op_module(lv.op_id)
            levels.append(f"{lv.op_name} (op {lv.op_id}{', ' + module if module else ''}"
                          f"{', rebuild' if lv.remat else ''}, {lv.locked_bytes:,} B locked)")
    where = joint.op_module(op) if op is not None else None
    shortfall = f.shortfall if f is not None else None
    text = (f"budget {budget:,} bytes cannot be met: the engine's schedule runs out of memory "
            f"at op {op} ({program.op_name(op) if op is not None else '?'}"
            f"{', in ' + where if where else ''})")
    if f is not None:
        if len(levels) > 6:
            levels = [*levels[:3], f"({len(levels) - 6} more levels)", *levels[-3:]]
        text += (f": request {f.request:,} bytes, memory {f.memory:,}, pinned {f.pinned_bytes:,}, "
                 f"shortfall {shortfall:,} bytes; frontier, outermost first: " + " > ".join(levels))
    return BudgetNotMet(text, f)


def dtr_backend(budget: int | None = None, *, ratio: float | None = None, policy="dtr",
                checking: bool = False, log=None) -> DtrBackend:
    """A torch.compile backend that runs each training step as the DTR engine's
    schedule at `budget` bytes (or `ratio` of the joint graph's unconstrained
    peak) with `policy`; `checking` compares live bytes with the engine at
    every allocation check (`DtrBackend.graphs[i].checks`); `log` writes the
    joint graph's DTR log there."""
    return DtrBackend(budget, ratio, policy, checking, log)


__all__ = ["BudgetNotMet", "DtrBackend", "LiveStorages", "NotExpressibleError", "dtr_backend"]
