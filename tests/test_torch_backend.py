"""dtr_backend: the engine's schedule lowered into the graphs torch.compile runs."""

from __future__ import annotations

import copy
import functools
import logging
import re

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf

from dtrforensics.engine.replay import replay
from dtrforensics.torch import BudgetNotMet, dtr_backend, lowering
from dtrforensics.torch.backend import compile_refusal
from dtrforensics.torch.joint import NotExpressibleError
from dtrforensics.torch.zoo import ZOO
from dtrforensics.trace.parser import parse_file


def _model(name: str, **sizes):
    torch.manual_seed(0)
    return ZOO[name](**sizes)


def _step(backend, model, batch, loss_fn, steps: int = 1, optimizer: bool = False):
    """Loss, gradients and buffers (after the forward) of `steps` compiled steps."""
    torch._dynamo.reset()
    m = copy.deepcopy(model)
    x, y = batch
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2) if optimizer else None
    step = torch.compile(lambda x, y: loss_fn(m(x), y), backend=backend, dynamic=False)
    values = []
    for _ in range(steps):
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        loss = step(x, y)
        buffers = [b.clone() for b in m.buffers()]
        loss.backward()
        if opt is not None:
            opt.step()
        values += [loss.detach(), *buffers, *(p.grad for p in m.parameters())]
    values += [p.detach().clone() for p in m.parameters()]
    return values


def _seeded_step(backend, model, batch, loss_fn):
    """`_step` from seed 1, then the generator's next draw: a random op run
    again under another state shows in the values or in where it leaves the
    generator."""
    torch.manual_seed(1)
    return _step(backend, model, batch, loss_fn) + [torch.rand(4)]


