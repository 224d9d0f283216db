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
check compares that count with the engine's memory there. A checking
backend (or one with measured costs) runs the joint graph for real once when
compiling, and takes each new storage's bytes from it where the fake tensors
say otherwise (`joint.real_storage_sizes`: aten's `mse_loss` returns its
scalar in the elementwise buffer); without it the sizes are the fake tensors'.

`inner="inductor"` hands the lowered graphs to inductor (`compile_fx_inner`,
a C++ compiler on CPU) instead of the nop compiler, with inductor's
decompositions in AOTAutograd's trace (so the joint graph's log is of the
decomposed graph), the drops left out: inductor frees each buffer after its
last use and fuses what it can, so what it allocates is not the engine's
schedule; the checking mode cannot apply there and is refused, and so is a
schedule rerunning a random op (inductor draws its own random numbers).

`DtrBackend.measure_next()` makes the next checking step a measured one: each
graph runs under PyTorch's profiler with memory events (`workspace.Meter`),
which gives every aten call's workspace (its scratch beyond its outputs, by
the log op of the allocation check before it) and the CPU allocator's peak
over the graph above what it held at the start; the step's allocator peak is
the live bytes at a graph's start plus that (`StepPeak`). Each op's outputs
fit the budget beside the live bytes (the engine's check), so the peak is at
most the budget plus the largest workspace.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import validate
from ..engine.frontier import Frontier
from .joint import (
    JointLog,
    NotExpressibleError,
    capture_joint,
    largest_workspace,
    measured_costs,
    real_storage_sizes,
)
from .lowering import CheckPoints, Lowered, dtr_drop, dtr_rerun_random, dtr_rng_state, lower
from .recorder import RecordError, output_tensors
from .schedule import Plan, plan
from .storages import Storages
from .workspace import Meter, Workspaces, _allocations, workspace_of


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
        self.meter: Meter | None = None   # measuring each aten call, in a measured step
        self.op = -1                      # the log op of the last allocation check
        self.untracked = 0                # bytes held outside the count (generator states)

    @property
    def live(self) -> int:
        return self.count.live

    def track(self, t) -> None:
        if isinstance(t, torch.Tensor):
            self.count.track(t.untyped_storage())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.meter is None:
            out = func(*args, **(kwargs or {}))
        else:
            with self.meter.around(self.op, self.count.live + self.untracked):
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


class _GraphMeter(Meter):
    """A `workspace.Meter` over one graph run that also reads the allocator's
    running peak over the whole run, above what it held at the start."""

    window_peak = 0

    def _read_profile(self) -> None:
        found = []
        for event in self._profile.profiler.kineto_results.experimental_event_tree():
            if type(event.extra_fields).__name__ == "_ExtraFields_Allocation":
                if event.extra_fields.device.type == "cpu":
                    found.append(event)
            else:
                found += _allocations(event)
        found.sort(key=lambda e: e.start_time_ns)
        self.window_peak = workspace_of([e.extra_fields.alloc_size for e in found])[1]
        super()._read_profile()


@dataclass
class StepPeak:
    """The allocator over one measured step of the lowered graphs (see the module
    docstring): its peak, beside the budget and the workspaces of the step's ops."""

    budget: int                 # the budget asked for (the schedule's plus the reserve)
    allocator_peak: int         # live bytes at a graph's start plus the allocator's peak above that
    workspaces: Workspaces      # each aten call's scratch, by the log op of the check before it
    check: CheckReport          # the step's live bytes against the engine's, as any checking step
    generator_states: int = 0   # random generator states kept for reruns (no storage of the log)
    reserved: int = 0           # bytes reserved for workspaces: the schedule's budget is less

    @property
    def schedule_budget(self) -> int:
        """The budget the schedule was planned at: the one asked for less the reserve."""
        return self.budget - self.reserved

    @property
    def bound(self) -> int:
        """The most the allocator may hold: the schedule's budget plus the largest
        workspace plus the generator states kept for reruns (which it does not count)."""
        return self.schedule_budget + self.workspaces.largest + self.generator_states

    @property
    def over_budget(self) -> int:
        """Bytes of the allocator's peak above the budget asked for (0: within it)."""
        return max(0, self.allocator_peak - self.budget)

    def to_json(self) -> dict:
        return {"allocator_peak": self.allocator_peak, "budget": self.budget,
                "over_budget": self.over_budget, "reserved_workspace": self.reserved,
                "schedule_budget": self.schedule_budget,
                "budget_plus_largest_workspace": self.schedule_budget + self.workspaces.largest,
                "generator_states": self.generator_states, "bound": self.bound,
                "within_budget_plus_workspaces": self.allocator_peak <= self.bound,
                "workspaces": self.workspaces.to_json()}


@dataclass
class CompiledGraph:
    """One graph dynamo captured: its joint log, schedule and lowered graphs."""

    joint: JointLog
    schedule: Plan
    lowered: Lowered
    budget: int                 # the schedule's: the budget asked for less `reserved`
    checks: list[CheckReport] = field(default_factory=list)
    peaks: list[StepPeak] = field(default_factory=list)     # measured steps (`measure_next`)
    reserved: int = 0           # bytes reserved for workspaces (`reserve_workspace`)
    reserved_op: int | None = None   # the log op whose workspace was reserved (measured)

    @property
    def summary(self):
        return self.schedule.result.summary


class _Checker:
    """Compares a `LiveStorages` count with the engine's memory at each check."""

    def __init__(self, graph: CompiledGraph, measure: bool = False):
        self.graph = graph
        self.report = CheckReport()
        self.live = LiveStorages(self.report)
        self.measure = measure
        self.meters: list[tuple[int, _GraphMeter]] = []   # (live bytes at its start, meter) per graph
        self.most_states = 0   # the most bytes of generator states held at a graph's start

    def run(self, run, args):
        """One graph run under the live count (and, measuring, the profiler)."""
        if not self.measure:
            with self.live:
                return run(args)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        meter = self.live.meter = _GraphMeter(device)
        self.meters.append((self.live.live + self.live.untracked, meter))
        self.most_states = max(self.most_states, self.live.untracked)
        with meter.session(), self.live:
            return run(args)

    def peak(self) -> StepPeak:
        """The measured step's `StepPeak`, from its graphs' meters."""
        joint = self.graph.joint
        runs = [r for _, m in self.meters for r in m.runs]
        largest, op = 0, None
        for k, ws, _ in runs:
            if ws > largest:
                largest, op = ws, k
        workspaces = Workspaces(
            largest=largest, op_id=op, op_name=joint.program.op_name(op) if op is not None else None,
            module=joint.op_module(op), total=sum(ws for _, ws, _ in runs), op_runs=len(runs),
            with_workspace=sum(ws > 0 for _, ws, _ in runs), method=self.meters[0][1].method,
            peak_with_workspaces=max((held for _, _, held in runs), default=0))
        # on CUDA the allocator's statistics are reset around each op: its peak over a
        # graph is the largest of an op's start and its peak above that
        peak = max(max((held for _, _, held in m.runs), default=base) if m.cuda
                   else base + m.window_peak for base, m in self.meters)
        return StepPeak(self.graph.budget + self.graph.reserved, peak, workspaces, self.report,
                        _state_bytes(self.graph.lowered, self.most_states), self.graph.reserved)

    def kept(self, state: torch.Tensor) -> None:
        """A generator state kept for a rerun: held, outside the live count."""
        self.live.untracked += state.nbytes

    def __call__(self, index: int) -> None:
        self.live.op = self.graph.lowered.check_ops[index]
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
        if phase == "backward":   # the states cross as saved values, outside the live count
            checker.live.untracked = sum(args[i].nbytes for i in _state_slots(state["graph"].lowered))
        previous, CheckPoints.hook = CheckPoints.hook, checker
        CheckPoints.states = checker.kept
        try:
            return checker.run(run, args)
        finally:
            CheckPoints.hook, CheckPoints.states = previous, None
            if phase == "backward":
                state["checker"] = None
                if checker.measure:
                    state["graph"].peaks.append(checker.peak())
                else:
                    state["graph"].checks.append(checker.report)

    call._boxed_call = True
    return call


BREAKS = ("warn", "refuse")     # what dtr_backend does where dynamo breaks a step into graphs
BREAK_ADVICE = ("remove the break (torch.compile(..., fullgraph=True) raises there, naming the "
                "line; for a logging call, add its method to "
                "torch._dynamo.config.ignore_logging_functions)")


def break_words(reasons) -> str:
    """Where dynamo broke a step, in words: the first of its reasons (each a graph
    break's text), its first line quoted, and how many more; '?' where none is given."""
    texts = [str(r) for r in reasons]
    first = (texts[0].strip().splitlines() or ["?"])[0] if texts else "?"
    return repr(first) + (f" (and {len(texts) - 1} more)" if len(texts) > 1 else "")


def _inductor(gm: torch.fx.GraphModule, example_inputs, backward: bool):
    """Inductor's inner compiler on a lowered graph, its drops left out.

    Inductor replaces random ops by its own (`replace_random_passes`) in its joint
    graph passes, which run in its own partitioner, not in ours: so a random op
    (a dropout's `aten.rand`) reaches its lowering unreplaced, which it refuses
    unless `fallback_random` is set. With it, the op runs as aten's kernel, on the
    generator eager uses: the masks are aot_eager's."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is dtr_drop:
            gm.graph.erase_node(node)
    gm.recompile()
    with config.patch(fallback_random=True):
        return compile_fx_inner(gm, example_inputs, is_backward=backward)


class DtrBackend:
    """The backend object `dtr_backend` returns; `graphs` lists what it compiled."""

    def __init__(self, budget: int | None, ratio: float | None, policy, checking: bool,
                 log_path=None, cost: str = "flops", inner: str = "aot_eager",
                 reserve_workspace: bool | int = False, breaks: str = "warn"):
        budget, ratio = _check_budget(budget, ratio, policy)
        validate.choice(cost, validate.COST_MODELS, "cost model")
        validate.choice(inner, validate.INNER_COMPILERS, "inner compiler")
        if inner == "inductor" and checking:
            raise RecordError("the checking mode cannot apply under inductor: its fusions change "
                              "what is allocated, so its live bytes are not the engine's "
                              "(check with the inner compiler aot_eager)")
        self.budget, self.ratio, self.policy, self.cost = budget, ratio, policy, cost
        self.inner = inner
        self.reserve = _check_reserve(reserve_workspace)
        self.breaks = validate.choice(breaks, BREAKS, "breaks")
        self._break: str | None = None     # why dynamo broke a step, once a graph ended there
        self._warned = False
        self._shapes: dict = {}             # each frame's input shapes, as last compiled
        self.checking, self.log_path = checking, log_path
        self.graphs: list[CompiledGraph] = []
        self._measure = False

    def measure_next(self) -> None:
        """Measure the next step (checking only): its allocator peak and workspaces
        land in `graphs[i].peaks`, its checks with them (not in `checks`)."""
        if not self.checking:
            raise RecordError("measuring a step's allocator peak needs checking=True")
        self._measure = True

    def __call__(self, gm, example_inputs, **kwargs):
        from torch._dynamo.backends.common import aot_autograd
        _static_shapes(gm, example_inputs)
        self._graph_break(gm)
        state: dict = {}
        new_shape = self._new_shape(gm, example_inputs)

        def partition(joint_gm, joint_inputs, *, num_fwd_outputs, **_):
            try:
                graph = self.plan_graph(joint_gm, joint_inputs, num_fwd_outputs)
            except BudgetNotMet as exc:
                if new_shape is None:
                    raise
                of = f" (ratio {self.ratio} of this shape's own peak)" if self.ratio else ""
                raise BudgetNotMet(f"re-planning a new shape, {new_shape}{of}: {exc}",
                                   exc.frontier) from None
            state["graph"] = graph
            return graph.lowered.forward, graph.lowered.backward

        def fw_compiler(g, inputs):
            if self.inner == "inductor":
                return _inductor(g, inputs, False)
            return _boxed(g, state, "forward")

        def bw_compiler(g, inputs):
            if self.inner == "inductor":
                return _inductor(g, inputs, True)
            return _boxed(g, state, "backward")

        extra = {}
        if self.inner == "inductor":
            from torch._inductor.compile_fx import select_decomp_table
            extra["decompositions"] = select_decomp_table()
        compiled = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                                partition_fn=partition, keep_inference_input_mutations=True,
                                **extra)
        inner = compiled(gm, example_inputs, **kwargs)
        if not self.checking:
            return inner

        def checked(*args):
            if "graph" in state:
                state["checker"] = _Checker(state["graph"], self._measure)
                self._measure = False
            return inner(*args)
        return checked

    def _new_shape(self, gm, example_inputs) -> str | None:
        """How this graph's inputs differ from the last graph dynamo compiled for the
        same frame (a recompile for new shapes), in words; None for a frame's first."""
        compile_id = gm.meta.get("dynamo_compile_id") if hasattr(gm, "meta") else None
        frame = getattr(compile_id, "frame_id", None)
        names = [n.target for n in gm.graph.find_nodes(op="placeholder")] \
            if hasattr(gm, "graph") else []
        if len(names) != len(example_inputs):
            names = [f"input {i}" for i in range(len(example_inputs))]
        shapes = [(name, tuple(x.shape)) for name, x in zip(names, example_inputs)
                  if isinstance(x, torch.Tensor)]
        before = self._shapes.get(frame) if frame is not None else None
        self._shapes[frame] = shapes
        if before is None:
            return None
        changed = [f"{name} {' x '.join(map(str, new))} (was {' x '.join(map(str, old))})"
                   for (name, old), (_, new) in zip(before, shapes) if old != new]
        if len(before) != len(shapes):
            changed.insert(0, f"{len(shapes)} inputs (were {len(before)})")
        return ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3
                                         else "") if changed else None

    def _graph_break(self, gm) -> None:
        """A graph dynamo ended at a graph break: refused (`breaks="refuse"`), or
        (`"warn"`) warned of once, when the next graph of the step compiles."""
        if self._break is not None and not self._warned:
            self._warned = True
            warnings.warn(f"dtr_backend: the step compiled into {len(self.graphs) + 1} graphs so "
                          f"far: dynamo broke it at {self._break}; each graph is planned alone "
                          "with the whole budget (a graph's share would depend on graphs not yet "
                          "seen, and memory held across the break is in no plan), so the step "
                          "can hold more than the budget: " + BREAK_ADVICE, stacklevel=2)
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is None or not reason.graph_break:
            return
        self._break = break_words([reason.reason])
        if self.breaks == "refuse":
            raise RecordError(f"dynamo broke the step at {self._break} (its graph before the break "
                              "is being compiled); dtr_backend plans one graph (each graph alone "
                              "would have the whole budget while the others' memory is alive): "
                              + BREAK_ADVICE)

    def plan_graph(self, joint_gm, joint_inputs, num_fwd_outputs: int) -> CompiledGraph:
        joint = capture_joint(joint_gm, joint_inputs, num_fwd_outputs)
        if self.checking or self.cost == "measured":    # the graph runs for real once
            joint = real_storage_sizes(joint, joint_inputs)
        if self.cost == "measured":
            joint = measured_costs(joint, joint_inputs)
        if self.log_path is not None:
            joint.write(self.log_path)
        program = joint.program
        budget = self.budget if self.budget is not None else \
            int(self.ratio * _peak(program))
        reserved, reserved_op = _reserved(self.reserve, joint, joint_inputs, budget)
        budget -= reserved
        schedule = plan(program, budget, self.policy)
        summary = schedule.result.summary
        if summary.outcome != "ok":
            raise _not_met(joint, schedule, budget)
        lowered = lower(joint, schedule.events, checking=self.checking)
        if self.inner == "inductor" and _reruns_random(lowered):
            raise NotExpressibleError("the schedule reruns a random op, whose generator state "
                                      "inductor cannot keep (it draws its own random numbers): "
                                      "use the inner compiler aot_eager")
        graph = CompiledGraph(joint, schedule, lowered, budget, reserved=reserved,
                              reserved_op=reserved_op)
        self.graphs.append(graph)
        return graph


