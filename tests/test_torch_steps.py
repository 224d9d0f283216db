"""`torch run --steps N`: N training steps under one schedule, each the plain step's."""

from __future__ import annotations

import functools
import json
import weakref

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf
from torch.utils._python_dispatch import _disable_current_modes

import dtrforensics.torch.execute as execute_module
from dtrforensics.analyses.floor import floor
from dtrforensics.engine.replay import replay
from dtrforensics.torch import RecordError, runtime, schedule
from dtrforensics.torch.execute import execute, prepare
from dtrforensics.torch.optim import steady_optimizer
from dtrforensics.torch.spec import build

# Values are compared bitwise: one intra-op thread sums in the same order every run.
pytestmark = pytest.mark.usefixtures("one_thread")

LLAMA = {"seq": 32, "batch": 2, "hidden_size": 32, "intermediate_size": 64}
# (spec, options, optimizer): Adam's moments and step counts; batch norm's running
# statistics with SGD's momentum; a transformers model built from its config;
# dropout after every layer (random rebuilds, the generator moving on step by step).
MODELS = [("zoo:mlp", {}, "adam"), ("zoo:resnet", {}, "sgd"), ("hf:LlamaForCausalLM", LLAMA, "adamw"),
          ("test_torch_runtime:dropout_mlp", {}, "adam")]
STEPS = 5