def _bitwise(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def gpt():
    model, batch, loss_fn = _model("gpt")
    return model, batch, loss_fn, _step("aot_eager", model, batch, loss_fn)


@pytest.fixture(scope="module")
def resnet():
    model, batch, loss_fn = _model("resnet")
    return model, batch, loss_fn, _step("aot_eager", model, batch, loss_fn)


def test_joint_log_peak_is_the_live_peak(gpt, tmp_path):
    """At the joint log's peak (ratio 1, nothing evicted) the lowered step's live
    storage bytes equal the engine's memory at every allocation check, its peak is
    the log's, and `dtrf run`'s replay of the written log has that peak."""
    model, batch, loss_fn, plain = gpt
    be = dtr_backend(ratio=1.0, checking=True, log=tmp_path / "joint.log")
    assert _bitwise(_step(be, model, batch, loss_fn), plain)
    (graph,) = be.graphs
    (check,) = graph.checks
    assert graph.summary.evictions == 0 and graph.lowered.victims == []
    assert check.checks == len(graph.lowered.check_memory) > 100
    assert check.mismatches == 0, check.first_mismatch
    assert check.peak_live == graph.summary.peak
    assert replay(parse_file(tmp_path / "joint.log"), ratio=1.0).summary.peak == check.peak_live


@pytest.mark.parametrize("fixture,ratios", [("gpt", (0.95, 0.85)), ("resnet", (0.8, 0.7))])
def test_lowered_step_follows_the_schedule(fixture, ratios, request):
    """At light and heavy eviction the lowered step evicts the engine's victims in
    its order, rebuilds as often, holds the engine's memory at every check and
    computes the plain aot_eager step's loss, gradients and buffers bit for bit."""
    model, batch, loss_fn, plain = request.getfixturevalue(fixture)
    evictions = []
    for ratio in ratios:
        be = dtr_backend(ratio=ratio, checking=True)
        assert _bitwise(_step(be, model, batch, loss_fn), plain)
        (graph,) = be.graphs
        (check,) = graph.checks
        victims = graph.schedule.result.victims[:, 0].tolist()
        assert graph.lowered.victims == victims and victims
        assert graph.lowered.remats == graph.summary.remats
        assert check.mismatches == 0, check.first_mismatch
        assert check.over_budget == 0 and check.peak_live <= graph.budget
        evictions.append(len(victims))
    assert evictions[0] < evictions[1]


def test_the_check_sees_a_missing_drop(gpt, monkeypatch):
    """The check can fail: with the drops lowered to nothing (the evicted values
    live on to their last use), live bytes exceed the engine's memory."""
    model, batch, loss_fn, _ = gpt
    monkeypatch.setattr(lowering._Builder, "free", _free_without_drop)
    be = dtr_backend(ratio=0.9, checking=True)
    _step(be, model, batch, loss_fn)
    (check,) = be.graphs[0].checks
    assert check.mismatches > 0 and "engine memory" in check.first_mismatch


def _free_without_drop(self, sid: int, pressure: bool) -> None:
    for tid in self.storage_tensors.get(sid, ()):
        self.version.pop(tid, None)
    if pressure:
        self.victims.append(sid)


def _measured(backend, model, batch, loss_fn):
    """A step compiled with `backend`, run once, then once more measured."""
    torch._dynamo.reset()
    m = copy.deepcopy(model)
    step = torch.compile(lambda x, y: loss_fn(m(x), y), backend=backend, dynamic=False)
    step(*batch).backward()
    for p in m.parameters():
        p.grad = None
    backend.measure_next()
    step(*batch).backward()
    (graph,) = backend.graphs
    (peak,) = graph.peaks
    return graph, peak


@pytest.mark.parametrize("fixture,ratio", [("gpt", 0.9), ("resnet", 0.7)])
def test_allocator_peak_within_budget_plus_workspaces(fixture, ratio, request):
    """A measured step: the CPU allocator's peak is exactly the largest of the live
    bytes at an op's start plus that op's own allocations (nothing but the ops'
    outputs and scratch is held), so at most the budget plus the largest
    workspace; resnet's convolutions take scratch beyond the budget."""
    model, batch, loss_fn, _ = request.getfixturevalue(fixture)
    graph, peak = _measured(dtr_backend(ratio=ratio, checking=True), model, batch, loss_fn)
    ws = peak.workspaces
    assert len(graph.checks) == 1 and peak.check.checks == graph.checks[0].checks
    assert peak.check.mismatches == 0, peak.check.first_mismatch
    assert peak.allocator_peak == ws.peak_with_workspaces
    assert peak.check.peak_live <= graph.budget < peak.bound == graph.budget + ws.largest
    assert peak.allocator_peak <= peak.bound and peak.to_json()["within_budget_plus_workspaces"]
    assert ws.op_runs >= peak.check.checks and ws.op_name and ws.module
    if fixture == "resnet":
        assert peak.allocator_peak > graph.budget and ws.op_name == "convolution_backward"


def _profiled_step_peak(step, batch, held: int) -> int:
    """The CPU allocator's peak over one step run under PyTorch's profiler: `held`
    (what the step starts with) plus the running peak of every allocation event."""
    from dtrforensics.torch.workspace import _allocations, workspace_of
    with torch.profiler.profile(profile_memory=True) as prof:
        step(*batch).backward()
    found = []
    for event in prof.profiler.kineto_results.experimental_event_tree():
        found += [event] if type(event.extra_fields).__name__ == "_ExtraFields_Allocation" \
            else _allocations(event)
    found.sort(key=lambda e: e.start_time_ns)
    return held + workspace_of([e.extra_fields.alloc_size for e in found])[1]


def test_allocator_peak_counts_the_generator_states_of_reruns():
    """A schedule rerunning a dropout keeps its generator state (5,056 B on CPU) from
    the forward to the backward, outside the schedule's storages: the measured peak
    counts it (equal to the profiler's own peak over a whole step) and so does the
    bound, named apart."""
    model, batch, loss_fn = _dropout_mlp()
    torch.manual_seed(1)
    be = dtr_backend(ratio=0.8, checking=True)
    torch._dynamo.reset()
    m = copy.deepcopy(model)
    step = torch.compile(lambda x, y: loss_fn(m(x), y), backend=be, dynamic=False)
    for measure in (False, True, False):
        for p in m.parameters():
            p.grad = None
        if measure:
            be.measure_next()
        if len(be.graphs) and be.graphs[0].peaks:
            held = sum(t.nbytes for t in [*m.parameters(), *batch])
            real = _profiled_step_peak(step, batch, held)
        else:
            step(*batch).backward()
    (graph,) = be.graphs
    (peak,) = graph.peaks
    reruns = sum(n.target is lowering.dtr_rerun_random for g in (graph.lowered.forward,
                 graph.lowered.backward) for n in g.graph.nodes)
    assert reruns > 0 and peak.allocator_peak == real == peak.workspaces.peak_with_workspaces
    assert peak.generator_states >= torch.get_rng_state().nbytes
    assert peak.bound == graph.budget + peak.workspaces.largest + peak.generator_states
    assert peak.to_json()["generator_states"] == peak.generator_states


def test_reserve_workspace_holds_the_allocator_peak_within_the_budget(resnet):
    """zoo:resnet's convolutions take scratch beyond the schedule: at ratio 1.0 the
    schedule fits the budget and the allocator's peak exceeds it, said plainly
    (text headline and JSON); `reserve_workspace=True` measures the largest
    workspace when compiling and plans below the budget by it, so the allocator's
    peak of the measured step stays within the budget asked for."""
    from dtrforensics.render.compiled_run import compiled_lines
    from dtrforensics.torch.compiled_run import run_compiled
    model, batch, loss_fn, _ = resnet
    plain = run_compiled(model, batch, loss_fn, ratio=1.0).to_json()
    over = plain["allocator"]["over_budget"]
    assert plain["mismatch"] is None and plain["allocator_within_budget"] is False and over > 0
    assert plain["allocator"]["allocator_peak"] == plain["budget_asked"] + over
    assert f"exceeds it by {over:,} B (workspaces" in plain["verdict"]
    assert "schedule fits the budget" in plain["verdict"]
    assert f"allocator peak {over:,} bytes OVER the budget" in compiled_lines(plain)[0]
    graph, peak = _measured(dtr_backend(ratio=1.0, checking=True, reserve_workspace=True),
                            model, batch, loss_fn)
    assert peak.budget == plain["budget"] == graph.budget + graph.reserved
    assert graph.reserved == peak.reserved >= peak.workspaces.largest > 0
    assert graph.joint.program.op_name(graph.reserved_op) == "convolution_backward"
    assert peak.check.mismatches == 0 and graph.summary.evictions > 0
    assert peak.allocator_peak <= peak.budget and peak.over_budget == 0


def test_the_peak_bound_sees_values_kept_alive(gpt, monkeypatch):
    """The bound can fail: with every freed value kept alive to the end of the
    step (its drop moved there), the allocator holds more than the budget plus
    any workspace."""
    model, batch, loss_fn, _ = gpt
    monkeypatch.setattr(lowering._Builder, "free", _free_at_the_end)
    _, peak = _measured(dtr_backend(ratio=0.9, checking=True), model, batch, loss_fn)
    assert peak.allocator_peak > peak.bound


def _free_at_the_end(self, sid: int, pressure: bool) -> None:
    for tid in self.storage_tensors.get(sid, ()):
        node = self.version.pop(tid, None)
        if node is not None:    # what the builder still holds at the end lives to the end
            self.version[("kept", tid, len(self.version))] = node
    if pressure:
        self.victims.append(sid)


def test_adamw_steps_bitwise(resnet):
    """Five AdamW steps compiled once: parameters and running statistics bitwise
    those of aot_eager, every step's live bytes the engine's."""
    model, batch, loss_fn, _ = resnet
    plain = _step("aot_eager", model, batch, loss_fn, steps=5, optimizer=True)
    be = dtr_backend(ratio=0.7, checking=True)
    assert _bitwise(_step(be, model, batch, loss_fn, steps=5, optimizer=True), plain)
    (graph,) = be.graphs
    assert len(graph.checks) == 5 and all(c.mismatches == 0 for c in graph.checks)
    assert graph.summary.evictions > 0


def test_budget_refused_when_compiling(gpt):
    """A budget the schedule cannot meet is refused before any step runs, with the
    engine's failing op, its module and the shortfall."""
    model, batch, loss_fn, _ = gpt
    be = dtr_backend(ratio=0.4)
    with pytest.raises(Exception) as caught:
        _step(be, model, batch, loss_fn)
    error = compile_refusal(caught.value)    # inside dynamo's BackendCompilerFailed
    assert isinstance(error, BudgetNotMet) and error is caught.value.inner_exception
    assert "shortfall" in str(error) and "tokens" in str(error)
    assert error.frontier is not None and error.frontier.shortfall > 0


@pytest.mark.parametrize("arguments,refusal", [
    ({"budget": -5}, "budget must be between 1 and"),
    ({"ratio": -0.5}, "ratio must be > 0"),
    ({"ratio": float("nan")}, "ratio must be a finite number"),
    ({"ratio": 0.9, "policy": "nope"}, "unknown policy 'nope'"),
    ({"budget": True}, "budget must be a whole number of bytes, got True"),
    ({"budget": 1.5}, "budget must be a whole number of bytes, got 1.5"),
    ({"budget": 10, "ratio": 0.5}, "give exactly one of budget"),
    ({"ratio": 0.9, "reserve_workspace": -1}, "reserve_workspace must be >= 0"),
])
def test_arguments_are_refused_when_the_backend_is_made(arguments, refusal):
    """A mistake in `dtr_backend`'s arguments is refused where it is made, with the
    check (and the wording) a command's options get, not at the first step inside
    dynamo's wrapper; an integral float budget is a number of bytes."""
    from dtrforensics.errors import OptionError
    with pytest.raises(OptionError, match=re.escape(refusal)):
        dtr_backend(**arguments)
    assert dtr_backend(1.5e6).budget == 1_500_000 and type(dtr_backend(1.5e6).budget) is int
    assert compile_refusal(ValueError("not the backend's")) is None


def test_a_budget_below_the_inputs_says_so():
    """A budget below what the parameters and the batch take fails at an input of the
    graph (a `constant` op): the refusal says the inputs alone exceed it, how much
    they take, and that no schedule can run."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    x = torch.randn(8, 8)
    held = sum(p.nbytes for p in m.parameters()) + x.nbytes
    torch._dynamo.reset()
    step = torch.compile(lambda x: m(x).sum(), backend=dtr_backend(budget=held // 2),
                         dynamic=False)
    with pytest.raises(Exception) as caught:
        step(x).backward()
    text = str(compile_refusal(caught.value))
    assert "(constant)" in text and "parameters and inputs alone exceed the budget" in text
    taken = int(re.search(r"take ([\d,]+) bytes", text).group(1).replace(",", ""))
    assert taken >= held > held // 2 and "no schedule can run" in text


def test_new_shapes_are_planned_again(gpt):
    """A batch of another shape recompiles (dynamic=False) and plans again."""
    model, batch, loss_fn, _ = gpt
    be = dtr_backend(ratio=1.0)
    _step(be, model, batch, loss_fn)
    x, y = batch
    _step(be, model, (x[:1], y[:1]), loss_fn)
    assert len(be.graphs) == 2
    assert be.graphs[1].summary.peak < be.graphs[0].summary.peak


def test_symbolic_shapes_are_refused_saying_dynamic_false():
    """Without dynamic=False, torch.compile marks the batch dimension dynamic when a
    second shape arrives: that graph's sizes are formulas, not bytes, so it is
    refused in one line saying what to pass (no log parse error from inside)."""
    from dtrforensics.torch import RecordError
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    torch._dynamo.reset()
    be = dtr_backend(ratio=1.0)
    step = torch.compile(lambda x: m(x).sum(), backend=be)
    step(torch.randn(8, 8)).backward()
    with pytest.raises(Exception) as caught:
        step(torch.randn(4, 8)).backward()
    refusal = compile_refusal(caught.value)
    assert isinstance(refusal, RecordError) and "symbolic shapes" in str(refusal)
    assert "torch.compile(..., dynamic=False)" in str(refusal) and "\n" not in str(refusal)
    assert len(be.graphs) == 1


def test_a_new_shape_refused_is_named():
    """A budget the first batch shape meets can be refused for a later one (a
    recompile re-plans it, in the middle of training): the refusal names the
    input whose shape changed, from what to what."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def compiled(backend):
        torch._dynamo.reset()
        return torch.compile(lambda x: m(x).sum(), backend=backend, dynamic=False)
    first = dtr_backend(ratio=1.0)
    compiled(first)(torch.randn(8, 8)).backward()
    be = dtr_backend(budget=first.graphs[0].summary.peak)
    step = compiled(be)
    step(torch.randn(8, 8)).backward()
    with pytest.raises(Exception) as caught:
        step(torch.randn(64, 8)).backward()
    refusal = compile_refusal(caught.value)
    assert isinstance(refusal, BudgetNotMet) and len(be.graphs) == 1
    assert str(refusal).startswith("re-planning a new shape, L_x_ 64 x 8 (was 8 x 8): budget")


def test_random_op_rebuilt_draws_the_same():
    """A dropout mask the schedule evicts and rebuilds is drawn again under the
    generator state of its first run: loss and gradients bitwise those of
    aot_eager, the generator after the step where aot_eager leaves it."""
    model, batch, loss_fn = _dropout_mlp()
    plain = _seeded_step("aot_eager", model, batch, loss_fn)
    be = dtr_backend(ratio=0.8, checking=True)
    assert _bitwise(_seeded_step(be, model, batch, loss_fn), plain)
    (graph,) = be.graphs
    program = graph.joint.program
    rebuilt = {int(program.tensor_op[t]) for t in _rebuilt_tensors(graph)}
    assert any(program.op_name(op) == "native_dropout" for op in rebuilt)
    assert graph.checks[0].mismatches == 0, graph.checks[0].first_mismatch


def test_measured_costs_plan_by_time_and_change_nothing_else():
    """Under measured costs the joint log is the flops log but for its costs (the
    joint graph run for real once when compiling), the step follows that
    schedule faithfully, and the measuring run leaves the generator and the
    model as they were: values bitwise aot_eager's."""
    model, batch, loss_fn = _dropout_mlp()
    plain = _seeded_step("aot_eager", model, batch, loss_fn)
    flops = dtr_backend(ratio=0.8, checking=True)
    measured = dtr_backend(ratio=0.8, checking=True, cost="measured")
    assert _bitwise(_seeded_step(flops, model, batch, loss_fn), plain)
    assert _bitwise(_seeded_step(measured, model, batch, loss_fn), plain)
    a, b = flops.graphs[0], measured.graphs[0]
    pa, pb = a.joint.program, b.joint.program
    assert pa.n_ops == pb.n_ops and (pa.op_total_size == pb.op_total_size).all()
    assert [pa.op_name(i) for i in range(pa.n_ops)] == [pb.op_name(i) for i in range(pb.n_ops)]
    assert (pa.op_cost != pb.op_cost).any() and (pb.op_cost[pb.op_cost > 0] >= 1).all()
    assert b.checks[0].mismatches == 0 and b.lowered.victims == \
        b.schedule.result.victims[:, 0].tolist()
    with pytest.raises(Exception, match="unknown cost model"):
        dtr_backend(ratio=0.8, cost="wall")


def test_what_the_forward_returns_stays_held_by_its_caller():
    """The caller holds what the forward returns, so the joint log pins it where the
    forward ends (semantics.md §2.1). Under lru at 0.8 the dropout MLP's schedule
    evicts the loss in the backward without those pins (the lowering refused the
    step: a budget that compiled or not as measured costs varied); with them the
    step runs, its values bitwise aot_eager's and its live bytes the engine's."""
    from dtrforensics.trace.parser import parse_lines
    from dtrforensics.trace.program import CMD_COMPUTE, CMD_PIN
    model, batch, loss_fn = _dropout_mlp()
    plain = _seeded_step("aot_eager", model, batch, loss_fn)
    backend = dtr_backend(ratio=0.8, policy="lru", checking=True)
    assert _bitwise(_seeded_step(backend, model, batch, loss_fn), plain)
    graph = backend.graphs[0]
    joint, program = graph.joint, graph.joint.program
    assert graph.checks[0].mismatches == 0
    returned = {int(program.tensor_storage[t])
                for t in lowering._tensor_ids(joint, joint.forward_outputs()) if t is not None}
    kinds, args = program.sched_kind.tolist(), program.sched_arg.tolist()
    cut = next(i for i, (k, a) in enumerate(zip(kinds, args))
               if k == CMD_COMPUTE and a == joint.backward_op)
    assert returned and returned <= {int(program.tensor_storage[a])
                                     for k, a in zip(kinds[:cut], args[:cut]) if k == CMD_PIN}
    assert not returned & set(graph.schedule.result.victims[:, 0].tolist())
    unpinned = parse_lines([line for line in joint.lines if '"PIN"' not in line], name="joint")
    evicted = set(replay(unpinned, budget=graph.budget, policy="lru").victims[:, 0].tolist())
    assert returned & evicted


def _dropout_mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Dropout(0.5), torch.nn.GELU(),
                                torch.nn.Linear(64, 64), torch.nn.Dropout(0.3), torch.nn.GELU(),
                                torch.nn.Linear(64, 4))
    return model, (torch.randn(512, 16), torch.randint(4, (512,))), torch.nn.functional.cross_entropy


