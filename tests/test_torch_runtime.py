"""The real step under DTR: values, memory and decisions as the simulation has them."""

from __future__ import annotations

import json
import weakref

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf
from torch import nn
from typer.testing import CliRunner

from dtrforensics.analyses.floor import floor
from dtrforensics.cli.main import app
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.hooks import (
    E_FLAG,
    E_KIND,
    E_TENSOR,
    EV_COMPUTE,
    FLAG_COLLATERAL,
    FLAG_REMAT,
)
from dtrforensics.engine.replay import replay
from dtrforensics.engine.summary import victims_sha256
from dtrforensics.render.labels import short_source
from dtrforensics.torch import (
    RecordError,
    rebuild,
    record,
    runtime,
    versions,
)
from dtrforensics.torch.execute import BudgetError, NotFaithfulError, _stop_of, execute, prepare
from dtrforensics.torch.optim import OPTIMIZERS
from dtrforensics.torch.recorder import VALUE_READS
from dtrforensics.torch.schedule import RealOutOfMemory, ScheduleError, op_text, plan
from dtrforensics.torch.spec import build
from dtrforensics.torch.zoo import ZOO
from dtrforensics.trace.parser import parse_file
from dtrforensics.trace.where import with_where

runner = CliRunner()
# Values are compared bitwise: one intra-op thread sums in the same order every
# run (and on a shared 2-core machine it is the faster setting).
pytestmark = pytest.mark.usefixtures("one_thread")


def zoo(name):
    torch.manual_seed(0)
    return ZOO[name]()


def dropout_mlp(batch: int = 256, width: int = 32, layers: int = 4):
    """Dropout after every hidden layer, with in-place ReLUs and an in-place scale."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
            self.drop = nn.Dropout(0.5)
            self.act = nn.ReLU(inplace=True)
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            for layer in self.hidden:
                x = self.drop(self.act(layer(x)))
                x.mul_(0.5)
            return self.head(x)

    return Net(), (torch.randn(batch, width), torch.randint(10, (batch,))), nn.functional.cross_entropy


class LateRead(nn.Module):
    """Compares two early activations (`torch.equal`) after the rest of forward."""

    def __init__(self, width: int = 32, layers: int = 4):
        super().__init__()
        self.first, self.second = nn.Linear(width, width), nn.Linear(width, width)
        self.body = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        a, b = self.first(x), self.second(x)
        h = a + b
        for layer in self.body:
            h = torch.relu(layer(h))
        return h * 2 if torch.equal(a, b) else h


def late_read():
    torch.manual_seed(0)
    return LateRead(), (torch.randn(256, 32), torch.randn(256, 32)), nn.functional.mse_loss


def assert_faithful(result, constrained: bool = True):
    """Values, memory and decisions of a completing real step: the live storage
    bytes the engine's memory at every allocation check, never over the budget
    (with an optimizer too: the old parameter versions are kept as the engine
    keeps them)."""
    sim = result.simulated
    assert result.outcome == sim.outcome == "ok"
    assert result.loss_bitwise_equal is True and result.grads_bitwise_equal is True
    assert result.grads_compared > 0
    assert result.memory_mismatches == 0, result.first_mismatch
    assert result.alloc_checks > 0 and result.over_budget_checks == 0
    assert result.peak_live_bytes <= result.budget
    assert (result.victims_sha256, len(result.victims), result.remats, result.clock) == \
        (sim.victims_sha256, sim.evictions, sim.remats, sim.clock)
    if result.optimizer:
        assert result.updates_bitwise_equal is True and result.updates_compared > 0
    if constrained:
        assert sim.evictions > 0 and result.remats > 0


# Budgets as fractions of the way from the floor to the peak, where each model
# completes (each run asserts the engine's outcome is "ok").
COMPLETING = [("resnet", 0.6), ("gpt", 0.8), ("lstm", 0.9), ("unet", 0.85)]


@pytest.mark.parametrize("name,between", COMPLETING)
def test_zoo_step_is_the_unconstrained_one_and_the_simulated_one(name, between, tmp_path):
    path = tmp_path / "step.log"
    record(*zoo(name), path)
    program = parse_file(path)
    peak, least = baseline(program).peak, floor(program).floor
    budget = least + int((peak - least) * between)
    result = execute(*zoo(name), budget=budget)
    assert_faithful(result)
    assert result.floor == least and result.peak == peak


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet", "gpt", "lstm", "unet"])
def test_zoo_step_at_every_completing_budget_of_a_grid(name, tmp_path):
    """(zoo:mlp is not here: it completes only at its peak, where nothing is evicted.)"""
    path = tmp_path / "step.log"
    record(*zoo(name), path)
    program = parse_file(path)
    peak, least = baseline(program).peak, floor(program).floor
    budgets = [least + (peak - least) * i // 8 for i in range(9)]
    completing = [b for b in budgets if replay(program, budget=b).summary.outcome == "ok"]
    assert len(completing) >= 2
    for budget in completing:
        assert_faithful(execute(*zoo(name), budget=budget), constrained=budget < peak)


def test_unconstrained_step_evicts_nothing_and_is_exact():
    result = execute(*zoo("mlp"), ratio=1.0)
    assert_faithful(result, constrained=False)
    assert result.victims == () and result.remats == 0
    assert result.peak_live_bytes == result.peak


def lowest_completing(factory, folder, points: int = 20) -> int:
    """The lowest budget of a grid from the floor to the peak where the engine completes."""
    path = folder / "step.log"
    record(*factory(), path)
    program = parse_file(path)
    peak, least = baseline(program).peak, floor(program).floor
    return next(b for b in (least + (peak - least) * i // points for i in range(points + 1))
                if replay(program, budget=b).summary.outcome == "ok")


def test_dropout_and_in_place_ops_rebuild_to_the_same_bits(tmp_path):
    result = execute(*dropout_mlp(), budget=lowest_completing(dropout_mlp, tmp_path))
    assert_faithful(result)
    assert result.random_rebuilds > 0


def test_writes_through_views_run_as_dtr_has_them(tmp_path):
    """T5's `_shift_right` (`view_writes.shift_right`) writes through a slice and
    a select of one tensor, then reads the whole: refused before ("reads a tensor
    whose storage an in-place op changed after the tensor was made"), and at the
    unconstrained budget live bytes differed from the engine's (the old versions,
    and the lifted scalar the engine pins). Now every name of the storage is the
    new version: faithful with nothing evicted and at evicting budgets."""
    from view_writes import shift_right
    path = tmp_path / "step.log"
    record(*shift_right(), path)
    program = parse_file(path)
    peak, least = baseline(program).peak, floor(program).floor
    assert_faithful(execute(*shift_right(), budget=2 * peak), constrained=False)
    budgets = [least + (peak - least) * i // 4 for i in range(4)]
    completing = [b for b in budgets if replay(program, budget=b).summary.outcome == "ok"]
    assert completing
    for budget in completing[:2]:
        assert_faithful(execute(*shift_right(), budget=budget))


def test_t5_runs_at_an_evicting_budget(tmp_path):
    """transformers' T5 (`view_writes.t5`, tiny): the same, with its own loss."""
    needs_library("hf:t5")
    from view_writes import t5

    def tiny():
        torch.manual_seed(0)
        return t5(layers=1, width=32, ff=64, vocab=64, heads=2, batch=8, seq=32)
    assert_faithful(execute(*tiny(), budget=lowest_completing(tiny, tmp_path, points=10)))


