"""`dtrf torch run --compiled`: training steps compiled with `dtr_backend`, beside
the plain `aot_eager` steps and the engine's run of the joint graph's log.

Both runs start from the same model state and random state: the plain one
compiled with `aot_eager` (`step = loss_fn(model(inputs), targets)`, the loss
inside the compiled graph), the lowered one with `dtr_backend(checking=True)`.
The result says whether the lowered step evicted the engine's victims in
its order, held the engine's memory at every allocation check, and computed
the plain step's losses, gradients, buffers and (with an optimizer)
parameters bit for bit; and the wall time of each, the first (compiling)
step left out. Then one more lowered step, its values not compared, is
measured (`DtrBackend.measure_next`): the CPU allocator's peak during it and
the workspace of each of its ops, and whether the peak is within the budget
plus the largest workspace.

With `inner="inductor"` the lowered graphs go to inductor: nothing is
checked or measured (its fusions change what is allocated, so its live
bytes are not the engine's), and the values are compared within
`INDUCTOR_TOLERANCE` of the plain step's (inductor reorders float
arithmetic), not bit for bit.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from ..engine.summary import victims_sha256
from ..jsonsafe import json_safe
from .backend import (
    BREAK_ADVICE,
    DtrBackend,
    StepPeak,
    break_words,
    compile_refusal,
    dtr_backend,
)
from .optim import OPTIMIZERS
from .recorder import RecordError
from .step import _forward

INDUCTOR_TOLERANCE = 1e-4   # largest |difference| over a tensor's largest |value|, under inductor


@dataclass(frozen=True)
class CompiledRunResult:
    budget: int
    peak: int
    policy: str
    optimizer: str | None
    steps: int
    simulated: dict             # the engine's summary of the joint graph's log
    lowered_victims_equal: bool
    lowered_remats: int
    saved: int
    checks: int
    memory_mismatches: int
    first_mismatch: str | None
    over_budget_checks: int
    peak_live_bytes: int
    values_compared: int
    values_bitwise_equal: bool
    first_difference: str | None
    wall_seconds: float | None
    plain_wall_seconds: float | None
    allocator: StepPeak | None = None   # the measured step's allocator peak and workspaces
    cost: str = "flops"                 # the joint graph's log's cost model
    inner: str = "aot_eager"            # the compiler of the lowered graphs
    largest_relative_difference: float = 0.0   # over the values, against the plain step's
    reserved: int = 0                   # bytes reserved for workspaces (`budget` is less by it)

    @property
    def slowdown(self) -> float | None:
        if not self.wall_seconds or not self.plain_wall_seconds:
            return None
        return self.wall_seconds / self.plain_wall_seconds

    @property
    def mismatch(self) -> str | None:
        if not self.lowered_victims_equal:
            return "the lowered graphs evict other victims than the engine"
        if self.memory_mismatches:
            return f"live bytes differ from the engine's memory: {self.first_mismatch}"
        if self.inner == "inductor":
            if self.largest_relative_difference > INDUCTOR_TOLERANCE:
                return (f"values differ from the plain step (aot_eager with inductor's "
                        f"decompositions) by "
                        f"{self.largest_relative_difference:.3g} (relative), above "
                        f"{INDUCTOR_TOLERANCE:g}: {self.first_difference}")
        elif not self.values_bitwise_equal:
            return f"values differ from the plain aot_eager step: {self.first_difference}"
        p = self.allocator
        if p is not None and p.check.mismatches:
            return f"live bytes differ from the engine's memory: {p.check.first_mismatch}"
        if p is not None and p.allocator_peak > p.bound:
            states = " plus the generator states kept for reruns" if p.generator_states else ""
            return (f"the allocator's peak {p.allocator_peak:,} bytes is above the budget plus the "
                    f"largest workspace{states} ({p.bound:,})")
        return None

    @property
    def budget_asked(self) -> int:
        """The budget asked for: the schedule's plus the workspace reserve."""
        return self.budget + self.reserved

    @property
    def verdict(self) -> str:
        """In words: whether the schedule fits the budget, and the allocator's peak."""
        sim = self.simulated
        if sim["outcome"] != "ok":
            return f"the schedule ends {sim['outcome']}"
        fits = f"the schedule fits the budget ({self.budget_asked:,} B)"
        if self.reserved:
            fits += f", planned at {self.budget:,} B with {self.reserved:,} B reserved for workspaces"
        p = self.allocator
        if p is None:
            return fits + "; the allocator's peak not measured"
        if p.over_budget:
            ws = p.workspaces
            return (f"{fits}; the allocator's peak {p.allocator_peak:,} B exceeds it by "
                    f"{p.over_budget:,} B (workspaces: scratch an op frees inside itself, the "
                    f"largest {ws.largest:,} B in {ws.op_name}, which the schedule does not model; "
                    "reserve_workspace=True / --reserve-workspace auto plans below it)")
        return f"{fits}; the allocator's peak {p.allocator_peak:,} B is within it"

    def to_json(self) -> dict:
        return json_safe({
            "compiled": True, "budget": self.budget, "peak": self.peak, "policy": self.policy,
            "budget_asked": self.budget_asked, "reserved_workspace": self.reserved,
            "verdict": self.verdict,
            "allocator_within_budget": (None if self.allocator is None
                                        else self.allocator.over_budget == 0),
            "cost": self.cost, "inner": self.inner,
            "optimizer": self.optimizer, "steps": self.steps, "simulated": self.simulated,
            "lowered": {"victims_equal": self.lowered_victims_equal, "remats": self.lowered_remats,
                        "saved_for_backward": self.saved},
            "real": {"alloc_checks": self.checks, "memory_mismatches": self.memory_mismatches,
                     "first_mismatch": self.first_mismatch,
                     "over_budget_checks": self.over_budget_checks,
                     "peak_live_bytes": self.peak_live_bytes,
                     "values_compared": self.values_compared,
                     "values_bitwise_equal": self.values_bitwise_equal,
                     "first_difference": self.first_difference,
                     "largest_relative_difference": self.largest_relative_difference,
                     "wall_seconds": self.wall_seconds, "plain_wall_seconds": self.plain_wall_seconds,
                     "slowdown": self.slowdown},
            "allocator": self.allocator.to_json() if self.allocator is not None else None,
            "mismatch": self.mismatch,
        })


