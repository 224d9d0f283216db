"""`record`: run one training step (forward, loss, backward) under the recorder
and write its DTR log.

The step is `loss_fn(model(inputs), targets)` with `batch = (inputs, targets)`
(`inputs` a tensor, a tuple of positional tensors or a dict of keyword
tensors), then `loss.backward()`. Gradients stay on the parameters. The
garbage collector is paused during the step (and run once at its end), so
the moments tensors die, and with `flops` the whole log, do not depend on
allocations made by the recorder itself. Those collections walk only what the
step made: the objects older than the step (a library such as transformers
makes hundreds of thousands) are set aside with `gc.freeze`, which halves
their time on the Llama-2-7B-shaped step (1.2 s to 0.6 s).
"""

from __future__ import annotations

import contextlib
import gc
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  (imported lazily by the first module call otherwise; the
from torch.utils._python_dispatch import _disable_current_modes

#                      import's tracebacks would keep that call's tensors alive until a GC)
from torch.utils._pytree import tree_flatten

from ..analyses.floor import Floor, floor
from ..trace.parser import parse_file
from .concrete import ConcreteValues, real_paths
from .costs import COST_MODELS
from .log import LogWriter
from .optim import autocast_context, state_tensors, steady_optimizer
from .recorder import RecordError, StepRecorder, constants_of
from .where import Where


@dataclass(frozen=True)
class RecordSummary:
    path: Path
    peak: int          # unconstrained peak of the log (bytes), as `dtrf traces info`
    ops: int           # operators in the log, constants included, as `dtrf traces info`
    lines: int
    cost: str
    fake: bool
    loss: float | None  # the step's loss (None in fake mode: there are no values)
    floor: Floor       # the bytes no budget can go below (`analyses/floor.py`)
    where: Path | None = None   # the where-file beside the log (module paths, phases, lines)


class ModuleLocator:
    """Names the code running now, for error messages: in backward the autograd
    node, in forward the innermost module whose method is on the Python stack.
    (Walking frames on demand, rather than module hooks, keeps `nn.Module` on its
    hook-free path, which creates no reference cycles that would delay frees.)"""

    def __init__(self, model: torch.nn.Module):
        self._names = {id(m): name or type(model).__name__ for name, m in model.named_modules()}

    def _module_of(self, frame) -> str | None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module) and id(owner) in self._names:
            return f"in module {self._names[id(owner)]} ({type(owner).__name__})"
        return None

    def where(self) -> str:
        node = torch._C._current_autograd_node()
        if node is not None:
            return f"in backward node {node.name()}"
        frame = sys._getframe(1)
        while frame is not None:
            found = self._module_of(frame)
            if found:
                return found
            frame = frame.f_back
        return "outside any module (in the loss function)"

    def where_raised(self, exc: BaseException) -> str:
        """Where `exc` was raised: the innermost module on its traceback."""
        found, tb = None, exc.__traceback__
        while tb is not None:
            found = self._module_of(tb.tb_frame) or found
            tb = tb.tb_next
        return found or "outside any module (in the loss function)"


def _fake_mode_of(tensors):
    from torch._subclasses.fake_tensor import FakeTensor
    for t in tensors:
        if isinstance(t, FakeTensor):
            return t.fake_mode
    return None


