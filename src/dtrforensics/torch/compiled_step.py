"""The step `torch.compile` runs, at a memory-budget knob and solver, recorded
under a dispatch mode.

`compiled(model, knob, solver)` compiles `model`'s forward in place (so its
module names stay) with backend `aot_eager_decomp_partition`'s
pieces: AOTAutograd with inductor's decompositions, the min-cut
rematerialization partitioner at `activation_memory_budget` KNOB and
`activation_memory_budget_solver` SOLVER, and no code generation: the
forward and backward graphs (`fx.GraphModule`s) run their aten ops eagerly.
`CompiledStep.graphs` keeps each compiled graph, forward and backward, and
`recomputed()` counts the backward graph's nodes copied from the forward
(the partitioner's recomputation).

Running the graphs under a `TorchDispatchMode`: Dynamo does not run compiled
code while a mode that does not ignore compile internals is on the stack (it
falls back to eager, and a mode sees the eager ops); a mode whose class says
`ignore_compile_internals()` is True is switched off while Dynamo compiles
and on while the compiled code runs, so it sees the graphs' aten ops, the
decomposed ones (`var_mean`, `rsqrt`, `prims.iota`), as the step runs them.
`warm_up` compiles with no mode on (forward and backward), leaving the
model's values, gradients and random state as they were; a run under a mode
must not compile again (`compiles` counts compilations: compare it).

This module is shared: any recording or execution of a compiled step's
partitioned graphs (not the joint graph) goes through `compiled()` and
`CompiledStep`. To run them under a mode of your own:

    with compiled(model, knob, solver) as step:
        warm_up(model, batch, loss_fn)          # compiles, no mode on
        with MyMode():                          # MyMode.ignore_compile_internals() -> True
            loss_fn(model(inputs), targets).backward()
        step.graphs                             # [CompiledGraph("forward", gm), ("backward", gm)]

and compare `step.compiles` and `step.runs` before and after (`_check_ran`):
a mode that does not ignore compile internals sees eager ops, not the graphs'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..trace.where import where_path
from .recorder import RecordError, StepRecorder

BACKEND = "aot_eager_decomp_partition"


@dataclass
class CompiledGraph:
    """One graph AOTAutograd compiled: `kind` forward or backward."""

    kind: str
    module: torch.fx.GraphModule

    def call_nodes(self) -> list[str]:
        return [n.name for n in self.module.graph.nodes if n.op == "call_function"]


@dataclass
class CompiledStep:
    model: torch.nn.Module
    knob: float
    solver: str
    graphs: list[CompiledGraph] = field(default_factory=list)
    compiles: int = 0          # Dynamo graphs compiled (each: one forward, one backward)
    runs: dict = field(default_factory=lambda: {"forward": 0, "backward": 0})   # graphs run

    def recomputed(self) -> int:
        """How many backward nodes are forward nodes again (`decisions`)."""
        return len(self.decisions()[1])

    def decisions(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The partitioner's plan, by forward node name: the forward values the
        backward graph takes as inputs (saved), and the backward graph's nodes
        that are forward nodes again (recomputed: the partitioner copies a node
        into the backward graph under its name). With several graphs (graph
        breaks) each name is prefixed `gN:`, N counting from 0."""
        saved: list[str] = []
        recomputed: list[str] = []
        forwards = [g for g in self.graphs if g.kind == "forward"]
        backwards = [g for g in self.graphs if g.kind == "backward"]
        for index, (fw, bw) in enumerate(zip(forwards, backwards)):
            prefix = f"g{index}:" if len(forwards) > 1 else ""
            names = set(fw.call_nodes())
            for node in bw.module.graph.nodes:
                if node.name in names and node.op in ("placeholder", "call_function"):
                    (saved if node.op == "placeholder" else recomputed).append(prefix + node.name)
        return tuple(saved), tuple(recomputed)


def _config(knob: float, solver: str):
    from torch._functorch import config
    return config.patch(activation_memory_budget=knob, activation_memory_budget_solver=solver,
                        unlift_effect_tokens=True)


def _backend(step: CompiledStep):
    """`aot_eager_decomp_partition`, keeping each graph it compiles."""
    from functorch.compile import min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    def keeper(kind):
        def compile_graph(gm, example_inputs):
            run_graph = boxed_nop(gm, example_inputs)    # the backend's own: inputs freed early
            step.graphs.append(CompiledGraph(kind, gm))

            def run(args):
                step.runs[kind] += 1
                return run_graph(args)
            run._boxed_call = True
            return run
        return compile_graph

    def backend(gm, example_inputs):
        step.compiles += 1
        with _config(step.knob, step.solver):
            return aot_autograd(
                fw_compiler=keeper("forward"), bw_compiler=keeper("backward"),
                decompositions=_decompositions,
                partition_fn=functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
            )(gm, example_inputs)
    return backend


def _decompositions():
    from torch._inductor.compile_fx import select_decomp_table
    return select_decomp_table()


def check_solver(solver: str) -> None:
    from .private_api import require
    require("torch._functorch.config.activation_memory_budget", "a compiled step at a knob")
    require("torch._functorch.config.activation_memory_budget_solver", "a compiled step's solver")
    if solver == "ilp":
        try:
            import scipy.optimize  # noqa: F401
        except ImportError:
            raise RecordError("solver ilp needs scipy (pip install scipy); use dp or greedy") from None