def test_rebuilds_without_the_random_state_would_differ(monkeypatch, tmp_path):
    """The dropout test can fail: rebuilding random ops under the current random
    state gives other gradients."""
    budget = lowest_completing(dropout_mlp, tmp_path)
    original = rebuild.Rebuilder.rebuild

    def rebuild_without_rng(self, op, meter=None):
        for rec in self.ops.values():
            rec.rng = None
        original(self, op, meter)

    monkeypatch.setattr(rebuild.Rebuilder, "rebuild", rebuild_without_rng)
    result = execute(*dropout_mlp(), budget=budget)
    assert result.outcome == "ok" and result.grads_bitwise_equal is False
    assert not result.matches_simulation() and result.memory_mismatches == 0
    assert result.mismatch().startswith("the gradient of ")
    assert result.mismatch().endswith(" in the real step is not bitwise that of the plain step")


def test_memory_truth_is_pytorchs(monkeypatch):
    """The memory check can fail: an eviction that does not release the storage
    leaves live bytes above the engine's memory."""
    monkeypatch.setattr(torch.UntypedStorage, "resize_", lambda self, n: self)
    result = execute(*zoo("resnet"), ratio=0.8)
    assert result.simulated.evictions > 0
    assert result.memory_mismatches > 0 and "live storages" in result.first_mismatch
    assert not result.matches_simulation() and result.first_mismatch in result.mismatch()


def test_decisions_are_those_of_dtrf_run_on_the_recorded_log(tmp_path):
    log = tmp_path / "resnet.log"
    done = runner.invoke(app, ["torch", "record", "zoo:resnet", "-o", str(log)])
    assert done.exit_code == 0, done.output
    program = parse_file(log)
    least = floor(program).floor
    budget = least + (baseline(program).peak - least) // 2
    sim = json.loads(runner.invoke(app, ["run", str(log), "--budget", str(budget), "--json"]).stdout)
    done = runner.invoke(app, ["torch", "run", "zoo:resnet", "--budget", str(budget), "--json"])
    assert done.exit_code == 0, done.output
    real = json.loads(done.stdout)
    for key in ("outcome", "victims_sha256", "evictions", "remats", "clock", "overhead"):
        assert real[key] == sim[key], key
    assert real["evictions"] > 0
    assert real["real"]["memory_mismatches"] == 0
    assert real["real"]["grads_bitwise_equal"] is True