def _close(a: list, b: list, tolerance: float = 1e-4) -> bool:
    """Every value of `b` within `tolerance` of `a`'s, relative to its largest."""
    return len(a) == len(b) and all(
        x.shape == y.shape and (float((x - y).abs().max()) <= tolerance * (float(x.abs().max()) or 1)
                                if x.is_floating_point() else torch.equal(x, y))
        for x, y in zip(a, b))


def test_inductor_refuses_checking_and_random_reruns():
    """Under inductor the checking mode cannot apply (refused in one line), nor can a
    schedule rerunning a random op (refused when compiling, before inductor runs)."""
    from dtrforensics.torch import RecordError
    with pytest.raises(RecordError, match="cannot apply under inductor"):
        dtr_backend(ratio=0.9, checking=True, inner="inductor")
    from dtrforensics.errors import OptionError
    with pytest.raises(OptionError, match="unknown inner compiler 'xla'"):
        dtr_backend(ratio=0.9, inner="xla")     # as its docstring says: an OptionError
    model, batch, loss_fn = _dropout_mlp()
    with pytest.raises(Exception) as caught:
        _step(dtr_backend(ratio=0.9, inner="inductor"), model, batch, loss_fn)
    error = getattr(caught.value, "inner_exception", caught.value)
    assert isinstance(error, NotExpressibleError) and "random" in str(error)


