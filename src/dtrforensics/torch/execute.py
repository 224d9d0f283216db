"""`execute`: one real training step under DTR, and how it compares with the simulation.

The step (`loss_fn(model(inputs), targets)`, then `loss.backward()` and, with
an optimizer, `optimizer.step()`, as `record` runs it) runs three times from
the same state and random state: under the recorder (its DTR log, `flops`
costs by default), plainly (the unconstrained reference: loss, gradients,
updated parameters, wall time), and for real under the engine's schedule for
that log at the budget (`runtime.Executor`). The model is left as a completed
real step leaves it; however else the step ends (an out-of-memory, a refusal,
an error, Ctrl-C) it is put back as it was before. A real step that differs
from its simulation (decisions, live bytes at a check, values) is never a
match (`ExecuteResult.mismatch`). With `steps=N` the real and plain runs are N
steps each, one optimizer throughout, every real step under the recorded
step's schedule and checked against the plain step of the same number.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import random
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import validate
from ..analyses.floor import Floor, floor
from ..engine.baseline import baseline, budget_for_ratio
from ..engine.summary import RunSummary, victims_sha256
from ..errors import NotDeterministicError
from ..jsonsafe import json_safe
from ..trace.parser import parse_file
from ..trace.program import Program
from ..trace.where import with_where
from .following import FollowingLog, RecordedLog
from .optim import OPTIMIZERS, state_tensors, steady_optimizer
from .recorder import RecordError, constants_of
from .runtime import Executor
from .schedule import Plan, RealOutOfMemory, ScheduleEnded, ScheduleError, plan
from .step import ModuleLocator, _forward, _run_backward, _run_forward, _run_optimizer, record
from .where import Where
from .workspace import Meter, Workspaces


class BudgetError(RecordError):
    """A budget below the step's floor (`analyses/floor.py`): no run completes."""

    def __init__(self, budget: int, least: Floor):
        super().__init__(f"budget {budget:,} bytes is below the step's floor of {least.floor:,} "
                         "bytes: no policy can run it")
        self.budget, self.floor = budget, least