def grid(program, points: int) -> list[int]:
    """`points + 1` budgets from the log's floor to the peak of a DTR run with memory
    to spare (above it nothing is evicted; with an optimizer it lies above the
    unconstrained peak, by the old parameter versions a DTR run keeps)."""
    least = floor(program).floor
    top = replay(program, budget=1 << 62).summary.peak_memory
    return [least + (top - least) * i // points for i in range(points + 1)]


def lowest_on_grid(step, points: int = 10) -> int:
    """The lowest budget of `grid` where the engine completes the step's log."""
    return next(b for b in grid(step.program, points)
                if replay(step.program, budget=b).summary.outcome == "ok")


def read_rebuilt(schedule, program) -> bool:
    """Whether the schedule rebuilds a storage right before a value read (`.item()`,
    `torch.equal`)."""
    rebuilt = False
    for e in schedule.events.tolist():
        if e[E_KIND] != EV_COMPUTE or e[E_FLAG] & FLAG_COLLATERAL:
            continue
        if e[E_FLAG] & FLAG_REMAT:
            rebuilt = True
        elif program.op_name(int(program.tensor_op[e[E_TENSOR]])) in VALUE_READS and rebuilt:
            return True
        else:
            rebuilt = False
    return False


def test_a_value_read_of_an_evicted_tensor_rebuilds_it_first(tmp_path):
    """A read makes no tensor, but the recorder logs it as a 0-byte view of what it
    reads: the schedule rebuilds an evicted activation before `torch.equal` reads
    it, and so does the real step."""
    budget = lowest_completing(late_read, tmp_path)
    step = prepare(*late_read())
    assert read_rebuilt(plan(step.program, budget), step.program)
    assert_faithful(execute(*late_read(), budget=budget))


def needs_library(spec: str) -> None:
    """Skip, saying so, where the library of a named model is not installed."""
    library = {"hf": "transformers", "timm": "timm", "torchvision": "torchvision"}
    if spec.partition(":")[0] in library:
        pytest.importorskip(library[spec.partition(":")[0]])


# (spec, options, optimizer): each completes at the lowest budget of its grid
# with evictions.
OPTIMIZED = [("zoo:unet", {}, "sgd"), ("zoo:mlp", {}, "adam"), ("zoo:resnet", {}, "adamw"),
             pytest.param("zoo:gpt", {"batch": 8}, "adamw", marks=pytest.mark.slow),
             pytest.param("hf:LlamaForCausalLM", {"seq": 64, "batch": 4, "hidden_size": 64,
                                                  "intermediate_size": 128}, "adamw",
                          marks=pytest.mark.slow)]


@pytest.mark.parametrize("spec,options,optimizer", OPTIMIZED)
def test_optimizer_steps_run_as_recorded(spec, options, optimizer):
    """The optimizer makes a new version of every parameter (the old one kept, as
    the engine keeps it pinned) and writes its states in place (views in the log):
    live bytes the engine's memory at every check, parameters and states after
    the step bitwise those of the plain step."""
    needs_library(spec)
    torch.manual_seed(0)
    step = prepare(*build(spec, **options), optimizer=optimizer)
    budget = lowest_on_grid(step)
    torch.manual_seed(0)
    result = execute(*build(spec, **options), budget=budget, optimizer=optimizer)
    assert_faithful(result)
    assert result.updates_compared >= 2 * sum(1 for _ in step.model.parameters())


# Every optimizer on zoo models and a library model, at sizes where some budgets
# of the grid evict.
GRIDS = [("zoo:mlp", {}, "adam"), ("zoo:unet", {}, "sgd"), ("zoo:resnet", {}, "adamw"),
         ("zoo:resnet", {}, "sgd"), ("zoo:gpt", {"batch": 8}, "adam"),
         ("zoo:gpt", {"batch": 8}, "sgd"), ("zoo:gpt", {"batch": 8}, "adamw"),
         ("hf:LlamaForCausalLM", {"seq": 64, "batch": 4, "hidden_size": 64,
                                  "intermediate_size": 128}, "adamw"),
         ("torchvision:resnet18", {"image_size": 32}, "sgd")]


@pytest.mark.slow
@pytest.mark.parametrize("spec,options,optimizer", GRIDS)
def test_optimizer_steps_at_every_completing_budget_of_a_grid(spec, options, optimizer):
    """Wherever the simulation completes on a 9-point grid from the floor up:
    values bitwise, decisions the engine's, live bytes the engine's memory at
    every check and never over the budget. No rebuild ever needed a state's
    value from before its update (the executor would have refused it)."""
    needs_library(spec)
    torch.manual_seed(0)
    step = prepare(*build(spec, **options), optimizer=optimizer)
    completing = [b for b in grid(step.program, 8)
                  if replay(step.program, budget=b).summary.outcome == "ok"]
    evicting = 0
    for budget in completing:
        torch.manual_seed(0)
        result = execute(*build(spec, **options), budget=budget, optimizer=optimizer)
        assert_faithful(result, constrained=False)
        evicting += result.remats > 0
    assert evicting >= 1


def test_rebuilds_after_an_update_read_the_parameters_old_versions(monkeypatch):
    """zoo:mlp with Adam at its lowest completing budget: the schedule rebuilds,
    after a parameter's update, ops that read the parameter before it. They read
    its old version, which the engine keeps pinned and the executor keeps too, so
    live bytes are the engine's memory at every check. Updated in place instead
    (no old version kept, as a view in the log would have it), the values differ."""
    torch.manual_seed(0)
    step = prepare(*build("zoo:mlp"), optimizer="adam")
    budget = lowest_on_grid(step)
    schedule = plan(step.program, budget)
    assert rebuilds_reading_old_versions(step.program, schedule) > 0
    plain = step.plain()[0]
    run = step.real(schedule, budget)
    assert run.stop is None and run.values == plain
    assert run.executor.stats.mismatches == 0 and run.executor.stats.remats > 0

    def in_place(self, op, inputs, mutated):
        for out_tid, m in zip(self.program.op_outputs_of(op), mutated):
            self.storages.weak[out_tid] = weakref.ref(inputs[m].untyped_storage())
            self.storages.resident.add(out_tid)

    monkeypatch.setattr(versions.Versions, "new_versions", in_place)
    run = step.real(schedule, budget)
    assert run.stop is None and (run.values.grads, run.values.updates) != (plain.grads, plain.updates)


def rebuilds_reading_old_versions(program, schedule) -> int:
    """Rebuilds, after the first update of a constant written in place (one with a
    new version `<name>$`), of ops that ran before it and read such a constant."""
    names = set(program.tensor_names)
    versioned = {s for s in program.storage_ids().tolist()
                 if program.is_constant(int(program.tensor_op[s]))
                 and program.tensor_name(s) + "$" in names}
    first = min(int(program.tensor_op[program.tensor_by_name(program.tensor_name(s) + "$")])
                for s in versioned)
    found, started = 0, False
    for e in schedule.events.tolist():
        if e[E_KIND] != EV_COMPUTE or e[E_FLAG] & FLAG_COLLATERAL:
            continue
        op = int(program.tensor_op[e[E_TENSOR]])
        started = started or (op == first and not e[E_FLAG] & FLAG_REMAT)
        if started and e[E_FLAG] & FLAG_REMAT and op < first:
            found += any(int(program.tensor_storage[t]) in versioned for t in program.op_args_of(op))
    return found


class ReadThenWrite(torch.optim.Optimizer):
    """Reads its state into a large temporary, writes the state in place, then
    allocates and reads the temporary: breaks the rule that lets a state's update
    be a view (no op that read a state before its update is rerun after it)."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.01})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if "avg" not in state:
                    state["avg"] = torch.zeros_like(p)
                avg = state["avg"]
                spread = avg.reshape(-1).repeat(64)   # read before the update
                avg.add_(p.grad)                      # the update: a view in the log
                pressure = torch.ones(32 * p.numel())
                p.add_(avg + spread.sum() * pressure.sum(), alpha=-group["lr"])


def test_a_rebuild_that_would_read_a_state_written_since_is_refused(monkeypatch):
    """With the `size` policy the largest storage goes first: the temporary read
    from a state before its update is evicted by the next allocation and rebuilt
    after the update. The executor refuses in one line rather than compute it
    from the updated state."""
    monkeypatch.setitem(OPTIMIZERS, "read-then-write", ReadThenWrite)
    model = nn.Linear(16, 16)
    batch = (torch.randn(4, 16), torch.randn(4, 16))
    step = prepare(model, batch, nn.functional.mse_loss, optimizer="read-then-write")
    refused = {}
    for budget in grid(step.program, 6):
        try:
            execute(model, batch, nn.functional.mse_loss, budget=budget, policy="size",
                    optimizer="read-then-write")
        except ScheduleError as exc:
            refused[budget] = str(exc)
    assert refused and all("\n" not in m and "optimizer state" in m for m in refused.values())
    assert "before op" in min(refused.values()) and "cannot be recomputed faithfully" in min(refused.values())
    # the rebuilt op's module, from the log's where-file
    assert all(" in module Linear, which read optimizer state" in m for m in refused.values())
    monkeypatch.setattr(rebuild.Rebuilder, "check_states_unwritten", lambda *args: None)
    result = execute(model, batch, nn.functional.mse_loss, budget=min(refused), policy="size",
                     optimizer="read-then-write")
    assert result.outcome == "ok" and result.updates_bitwise_equal is False


def test_an_optimizer_step_matches_dtrf_run_on_the_log_torch_record_writes(tmp_path):
    log = tmp_path / "mlp.log"
    done = runner.invoke(app, ["torch", "record", "zoo:mlp", "-o", str(log), "--optimizer", "adam"])
    assert done.exit_code == 0, done.output
    program = parse_file(log)
    budget = next(b for b in grid(program, 10) if replay(program, budget=b).summary.outcome == "ok")
    sim = json.loads(runner.invoke(app, ["run", str(log), "--budget", str(budget), "--json"]).stdout)
    done = runner.invoke(app, ["torch", "run", "zoo:mlp", "--budget", str(budget), "--optimizer", "adam",
                               "--json"])
    assert done.exit_code == 0, done.output
    real = json.loads(done.stdout)
    for key in ("outcome", "victims_sha256", "evictions", "remats", "clock", "overhead"):
        assert real[key] == sim[key], key
    assert real["evictions"] > 0 and real["optimizer"] == "adam"
    assert real["real"]["memory_mismatches"] == 0 and real["real"]["over_budget_checks"] == 0
    assert real["real"]["updates_bitwise_equal"] is True
    top = grid(program, 1)[-1]
    whole = dtrf("torch", "run", "zoo:mlp", "--budget", str(top), "--optimizer", "adam")
    assert whole.code == 0, whole.err
    assert "evictions 0," in whole.out and "equal to the engine's at" in whole.out
    assert "over budget at 0;" in whole.out and "bitwise equal True" in whole.out


# Library models at sizes where activations outweigh parameters, so that the
# lowest completing budget of the grid evicts.
LIBRARY = [
    ("torchvision:resnet18", {"image_size": 32}),
    pytest.param("torchvision:mobilenet_v3_small", {"image_size": 32}, marks=pytest.mark.slow),
    ("hf:LlamaForCausalLM", {"seq": 64, "batch": 4, "hidden_size": 64, "intermediate_size": 128}),
    pytest.param("hf:gpt2", {"seq": 64, "batch": 4, "n_embd": 64}, marks=pytest.mark.slow),
    pytest.param("timm:vit_tiny_patch16_224", {"image_size": 64, "batch": 8}, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("spec,options", LIBRARY)
def test_library_models_run_as_recorded(spec, options):
    """In-place ReLUs and hardswishes of torchvision, transformers' attention and
    its causal-mask read, timm's blocks: values, memory and decisions."""
    needs_library(spec)
    torch.manual_seed(0)
    step = prepare(*build(spec, **options))
    budget = lowest_on_grid(step)
    torch.manual_seed(0)
    assert_faithful(execute(*build(spec, **options), budget=budget))


def test_live_bytes_kept_as_pytorch_frees_equal_a_fresh_sum(monkeypatch):
    """The live bytes at each check are kept as PyTorch frees and resizes storages;
    summing every tracked storage afresh at every check gives the same number."""
    sums = []
    original = runtime.Executor._check

    def check(self, *args):
        sums.append((self.live, self.live_bytes()))
        original(self, *args)

    monkeypatch.setattr(runtime.Executor, "_check", check)
    step = prepare(*zoo("resnet"))
    budget = int(0.8 * step.peak)
    run = step.real(plan(step.program, budget), budget)
    assert run.stop is None and run.executor.stats.remats > 0
    assert len(sums) == run.executor.stats.alloc_checks and all(kept == fresh for kept, fresh in sums)


def _state(model):
    return [t.detach().clone() for t in [*model.parameters(), *model.buffers()]] + \
        [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def _same(a, b):
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for x, y in zip(a, b))


def test_a_hole_sweep_exact_certifies_is_a_hole_of_the_real_step(tmp_path):
    """zoo:gpt has a hole 256 bytes wide that `sweep --exact` certifies with both
    edges exact: the real step fails at its lowest and highest budgets, at the
    simulated op with the simulated shortfall, leaving the model as it was, and
    completes at the budgets one byte outside it, which the sweep certified."""
    log = tmp_path / "gpt.log"
    torch.manual_seed(0)
    step = prepare(*zoo("gpt"), log_path=log)
    sweep = tmp_path / "sweep"
    done = runner.invoke(app, ["sweep", str(log), "--from", "0.8215", "--to", "0.8219", "--exact",
                               "-o", str(sweep), "--jobs", "1"])
    assert done.exit_code == 0, done.output
    holes = json.loads(runner.invoke(app, ["holes", str(sweep), "--json"]).stdout)
    regions = holes["policies"]["dtr"]["failure_regions_bytes_detail"]
    hole = next(r for r in regions if r["hole"] and r["lo_exact"] and r["hi_exact"])
    before = _state(step.model)
    for budget in (hole["lo"], hole["hi"]):
        schedule = plan(step.program, budget)
        sim = schedule.result.summary
        run = step.real(schedule, budget)
        assert isinstance(run.stop, RealOutOfMemory) and sim.outcome == "oom"
        assert (run.stop.op_id, run.stop.request) == (sim.oom.op_id, sim.oom.request)
        assert run.stop.live == run.stop.memory == sim.oom.memory
        assert run.stop.live + run.stop.request - budget == schedule.frontier.shortfall > 0
        assert run.executor.stats.mismatches == 0
        assert victims_sha256(run.executor.stats.victims) == sim.victims_sha256
        step.state.restore()
        assert _same(before, _state(step.model))
    plain = step.plain()[0]
    for budget in (hole["lo"] - 1, hole["hi"] + 1):
        schedule = plan(step.program, budget)
        sim = schedule.result.summary
        run = step.real(schedule, budget)
        stats = run.executor.stats
        assert run.stop is None and sim.outcome == "ok" and run.values == plain
        assert stats.mismatches == 0 and stats.over_budget == 0
        assert (victims_sha256(stats.victims), stats.remats) == (sim.victims_sha256, sim.remats)


def test_an_oom_is_reported_as_simulated_and_leaves_the_model_as_it_was(tmp_path):
    path = tmp_path / "resnet.log"
    record(*zoo("resnet"), path)
    program = parse_file(path)
    budget = floor(program).floor + 1000
    assert replay(program, budget=budget).summary.outcome == "oom"
    model, batch, loss_fn = zoo("resnet")
    before = _state(model)
    result = execute(model, batch, loss_fn, budget=budget)
    sim = result.simulated
    assert result.outcome == "oom" and result.grads_bitwise_equal is None
    assert (result.oom.op_id, result.oom.request, result.oom.shortfall) == \
        (sim.oom.op_id, sim.oom.request, result.frontier["shortfall"])
    assert result.oom.live_bytes == sim.oom.memory
    assert result.memory_mismatches == 0 and result.over_budget_checks == 0
    assert _same(before, _state(model))


def test_an_oom_of_the_real_step_speaks_in_the_models_modules(tmp_path):
    """torch run's OOM report names the module, phase and source line of the op that
    makes the failing allocation, and the module of each frontier level, as the
    recorded where-file has them."""
    path = tmp_path / "resnet.log"
    record(*zoo("resnet"), path)
    program = with_where(parse_file(path), path)
    budget = floor(program).floor + 1000
    done = dtrf("torch", "run", "zoo:resnet", "--budget", str(budget), "--json")
    doc = json.loads(done.out)
    oom, levels = doc["oom"], doc["frontier"]["frontier"]
    assert doc["outcome"] == "oom" and levels
    maker = int(program.tensor_op[program.tensor_name_id.tolist().index(
        program.tensor_names.index(oom["tensor"]))])
    assert (oom["module"], oom["phase"], oom["source"]) == \
        tuple(program.op_where(maker, f) for f in ("module", "phase", "source"))
    assert oom["final_pins"] is False
    assert oom["module"] and oom["phase"] in ("forward", "backward")
    assert [lv["module"] for lv in levels] == [program.op_where(lv["op_id"]) for lv in levels]
    text = dtrf("torch", "run", "zoo:resnet", "--budget", str(budget)).out
    assert (f"{oom['tensor']} is made by an op of {oom['module']} ({oom['phase']}), at "
            f"{short_source(oom['source'])}") in " ".join(text.split())
    assert f" in {levels[0]['module']}, " in text


def test_a_budget_below_the_floor_is_refused_up_front():
    with pytest.raises(BudgetError, match="below the step's floor"):
        execute(*zoo("mlp"), budget=1000)
    done = dtrf("torch", "run", "zoo:mlp", "--budget", "1000")
    assert done.code == 2 and done.traceback is None
    assert done.err.count("\n") == 1 and "floor" in done.error_lines[0]


def batch_norm_head():
    """Batch norm and a linear head on two samples: the model's state is the step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(64), nn.Linear(64, 1))
    return model, (torch.randn(2, 64), torch.randn(2, 1)), nn.functional.mse_loss


def test_a_floor_above_the_peak_says_why():
    """A DTR run never frees a constant; the unconstrained run frees the old versions
    of the parameters SGD updates and of batch norm's running statistics (MUTATEs
    of constants), so where the state is the peak the floor lies above it, and the
    refusal says so in one line."""
    step = prepare(*batch_norm_head(), optimizer="sgd")
    least = floor(step.program)
    assert least.floor > step.peak and least.old_version_bytes > 0
    with pytest.raises(BudgetError) as info:
        execute(*batch_norm_head(), ratio=1.0, optimizer="sgd")
    assert info.value.floor == least
    done = dtrf("torch", "run", "test_torch_runtime:batch_norm_head", "--ratio", "1.0",
                "--optimizer", "sgd")
    assert done.code == 2 and done.traceback is None and done.err.count("\n") == 1
    assert f"the floor lies {least.floor - step.peak:,} B above the unconstrained peak" in done.err
    assert least.old_version_bytes == least.freed_constant_bytes
    assert f"frees {least.old_version_bytes:,} B of them: old versions" in done.err


class Counting(nn.Module):
    """Changes a Python attribute in forward: the recording is not the real step."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x) * self.calls