def test_inductor_gets_the_lowered_graphs_without_drops(gpt, monkeypatch):
    """What inductor is handed (its compiler replaced by the nop one here: no C++
    compile in the default tier): the decomposed joint graph's schedule, lowered,
    its drops left out, forward then backward; the step's values close to
    aot_eager's. tests marked slow run inductor itself."""
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._inductor import compile_fx
    model, batch, loss_fn, plain = gpt
    handed = []

    def nop(gm, inputs, is_backward=False):
        handed.append((is_backward, [n.target for n in gm.graph.nodes]))
        return boxed_nop(gm, inputs)
    monkeypatch.setattr(compile_fx, "compile_fx_inner", nop)
    be = dtr_backend(ratio=0.9, inner="inductor")
    assert _close(plain, _step(be, model, batch, loss_fn))
    assert [backward for backward, _ in handed] == [False, True]
    assert all(lowering.dtr_drop not in targets for _, targets in handed)
    (graph,) = be.graphs
    assert graph.lowered.victims == graph.schedule.result.victims[:, 0].tolist()
    assert graph.summary.evictions > 0 and graph.checks == []


@pytest.mark.slow
def test_inductor_step_runs_close_to_aot_eager(gpt):
    """Inductor compiles the lowered graphs (a C++ compile: minutes on 2 cores):
    loss and gradients within 1e-4 of aot_eager's, the schedule the engine's,
    and `torch run --compiled --inner inductor` says so."""
    model, batch, loss_fn, plain = gpt
    be = dtr_backend(ratio=0.9, inner="inductor")
    assert _close(plain, _step(be, model, batch, loss_fn))
    (graph,) = be.graphs
    assert graph.summary.evictions > 0
    assert graph.lowered.victims == graph.schedule.result.victims[:, 0].tolist()
    doc = dtrf("torch", "run", "zoo:gpt", "--ratio", "0.9", "--compiled", "--inner", "inductor",
               "--json").json()
    assert doc["mismatch"] is None and doc["inner"] == "inductor" and doc["allocator"] is None
    assert doc["real"]["alloc_checks"] == 0 and doc["real"]["largest_relative_difference"] <= 1e-4


