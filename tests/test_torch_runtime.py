"""The real step under DTR: values, memory and decisions as the simulation has them."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from hostile import dtrf
from torch import nn
from typer.testing import CliRunner

from dtrforensics.cli.main import app
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import replay
from dtrforensics.torch import (
    RecordError,
    record,
    runtime,
)
from dtrforensics.torch.execute import BudgetError, execute
from dtrforensics.torch.runtime import ScheduleError
from dtrforensics.torch.schedule import floor
from dtrforensics.torch.zoo import ZOO
from dtrforensics.trace.parser import parse_file

runner = CliRunner()


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


def assert_faithful(result, constrained: bool = True):
    """Values, memory and decisions of a completing real step."""
    sim = result.simulated
    assert result.outcome == sim.outcome == "ok"
    assert result.loss_bitwise_equal is True and result.grads_bitwise_equal is True
    assert result.grads_compared > 0
    assert result.memory_mismatches == 0, result.first_mismatch
    assert result.alloc_checks > 0 and result.over_budget_checks == 0
    assert result.peak_live_bytes <= result.budget
    assert (result.victims_sha256, len(result.victims), result.remats, result.clock) == \
        (sim.victims_sha256, sim.evictions, sim.remats, sim.clock)
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
    peak, least = baseline(program).peak, floor(program)
    budget = least + int((peak - least) * between)
    result = execute(*zoo(name), budget=budget)
    assert_faithful(result)
    assert result.floor == least and result.peak == peak


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet", "gpt", "lstm", "unet", "mlp"])
def test_zoo_step_at_every_completing_budget_of_a_grid(name, tmp_path):
    path = tmp_path / "step.log"
    record(*zoo(name), path)
    program = parse_file(path)
    peak, least = baseline(program).peak, floor(program)
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
    peak, least = baseline(program).peak, floor(program)
    return next(b for b in (least + (peak - least) * i // points for i in range(points + 1))
                if replay(program, budget=b).summary.outcome == "ok")


def test_dropout_and_in_place_ops_rebuild_to_the_same_bits(tmp_path):
    result = execute(*dropout_mlp(), budget=lowest_completing(dropout_mlp, tmp_path))
    assert_faithful(result)
    assert result.random_rebuilds > 0


def test_rebuilds_without_the_random_state_would_differ(monkeypatch, tmp_path):
    """The dropout test can fail: rebuilding random ops under the current random
    state gives other gradients."""
    budget = lowest_completing(dropout_mlp, tmp_path)
    original = runtime.Executor._rebuild

    def rebuild_without_rng(self, op):
        for rec in self._ops.values():
            rec.rng = None
        original(self, op)

    monkeypatch.setattr(runtime.Executor, "_rebuild", rebuild_without_rng)
    result = execute(*dropout_mlp(), budget=budget)
    assert result.outcome == "ok" and result.grads_bitwise_equal is False


def test_memory_truth_is_pytorchs(monkeypatch):
    """The memory check can fail: an eviction that does not release the storage
    leaves live bytes above the engine's memory."""
    monkeypatch.setattr(torch.UntypedStorage, "resize_", lambda self, n: self)
    result = execute(*zoo("resnet"), ratio=0.8)
    assert result.simulated.evictions > 0
    assert result.memory_mismatches > 0 and "live storages" in result.first_mismatch


def test_decisions_are_those_of_dtrf_run_on_the_recorded_log(tmp_path):
    log = tmp_path / "resnet.log"
    done = runner.invoke(app, ["torch", "record", "zoo:resnet", "-o", str(log)])
    assert done.exit_code == 0, done.output
    program = parse_file(log)
    budget = floor(program) + (baseline(program).peak - floor(program)) // 2
    sim = json.loads(runner.invoke(app, ["run", str(log), "--budget", str(budget), "--json"]).stdout)
    done = runner.invoke(app, ["torch", "run", "zoo:resnet", "--budget", str(budget), "--json"])
    assert done.exit_code == 0, done.output
    real = json.loads(done.stdout)
    for key in ("outcome", "victims_sha256", "evictions", "remats", "clock", "overhead"):
        assert real[key] == sim[key], key
    assert real["evictions"] > 0
    assert real["real"]["memory_mismatches"] == 0
    assert real["real"]["grads_bitwise_equal"] is True