class Growing(nn.Module):
    """Runs one more op on every call (state in a list, not a plain attribute)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        self.seen.append(None)
        for _ in self.seen:
            x = self.lin(x)
        return x


def counting():
    return Counting(), (torch.randn(2, 4), torch.randn(2, 4)), nn.functional.mse_loss


def growing():
    return Growing(), (torch.randn(2, 4), torch.randn(2, 4)), nn.functional.mse_loss


@pytest.mark.parametrize("factory,words,code,error", [
    ("counting", "changed its attribute 'calls'", 2, ScheduleError),
    # one more op each call: the plain runs differ too, so not the same step each time
    ("growing", "not the same step each time it runs, so it cannot follow its recording (the step "
                "ran differently from its recording", 3, NotFaithfulError)])
def test_a_step_that_changes_python_state_is_refused_in_one_line(factory, words, code, error):
    done = dtrf("torch", "run", f"test_torch_runtime:{factory}", "--ratio", "1.0")
    assert done.code == code and done.traceback is None, done.err
    assert done.err.count("\n") == 1 and words in done.error_lines[0]
    with pytest.raises(error):
        execute(*globals()[factory](), ratio=1.0)


def test_a_read_of_an_evicted_tensor_the_log_cannot_see_is_named_in_one_line():
    """`.tolist()` reads a tensor without an op PyTorch dispatches: when its storage
    was evicted, PyTorch's multi-line error becomes one line saying why."""
    try:
        raise RuntimeError("The tensor has a non-zero number of elements, but its data is not "
                           "allocated yet.\nIf you're using torch.compile ...")
    except RuntimeError as cause:
        wrapped = RecordError("the forward pass raised RuntimeError: The tensor ... (in module m)")
        wrapped.__cause__ = cause
    with pytest.raises(ScheduleError) as info:
        _stop_of(wrapped)
    message = str(info.value)
    assert "\n" not in message and message.startswith("the forward pass read a tensor")
    assert "cannot follow its schedule" in message