class NotFaithfulError(NotDeterministicError):
    """The real step is not faithful to the simulation: its decisions, its live
    bytes at an allocation check or its values differ (exit 3)."""

    def __init__(self, reason: str, subject: str | None = None):
        prefix = f"{subject}: " if subject else ""
        super().__init__(f"{prefix}the real step is not faithful to the simulation: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class RealOom:
    """Where the real step stopped: as a simulated OOM reports it, with PyTorch's bytes."""

    op_id: int
    op_name: str
    tensor: str
    request: int
    live_bytes: int       # storages PyTorch held alive at the failing check
    engine_memory: int
    budget: int
    module: str | None = None     # where the failing allocation's op ran (the where-file)
    phase: str | None = None
    source: str | None = None
    final_pins: bool = False      # while pinning what the step keeps, after the op named

    @property
    def shortfall(self) -> int:
        return self.live_bytes + self.request - self.budget

    def to_json(self) -> dict:
        return {"op_id": self.op_id, "op_name": self.op_name, "tensor": self.tensor,
                "request": self.request, "live_bytes": self.live_bytes,
                "engine_memory": self.engine_memory, "budget": self.budget,
                "shortfall": self.shortfall, "module": self.module, "phase": self.phase,
                "source": self.source, "final_pins": self.final_pins}


@dataclass(frozen=True)
class ExecuteResult:
    """The real constrained step beside its simulation (`simulated`)."""

    simulated: RunSummary
    frontier: dict | None          # the engine's pinned frontier at its OOM
    budget: int
    peak: int                      # unconstrained peak of the log
    floor: int
    cost: str
    optimizer: str | None
    outcome: str                   # the real step's: ok, oom, or the engine's other outcome
    victims: tuple[int, ...]       # storages the real step evicted under pressure, in order
    dead_frees: int
    remats: int
    collateral_remats: int
    clock: int
    model_compute: int
    remat_compute: int
    oom: RealOom | None
    alloc_checks: int
    memory_mismatches: int
    first_mismatch: str | None
    over_budget_checks: int
    peak_live_bytes: int
    ghosts: int
    random_rebuilds: int
    wall_seconds: float            # the real constrained step
    plain_wall_seconds: float      # the plain unconstrained step
    cpu_seconds: float             # the process's CPU time in the real step
    plain_cpu_seconds: float
    loss: float | None
    plain_loss: float
    loss_bitwise_equal: bool | None
    grads_bitwise_equal: bool | None
    grads_compared: int
    updates_bitwise_equal: bool | None   # parameters and optimizer states after its step
    updates_compared: int
    value_difference: str | None = None  # the first value not bitwise the plain step's
    steps: tuple[StepCheck, ...] = ()    # every step run, the first one this result's
    n_steps: int = 1                     # the steps asked for
    workspaces: Workspaces | None = None # measured around each op of the (first) real step, if asked
    reserved_workspace: int = 0          # bytes taken off the budget asked for: the engine ran at `budget`

    @property
    def victims_sha256(self) -> str:
        return victims_sha256(self.victims)

    @property
    def overhead(self) -> float | None:
        return (self.clock - 1) / self.model_compute if self.model_compute else None

    def to_json(self) -> dict:
        sim = self.simulated
        return json_safe({
            "trace": sim.trace, "trace_sha256": sim.trace_sha256, "policy": sim.policy,
            "budget": self.budget, "peak": self.peak, "floor": self.floor, "cost": self.cost,
            "optimizer": self.optimizer,
            "outcome": self.outcome, "clock": self.clock, "remat_compute": self.remat_compute,
            "overhead": self.overhead if self.outcome == "ok" else None,
            "evictions": len(self.victims), "dead_frees": self.dead_frees,
            "distinct_evicted": len(set(self.victims)), "remats": self.remats,
            "collateral_remats": self.collateral_remats, "victims_sha256": self.victims_sha256,
            "oom": self.oom.to_json() if self.oom else None, "frontier": self.frontier,
            "real": {
                "peak_live_bytes": self.peak_live_bytes, "alloc_checks": self.alloc_checks,
                "memory_mismatches": self.memory_mismatches, "first_mismatch": self.first_mismatch,
                "over_budget_checks": self.over_budget_checks, "ghosts": self.ghosts,
                "random_rebuilds": self.random_rebuilds,
                "wall_seconds": self.wall_seconds, "plain_wall_seconds": self.plain_wall_seconds,
                "slowdown": self.wall_seconds / self.plain_wall_seconds if self.plain_wall_seconds else None,
                "cpu_seconds": self.cpu_seconds, "plain_cpu_seconds": self.plain_cpu_seconds,
                "cpu_slowdown": self.cpu_seconds / self.plain_cpu_seconds if self.plain_cpu_seconds else None,
                "loss": self.loss, "plain_loss": self.plain_loss,
                "loss_bitwise_equal": self.loss_bitwise_equal,
                "grads_bitwise_equal": self.grads_bitwise_equal, "grads_compared": self.grads_compared,
                "updates_bitwise_equal": self.updates_bitwise_equal,
                "updates_compared": self.updates_compared,
            },
            "simulated": sim.to_json(),
            "matches_simulation": self.matches_simulation(),
            "mismatch": self.mismatch(),
            "n_steps": self.n_steps, "steps": [check.to_json() for check in self.steps],
            "workspaces": self.workspaces.to_json() if self.workspaces is not None else None,
            "reserved_workspace": self.reserved_workspace,
            "budget_asked": self.budget + self.reserved_workspace,
        })

    def real_summary(self) -> RunSummary:
        """The real step as a run summary: its own counts, PyTorch's peak, its wall time."""
        sim = self.simulated
        oom = sim.oom
        if oom is not None and self.oom is not None:
            oom = dataclasses.replace(oom, memory=self.oom.live_bytes)
        return dataclasses.replace(
            sim, outcome=self.outcome, clock=self.clock, remat_compute=self.remat_compute,
            overhead=self.overhead if self.outcome == "ok" else None,
            evictions=len(self.victims), dead_frees=self.dead_frees,
            distinct_evicted=len(set(self.victims)), remats=self.remats,
            collateral_remats=self.collateral_remats, victims_sha256=self.victims_sha256,
            peak_memory=self.peak_live_bytes, oom=oom, wall_seconds=self.wall_seconds)

    def matches_simulation(self) -> bool:
        """Outcome, victims, rematerializations and clock as the engine's run, live
        bytes the engine's memory at every allocation check, and every value (loss,
        gradients, updates) bitwise the plain step's: `mismatch()` is None."""
        return self.mismatch() is None

    def mismatch(self) -> str | None:
        """The first way the real step differs from the simulation, or None; with
        several steps, the first way any of them does, naming the step."""
        if self.n_steps > 1:
            return next((f"step {c.step} of {self.n_steps}: {c.mismatch}"
                         for c in self.steps if c.mismatch is not None), None)
        return self.step_mismatch()

    def step_mismatch(self) -> str | None:
        """The first way this one real step differs from the simulation, or None."""
        sim = self.simulated
        decisions = [("outcome", self.outcome, sim.outcome),
                     ("evictions", len(self.victims), sim.evictions),
                     ("victims sha256", self.victims_sha256, sim.victims_sha256),
                     ("rematerializations", self.remats, sim.remats), ("clock", self.clock, sim.clock)]
        for what, real, engine in decisions:
            if real != engine:
                return f"{what} {real} in the real step, {engine} in the simulation"
        if self.memory_mismatches:
            return (f"live storage bytes differ from the engine's memory at "
                    f"{self.memory_mismatches:,} of {self.alloc_checks:,} allocation checks, "
                    f"first at {self.first_mismatch}")
        if self.over_budget_checks:
            return f"live storage bytes over the budget at {self.over_budget_checks:,} allocation checks"
        return self.value_difference

    def require_match(self) -> None:
        """Raise `NotFaithfulError` unless the real step matches its simulation."""
        reason = self.mismatch()
        if reason is not None:
            raise NotFaithfulError(reason)


@dataclass(frozen=True)
class StepCheck:
    """One of the training steps `execute(steps=N)` runs, beside its simulation (the
    same schedule every step) and the plain step of the same number."""

    step: int                      # 1 for the first
    outcome: str
    loss: float | None
    plain_loss: float
    loss_bitwise_equal: bool | None
    grads_bitwise_equal: bool | None
    updates_bitwise_equal: bool | None   # parameters and optimizer states after its update
    alloc_checks: int
    memory_mismatches: int
    over_budget_checks: int
    evictions: int
    remats: int
    clock: int
    peak_live_bytes: int
    mismatch: str | None           # the step's first difference, or None

    @classmethod
    def of(cls, step: int, result: ExecuteResult) -> StepCheck:
        return cls(step=step, outcome=result.outcome, loss=result.loss, plain_loss=result.plain_loss,
                   loss_bitwise_equal=result.loss_bitwise_equal,
                   grads_bitwise_equal=result.grads_bitwise_equal,
                   updates_bitwise_equal=result.updates_bitwise_equal,
                   alloc_checks=result.alloc_checks, memory_mismatches=result.memory_mismatches,
                   over_budget_checks=result.over_budget_checks, evictions=len(result.victims),
                   remats=result.remats, clock=result.clock,
                   peak_live_bytes=result.peak_live_bytes, mismatch=result.step_mismatch())

    def to_json(self) -> dict:
        return json_safe({**dataclasses.asdict(self),
                          "memory_equal": self.alloc_checks > 0 and self.memory_mismatches == 0})


# --- model state ----------------------------------------------------------------------


class _State:
    """Parameters, buffers, gradients, the modules' plain Python attributes and the
    random state before the step (torch's, and Python's and numpy's generators)."""

    def __init__(self, model: torch.nn.Module):
        with torch.no_grad():
            self.tensors = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
            self.grads = [(p, None if p.grad is None else p.grad.detach().clone())
                          for p in model.parameters()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if _cuda_in_use() else None
        # Python's and numpy's generators: a model may draw there (wav2vec2's time masks)
        self.py_rng = random.getstate()
        numpy = sys.modules.get("numpy")
        self.np_rng = (numpy, numpy.random.get_state()) if numpy is not None else None
        self.python = _python_state(model)
        self.attributes = [(module, key, value) for _, module, key, value in _plain_attributes(model)]

    def restore(self) -> None:
        for module, key, value in self.attributes:
            if vars(module).get(key, value) is not value:
                vars(module)[key] = value
        with _disable_current_modes(), torch.no_grad():
            for t, saved in self.tensors:
                storage = t.untyped_storage()
                if storage.nbytes() == 0 and saved.numel():
                    storage.resize_(saved.untyped_storage().nbytes())
                t.copy_(saved)
            for p, g in self.grads:
                p.grad = None if g is None else g.clone()
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        random.setstate(self.py_rng)
        if self.np_rng is not None:
            numpy, state = self.np_rng
            numpy.random.set_state(state)


def _plain_attributes(model: torch.nn.Module):
    """(module name, module, attribute, value) of every module's plain Python
    attribute (numbers, strings, tuples of them)."""
    plain = (int, float, str, bool, type(None))
    for name, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, plain) or (isinstance(value, tuple) and all(isinstance(v, plain) for v in value)):
                yield name, module, key, value


def _python_state(model: torch.nn.Module) -> dict:
    """Every module's plain Python attributes, by module name and attribute."""
    return {(name or type(model).__name__, key): value
            for name, _, key, value in _plain_attributes(model)}


def _check_python_state(before: dict, model: torch.nn.Module) -> None:
    after = _python_state(model)
    for key, value in before.items():
        if after.get(key, value) != value:
            module, attr = key
            raise ScheduleError(f"module {module} changed its attribute {attr!r} during the step "
                                f"({value!r} -> {after[key]!r}): a step that changes Python state "
                                "cannot be recomputed faithfully")


DEVICES = ("cpu", "cuda")


def _check_device(model: torch.nn.Module, batch) -> None:
    """The executor replays the random states of the CPU and CUDA generators only."""
    from torch.utils._pytree import tree_flatten
    for t in [*model.parameters(), *model.buffers(), *tree_flatten(list(batch))[0]]:
        if isinstance(t, torch.Tensor) and t.device.type not in DEVICES:
            raise RecordError(f"the real step runs on CPU or CUDA, got a tensor on {t.device} "
                              "(random states of other devices are not replayed)")


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _bits(t: torch.Tensor) -> bytes:
    """The tensor's bytes, read from a copy: a storage numpy has seen can never be
    resized again, so never evicted."""
    with _disable_current_modes():
        copy = t.detach().clone(memory_format=torch.contiguous_format).cpu()
        return copy.view(-1).view(torch.uint8).numpy().tobytes()


def _digest(t: torch.Tensor | None) -> str | None:
    return None if t is None else hashlib.sha256(_bits(t)).hexdigest()


@dataclass(frozen=True)
class Values:
    """What a completed step computed, as digests: the loss, every parameter's
    gradient and, with an optimizer, every parameter and optimizer state after
    its update."""

    loss: float
    grads: tuple[str | None, ...]
    updates: tuple[str | None, ...]
    grad_names: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    update_names: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    @classmethod
    def of(cls, loss: float, model: torch.nn.Module, opt) -> Values:
        params = list(model.named_parameters())
        grads = tuple(f"the gradient of {n}" for n, _ in params)
        if opt is None:
            return cls(loss, tuple(_digest(p.grad) for _, p in params), (), grads)
        # in state_tensors' order: parameter by parameter, each state in its own order
        states = [f"optimizer state {k!r} of {n}" for n, p in params
                  for k, v in opt.state[p].items() if isinstance(v, torch.Tensor)]
        updated = [p for _, p in params] + state_tensors(opt)
        return cls(loss, tuple(_digest(p.grad) for _, p in params), tuple(_digest(t) for t in updated),
                   grads, tuple([f"parameter {n}" for n, _ in params] + states))

    def difference(self, plain: Values, mine: str = "the real step",
                   theirs: str = "the plain step") -> str | None:
        """The first value not bitwise `plain`'s (the loss, a gradient, a parameter
        or optimizer state after the update), or None."""
        if struct.pack("<d", self.loss) != struct.pack("<d", plain.loss):
            return f"the loss is {self.loss!r} in {mine}, {plain.loss!r} in {theirs}"
        for what, ours, others, names in (("", self.grads, plain.grads, plain.grad_names),
                                          (" after the optimizer step", self.updates, plain.updates,
                                           plain.update_names)):
            for k, (a, b) in enumerate(zip(ours, others)):
                if a != b:
                    name = names[k] if k < len(names) else f"value {k}"
                    return f"{name}{what} in {mine} is not bitwise that of {theirs}"
        return None


@contextlib.contextmanager
def _collector_paused():
    """The garbage collector off during a step, and what existed before it frozen:
    the step's collections (where `record` makes them) then walk only the objects
    the step made, not the whole heap (a full collection with PyTorch imported
    takes about 0.2 s of CPU, fifty times zoo:gpt's whole plain step)."""
    was_enabled = gc.isenabled()
    gc.disable()
    freeze = gc.get_freeze_count() == 0      # never unfreeze what the caller froze
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        if was_enabled:
            gc.enable()


@dataclass
class Step:
    """One training step of `model`, recorded once, to run again from the same
    state: plainly (`plain`) or for real under a schedule of its log (`real`).

    `optimizer` (`sgd`, `adam`, `adamw`) adds `optimizer.step()` in its steady
    state, as `record` has it: each run builds the optimizer anew from the
    state before the step (`optim.steady_optimizer`)."""

    model: torch.nn.Module
    batch: tuple
    loss_fn: object
    optimizer: str | None
    state: _State
    program: Program
    lines: list[str]

    @property
    def peak(self) -> int:
        return baseline(self.program).peak

    @functools.cached_property
    def recording(self) -> RecordedLog:
        """The log as the executor follows it, read once for every run."""
        return RecordedLog(self.lines)

    def _optimizer(self):
        return steady_optimizer(self.optimizer, list(self.model.parameters()))

    def plain(self) -> tuple[Values, Timing]:
        """The unconstrained step without any dispatch mode: its values and times."""
        values, timings = self.plain_steps(1)
        return values[0], timings[0]

    def plain_steps(self, steps: int) -> tuple[list[Values], list[Timing]]:
        """`steps` unconstrained steps from the state before the first, one optimizer
        throughout (gradients set to None between steps, as a training loop does)."""
        self.state.restore()
        opt = self._optimizer()
        values, timings = [], []
        for k in range(steps):
            if k and opt is not None:
                opt.zero_grad(set_to_none=True)
            value, timing = self._plain_step(opt)
            values.append(value)
            timings.append(timing)
        return values, timings

    def _plain_step(self, opt) -> tuple[Values, Timing]:
        inputs, targets = self.batch
        with _collector_paused():
            clock = Timing.start()
            try:
                loss = self.loss_fn(_forward(self.model, inputs, None), targets)
                loss.backward()
                if opt is not None:
                    opt.step()
            except Exception as exc:
                first = str(exc).strip().split("\n")[0]
                raise RecordError(f"the plain step (the reference, without DTR) raised "
                                  f"{type(exc).__name__}: {first} "
                                  f"({ModuleLocator(self.model).where_raised(exc)})") from exc
            taken = clock.stop()
            value = float(loss.detach())
            del loss
        return Values.of(value, self.model, opt), taken

    def real(self, schedule: Plan, budget: int, measure: bool = False) -> RealStep:
        """The step under `runtime.Executor`, following `schedule` at `budget`
        (`measure`: its kernel workspaces measured around each op, `workspace.Meter`)."""
        return next(self.real_steps(schedule, budget, 1, measure))

    def real_steps(self, schedule: Plan, budget: int, steps: int,
                   measure: bool = False) -> Iterator[RealStep]:
        """`steps` steps, each under its own `runtime.Executor` following the same
        `schedule` (the steady state's: every step runs the recorded ops on tensors
        of the recorded sizes) from the state before the first, one optimizer
        throughout; they end at the first that does not complete. Yielded one by
        one, so that a step's executor (its ghosts, its parameters' old versions)
        can go before the next step runs."""
        self.state.restore()
        opt = self._optimizer()
        for k in range(steps):
            if k:
                gc.collect()    # the last step's executor, a cycle: its old versions go
                if opt is not None:
                    opt.zero_grad(set_to_none=True)
            run = self._real_step(schedule, budget, opt, measure and not k)
            stopped = run.values is None
            yield run
            del run
            if stopped:
                return

    def _real_step(self, schedule: Plan, budget: int, opt, measure: bool = False) -> RealStep:
        inputs, targets = self.batch
        modules = ModuleLocator(self.model)
        log = FollowingLog(self.recording)
        ex = Executor(log, self.program, schedule.events, budget, modules.where)
        ex.meter = Meter(_step_device(self.model)) if measure else None
        existing = constants_of(self.model, [inputs, targets]) + state_tensors(opt)
        loss_value, stop = None, None
        with _collector_paused():
            clock = Timing.start()
            try:
                with ex.meter.session() if measure else contextlib.nullcontext(), ex:
                    try:
                        for t in existing:
                            ex.name_of(t)
                        loss_value = _training_step(ex, self.model, inputs, targets, self.loss_fn,
                                                    opt, modules)
                        ex.finish()
                    except RecordError as exc:
                        stop = _stop_of(exc)
                    except (RealOutOfMemory, ScheduleEnded) as exc:
                        stop = exc
                    if stop is not None:
                        stop.__traceback__ = None
                        gc.collect()       # what the failed step still held
            finally:
                taken = clock.stop()
                ex.close()
        values = Values.of(loss_value, self.model, opt) if stop is None else None
        return RealStep(ex, values, stop, taken, ex.meter.summary(self.program) if measure else None)


@dataclass(frozen=True)
class Timing:
    """Wall and CPU seconds of one step (the process's CPU time: fair on a shared
    machine, where wall time waits for other work). With CUDA in use the device
    is synchronized at both ends, so its queued work is counted."""

    wall: float
    cpu: float

    @classmethod
    def start(cls) -> Timing:
        if _cuda_in_use():
            torch.cuda.synchronize()
        return cls(time.perf_counter(), time.process_time())

    def stop(self) -> Timing:
        if _cuda_in_use():
            torch.cuda.synchronize()
        return Timing(time.perf_counter() - self.wall, time.process_time() - self.cpu)


@dataclass(frozen=True)
class RealStep:
    executor: Executor
    values: Values | None          # None unless the step completed
    stop: Exception | None         # RealOutOfMemory or ScheduleEnded
    timing: Timing
    workspaces: Workspaces | None = None


def _step_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a model without one)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _stop_of(exc: RecordError) -> Exception:
    """The schedule's OOM or end, when the model's code wrapped it; else an error."""
    cause = exc.__cause__
    if isinstance(cause, (RealOutOfMemory, ScheduleEnded)) and not isinstance(exc, ScheduleError):
        return cause
    if isinstance(cause, RuntimeError) and "data is not allocated" in str(cause):
        what = str(exc).split(" raised ")[0]
        raise ScheduleError(f"{what} read a tensor whose storage the schedule had evicted, by a read "
                            "PyTorch does not dispatch (`.tolist()`, `.numpy()`), so the log has no "
                            "op that keeps it resident: this step cannot follow its schedule "
                            "faithfully") from None
    raise exc