def _inputs_alone(program, op: int | None, budget: int) -> str:
    """Where the schedule fails at an input of the graph (a `constant` of the log:
    a parameter, a batch tensor, a tangent), words for what the inputs hold."""
    if op is None or program.op_name(op) != "constant":
        return ""
    sizes = program.op_total_size.tolist()
    inputs = [k for k in range(program.n_ops) if program.op_name(k) == "constant"]
    total, upto = sum(sizes[k] for k in inputs), sum(sizes[k] for k in inputs if k <= op)
    if total > budget:
        return (f". The parameters and inputs alone exceed the budget: the graph's {len(inputs):,} "
                f"inputs (parameters, the batch, the tangents) take {total:,} bytes "
                f"({upto:,} up to op {op}), against {budget:,}: no schedule can run")
    return (f". Op {op} is an input of the graph (a parameter, a batch tensor or a tangent), "
            f"which the schedule must hold when it arrives ({len(inputs):,} inputs, "
            f"{total:,} bytes in all)")


def _check_budget(budget, ratio, policy) -> tuple[int | None, float | None]:
    """The budget (a whole number of bytes: 1.5e6 is 1,500,000) or the ratio, and the
    policy, checked as a command checks them: a mistake is refused here, when the
    backend is made, not inside dynamo at the first step."""
    from ..engine.policies import get_policy
    budget, ratio = validate.budget_or_ratio_arguments(budget, ratio)
    if isinstance(policy, str):
        get_policy(policy)
    return budget, ratio