def test_a_real_recording_diffs_against_its_simulation(tmp_path):
    """`--record` writes a recording `dtrf diff` reads: the real step's decisions
    agree with the replay of the log it recorded, and its memory column is
    PyTorch's live bytes."""
    log, real, sim = tmp_path / "step.log", tmp_path / "real", tmp_path / "sim"
    budget = lowest_completing(lambda: zoo("unet"), tmp_path)
    done = runner.invoke(app, ["torch", "run", "zoo:unet", "--budget", str(budget),
                               "--record", str(real), "--log", str(log), "--json"])
    assert done.exit_code == 0, done.output
    assert runner.invoke(app, ["run", str(log), "--budget", str(budget), "--record", str(sim)]).exit_code == 0
    diff = json.loads(runner.invoke(app, ["diff", str(sim), str(real), "--json"]).stdout)
    assert diff["first_divergence"] is None and diff["a"]["evictions"] == diff["b"]["evictions"] > 0
    run = json.loads((real / "run.json").read_text())
    assert run["summary"]["wall_seconds"] == json.loads(done.stdout)["real"]["wall_seconds"]
    sql = ("select count(*) filter (where e.memory = r.memory) as same, count(*) as checks "
           "from events e join events r on e.seq = r.seq and r.run_id = 'sim' "
           "where e.run_id = 'real' and e.kind = 'alloc_check'")
    rows = runner.invoke(app, ["sql", sql, str(real), str(sim), "--json"])
    assert rows.exit_code == 0, rows.output
    counts = json.loads(rows.stdout)
    row = counts[0] if isinstance(counts, list) else counts["rows"][0]
    assert row["same"] == row["checks"] > 0