def _inductor_nop(monkeypatch, seen: list):
    """Inductor's inner compiler replaced by the nop one, noting its random config."""
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._inductor import compile_fx, config

    def nop(gm, inputs, is_backward=False):
        seen.append(config.fallback_random)
        return boxed_nop(gm, inputs)
    monkeypatch.setattr(compile_fx, "compile_fx_inner", nop)


def test_inductor_compiles_a_dropout_with_aten_random(monkeypatch):
    """A dropout not rerun reaches inductor's lowering as `aten.rand`, which it
    refuses unless random ops fall back to aten's (its own replacement runs in its
    partitioner, not ours): the lowered graphs are compiled with `fallback_random`."""
    model, batch, loss_fn = _dropout_mlp()
    seen: list = []
    _inductor_nop(monkeypatch, seen)
    _step(dtr_backend(ratio=1.0, inner="inductor"), model, batch, loss_fn)
    assert seen == [True, True]


def test_inductor_run_compares_with_the_decomposed_plain_step(monkeypatch):
    """`torch run --compiled --inner inductor` on a model with active dropout: its
    plain step is aot_eager with inductor's decompositions, whose dropout draws its
    mask with `rand` as the lowered step does (aot_eager's `native_dropout` draws
    other numbers), so the values agree (inductor's compiler replaced by the nop one
    here; the slow tier compiles it)."""
    from dtrforensics.torch.compiled_run import run_compiled
    model, batch, loss_fn = _dropout_mlp()
    _inductor_nop(monkeypatch, [])
    torch.manual_seed(1)
    doc = run_compiled(model, batch, loss_fn, ratio=1.0, inner="inductor").to_json()
    assert doc["mismatch"] is None and doc["real"]["largest_relative_difference"] <= 1e-6