def train(model, batch, loss_fn, backend, steps: int, optimizer: str | None):
    """`steps` compiled training steps of a copy of `model`; the values each step
    leaves (loss, buffers after the forward, gradients; the parameters at the
    end) with their names, and the wall time of the steps after the first."""
    torch._dynamo.reset()
    m = copy.deepcopy(model)
    inputs, targets = batch
    opt = OPTIMIZERS[optimizer](list(m.parameters())) if optimizer else None
    step = torch.compile(lambda x, y: loss_fn(_forward(m, x, None), y), backend=backend,
                         dynamic=False)
    with torch._dynamo.config.patch(ignore_logging_functions=_ignored_logging()):
        return _train(m, step, inputs, targets, opt, backend, steps)


def _ignored_logging() -> set:
    """Dynamo's ignored logging calls, and transformers' `Logger.warning_once`
    (hf: models' loss warns through it: a message, not the step's math; traced,
    it breaks the graph)."""
    import logging
    once = getattr(logging.Logger, "warning_once", None)
    return set(torch._dynamo.config.ignore_logging_functions) | ({once} if once else set())


def _train(m, step, inputs, targets, opt, backend, steps: int):
    values: list[tuple[str, torch.Tensor]] = []
    start = None
    for k in range(steps + 1 if steps > 1 else steps):
        if k == 1:
            start = time.perf_counter()
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        loss = step(inputs, targets)
        values += [(f"step {k}: loss", loss.detach().clone())]
        values += [(f"step {k}: buffer {n}", b.clone()) for n, b in m.named_buffers()]
        loss.backward()
        values += [(f"step {k}: gradient of {n}", p.grad.clone())
                   for n, p in m.named_parameters() if p.grad is not None]
        if opt is not None:
            opt.step()
    wall = time.perf_counter() - start if start is not None else None
    values += [(f"parameter {n}", p.detach().clone()) for n, p in m.named_parameters()]
    if isinstance(backend, DtrBackend) and backend.checking and len(backend.graphs) == 1:
        # one more step, measured
        for p in m.parameters():
            p.grad = None
        backend.measure_next()
        step(inputs, targets).backward()
    return values, wall


def _largest_difference(plain: list, mine: list) -> float:
    """The largest |difference| over the tensor's largest |value|, over the values;
    inf where the values are not the same ones (another count, or other names)."""
    if [name for name, _ in plain] != [name for name, _ in mine]:
        return float("inf")
    largest = 0.0
    for (_, a), (_, b) in zip(plain, mine):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if a.is_floating_point() and a.numel():
            scale = float(a.abs().max()) or 1.0
            largest = max(largest, float((a - b).abs().max()) / scale)
        elif not torch.equal(a, b):
            return float("inf")
    return largest


def _first_difference(plain: list, mine: list) -> str | None:
    if len(plain) != len(mine):
        return f"{len(mine)} values against {len(plain)}"
    for (name, a), (_, b) in zip(plain, mine):
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
            return name
    return None