def test_tensors_off_the_cpu_and_cuda_are_refused():
    model, batch, loss_fn = zoo("mlp")
    with pytest.raises(RecordError, match="runs on CPU or CUDA"):
        execute(model.to("meta"), batch, loss_fn, ratio=1.0)


def cuda_dropout_mlp():
    model, (x, y), loss_fn = dropout_mlp()
    return model.cuda(), (x.cuda(), y.cuda()), loss_fn


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_a_cuda_step_with_dropout_rebuilds_to_the_same_bits(tmp_path):
    """On a CUDA device: evictions release device memory, rebuilds rerun dropout
    under the device generator's saved state."""
    result = execute(*cuda_dropout_mlp(), budget=lowest_completing(cuda_dropout_mlp, tmp_path))
    assert_faithful(result)
    assert result.random_rebuilds > 0


# --- never a silent mismatch ---------------------------------------------------------


def test_peak_live_is_the_steps_peak_over_every_allocation(monkeypatch):
    """"peak live" is the most the step's storages held after any allocation, not the
    live bytes before an allocation check: at the unconstrained budget it is the
    log's peak, and at an evicting one the largest of fresh sums taken after every
    op and at every check, within the budget."""
    result = execute(*zoo("gpt"), ratio=1.0)
    assert result.matches_simulation() and result.peak_live_bytes == result.peak
    sums = []
    dispatch, check = runtime.Executor.__torch_dispatch__, runtime.Executor._check

    def dispatched(self, *args, **kwargs):
        out = dispatch(self, *args, **kwargs)
        sums.append(self.live_bytes())
        return out

    def checked(self, *args):
        sums.append(self.live_bytes())
        check(self, *args)

    monkeypatch.setattr(runtime.Executor, "__torch_dispatch__", dispatched)
    monkeypatch.setattr(runtime.Executor, "_check", checked)
    step = prepare(*zoo("gpt"))
    least = floor(step.program).floor
    budget = least + int((step.peak - least) * 0.8)
    result = execute(*zoo("gpt"), budget=budget)
    assert result.victims and result.matches_simulation()
    assert result.peak_live_bytes == max(sums) <= budget


