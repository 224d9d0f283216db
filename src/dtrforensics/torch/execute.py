"""`execute`: one real training step under DTR, and how it compares with the simulation.

The step (`loss_fn(model(inputs), targets)`, then `loss.backward()`, as
`record` runs it) runs three times from the same state and random state:
plainly (the unconstrained reference: loss, gradients, wall time), under the
recorder (its DTR log, `flops` costs by default), and for real under the
engine's schedule for that log at the budget (`runtime.Executor`). The model
is left as the real step leaves it; after an out-of-memory it is put back as
it was before.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..engine.baseline import baseline, budget_for_ratio
from ..engine.summary import RunSummary, victims_sha256
from ..jsonsafe import json_safe
from ..trace.parser import parse_file
from .recorder import RecordError, constants_of
from .runtime import (
    Executor,
    FollowingLog,
    RealOutOfMemory,
    ScheduleEnded,
    ScheduleError,
)
from .schedule import Plan, floor, plan
from .step import ModuleLocator, _forward, _run_backward, _run_forward, record


class BudgetError(RecordError):
    """A budget no run of the step can complete under."""


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

    @property
    def shortfall(self) -> int:
        return self.live_bytes + self.request - self.budget

    def to_json(self) -> dict:
        return {"op_id": self.op_id, "op_name": self.op_name, "tensor": self.tensor,
                "request": self.request, "live_bytes": self.live_bytes,
                "engine_memory": self.engine_memory, "budget": self.budget,
                "shortfall": self.shortfall}


@dataclass(frozen=True)
class ExecuteResult:
    """The real constrained step beside its simulation (`simulated`)."""

    simulated: RunSummary
    frontier: dict | None          # the engine's pinned frontier at its OOM
    budget: int
    peak: int                      # unconstrained peak of the log
    floor: int
    cost: str
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
    loss: float | None
    plain_loss: float
    loss_bitwise_equal: bool | None
    grads_bitwise_equal: bool | None
    grads_compared: int

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
                "loss": self.loss, "plain_loss": self.plain_loss,
                "loss_bitwise_equal": self.loss_bitwise_equal,
                "grads_bitwise_equal": self.grads_bitwise_equal, "grads_compared": self.grads_compared,
            },
            "simulated": sim.to_json(),
            "matches_simulation": self.matches_simulation(),
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
        """Outcome, victims, rematerializations and clock as the engine's run."""
        sim = self.simulated
        return (self.outcome == sim.outcome and self.victims_sha256 == sim.victims_sha256
                and self.remats == sim.remats and self.clock == sim.clock
                and len(self.victims) == sim.evictions)


# --- model state ----------------------------------------------------------------------


class _State:
    """Parameters, buffers, gradients and the random state before the step."""

    def __init__(self, model: torch.nn.Module):
        with torch.no_grad():
            self.tensors = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
            self.grads = [(p, None if p.grad is None else p.grad.detach().clone())
                          for p in model.parameters()]
        self.rng = torch.get_rng_state()
        self.python = _python_state(model)

    def restore(self) -> None:
        with _disable_current_modes(), torch.no_grad():
            for t, saved in self.tensors:
                storage = t.untyped_storage()
                if storage.nbytes() == 0 and saved.numel():
                    storage.resize_(saved.untyped_storage().nbytes())
                t.copy_(saved)
            for p, g in self.grads:
                p.grad = None if g is None else g.clone()
        torch.set_rng_state(self.rng)


def _python_state(model: torch.nn.Module) -> dict:
    """Every module's plain Python attributes (numbers, strings, tuples of them)."""
    plain = (int, float, str, bool, type(None))
    found = {}
    for name, module in model.named_modules():
        for key, value in vars(module).items():
            if isinstance(value, plain) or (isinstance(value, tuple) and all(isinstance(v, plain) for v in value)):
                found[(name or type(model).__name__, key)] = value
    return found


def _check_python_state(before: dict, model: torch.nn.Module) -> None:
    after = _python_state(model)
    for key, value in before.items():
        if after.get(key, value) != value:
            module, attr = key
            raise ScheduleError(f"module {module} changed its attribute {attr!r} during the step "
                                f"({value!r} -> {after[key]!r}): a step that changes Python state "
                                "cannot be recomputed faithfully")


def _check_device(model: torch.nn.Module, batch) -> None:
    """The executor replays the CPU generator's random state only: CPU tensors only."""
    from torch.utils._pytree import tree_flatten
    for t in [*model.parameters(), *model.buffers(), *tree_flatten(list(batch))[0]]:
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            raise RecordError(f"the real step runs on CPU only, got a tensor on {t.device} "
                              "(random states of other devices are not replayed)")


def _bits(t: torch.Tensor) -> bytes:
    with _disable_current_modes():
        return t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def _digest(t: torch.Tensor | None) -> str | None:
    return None if t is None else hashlib.sha256(_bits(t)).hexdigest()


def _plain_step(model, batch, loss_fn) -> tuple[float, list, float]:
    inputs, targets = batch
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        loss = loss_fn(_forward(model, inputs, None), targets)
        loss.backward()
        wall = time.perf_counter() - start
        value = float(loss.detach())
        del loss
    finally:
        if gc_was_enabled:
            gc.enable()
    return value, [_digest(p.grad) for p in model.parameters()], wall


# --- the real step ----------------------------------------------------------------------