@functools.cache
def evicting_budget(spec: str, options: tuple, optimizer: str, points: int = 10) -> int:
    """The lowest budget of a grid from the log's floor to a DTR run's peak with
    memory to spare where the engine completes the step."""
    torch.manual_seed(0)
    program = prepare(*build(spec, **dict(options)), optimizer=optimizer).program
    least = floor(program).floor
    top = replay(program, budget=1 << 62).summary.peak_memory
    return next(b for b in (least + (top - least) * i // points for i in range(points + 1))
                if replay(program, budget=b).summary.outcome == "ok")


def plain_loop(spec: str, options: dict, optimizer: str, steps: int):
    """The training loop written out, without dtrforensics' runner: the loss of every
    step and every parameter and buffer after the last."""
    torch.manual_seed(0)
    model, (inputs, targets), loss_fn = build(spec, **options)
    opt = steady_optimizer(optimizer, list(model.parameters()))
    losses = []
    for _ in range(steps):
        out = model(**inputs) if isinstance(inputs, dict) else model(inputs)
        loss = loss_fn(out, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses, model.state_dict()


def bits(t: torch.Tensor) -> bytes:
    """The tensor's bytes, read from a copy (a storage numpy has seen cannot be evicted)."""
    return t.detach().clone().view(-1).view(torch.uint8).numpy().tobytes()


def needs_library(spec: str) -> None:
    if spec.startswith("hf:"):
        pytest.importorskip("transformers")


@pytest.mark.parametrize("spec,options,optimizer", MODELS)
def test_many_steps_are_the_plain_steps_bit_for_bit(spec, options, optimizer):
    """Five steps at an evicting budget, one schedule: every step evicts and
    rebuilds as the simulation does, its live bytes the engine's memory at every
    check, its loss, gradients, parameters and optimizer states bitwise the plain
    step's; the losses are those of a training loop written out by hand, and the
    model is left with that loop's parameters and buffers."""
    needs_library(spec)
    budget = evicting_budget(spec, tuple(options.items()), optimizer)
    torch.manual_seed(0)
    model, batch, loss_fn = build(spec, **options)
    result = execute(model, batch, loss_fn, budget=budget, optimizer=optimizer, steps=STEPS)
    sim = result.simulated
    assert result.mismatch() is None and result.n_steps == STEPS
    assert [c.step for c in result.steps] == list(range(1, STEPS + 1))
    for check in result.steps:
        assert check.mismatch is None and check.outcome == sim.outcome == "ok"
        assert check.loss_bitwise_equal and check.grads_bitwise_equal and check.updates_bitwise_equal
        assert check.alloc_checks > 0 and check.memory_mismatches == 0 and check.over_budget_checks == 0
        assert (check.evictions, check.remats, check.clock) == (sim.evictions, sim.remats, sim.clock)
        assert check.evictions > 0 and check.remats > 0 and check.peak_live_bytes <= budget
    losses, state = plain_loop(spec, options, optimizer, STEPS)
    assert [c.loss for c in result.steps] == losses and len(set(losses)) == STEPS
    assert all(bits(t) == bits(state[k]) for k, t in model.state_dict().items())


def test_steps_on_the_command_line(tmp_path):
    """`--steps 5 --json`: a `steps` list of five checks, exit 0; the text names every
    step; one step (the default) prints no step lines and a list of one."""
    budget = evicting_budget("zoo:mlp", (), "adam")
    args = ("torch", "run", "zoo:mlp", "--budget", budget, "--optimizer", "adam")
    done = dtrf(*args, "--steps", STEPS, "--json")
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    assert doc["n_steps"] == STEPS and doc["mismatch"] is None
    assert [(s["step"], s["loss_bitwise_equal"], s["memory_equal"], s["mismatch"]) for s in doc["steps"]] \
        == [(k, True, True, None) for k in range(1, STEPS + 1)]
    assert all(s["evictions"] == doc["evictions"] > 0 for s in doc["steps"])
    text = dtrf(*args, "--steps", STEPS)
    assert text.code == 0 and f"step {STEPS} of {STEPS}: ok, loss " in text.out
    assert f"after step {STEPS}: parameters and optimizer states bitwise equal True" in text.out
    one = dtrf(*args)
    assert one.code == 0 and " of 1:" not in one.out and "steps under" not in one.out
    assert len(json.loads(dtrf(*args, "--json").out)["steps"]) == 1


def nudged_after_call(at: int, monkeypatch):
    """A parameter nudged by one ulp as the `at`-th real step finishes (after its
    optimizer step), outside the executor's dispatch."""
    models, calls = [], []
    training_step, finish = execute_module._training_step, runtime.Executor.finish

    def seen(ex, model, *rest):
        models.append(model)
        return training_step(ex, model, *rest)

    def planted(self):
        finish(self)
        calls.append(None)
        if len(calls) == at:
            with _disable_current_modes(), torch.no_grad():
                first = next(models[-1].parameters()).view(-1)
                first[0] = torch.nextafter(first[0], torch.tensor(1e9))

    monkeypatch.setattr(execute_module, "_training_step", seen)
    monkeypatch.setattr(runtime.Executor, "finish", planted)


def memory_off_at_executor(at: int, monkeypatch):
    """The engine's memory one byte more at the first check of the `at`-th real step."""
    executors = []
    original = runtime.Executor._check

    def planted(self, memory, pending, op, depth):
        if not executors or executors[-1] is not self:
            executors.append(self)
            memory += len(executors) == at
        original(self, memory, pending, op, depth)

    monkeypatch.setattr(runtime.Executor, "_check", planted)


@pytest.mark.parametrize("plant,words", [
    (nudged_after_call, "parameter "),
    (memory_off_at_executor, "live storage bytes differ from the engine's memory at 1 of "),
])
def test_a_difference_planted_in_step_3_exits_3_naming_step_3(plant, words, monkeypatch):
    """A parameter one ulp off after the third real step, or the engine's memory one
    byte off at a check of it: steps 1 and 2 match, the verdict is step 3's, exit 3
    in one line."""
    plant(3, monkeypatch)
    done = dtrf("torch", "run", "zoo:mlp", "--budget", evicting_budget("zoo:mlp", (), "adam"),
                "--optimizer", "adam", "--steps", STEPS, "--json")
    assert done.code == 3 and done.traceback is None, done.err
    doc = json.loads(done.out)
    assert [s["mismatch"] is None for s in doc["steps"][:3]] == [True, True, False]
    assert doc["steps"][2]["mismatch"].startswith(words)
    assert doc["mismatch"] == f"step 3 of {STEPS}: {doc['steps'][2]['mismatch']}"
    assert doc["matches_simulation"] is False
    assert done.err.count("\n") == 1 and f"step 3 of {STEPS}: {words}" in done.err


def test_the_model_is_restored_when_a_later_step_is_interrupted(monkeypatch):
    """Ctrl-C in the third real step: parameters, buffers and gradients as before."""
    original = execute_module._training_step
    calls = []

    def interrupted(*args):
        calls.append(None)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(*args)

    monkeypatch.setattr(execute_module, "_training_step", interrupted)
    torch.manual_seed(0)
    model, batch, loss_fn = build("zoo:resnet")
    before = {k: bits(t) for k, t in model.state_dict().items()}
    with pytest.raises(KeyboardInterrupt):
        execute(model, batch, loss_fn, ratio=1.0, optimizer="sgd", steps=STEPS)
    assert len(calls) == 3 and {k: bits(t) for k, t in model.state_dict().items()} == before
    assert all(p.grad is None for p in model.parameters())


def test_several_steps_need_an_optimizer():
    torch.manual_seed(0)
    with pytest.raises(RecordError, match="2 steps are training steps: they need an optimizer"):
        execute(*build("zoo:mlp"), ratio=1.0, steps=2)
    done = dtrf("torch", "run", "zoo:mlp", "--ratio", "1.0", "--steps", "0")
    assert done.code == 2 and done.err.count("\n") == 1 and "--steps must be >= 1" in done.err


def test_a_step_lets_the_last_steps_executor_go(monkeypatch):
    """No executor outlives its step (its ghosts and its parameters' old versions,
    a copy of every parameter with an optimizer): N steps hold one step's worth."""
    executors = []
    original = execute_module._training_step

    def watched(ex, *args):
        alive = [k for k, ref in enumerate(executors, start=1) if ref() is not None]
        assert alive == [], f"the executors of steps {alive} are alive in step {len(executors) + 1}"
        executors.append(weakref.ref(ex))
        return original(ex, *args)

    monkeypatch.setattr(execute_module, "_training_step", watched)
    torch.manual_seed(0)
    result = execute(*build("zoo:mlp"), budget=evicting_budget("zoo:mlp", (), "adam"),
                     optimizer="adam", steps=4)
    assert result.mismatch() is None and len(executors) == 4


def out_of_memory_in_executor(at: int, monkeypatch):
    """PyTorch out of memory at the fifth allocation check of the `at`-th real step."""
    executors = []
    original = runtime.Executor._check

    def planted(self, memory, pending, op, depth):
        if not executors or executors[-1][0] is not self:
            executors.append([self, 0])
        executors[-1][1] += 1
        if len(executors) == at and executors[-1][1] == 5:
            raise schedule.RealOutOfMemory(op, 0, pending, self.live, memory)
        original(self, memory, pending, op, depth)

    monkeypatch.setattr(runtime.Executor, "_check", planted)


def test_a_step_that_stops_ends_the_run_and_leaves_the_model_as_before(monkeypatch):
    """An out-of-memory the simulation does not have, in the third real step: steps 4
    and 5 are not run, the verdict names step 3 (exit 3, the text says which steps
    did not run), and the model is as it was before the first step."""
    out_of_memory_in_executor(3, monkeypatch)
    torch.manual_seed(0)
    model, batch, loss_fn = build("zoo:mlp")
    before = {k: bits(t) for k, t in model.state_dict().items()}
    budget = evicting_budget("zoo:mlp", (), "adam")
    result = execute(model, batch, loss_fn, budget=budget, optimizer="adam", steps=STEPS)
    assert [c.outcome for c in result.steps] == ["ok", "ok", "oom"]
    assert result.mismatch() == f"step 3 of {STEPS}: outcome oom in the real step, ok in the simulation"
    assert {k: bits(t) for k, t in model.state_dict().items()} == before
    monkeypatch.undo()
    out_of_memory_in_executor(3, monkeypatch)
    done = dtrf("torch", "run", "zoo:mlp", "--budget", budget, "--optimizer", "adam", "--steps", STEPS)
    assert done.code == 3 and done.traceback is None, done.err
    assert f"stopped after step 3: steps 4 to {STEPS} not run" in done.out
    assert done.err.count("\n") == 1 and f"step 3 of {STEPS}: outcome oom" in done.err