class HiddenScale(torch.autograd.Function):
    """Identity forward; backward scales by a module global that every call changes."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        CALLS["backward"] += 1
        return grad * CALLS["backward"]


CALLS = {"forward": 0, "backward": 0}


class HiddenState(nn.Module):
    """State in a module global, which no restoration can put back: each step differs."""

    def __init__(self, where: str):
        super().__init__()
        self.first, self.second, self.where = nn.Linear(8, 8), nn.Linear(8, 8), where

    def forward(self, x):
        if self.where == "forward":
            CALLS["forward"] += 1
            return self.second(self.first(x)) * CALLS["forward"]
        return self.second(HiddenScale.apply(self.first(x)))


def hidden_in_forward():
    torch.manual_seed(0)
    return HiddenState("forward"), (torch.randn(4, 8), torch.randn(4, 8)), nn.functional.mse_loss


def hidden_in_backward():
    torch.manual_seed(0)
    return HiddenState("backward"), (torch.randn(4, 8), torch.randn(4, 8)), nn.functional.mse_loss


@pytest.mark.parametrize("factory,first", [
    ("hidden_in_forward", "the loss is "),
    ("hidden_in_backward", "the gradient of first.weight in the second plain run is not bitwise "
                           "that of the first"),
])
def test_values_unlike_the_plain_steps_are_never_a_match(factory, first):
    """Same decisions, same memory, other values: not a match, exit 3, the first
    value that differs named (JSON and text); here two plain runs differ already,
    and the reason says so."""
    result = execute(*globals()[factory](), ratio=1.0)
    assert result.outcome == "ok" and result.memory_mismatches == 0
    assert result.loss_bitwise_equal is (factory != "hidden_in_forward")
    assert result.grads_bitwise_equal is False
    reason = "the step is not deterministic even without DTR: from the same state " + first
    assert not result.matches_simulation() and result.mismatch().startswith(reason)
    done = dtrf("torch", "run", f"test_torch_runtime:{factory}", "--ratio", "1.0", "--json")
    assert done.code == 3 and done.traceback is None, done.err
    doc = json.loads(done.out)
    assert doc["matches_simulation"] is False and doc["mismatch"].startswith(reason)
    assert done.err.count("\n") == 1 and "not faithful to the simulation: " + reason in done.err
    text = dtrf("torch", "run", f"test_torch_runtime:{factory}", "--ratio", "1.0")
    assert text.code == 3 and "DIFFERENT from the simulation" in text.out


GLOBAL_STATE: dict = {}      # what the models below keep between calls, outside themselves


class GlobalState(nn.Module):
    """Keeps each call's activation in a module global: "sum" adds the previous
    call's (detached), "graph" keeps it with its graph and adds half of it, "list"
    only appends it to a list (read by nobody)."""

    def __init__(self, how: str):
        super().__init__()
        self.how, self.l1, self.l2 = how, nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        kept = GLOBAL_STATE.get(self.how)
        if self.how == "list":
            GLOBAL_STATE.setdefault("list", []).append(h)
            return self.l2(h)
        if kept is not None:
            h = h + (kept if self.how == "sum" else kept.detach() * 0.5)
        GLOBAL_STATE[self.how] = h.detach() if self.how == "sum" else h
        return self.l2(h)


def _global_state(how):
    GLOBAL_STATE.clear()
    torch.manual_seed(0)
    return GlobalState(how), (torch.randn(8, 8), torch.randint(0, 4, (8,))), nn.CrossEntropyLoss()


def global_sum():
    return _global_state("sum")


def global_graph():
    return _global_state("graph")


def global_list():
    return _global_state("list")


@pytest.mark.parametrize("factory", ["global_sum", "global_graph"])
def test_a_step_reading_a_module_global_it_changes_is_not_the_same_step_each_time(factory):
    """Each call adds the previous call's activation, kept in a module global:
    the recording, the plain runs and the real step are each another step. Not an
    internal KeyError (a tensor the recording never saw) nor a bare divergence:
    one line, exit 3, saying the step is not the same each time it runs."""
    with pytest.raises(NotFaithfulError) as info:
        execute(*globals()[factory](), ratio=0.95)
    said = str(info.value)
    assert "the step is not deterministic even without DTR" in said
    assert "not the same step each time it runs" in said and "in a global" in said
    done = dtrf("torch", "run", f"test_torch_runtime:{factory}", "--ratio", "0.95")
    assert done.code == 3 and done.traceback is None, done.err
    assert done.err.count("\n") == 1 and "KeyError" not in done.err
    assert done.err.startswith(f"error: test_torch_runtime:{factory}: the real step is not faithful")
    assert "not the same step each time it runs" in done.err


def test_a_module_global_list_keeping_activations_alive_is_faithful():
    """Appending each activation to a global list changes no value, and it does so
    in every run, the recording's included: the log keeps the activation alive to
    the step's end, the engine counts it, and PyTorch's live
    bytes equal the engine's at every check. So a match (exit 0) is the truth; the
    list's last activation is resident and right after the evicting real step."""
    model, batch, loss_fn = global_list()
    result = execute(model, batch, loss_fn, ratio=0.95)
    assert result.victims and result.matches_simulation(), result.mismatch()
    assert result.alloc_checks > 0 and result.memory_mismatches == 0
    kept = GLOBAL_STATE["list"][-1]
    assert kept.untyped_storage().nbytes() == kept.numel() * kept.element_size()
    assert torch.equal(kept, torch.relu(model.l1(batch[0])).detach())
    done = dtrf("torch", "run", "test_torch_runtime:global_list", "--ratio", "0.95")
    assert done.code == 0, done.err