def _to_fake(model, batch):
    """Fake copies of a real model's parameters and buffers and of the batch."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    state = {name: mode.from_tensor(t) for name, t in
             [*model.named_parameters(), *model.named_buffers()]}
    fake_batch = torch.utils._pytree.tree_map_only(torch.Tensor, mode.from_tensor, batch)
    return mode, state, fake_batch


def _forward(model, inputs, state):
    if isinstance(inputs, dict):
        args, kwargs = (), inputs
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = tuple(inputs), {}
    else:
        args, kwargs = (inputs,), {}
    if state is not None:
        return torch.func.functional_call(model, state, args, kwargs)
    return model(*args, **kwargs)


def record(model: torch.nn.Module, batch, loss_fn, path: str | Path, cost: str = "flops",
           fake: bool = False, optimizer: str | torch.optim.Optimizer | None = None,
           autocast: str | None = None, *,
           recorder_type: type[StepRecorder] = StepRecorder) -> RecordSummary:
    """Record one training step of `model` on `batch` as a DTR log at `path`.

    `fake=True` runs the step on fake tensors (exact sizes, no memory, no values):
    a real model is copied to fake parameters first; a model built under a
    `FakeTensorMode` is used as it is. Raises `RecordError` for a step that
    cannot be recorded faithfully; no file is left behind then.

    `optimizer` (`sgd`, `adam`, `adamw`) adds `optimizer.step()` to the step, its
    states existing from the start (`optim.py`); an optimizer over the model's
    parameters is stepped as it is; `autocast` (`bf16`, `fp16`) runs
    forward and loss under `torch.autocast`. `recorder_type`: the dispatch mode
    recording it (a compiled step's: `compiled_step.CompiledStepRecorder`)."""
    if cost not in COST_MODELS:
        raise RecordError(f"unknown cost model {cost!r}; known: {', '.join(COST_MODELS)}")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise RecordError("batch must be a pair (inputs, targets)")
    inputs, targets = batch
    state = None
    fake_mode = _fake_mode_of([*model.parameters(), *tree_flatten(list(batch))[0]])
    if fake and fake_mode is None:
        fake_mode, state, (inputs, targets) = _to_fake(model, batch)
    fake = fake_mode is not None
    if fake and cost == "measured":
        raise RecordError("measured costs need real tensors: use --cost flops with --fake")
    autocast_context(autocast)   # a bad name fails before any work

    log = LogWriter()
    modules = ModuleLocator(model)
    context = Where(model, state)
    recorder = recorder_type(log, cost, modules.where, fake, context)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    loss_value = None
    try:
        with contextlib.ExitStack() as stack:
            if fake_mode is not None:
                stack.enter_context(fake_mode)
                stack.enter_context(ConcreteValues(fake_mode))
                stack.enter_context(real_paths())
            params = list(state.values()) if state is not None else list(model.parameters())
            opt = steady_optimizer(optimizer, params)
            existing = constants_of(model, [inputs, targets], state) + state_tensors(opt)
            context.own(opt)
            stack.enter_context(_older_objects_set_aside())
            stack.enter_context(recorder)
            for t in existing:
                recorder.name_of(t)
            stack.enter_context(context.following_modules())
            cast = autocast_context(autocast)
            cast.__enter__()
            try:
                loss = _run_forward(model, inputs, targets, loss_fn, state, modules, context)
            finally:
                with recorder.simultaneous_releases():   # autocast frees its cast cache
                    cast.__exit__(None, None, None)
            log.annotate("BACKWARD")
            context.phase = "backward"
            _run_backward(loss)
            if opt is not None:
                context.phase = "optimizer"
                context.own(opt)
                _run_optimizer(recorder, opt)
            if not fake:
                with _disable_current_modes():
                    loss_value = float(loss.detach())
            del loss
            gc.collect()
    finally:
        recorder.close()
        if gc_was_enabled:
            gc.enable()
    where = log.write(path)
    program = parse_file(path)
    least = floor(program)
    return RecordSummary(path=Path(path), peak=least.peak, ops=program.n_ops, lines=len(log.lines),
                         cost=cost, fake=fake, loss=loss_value, floor=least, where=where)


@contextlib.contextmanager
def _older_objects_set_aside():
    """Collections inside the block skip the objects older than it (`gc.freeze`),
    unless the process has frozen objects of its own, which are left as they are."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _forward_then_loss(model, inputs, state, context: Where):
    """The model's output, the phase moved on to the loss (the output is passed on
    unnamed, so it dies when the loss function lets it go, as before)."""
    context.phase = "forward"
    try:
        return _forward(model, inputs, state)
    finally:
        context.phase = "loss"


def _run_forward(model, inputs, targets, loss_fn, state, modules, context: Where):
    try:
        loss = loss_fn(_forward_then_loss(model, inputs, state, context), targets)
    except RecordError:
        raise
    except Exception as exc:
        raise RecordError(f"the forward pass raised {type(exc).__name__}: {exc} "
                          f"({modules.where_raised(exc)})") from exc
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise RecordError(f"the loss function {getattr(loss_fn, '__name__', loss_fn)!r} must "
                          f"return a scalar tensor, got {shape}")
    if not loss.requires_grad:
        raise RecordError("the loss does not require grad: no parameter reaches it")
    return loss


def _run_optimizer(recorder: StepRecorder, opt) -> None:
    """`optimizer.step()` as the log has it: after a collection (what backward
    left behind dies first) and the release of the views that died with it, its
    writes of parameters recorded as new versions (MUTATE), of its states as
    views of them."""
    gc.collect()
    recorder.release_dead_views()
    recorder.update_in_place(state_tensors(opt))
    _reporting("optimizer.step()", opt.step)


def _run_backward(loss):
    _reporting("backward", loss.backward)


def _reporting(what: str, call) -> None:
    """Run `call`; an exception of the model's code becomes a RecordError naming `what`."""
    try:
        call()
    except RecordError:
        raise
    except Exception as exc:
        raise RecordError(f"{what} raised {type(exc).__name__}: {exc}") from exc