def run_compiled(model, batch, loss_fn, *, budget: int | None = None, ratio: float | None = None,
                 policy="dtr", steps: int = 1, optimizer: str | None = None,
                 log_path=None, cost: str = "flops", inner: str = "aot_eager",
                 reserve_workspace: bool | int = False) -> CompiledRunResult:
    """The lowered steps beside the plain ones (see the module docstring); a
    budget the schedule cannot meet raises `BudgetNotMet` before any step runs."""
    if steps > 1 and optimizer is None:
        raise RecordError("--steps above 1 needs --optimizer")
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise RecordError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    backend = dtr_backend(budget, ratio=ratio, policy=policy, checking=inner == "aot_eager",
                          log=log_path, cost=cost, inner=inner,
                          reserve_workspace=reserve_workspace, breaks="refuse")
    state = torch.get_rng_state()
    plain, plain_wall = train(model, batch, loss_fn, _plain_backend(inner), steps, optimizer)
    torch.set_rng_state(state)
    try:
        mine, wall = train(model, batch, loss_fn, backend, steps, optimizer)
    except Exception as exc:   # dynamo wraps what the backend raised
        refusal = compile_refusal(exc)
        if refusal is not None:
            raise refusal from None
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RecordError(f"compiling the step with dtr_backend raised {type(exc).__name__}: "
                          f"{first}") from exc
    return _result(backend, plain, mine, wall, plain_wall, steps, optimizer, policy)


def _plain_backend(inner: str):
    """The plain step's compiler: `aot_eager`; under inductor, aot_eager's nop compiler
    with inductor's decompositions, so that a dropout draws its mask as the lowered
    step does (the decomposition draws `rand`, aten's `native_dropout` `bernoulli`:
    other numbers from the same generator)."""
    if inner != "inductor":
        return "aot_eager"
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._inductor.compile_fx import select_decomp_table
    return aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop,
                        decompositions=select_decomp_table(),
                        keep_inference_input_mutations=True)


def _one_graph(backend: DtrBackend) -> None:
    """Refused unless the step compiled into one graph: none (dynamo handed the
    backend nothing to plan), or several (where dynamo broke it, as it counted)."""
    if not backend.graphs:
        raise RecordError("dynamo handed dtr_backend no graph of the step (it ran the step "
                          "without compiling it), so nothing was planned; --compiled plans the "
                          "step as one graph")
    if len(backend.graphs) > 1:
        from torch._dynamo.utils import counters
        raise RecordError(f"the step compiled into {len(backend.graphs)} graphs: dynamo broke it "
                          f"at {break_words(counters['graph_break'])}; --compiled plans one graph "
                          "(each graph alone would have the whole budget while the others' "
                          "memory is alive): " + BREAK_ADVICE)


def _result(backend: DtrBackend, plain, mine, wall, plain_wall, steps: int, optimizer,
            policy) -> CompiledRunResult:
    _one_graph(backend)
    (graph,) = backend.graphs
    summary = graph.summary
    reports = graph.checks
    mismatched = [r for r in reports if r.mismatches]
    victims = graph.schedule.result.victims[:, 0].tolist()
    simulated = {"outcome": summary.outcome, "evictions": summary.evictions,
                 "remats": summary.remats, "dead_frees": summary.dead_frees,
                 "overhead": summary.overhead, "clock": summary.clock,
                 "victims_sha256": summary.victims_sha256, "peak": summary.peak}
    difference = _first_difference(plain, mine)
    return CompiledRunResult(
        budget=graph.budget, peak=summary.peak, policy=str(policy), optimizer=optimizer,
        steps=steps, simulated=simulated,
        lowered_victims_equal=graph.lowered.victims == victims
        and victims_sha256(graph.lowered.victims) == summary.victims_sha256,
        lowered_remats=graph.lowered.remats, saved=graph.lowered.saved,
        checks=sum(r.checks for r in reports), memory_mismatches=sum(r.mismatches for r in reports),
        first_mismatch=mismatched[0].first_mismatch if mismatched else None,
        over_budget_checks=sum(r.over_budget for r in reports),
        peak_live_bytes=max((r.peak_live for r in reports), default=0),
        values_compared=len(plain), values_bitwise_equal=difference is None,
        first_difference=difference, wall_seconds=wall, plain_wall_seconds=plain_wall,
        allocator=graph.peaks[0] if graph.peaks else None, cost=backend.cost, inner=backend.inner,
        reserved=graph.reserved,
        largest_relative_difference=_largest_difference(plain, mine) if difference else 0.0)