@contextlib.contextmanager
def compiled(model: torch.nn.Module, knob: float, solver: str) -> Iterator[CompiledStep]:
    """Inside the block `model` is compiled (in place) at KNOB and SOLVER; the
    `CompiledStep` fills as Dynamo compiles. Afterwards the model is as it was
    and Dynamo's caches are reset."""
    check_solver(solver)
    step = CompiledStep(model, knob, solver)
    torch._dynamo.reset()
    # the forward, not `_call_impl` (`model.compile()`): a compiled `_call_impl`
    # guards on the global module hooks, which a recording adds (`where.py`)
    own = vars(model).get("forward")
    model.forward = torch.compile(model.forward, backend=_backend(step), dynamic=False)
    try:
        with _config(knob, solver):
            yield step
    finally:
        if own is None:
            del model.forward
        else:
            model.forward = own
        torch._dynamo.reset()


class CompiledStepRecorder(StepRecorder):
    """The recorder, seeing the ops a compiled step's graphs run (see the module
    docstring): off while Dynamo compiles, on while compiled code runs."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


@contextlib.contextmanager
def values_kept(model: torch.nn.Module) -> Iterator[None]:
    """The block's run leaves the model's parameters, buffers and gradients, and
    the random states, as they were (a warm-up that compiles)."""
    import random

    import numpy as np
    states = (torch.get_rng_state(), random.getstate(), np.random.get_state())
    tensors = [*model.parameters(), *model.buffers()]
    saved = [t.detach().clone() for t in tensors]
    grads = [getattr(t, "grad", None) for t in tensors]
    grads = [None if g is None else g.detach().clone() for g in grads]
    try:
        yield
    finally:
        with torch.no_grad():
            for t, value, grad in zip(tensors, saved, grads):
                t.copy_(value)
                t.grad = grad
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])


def warm_up(model: torch.nn.Module, batch, loss_fn) -> None:
    """One forward and backward with no mode on, so Dynamo and AOTAutograd
    compile both graphs; values kept (`values_kept`)."""
    from .step import _forward
    inputs, targets = batch
    with values_kept(model):
        try:
            loss = loss_fn(_forward(model, inputs, None), targets)
            loss.backward()
        except RecordError:
            raise
        except Exception as exc:
            raise RecordError(f"torch.compile of the step raised {type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from exc


def record_compiled(model: torch.nn.Module, batch, loss_fn, path, *, knob: float, solver: str,
                    cost: str = "flops", optimizer=None, autocast: str | None = None):
    """Record the compiled step of `model` at KNOB and SOLVER: compiled and warmed
    up with no mode on, then recorded by `CompiledStepRecorder`. Returns the
    `RecordSummary`, the plan (`CompiledStep.decisions`: saved and recomputed
    forward nodes) and notes (graphs compiled)."""
    from .optim import autocast_context
    from .step import record
    if any(getattr(t, "fake_mode", None) is not None for t in model.parameters()):
        raise RecordError("a compiled step is recorded from real tensors: drop --fake")
    with compiled(model, knob, solver) as step:
        with autocast_context(autocast):
            warm_up(model, batch, loss_fn)
        before, runs = step.compiles, dict(step.runs)
        with _written_if_kept(path) as draft:
            summary = record(model, batch, loss_fn, draft, cost=cost, optimizer=optimizer,
                             autocast=autocast, recorder_type=CompiledStepRecorder)
            _check_ran(step, before, runs)
    summary = dataclasses.replace(summary, path=Path(path),
                                  where=None if summary.where is None else where_path(path))
    notes = (f"{BACKEND}: {step.compiles} graph(s) compiled (each a forward and a backward), "
             f"activation_memory_budget {knob:g}, solver {solver}",)
    return summary, step.decisions(), notes


def _check_ran(step: CompiledStep, before: int, runs: dict) -> None:
    """The compiled graphs, as compiled before, are what ran: one forward and one
    backward run of each, and no compilation."""
    if step.compiles != before:
        raise RecordError("torch.compile compiled the step again while it was recorded "
                          "(a guard failed): the recording is not the compiled step")
    ran = {kind: step.runs[kind] - runs[kind] for kind in runs}
    if ran != {"forward": step.compiles, "backward": step.compiles}:
        raise RecordError(f"the compiled graphs did not run as compiled while the step was "
                          f"recorded ({ran['forward']} forward and {ran['backward']} backward "
                          f"runs of {step.compiles} graph(s)): the recording is not the "
                          "compiled step")


@contextlib.contextmanager
def _written_if_kept(path) -> Iterator[Path]:
    """A draft path beside `path` (and its where-file), moved onto `path` when
    the block ends normally, removed when it raises."""
    path = Path(path)
    draft = path.with_name(f".{path.name}.draft-{os.getpid()}")
    try:
        yield draft
        os.replace(draft, path)
        if where_path(draft).exists():
            os.replace(where_path(draft), where_path(path))
    finally:
        for leftover in (draft, where_path(draft)):
            leftover.unlink(missing_ok=True)