def _static_shapes(gm, example_inputs) -> None:
    """Refuse a graph dynamo made with symbolic shapes: a DTR log holds bytes, not
    formulas (`torch.compile` marks a dimension dynamic when a second shape arrives,
    unless `dynamic=False`)."""
    symbolic = [x for x in example_inputs if isinstance(x, torch.SymInt)] + \
        [s for x in example_inputs if isinstance(x, torch.Tensor)
         for s in (*x.shape, *x.stride()) if isinstance(s, torch.SymInt)]
    if symbolic:
        raise RecordError(f"dynamo compiled a graph with symbolic shapes ({symbolic[0]}: a new "
                          "shape made it mark a dimension dynamic); dtr_backend plans each shape "
                          "in bytes: pass torch.compile(..., dynamic=False), which recompiles "
                          "and re-plans each new shape")


def _check_reserve(reserve) -> bool | int:
    """`reserve_workspace`: True (measure it), False, or a number of bytes (0 or more)."""
    if isinstance(reserve, bool):
        return reserve
    if isinstance(reserve, float) and reserve.is_integer():
        reserve = int(reserve)
    if not isinstance(reserve, int):
        raise RecordError(f"reserve_workspace must be True, False or a number of bytes, "
                          f"not {reserve!r}")
    return validate.at_least(reserve, 0, "reserve_workspace")