def _training_step(ex: Executor, model, inputs, targets, loss_fn, opt, modules) -> float:
    """Forward, loss, backward and the optimizer's step, with the collections and
    releases where `step.record` makes them (the log must come out line for line)."""
    loss = _run_forward(model, inputs, targets, loss_fn, None, modules, Where(model))
    with _disable_current_modes():
        value = float(loss.detach())
    ex.log.annotate("BACKWARD")
    _run_backward(loss)
    if opt is not None:
        _run_optimizer(ex.recorder, opt)
    del loss
    gc.collect()
    return value


def prepare(model: torch.nn.Module, batch, loss_fn, *, cost: str = "flops",
            optimizer: str | None = None, log_path: str | Path | None = None) -> Step:
    """Check the step can run for real, run `record` on it (its DTR log, kept at
    `log_path` if given) and put the model back as it was."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise RecordError("batch must be a pair (inputs, targets)")
    _check_device(model, batch)
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise RecordError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    state = _State(model)
    try:
        with tempfile.TemporaryDirectory(prefix="dtrf-run-") as tmp:
            path = Path(log_path) if log_path is not None else Path(tmp) / "step.log"
            record(model, batch, loss_fn, path, cost=cost, optimizer=optimizer)
            _check_python_state(state.python, model)
            lines = path.read_text(encoding="utf-8").splitlines()
            program = with_where(parse_file(path), path)   # module paths for refusals
    finally:
        state.restore()      # however the recording ended (an error, Ctrl-C)
    return Step(model, tuple(batch), loss_fn, optimizer, state, program, lines)


MAX_STEPS = 10_000


def execute(model: torch.nn.Module, batch, loss_fn, *, budget: int | None = None,
            ratio: float | None = None, policy="dtr", cost: str = "flops",
            optimizer: str | None = None, log_path: str | Path | None = None,
            record_dir: str | Path | None = None, steps: int = 1, workspaces: bool = False,
            reserve_workspace: int | str | None = None) -> ExecuteResult:
    """Run one training step of `model` for real under DTR at `budget` bytes (or
    `ratio` of the step's unconstrained peak), decisions from `policy`;
    `optimizer` adds `optimizer.step()` as `record` has it.

    `steps` above 1 (an optimizer needed) runs that many training steps, one
    optimizer throughout, each under the schedule of the recorded step (the
    steady state's, planned once), each beside the plain step of the same number
    run from the same starting state: the result is the first step's, its
    `steps` every step's check, its `mismatch()` the first difference of any.

    `record_dir` writes the (first) real step as a recording (`real_recording`).
    `workspaces` measures the kernel workspaces of the (first) real step around
    each op (`workspace.Meter`; its timings then include the measuring).
    `reserve_workspace` (bytes, or "auto": the largest workspace of a measuring
    run at the unconstrained budget) runs the engine at the budget less that
    reserve, so the allocator's total, workspaces included, stays within the
    budget asked for; it implies `workspaces`.
    Raises `BudgetError` for a budget below the step's floor and `RecordError`
    (a `ScheduleError`) for a step that cannot be recorded or recomputed
    faithfully; an out-of-memory is a result (`outcome == "oom"`)."""
    _check_arguments(budget, ratio, optimizer, steps)
    reserve_workspace = _check_reserve(reserve_workspace)
    if record_dir is not None:
        from ..recorder.writer import Recorder
        Recorder(record_dir).check_target()
    step = prepare(model, batch, loss_fn, cost=cost, optimizer=optimizer, log_path=log_path)
    try:
        # a first run pays PyTorch's one-time setup (kernels, caches): not timed
        first = step.plain_steps(steps)[0]
        plains, plain_timings = step.plain_steps(steps)
        unsteady = [plain.difference(before, "the second plain run", "the first")
                    for plain, before in zip(plains, first)]
        _check_python_state(step.state.python, model)
        program, peak = step.program, step.peak
        if ratio is not None:
            budget = budget_for_ratio(ratio, peak)
        reserved = _reserved(step, reserve_workspace, budget, policy)
        budget -= reserved
        least = floor(program)
        if budget < least.floor:
            raise _below_floor(budget, least, reserved)
        schedule = plan(program, budget, policy)
        first, checks, completed = None, [], True
        measure = workspaces or reserve_workspace is not None
        real_runs = _unsteady_named(step.real_steps(schedule, budget, steps, measure), unsteady)
        for run in real_runs:    # no enumerate: it holds the last
            k = len(checks)
            result = _result(step, schedule, run, plains[k], plain_timings[k], budget,
                             least.floor, cost)
            if unsteady[k] is not None:
                result = dataclasses.replace(result, value_difference=_unsteady_reason(unsteady[k]))
            if first is None:
                first, first_run = result, run if record_dir is not None else None
            checks.append(StepCheck.of(k + 1, result))
            completed = run.values is not None
            del run, result
    except BaseException:
        # a refusal, an error, Ctrl-C: the model and its state as they were before
        step.state.restore()
        raise
    if not completed:
        step.state.restore()     # an out-of-memory, or the engine's run ended early
    result = dataclasses.replace(first, n_steps=steps, steps=tuple(checks),
                                 reserved_workspace=reserved)
    if record_dir is not None:
        from .real_recording import write_real_recording
        write_real_recording(record_dir, program, schedule, first_run.executor,
                             result.real_summary(), ratio)
    return result


def _unsteady_reason(difference: str) -> str:
    """Why a step whose two plain runs from the same state differ is not a match."""
    return (f"the step is not deterministic even without DTR: from the same state {difference} "
            "(does it keep state outside the model, in a global?)")


def _unsteady_named(runs: Iterator[RealStep], unsteady: list[str | None]) -> Iterator[RealStep]:
    """The real steps; one that fails where the plain runs of its number already
    differed is not the same step each time it runs (state outside the model, a
    module global it changes): `NotFaithfulError` says so, not the failure's symptom."""
    done = 0     # the runs yielded: the failing one is number done + 1
    try:
        for run in runs:
            yield run
            del run
            done += 1
    except RecordError as exc:
        k = min(done, len(unsteady) - 1)
        if unsteady[k] is None:
            raise
        raise NotFaithfulError(f"{_unsteady_reason(unsteady[k])}: it is not the same step each "
                               f"time it runs, so it cannot follow its recording ({exc})") from None


def _check_arguments(budget: int | None, ratio: float | None, optimizer, steps: int) -> None:
    """What `execute` checks before the step is recorded and run."""
    validate.budget_or_ratio_arguments(budget, ratio)
    validate.at_least(steps, 1, "steps", maximum=MAX_STEPS)
    if steps > 1 and optimizer is None:
        raise RecordError(f"{steps} steps are training steps: they need an optimizer "
                          f"({', '.join(OPTIMIZERS)})")


def _check_reserve(reserve: int | str | None) -> int | str | None:
    """`reserve_workspace`: None, "auto" or a number of bytes (0 or more)."""
    if reserve is None or reserve == "auto":
        return reserve
    if isinstance(reserve, str):
        try:
            reserve = int(reserve.replace(",", "").replace("_", ""))
        except ValueError:
            raise RecordError(f"reserve_workspace must be a number of bytes or auto, "
                              f"got {reserve!r}") from None
    return validate.at_least(reserve, 0, "reserve_workspace")


def _below_floor(budget: int, least: Floor, reserved: int) -> Exception:
    """The refusal of a budget below the floor; with a reserve, saying so."""
    if not reserved:
        return BudgetError(budget, least)
    return RecordError(f"the budget less the workspace reserve of {reserved:,} bytes, "
                       f"{budget:,} bytes, is below the step's floor of {least.floor:,} bytes")


def _reserved(step: Step, reserve: int | str | None, budget: int, policy) -> int:
    """The bytes to take off `budget` for workspaces: as given, or with "auto" the
    largest workspace of a real step at the unconstrained budget (every op run once)."""
    if reserve is None:
        return 0
    if reserve == "auto":
        run = step.real(plan(step.program, step.peak, policy), step.peak, measure=True)
        reserve = run.workspaces.largest
        del run
        step.state.restore()
    if reserve >= budget:
        raise RecordError(f"the workspace reserve of {reserve:,} bytes leaves nothing of the "
                          f"budget of {budget:,} bytes")
    return reserve


def _frontier_json(program, frontier) -> dict | None:
    """The engine's pinned frontier at its OOM, each level naming the module its op ran
    in (None for a log without a where-file)."""
    if frontier is None:
        return None
    doc = frontier.to_json()
    for level in doc["frontier"]:
        level["module"] = program.op_where(level["op_id"])
    return doc


def _result(step: Step, schedule: Plan, run: RealStep, plain: Values, plain_timing: Timing,
            budget: int, least: int, cost: str) -> ExecuteResult:
    program, sim, stop, st = step.program, schedule.result.summary, run.stop, run.executor.stats
    oom = None
    if isinstance(stop, RealOutOfMemory):
        outcome = "oom"
        oom = RealOom(op_id=stop.op_id, op_name=program.op_name(stop.op_id),
                      tensor=program.tensor_name(stop.tensor_id), request=stop.request,
                      live_bytes=stop.live, engine_memory=stop.memory, budget=budget,
                      final_pins=bool(sim.oom and sim.oom.final_pins),
                      **{f: program.op_where(int(program.tensor_op[stop.tensor_id]), f)
                         for f in ("module", "phase", "source")})
    else:
        outcome = sim.outcome if stop is not None else "ok"
    real = run.values
    done = real is not None
    return ExecuteResult(
        simulated=sim, frontier=_frontier_json(program, schedule.frontier),
        budget=budget, peak=step.peak, floor=least, cost=cost, optimizer=step.optimizer,
        outcome=outcome, victims=tuple(st.victims), dead_frees=st.dead_frees, remats=st.remats,
        collateral_remats=st.collateral, clock=1 + st.model_compute + st.remat_compute,
        model_compute=int(sim.model_compute), remat_compute=st.remat_compute, oom=oom,
        alloc_checks=st.alloc_checks, memory_mismatches=st.mismatches,
        first_mismatch=st.first_mismatch, over_budget_checks=st.over_budget,
        peak_live_bytes=st.peak_live, ghosts=st.ghosts, random_rebuilds=st.random_rebuilds,
        wall_seconds=run.timing.wall, plain_wall_seconds=plain_timing.wall,
        cpu_seconds=run.timing.cpu, plain_cpu_seconds=plain_timing.cpu,
        loss=real.loss if done else None, plain_loss=plain.loss,
        loss_bitwise_equal=struct.pack("<d", real.loss) == struct.pack("<d", plain.loss) if done else None,
        grads_bitwise_equal=real.grads == plain.grads if done else None,
        grads_compared=sum(g is not None for g in plain.grads),
        updates_bitwise_equal=real.updates == plain.updates if done and step.optimizer else None,
        updates_compared=len(plain.updates),
        value_difference=real.difference(plain) if done else None,
        workspaces=run.workspaces)