def _state(model):
    return [t.detach().clone() for t in [*model.parameters(), *model.buffers()]] + \
        [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def _same(a, b):
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for x, y in zip(a, b))


@pytest.mark.slow
def test_a_hole_of_the_simulation_is_a_hole_of_the_real_step(tmp_path):
    """zoo:gpt fails inside a feasibility hole of its log and completes on both
    sides; the real failure is the simulated one, to the op and the byte."""
    path = tmp_path / "gpt.log"
    record(*zoo("gpt"), path)
    program = parse_file(path)
    peak, least = baseline(program).peak, floor(program)
    budgets = [least + (peak - least) * i // 40 for i in range(41)]
    outcomes = [replay(program, budget=b).summary.outcome for b in budgets]
    inside = next(i for i in range(1, 40) if outcomes[i] == "oom" and "ok" in outcomes[:i])
    below = max(i for i in range(inside) if outcomes[i] == "ok")
    above = next(i for i in range(inside, 41) if outcomes[i] == "ok")
    model, batch, loss_fn = zoo("gpt")
    before = _state(model)
    failed = execute(model, batch, loss_fn, budget=budgets[inside])
    sim = failed.simulated
    assert failed.outcome == sim.outcome == "oom"
    assert (failed.oom.op_id, failed.oom.request) == (sim.oom.op_id, sim.oom.request)
    assert failed.oom.live_bytes == failed.oom.engine_memory == sim.oom.memory
    assert failed.oom.shortfall == failed.frontier["shortfall"] > 0
    assert failed.victims_sha256 == sim.victims_sha256 and failed.memory_mismatches == 0
    assert _same(before, _state(model))
    for i in (below, above):
        assert_faithful(execute(*zoo("gpt"), budget=budgets[i]))


def test_an_oom_is_reported_as_simulated_and_leaves_the_model_as_it_was(tmp_path):
    path = tmp_path / "resnet.log"
    record(*zoo("resnet"), path)
    program = parse_file(path)
    budget = floor(program) + 1000
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


def test_a_budget_below_the_floor_is_refused_up_front():
    with pytest.raises(BudgetError, match="below the step's floor"):
        execute(*zoo("mlp"), budget=1000)
    done = dtrf("torch", "run", "zoo:mlp", "--budget", "1000")
    assert done.code == 2 and done.traceback is None
    assert done.err.count("\n") == 1 and "floor" in done.error_lines[0]


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


@pytest.mark.parametrize("factory,words", [("counting", "changed its attribute 'calls'"),
                                           ("growing", "ran differently from its recording")])
def test_a_step_that_changes_python_state_is_refused_in_one_line(factory, words):
    done = dtrf("torch", "run", f"test_torch_runtime:{factory}", "--ratio", "1.0")
    assert done.code == 2 and done.traceback is None, done.err
    assert done.err.count("\n") == 1 and words in done.error_lines[0]
    with pytest.raises(ScheduleError):
        execute(*globals()[factory](), ratio=1.0)


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


def test_tensors_off_the_cpu_are_refused():
    model, batch, loss_fn = zoo("mlp")
    with pytest.raises(RecordError, match="runs on CPU only"):
        execute(model.to("meta"), batch, loss_fn, ratio=1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_a_cuda_model_is_refused_in_one_line():
    model, batch, loss_fn = zoo("mlp")
    with pytest.raises(RecordError, match="runs on CPU only"):
        execute(model.cuda(), batch, loss_fn, ratio=1.0)