def _reserved(reserve: bool | int, joint: JointLog, joint_inputs, budget: int) -> tuple[int, int | None]:
    """The bytes to plan below `budget` for workspaces (True: the largest workspace
    of the joint graph run for real once, measured) and the op that took it."""
    if reserve is False:
        return 0, None
    reserved, op = (largest_workspace(joint, joint_inputs) if reserve is True
                    else (reserve, None))
    if reserved >= budget:
        where = f" ({joint.program.op_name(op)}, op {op})" if op is not None else ""
        raise BudgetNotMet(f"budget {budget:,} bytes leaves nothing once the workspace reserve "
                           f"of {reserved:,} bytes{where} is set aside", None)
    return reserved, op


def _state_slots(lowered: Lowered) -> list[int]:
    """Which of the backward's saved inputs are generator states (`dtr_rng_state`)."""
    (out,) = lowered.forward.graph.find_nodes(op="output")
    values = list(out.args[0])
    saved = values[len(values) - lowered.saved:] if lowered.saved else []
    return [i for i, n in enumerate(saved)
            if isinstance(n, torch.fx.Node) and n.target is dtr_rng_state]


def _state_bytes(lowered: Lowered, held: int) -> int:
    """The bytes of every generator state the step keeps (one per random op rerun:
    all alive at once where all cross to the backward), at least those `held`."""
    nodes = _calls(lowered, dtr_rng_state)
    each = max((dtr_rng_state(n.args[0]).nbytes for n in nodes[:1]), default=0)
    return max(held, each * len(nodes))