@pytest.mark.slow
def test_inductor_dropout_draws_from_the_generator():
    """Inductor compiles a model with active dropout (no eviction): its masks are
    drawn by aten from the global generator, so the step is close to the same
    decomposed graphs run by the nop compiler under the same seed."""
    model, batch, loss_fn = _dropout_mlp()

    def run():
        return _seeded_step(dtr_backend(ratio=1.0, inner="inductor"), model, batch, loss_fn)
    compiled = run()
    with pytest.MonkeyPatch.context() as mp:
        _inductor_nop(mp, [])
        assert _close(run(), compiled)


def _rebuilt_tensors(graph) -> list[int]:
    from dtrforensics.engine.hooks import E_FLAG, E_KIND, E_TENSOR, EV_COMPUTE, FLAG_REMAT
    ev = graph.schedule.events
    return ev[(ev[:, E_KIND] == EV_COMPUTE) & (ev[:, E_FLAG] & FLAG_REMAT != 0), E_TENSOR].tolist()


def test_an_op_writing_its_arguments_is_not_rerun():
    """A rebuild of an op that writes its arguments is refused, said as such."""
    from torch import fx
    graph = fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.add_.Tensor, (x, x))
    with pytest.raises(NotExpressibleError, match="writes its arguments"):
        lowering._check_rerunnable(node, 3, type("P", (), {"op_name": lambda self, op: "add_"})())


def test_torch_run_compiled(tmp_path):
    """`dtrf torch run --compiled`: the lowered step beside the engine's run of the
    joint graph's log (`--log`), which `dtrf run` replays to the same victims; a
    workspace reserve (`--reserve-workspace BYTES`) plans below the budget by it."""
    log = tmp_path / "joint.log"
    doc = dtrf("torch", "run", "zoo:gpt", "--ratio", "0.95", "--compiled", "--json",
               "--log", log, "--reserve-workspace", "2048").json()
    assert doc["mismatch"] is None and doc["lowered"]["victims_equal"]
    assert doc["real"]["values_bitwise_equal"] and doc["real"]["memory_mismatches"] == 0
    assert doc["simulated"]["evictions"] > 0
    assert doc["reserved_workspace"] == 2048 and doc["budget_asked"] == doc["budget"] + 2048
    alloc = doc["allocator"]
    assert alloc["within_budget_plus_workspaces"] and alloc["budget"] == doc["budget_asked"]
    assert doc["allocator_within_budget"] and alloc["schedule_budget"] == doc["budget"]
    assert alloc["allocator_peak"] == alloc["workspaces"]["peak_with_workspaces"]
    assert alloc["budget_plus_largest_workspace"] == doc["budget"] + alloc["workspaces"]["largest"]
    run = dtrf("run", log, "--budget", str(doc["budget"]), "--json").json()
    assert run["victims_sha256"] == doc["simulated"]["victims_sha256"]
    assert run["evictions"] == doc["simulated"]["evictions"]
    refused = dtrf("torch", "run", "zoo:gpt", "--ratio", "0.4", "--compiled")
    assert refused.refused("cannot be met") and "shortfall" in refused.err
    assert dtrf("torch", "run", "zoo:gpt", "--ratio", "1", "--compiled", "--workspaces").refused(
        "--workspaces cannot be used with --compiled")
    assert dtrf("torch", "run", "zoo:gpt", "--ratio", "1", "--compiled", "--cost", "wall").refused(
        "unknown --cost 'wall'")