class DrawsOutsideTorch(nn.Module):
    """Scales its activation by draws from numpy's and Python's global generators, as
    wav2vec2 draws its time masks from numpy."""

    def __init__(self, source: str):
        super().__init__()
        self.source, self.l1, self.l2 = source, nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        import random

        import numpy
        draw = numpy.random.rand() if self.source == "numpy" else random.random()
        return self.l2(torch.relu(self.l1(x)) * (1.0 + draw))


@pytest.mark.parametrize("source", ["numpy", "python"])
def test_a_step_drawing_from_numpy_or_python_random_runs_from_the_same_state(source):
    """Each run of the step (recording, plain runs, real step) starts from the same
    numpy and Python random states, as from the same torch state: the two plain
    runs agree and the evicting real step matches."""
    import random

    import numpy
    torch.manual_seed(0)
    batch = (torch.randn(8, 8), torch.randint(0, 4, (8,)))
    numpy.random.seed(1)
    random.seed(1)
    result = execute(DrawsOutsideTorch(source), batch, nn.CrossEntropyLoss(), ratio=0.9)
    assert result.victims and result.matches_simulation(), result.mismatch()
    assert result.outcome == "ok" and result.loss == result.plain_loss


def test_live_bytes_unlike_the_engines_are_never_a_match(monkeypatch):
    """A mismatch planted at the third allocation check (the engine's memory one byte
    more than PyTorch's live bytes): exit 3, naming the check, the op and both
    byte counts; `--json` says `matches_simulation: false` with the reason."""
    seen = []
    original = runtime.Executor._check

    def planted(self, memory, pending, op, depth):
        if len(seen) == 2:
            memory += 1
        seen.append((self.live + pending, memory, f"{op_text(self.program, op)}, depth {depth}"))
        original(self, memory, pending, op, depth)

    monkeypatch.setattr(runtime.Executor, "_check", planted)
    done = dtrf("torch", "run", "zoo:mlp", "--ratio", "1.0", "--json")
    assert done.code == 3 and done.traceback is None, done.err
    live, memory, op = seen[2]
    assert memory == live + 1
    doc = json.loads(done.out)
    assert doc["matches_simulation"] is False and doc["real"]["memory_mismatches"] == 1
    where = f"allocation check 3 ({op}): live storages {live:,} bytes, engine memory {memory:,}"
    assert doc["mismatch"] == f"live storage bytes differ from the engine's memory at 1 of " \
        f"{len(seen):,} allocation checks, first at {where}"
    assert done.err.count("\n") == 1 and where in done.err


class Tripwire(nn.Module):
    """Batch norm (running statistics), dropout (random state) and a head; a forward
    hook on the head raises `error` at its call number `at` (1: the recording, 2
    and 3: the plain steps, 4: the real step), after batch norm has run."""

    def __init__(self, at: int, error: type[BaseException]):
        super().__init__()
        self.norm, self.drop, self.head = nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 1)
        calls = []

        def trip(module, args):
            calls.append(None)
            if len(calls) == at:
                raise error("tripped")

        self.head.register_forward_pre_hook(trip)

    def forward(self, x):
        return self.head(self.drop(self.norm(x)))


def tripwire(at: int, error: type[BaseException]):
    torch.manual_seed(0)
    return Tripwire(at, error), (torch.randn(8, 16), torch.randn(8, 1)), nn.functional.mse_loss


def raises_in_the_plain_step():
    return tripwire(2, RuntimeError)


@pytest.mark.parametrize("at,error,raised", [
    (1, KeyboardInterrupt, KeyboardInterrupt), (2, KeyboardInterrupt, KeyboardInterrupt),
    (4, KeyboardInterrupt, KeyboardInterrupt), (2, RuntimeError, RecordError),
])
@pytest.mark.parametrize("optimizer", [None, "adam"])
def test_the_model_is_restored_however_the_step_ends(at, error, raised, optimizer):
    """Ctrl-C (KeyboardInterrupt) in the recording, the plain step or the real step,
    or an exception in the plain step: parameters, batch norm's running statistics,
    gradients and the random state are as they were before `execute`."""
    model, batch, loss_fn = tripwire(at, error)
    before, rng = _state(model), torch.get_rng_state()
    with pytest.raises(raised):
        execute(model, batch, loss_fn, budget=10**9, optimizer=optimizer)
    assert _same(before, _state(model)) and torch.equal(rng, torch.get_rng_state())


def test_an_exception_in_the_plain_step_is_one_line():
    done = dtrf("torch", "run", "test_torch_runtime:raises_in_the_plain_step", "--ratio", "1.0")
    assert done.code == 2 and done.traceback is None, done.err
    assert done.err.count("\n") == 1
    assert "the plain step (the reference, without DTR) raised RuntimeError: tripped" in done.err