def _calls(lowered: Lowered, target) -> list[torch.fx.Node]:
    """The nodes of the lowered forward and backward graphs that call `target`."""
    return [n for g in (lowered.forward, lowered.backward) for n in g.graph.nodes
            if n.op == "call_function" and n.target is target]


def _reruns_random(lowered: Lowered) -> bool:
    return bool(_calls(lowered, dtr_rerun_random))


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
    return BudgetNotMet(text + _inputs_alone(program, op, budget), f)


def dtr_backend(budget: int | None = None, *, ratio: float | None = None, policy="dtr",
                checking: bool = False, log=None, cost: str = "flops",
                inner: str = "aot_eager", reserve_workspace: bool | int = False,
                breaks: str = "warn") -> DtrBackend:
    """A torch.compile backend that runs each training step as the DTR engine's
    schedule at `budget` bytes (or `ratio` of the joint graph's unconstrained
    peak) with `policy`; `checking` compares live bytes with the engine at
    every allocation check (`DtrBackend.graphs[i].checks`); `log` writes the
    joint graph's DTR log there; `cost` is the log's cost model: `flops`, or
    `measured` (each op's wall time, the joint graph run for real once when
    compiling: `joint.measured_costs`), which the policy and the simulated
    overhead then use; `inner` the compiler of the lowered graphs: `aot_eager`
    (the nop compiler: what runs is the schedule) or `inductor` (its fusions
    change what is allocated: no checking; see the module docstring);
    `reserve_workspace` plans each graph at the budget less a reserve for the
    ops' workspaces (scratch an op frees inside itself, which the schedule does
    not model), so that the allocator's peak stays within the budget: True
    measures the reserve (the largest workspace of the joint graph run for real
    once, no eviction), or a number of bytes. Arguments are checked here, as a
    command checks its options (`OptionError`); what is refused while compiling
    (a budget the schedule cannot meet, a graph the lowering cannot express)
    arrives at the first step as dynamo's `BackendCompilerFailed`, the original
    at its `.inner_exception`: `compile_refusal(exc)` returns it. Where dynamo
    breaks the step into several graphs, each is planned alone with the whole
    budget: `breaks="warn"` warns once (`UserWarning`, with the count), and
    `"refuse"` refuses the first graph that ends at a break, before planning it."""
    return DtrBackend(budget, ratio, policy, checking, log, cost, inner, reserve_workspace, breaks)


def compile_refusal(exc: BaseException) -> Exception | None:
    """What `dtr_backend` refused while compiling, from what `torch.compile`'s step
    raised: dynamo wraps it in `BackendCompilerFailed`, the original at
    `.inner_exception` (a `RecordError` such as `BudgetNotMet` or
    `NotExpressibleError`, or a `UserError`); None where the exception is not one."""
    from ..errors import UserError
    seen = exc
    while seen is not None:
        if isinstance(seen, (RecordError, UserError)):
            return seen
        seen = getattr(seen, "inner_exception", None)
    return None


__all__ = ["BudgetNotMet", "DtrBackend", "LiveStorages", "NotExpressibleError", "StepPeak",
           "compile_refusal", "dtr_backend"]