class _Broken(torch.nn.Module):
    """Two linear layers with a graph break between them."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(h)


@pytest.mark.parametrize("ratio", [1.0, 0.8])
def test_a_graph_break_is_refused_saying_what_to_do(ratio):
    """`--compiled` refuses a step dynamo breaks in two, naming the break and what
    to do, before planning its first graph (at 0.8 that small graph alone cannot
    meet its budget: the break is still what is said); `dtr_backend` itself plans
    each graph alone and warns of it once, with the count."""
    import warnings

    from dtrforensics.torch import RecordError
    from dtrforensics.torch.compiled_run import run_compiled
    torch.manual_seed(0)
    batch = (torch.randn(4, 8), torch.randn(4, 4))
    with pytest.raises(RecordError) as caught:
        run_compiled(_Broken(), batch, torch.nn.functional.mse_loss, ratio=ratio)
    text = str(caught.value)
    assert "dynamo broke the step at" in text and "graph_break" in text
    assert "fullgraph=True" in text and "cannot be met" not in text
    be = dtr_backend(ratio=1.0)
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        _step(be, _Broken(), batch, torch.nn.functional.mse_loss, steps=2)
    ours = [str(w.message) for w in caught_warnings if "dtr_backend" in str(w.message)]
    assert len(be.graphs) > 1 and len(ours) == 1
    assert "compiled into 2 graphs so far" in ours[0] and "planned alone" in ours[0]
    with pytest.raises(Exception) as refused:
        _step(dtr_backend(ratio=1.0, breaks="refuse"), _Broken(), batch,
              torch.nn.functional.mse_loss)
    assert "dynamo broke the step at" in str(compile_refusal(refused.value))


def test_a_storage_larger_than_its_fake_is_counted_as_real():
    """aten's mse_loss returns its scalar in the elementwise buffer (64 bytes for a
    4 x 4 input; the fake tensor says 4): a checking backend takes the real size
    from a real run of the joint graph, and the live bytes equal the engine's."""
    torch.manual_seed(0)
    model, batch = torch.nn.Linear(8, 4), (torch.randn(4, 8), torch.randn(4, 4))
    plain = _step("aot_eager", model, batch, torch.nn.functional.mse_loss)
    be = dtr_backend(ratio=1.0, checking=True)
    assert _bitwise(_step(be, model, batch, torch.nn.functional.mse_loss), plain)
    (graph,) = be.graphs
    program = graph.joint.program
    (loss,) = [t for t in range(program.n_tensors)
               if program.op_name(int(program.tensor_op[t])) == "mse_loss"]
    assert program.tensor_size[loss] == 64
    assert graph.checks[0].mismatches == 0, graph.checks[0].first_mismatch


_LOG = logging.getLogger("dtrforensics-test")


@functools.lru_cache(None)
def _warning_once(self, *args):
    """As transformers' `warning_once`: a logger's warning, each message once."""
    self.warning(*args)