def _real_step(model, batch, loss_fn, program, lines: list[str], schedule: Plan, budget: int):
    inputs, targets = batch
    modules = ModuleLocator(model)
    log = FollowingLog(lines)
    ex = Executor(log, program, schedule.events, budget, modules.where)
    existing = constants_of(model, [inputs, targets])
    loss_value, stop = None, None
    gc_was_enabled = gc.isenabled()
    gc.disable()
    start = time.perf_counter()
    try:
        with ex:
            try:
                for t in existing:
                    ex.name_of(t)
                loss = _run_forward(model, inputs, targets, loss_fn, None, modules)
                with _disable_current_modes():
                    loss_value = float(loss.detach())
                log.annotate("BACKWARD")
                _run_backward(loss)
                del loss
                gc.collect()
                ex.finish()
            except RecordError as exc:
                cause = exc.__cause__
                if isinstance(cause, (RealOutOfMemory, ScheduleEnded)) and not isinstance(exc, ScheduleError):
                    stop = cause
                else:
                    raise
            except (RealOutOfMemory, ScheduleEnded) as exc:
                stop = exc
            if stop is not None:
                stop.__traceback__ = None
                loss = None  # noqa: F841  (drop what the failed step still held)
                gc.collect()
    finally:
        wall = time.perf_counter() - start
        ex.close()
        if gc_was_enabled:
            gc.enable()
    return ex, loss_value, stop, wall


def execute(model: torch.nn.Module, batch, loss_fn, *, budget: int | None = None,
            ratio: float | None = None, policy="dtr", cost: str = "flops",
            log_path: str | Path | None = None, record_dir: str | Path | None = None) -> ExecuteResult:
    """Run one training step of `model` for real under DTR at `budget` bytes (or
    `ratio` of the step's unconstrained peak), decisions from `policy`.

    `record_dir` writes the real step as a recording (`real_recording`).
    Raises `BudgetError` for a budget below the step's floor and `RecordError`
    (a `ScheduleError`) for a step that cannot be recorded or recomputed
    faithfully; an out-of-memory is a result (`outcome == "oom"`)."""
    if (budget is None) == (ratio is None):
        raise ValueError("give exactly one of budget (bytes) or ratio")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise RecordError("batch must be a pair (inputs, targets)")
    _check_device(model, batch)
    if record_dir is not None:
        from ..recorder.writer import Recorder
        Recorder(record_dir).check_target()
    state = _State(model)
    plain_loss, plain_grads, plain_wall = _plain_step(model, batch, loss_fn)
    _check_python_state(state.python, model)
    state.restore()
    with tempfile.TemporaryDirectory(prefix="dtrf-run-") as tmp:
        path = Path(log_path) if log_path is not None else Path(tmp) / "step.log"
        record(model, batch, loss_fn, path, cost=cost)
        _check_python_state(state.python, model)
        lines = path.read_text(encoding="utf-8").splitlines()
        program = parse_file(path)
    state.restore()
    peak = baseline(program).peak
    if ratio is not None:
        budget = budget_for_ratio(ratio, peak)
    least = floor(program)
    if budget < least:
        raise BudgetError(f"budget {budget:,} bytes is below the step's floor of {least:,} bytes "
                          f"(constants, one op's inputs and outputs): no policy can run it")
    schedule = plan(program, budget, policy)
    ex, loss_value, stop, wall = _real_step(model, batch, loss_fn, program, lines, schedule, budget)
    sim = schedule.result.summary
    oom = None
    if isinstance(stop, RealOutOfMemory):
        outcome = "oom"
        oom = RealOom(op_id=stop.op_id, op_name=program.op_name(stop.op_id),
                      tensor=program.tensor_name(stop.tensor_id), request=stop.request,
                      live_bytes=stop.live, engine_memory=stop.memory, budget=budget)
    elif stop is not None:
        outcome = sim.outcome
    else:
        outcome = "ok"
    grads_equal = loss_equal = None
    if outcome == "ok":
        grads = [_digest(p.grad) for p in model.parameters()]
        grads_equal = grads == plain_grads
        loss_equal = _digest(torch.tensor(loss_value, dtype=torch.float64)) == \
            _digest(torch.tensor(plain_loss, dtype=torch.float64))
    else:
        state.restore()
    st = ex.stats
    result = ExecuteResult(
        simulated=sim, frontier=schedule.frontier.to_json() if schedule.frontier else None,
        budget=budget, peak=peak, floor=least, cost=cost, outcome=outcome,
        victims=tuple(st.victims), dead_frees=st.dead_frees, remats=st.remats,
        collateral_remats=st.collateral, clock=1 + st.model_compute + st.remat_compute,
        model_compute=int(sim.model_compute), remat_compute=st.remat_compute, oom=oom,
        alloc_checks=st.alloc_checks, memory_mismatches=st.mismatches,
        first_mismatch=st.first_mismatch, over_budget_checks=st.over_budget,
        peak_live_bytes=st.peak_live, ghosts=st.ghosts, random_rebuilds=st.random_rebuilds, wall_seconds=wall,
        plain_wall_seconds=plain_wall, loss=loss_value, plain_loss=plain_loss,
        loss_bitwise_equal=loss_equal, grads_bitwise_equal=grads_equal,
        grads_compared=sum(g is not None for g in plain_grads))
    if record_dir is not None:
        from .real_recording import write_real_recording
        write_real_recording(record_dir, program, schedule, ex, result.real_summary(), ratio)
    return result