class _Warns(torch.nn.Module):
    """A linear layer whose forward warns once through the logger, as transformers'
    loss does (`logging.Logger.warning_once`, which transformers adds)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 4)

    def forward(self, x):
        _LOG.warning_once("a message, not the step's math")
        return self.a(x)


def test_a_warning_once_does_not_break_the_step(monkeypatch):
    """`--compiled` ignores `Logger.warning_once` while compiling (transformers'
    loss calls it; traced, it breaks the graph): the step is one graph."""
    from dtrforensics.torch.compiled_run import run_compiled
    monkeypatch.setattr(logging.Logger, "warning_once", _warning_once, raising=False)
    torch.manual_seed(0)
    batch = (torch.randn(4, 8), torch.randn(4, 4))
    result = run_compiled(_Warns(), batch, torch.nn.functional.mse_loss, ratio=1.0)
    assert result.mismatch is None and result.checks > 0


def test_a_hole_is_refused_and_its_edges_run(gpt, tmp_path):
    """Around a hole of the joint graph's log (a failing budget with completing
    budgets below and above it), the failing budget is refused when compiling
    and the budgets on both sides run, faithful to the engine."""
    model, batch, loss_fn, plain = gpt
    log = tmp_path / "joint.log"
    _step(dtr_backend(ratio=1.0, log=log), model, batch, loss_fn)
    program = parse_file(log)
    runs = [replay(program, ratio=i / 1000).summary for i in range(800, 951)]
    ok = [s.outcome == "ok" for s in runs]
    holes = [i for i in range(1, len(runs) - 1) if not ok[i] and any(ok[:i]) and any(ok[i:])]
    assert holes, "no hole between ratios 0.8 and 0.95"
    fail = holes[0]
    below = max(i for i in range(fail) if ok[i])
    above = min(i for i in range(fail, len(runs)) if ok[i])
    with pytest.raises(Exception) as caught:
        _step(dtr_backend(runs[fail].budget), model, batch, loss_fn)
    assert isinstance(getattr(caught.value, "inner_exception", None), BudgetNotMet)
    for i in (below, above):
        be = dtr_backend(runs[i].budget, checking=True)
        assert _bitwise(_step(be, model, batch, loss_fn), plain)
        assert be.graphs[0].checks[0].mismatches == 0
        assert be.graphs[0].summary.victims_sha256 == runs[i].victims_sha256


def test_values_missing_or_renamed_are_an_infinite_difference():
    """Under inductor the mismatch reads only the largest difference: a value the
    compiled steps lack (or one under another name) cannot measure as 0."""
    from dtrforensics.torch.compiled_run import _largest_difference
    plain = [("step 0: loss", torch.tensor(1.0)), ("parameter w", torch.ones(3))]
    assert _largest_difference(plain, list(plain)) == 0.0
    assert _largest_difference(plain, plain[:1]) == float("inf")
    assert _largest_difference(plain, [plain[0], ("parameter v", torch.ones(3))]) == float("inf")


def test_a_user_error_raised_while_compiling_surfaces_as_itself(monkeypatch):
    """What the backend refuses while compiling reaches `run_compiled`'s caller as
    itself (an `OptionError` too, not only a `RecordError`), not as dynamo's
    `BackendCompilerFailed` reworded."""
    from dtrforensics.errors import OptionError
    from dtrforensics.torch.backend import DtrBackend
    from dtrforensics.torch.compiled_run import run_compiled

    def refuse(self, *args):
        raise OptionError("refused while planning")
    monkeypatch.setattr(DtrBackend, "plan_graph", refuse)
    torch.manual_seed(0)
    batch = (torch.randn(4, 8), torch.randn(4, 4))
    with pytest.raises(OptionError, match="^refused while planning$"):
        run_compiled(torch.nn.Linear(8, 4), batch, torch.nn.functional.mse_loss, ratio=1.0)


def test_inner_and_cost_are_checked_when_parsed_naming_the_option():
    """`--inner` and `--cost` take one of their names, refused (exit 2, one line naming
    the option) before the model is built: a spec that does not exist is not reached."""
    for option, value in (("--inner", "xla"), ("--cost", "wall")):
        for compiled in ((), ("--compiled",)):
            out = dtrf("torch", "run", "zoo:no_such_model", "--ratio", "1", *compiled,
                       option, value)
            assert out.refused(f"unknown {option} {value!r}"), out.err
            assert "no_such_model" not in out.err
    assert dtrf("torch", "run", "zoo:mlp", "--ratio", "1", "--inner", "inductor").refused(
        "--inner needs --compiled")


def test_a_step_compiled_into_no_graph_is_refused_in_its_own_words():
    """A step dynamo handed no graph is not worded as a break at '?'; several graphs
    name the first break dynamo counted."""
    from dtrforensics.torch import RecordError
    from dtrforensics.torch.compiled_run import _result
    with pytest.raises(RecordError) as caught:
        _result(dtr_backend(ratio=1.0), [], [], None, None, 1, None, "dtr")
    assert "no graph of the step" in str(caught.value) and "'?'" not in str(caught.value)
    from dtrforensics.torch.backend import break_words
    assert break_words(["a call\nin detail", "another"]) == "'a call' (and 1 more)"
    assert break_words([]) == "'?'"


def test_the_compiled_run_text_reads_every_field_to_json_writes():
    """The text reads the fields `to_json` always writes as they are: a document
    lacking one is a KeyError, not a line drawn from a made-up default."""
    from dtrforensics.render.compiled_run import compiled_lines
    from dtrforensics.torch.compiled_run import run_compiled
    torch.manual_seed(0)
    batch = (torch.randn(4, 8), torch.randn(4, 4))
    doc = run_compiled(torch.nn.Linear(8, 4), batch, torch.nn.functional.mse_loss,
                       ratio=1.0).to_json()
    assert compiled_lines(doc)[0].startswith("compiled step (dtr_backend, aot_eager)")
    for key in ("inner", "budget_asked", "cost", "verdict", "reserved_workspace",
                "allocator_within_budget", "allocator"):
        with pytest.raises(KeyError):
            compiled_lines({k: v for k, v in doc.items() if k != key})
    for key in ("generator_states", "bound"):
        alloc = {k: v for k, v in doc["allocator"].items() if k != key}
        with pytest.raises(KeyError):
            compiled_lines({**doc, "allocator": alloc})
