"""What PyTorch's own activation checkpointing runs, recorded as a DTR log.

A `CheckpointOption` names one way PyTorch trades compute for memory:

- `none`: the plain step;
- `block[:CLASS]`: `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`
  around each block, the modules of class CLASS (by default the repeated
  submodule: the class with two or more instances, submodules of its own and
  the most parameters, e.g. a transformer's layer);
- `sac[:POLICY][@CLASS]`: selective activation checkpointing
  (`create_selective_checkpoint_contexts`) over the same blocks, POLICY
  `matmul` (save matrix products and attention, recompute the rest; the
  default) or `module:function`, a policy function of the user's
  (`fn(ctx, op, *args, **kwargs)` returning a `CheckpointPolicy`, or a bool:
  true saves);
- `compile[:KNOB[:SOLVER]]`: the step `torch.compile` runs with backend
  `aot_eager_decomp_partition` at `activation_memory_budget` KNOB (0..1,
  default 1) and solver `dp` (default), `greedy` or `ilp` (`compiled_step.py`).

`record_option` builds the spec's model as `dtrf torch record` does
(`spec.build`), applies the option and records the step with the same recorder
and byte accounting as any step: the log's unconstrained peak is the step's
peak of live storage bytes, and every recomputed op is an op of the log (in
the where-file under phase `recompute` for `block` and `sac`; for `compile`
the recomputed nodes of the backward graph).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..analyses.floor import Floor
from .recorder import RecordError
from .spec import import_users_module, users_function

KINDS = ("none", "block", "sac", "compile")
SOLVERS = ("dp", "greedy", "ilp")
SAC_POLICIES = ("matmul",)
DEFAULT_POLICY = "matmul"
DEFAULT_SOLVER = "dp"
DEFAULT_KNOB = 1.0
# ops the `matmul` policy saves: matrix products and attention
MATMUL_OPS = ("mm", "bmm", "addmm", "baddbmm", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable")


class CheckpointOptionError(RecordError):
    """An option that does not parse or does not apply to the model."""


@dataclass(frozen=True)
class CheckpointOption:
    """One checkpointing option (see the module docstring); `str()` gives the
    text `parse` reads back."""

    kind: str = "none"
    block: str | None = None      # block class name (block, sac); None: found
    policy: str | None = None     # sac: "matmul" or "module:function"
    knob: float | None = None     # compile: activation_memory_budget
    solver: str | None = None     # compile: dp, greedy, ilp

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CheckpointOptionError(f"checkpoint kind {self.kind!r} is none of {', '.join(KINDS)}")
        if self.kind == "compile":     # made directly: the defaults parse_option gives
            knob = DEFAULT_KNOB if self.knob is None else float(self.knob)
            if not 0.0 <= knob <= 1.0:
                raise CheckpointOptionError(f"the knob (activation_memory_budget) is a number "
                                            f"from 0 to 1, not {self.knob!r}")
            if (self.solver or DEFAULT_SOLVER) not in SOLVERS:
                raise CheckpointOptionError(f"unknown solver {self.solver!r}; known: {', '.join(SOLVERS)}")
            object.__setattr__(self, "knob", knob)
            object.__setattr__(self, "solver", self.solver or DEFAULT_SOLVER)

    @property
    def label(self) -> str:
        blocks = f"each {self.block}" if self.block else "each block"
        if self.kind == "block":
            return f"checkpoint {blocks}"
        if self.kind == "sac":
            return f"SAC {self.policy or DEFAULT_POLICY} over {blocks}"
        if self.kind == "compile":
            return f"compile knob {_knob_text(self.knob)} ({self.solver or DEFAULT_SOLVER})"
        return "no checkpointing"

    def __str__(self) -> str:
        if self.kind == "block":
            return f"block:{self.block}" if self.block else "block"
        if self.kind == "sac":
            text = f"sac:{self.policy or DEFAULT_POLICY}"
            return f"{text}@{self.block}" if self.block else text
        if self.kind == "compile":
            return f"compile:{_knob_text(self.knob)}:{self.solver or DEFAULT_SOLVER}"
        return "none"

    def to_json(self) -> dict:
        return {"kind": self.kind, "block": self.block, "policy": self.policy, "knob": self.knob,
                "solver": self.solver, "label": self.label, "text": str(self)}

    @classmethod
    def parse(cls, text: str) -> CheckpointOption:
        return parse_option(text)


def _knob_text(knob: float | None) -> str:
    return f"{DEFAULT_KNOB if knob is None else knob:g}"


def parse_option(text: str) -> CheckpointOption:
    """`none`, `block`, `block:CLASS`, `sac`, `sac:matmul`, `sac:module:function`
    (each sac form may end `@CLASS`), `compile:KNOB`, `compile:KNOB:SOLVER`."""
    kind, _, rest = text.strip().partition(":")
    if kind == "none" and not rest:
        return CheckpointOption("none")
    if kind == "block":
        if rest and not rest.isidentifier():
            raise CheckpointOptionError(f"checkpoint option {text!r}: block:CLASS names a class, "
                                        f"{rest!r} is not a class name")
        return CheckpointOption("block", block=rest or None)
    if kind == "sac":
        return _parse_sac(text, rest)
    if kind == "compile":
        return _parse_compile(text, rest)
    raise CheckpointOptionError(f"checkpoint option {text!r} is none of none, block[:CLASS], "
                                "sac[:matmul|:module:function][@CLASS], compile[:KNOB[:SOLVER]]")


def _parse_sac(text: str, rest: str) -> CheckpointOption:
    policy, at, block = rest.partition("@")
    if at and not block.isidentifier():
        raise CheckpointOptionError(f"checkpoint option {text!r}: @CLASS names a class, "
                                    f"{block!r} is not a class name")
    policy = policy or DEFAULT_POLICY
    if ":" not in policy and policy not in SAC_POLICIES:
        raise CheckpointOptionError(f"checkpoint option {text!r}: unknown SAC policy {policy!r}; "
                                    f"known: {', '.join(SAC_POLICIES)}, or module:function")
    if ":" in policy:
        module, _, function = policy.partition(":")
        if not module or not function.isidentifier():
            raise CheckpointOptionError(f"checkpoint option {text!r}: a policy function is "
                                        "module:function")
    return CheckpointOption("sac", block=block or None, policy=policy)


def _parse_compile(text: str, rest: str) -> CheckpointOption:
    knob_text, _, solver = rest.partition(":")
    knob = DEFAULT_KNOB
    if knob_text:
        try:
            knob = float(knob_text)
        except ValueError:
            knob = float("nan")
        if not 0.0 <= knob <= 1.0:
            raise CheckpointOptionError(f"checkpoint option {text!r}: the knob "
                                        "(activation_memory_budget) is a number from 0 to 1")
    solver = solver or DEFAULT_SOLVER
    if solver not in SOLVERS:
        raise CheckpointOptionError(f"checkpoint option {text!r}: unknown solver {solver!r}; "
                                    f"known: {', '.join(SOLVERS)}")
    return CheckpointOption("compile", knob=knob, solver=solver)


# --- the blocks -------------------------------------------------------------------

_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)


def _outermost(model: torch.nn.Module, cls_name: str) -> list[tuple[str, torch.nn.Module]]:
    """The modules of class `cls_name` not inside another one, by name."""
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        if module is model or type(module).__name__ != cls_name:
            continue
        if any(name.startswith(outer + ".") for outer, _ in found):
            continue
        found.append((name, module))
    return found


def find_block_class(model: torch.nn.Module) -> str:
    """The repeated submodule's class: two or more instances, submodules of its
    own, not a container; of those the class whose instances hold the most
    parameters (a transformer's layer rather than its attention)."""
    best, best_params = None, -1
    for cls_name in dict.fromkeys(type(m).__name__ for m in model.modules()):
        blocks = _outermost(model, cls_name)
        if len(blocks) < 2 or isinstance(blocks[0][1], _CONTAINERS):
            continue
        if not any(True for _ in blocks[0][1].children()):
            continue
        params = sum(p.numel() for _, b in blocks for p in b.parameters())
        if params > best_params:
            best, best_params = cls_name, params
    if best is None:
        raise CheckpointOptionError(f"{type(model).__name__} has no repeated block (a class "
                                    "with two or more instances and submodules): name one, "
                                    "block:CLASS")
    return best


def blocks_of(model: torch.nn.Module, cls_name: str | None) -> list[tuple[str, torch.nn.Module]]:
    """The blocks an option checkpoints: the named class's outermost instances."""
    cls_name = cls_name or find_block_class(model)
    blocks = _outermost(model, cls_name)
    if not blocks:
        classes = sorted({type(m).__name__ for m in model.modules() if m is not model
                          and not isinstance(m, _CONTAINERS) and any(True for _ in m.children())})
        raise CheckpointOptionError(f"{type(model).__name__} has no module of class {cls_name!r}; "
                                    f"its composite classes: {', '.join(classes) or 'none'}")
    return blocks


# --- SAC policies -----------------------------------------------------------------

def matmul_policy(ctx, op, *args, **kwargs):
    """Save matrix products and attention (`MATMUL_OPS`), recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy
    if op.overloadpacket.__name__ in MATMUL_OPS:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def resolve_policy(policy: str | None):
    """The policy function a SAC option names."""
    policy = policy or DEFAULT_POLICY
    if policy == "matmul":
        return matmul_policy
    module_name, _, attr = policy.partition(":")
    try:
        module = import_users_module(module_name)
    except Exception as exc:
        raise CheckpointOptionError(f"cannot import {module_name!r} for the SAC policy {policy}: "
                                    f"{type(exc).__name__}: {exc}") from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise CheckpointOptionError(f"SAC policy {policy}: module {module_name!r} has no callable "
                                    f"{attr!r}")
    return _as_policy(users_function(function), policy)


def _as_policy(function, name: str):
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx, op, *args, **kwargs):
        decision = function(ctx, op, *args, **kwargs)
        if isinstance(decision, CheckpointPolicy):
            return decision
        if isinstance(decision, bool):
            return CheckpointPolicy.MUST_SAVE if decision else CheckpointPolicy.PREFER_RECOMPUTE
        raise RecordError(f"SAC policy {name} returned {type(decision).__name__} for {op}: "
                          "return a CheckpointPolicy or a bool (true saves)")
    return policy


# --- applying an option -----------------------------------------------------------

@contextlib.contextmanager
def checkpointed(model: torch.nn.Module, option: CheckpointOption) -> Iterator[list[str]]:
    """Inside the block each block of `model` runs under `checkpoint` (kind
    `block`) or SAC (kind `sac`); yields the blocks' names. The model is as it
    was afterwards."""
    if option.kind not in ("block", "sac"):
        raise CheckpointOptionError(f"checkpointed() applies block and sac options, not {option}")
    blocks = blocks_of(model, option.block)
    context_fn = None
    if option.kind == "sac":
        from torch.utils.checkpoint import create_selective_checkpoint_contexts
        policy = resolve_policy(option.policy)

        def context_fn():
            return create_selective_checkpoint_contexts(policy)
    owns = [vars(block).get("forward") for _, block in blocks]
    for _, block in blocks:
        block.forward = _checkpointed_forward(block, context_fn)
    try:
        yield [name for name, _ in blocks]
    finally:
        for (_, block), own in zip(blocks, owns):
            if own is None:
                del block.forward
            else:
                block.forward = own


def _checkpointed_forward(block: torch.nn.Module, context_fn):
    from torch.utils.checkpoint import checkpoint, noop_context_fn
    forward = vars(block).get("forward") or type(block).forward.__get__(block)

    def run_block(*args, **kwargs):
        if torch._C._current_autograd_node() is None:     # the forward: called as a module
            return forward(*args, **kwargs)
        return _as_module_call(block, forward, args, kwargs)    # recomputed in backward

    def run(*args, **kwargs):
        return checkpoint(run_block, *args, use_reentrant=False,
                          context_fn=context_fn or noop_context_fn, **kwargs)
    return run


def _as_module_call(block: torch.nn.Module, forward, args: tuple, kwargs: dict):
    """`forward` recomputed with the global module hooks around it, as a module
    call has them (the recording's module names: `where.py`), so the block's own
    ops are in the block, in phase `recompute`."""
    from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks
    for hook in list(_global_forward_pre_hooks.values()):
        hook(block, args)
    result = None
    try:
        result = forward(*args, **kwargs)
    finally:
        for hook in list(_global_forward_hooks.values()):
            hook(block, args, result)
    return result


# --- recording --------------------------------------------------------------------

@dataclass(frozen=True)
class OptionRecording:
    """One option's step, recorded: its log and what the log says."""

    option: CheckpointOption
    path: Path
    where: Path | None
    peak_bytes: int        # the log's unconstrained peak (replayed with no budget)
    ops: int
    compute_total: int     # sum of the log's op costs
    compute_plain: int     # the same for the plain step (option none)
    recompute_ops: int     # ops the step runs again (phase recompute; compile: the
    #                        backward graph's nodes copied from the forward)
    loss: float | None
    cost: str
    blocks: tuple[str, ...] = ()          # the modules checkpointed (block, sac)
    notes: tuple[str, ...] = field(default=())   # what the recording says of itself
    floor: Floor | None = None            # the log's floor (`analyses/floor.py`)
    fake: bool = False
    # compile: the partitioner's plan by forward node name (`CompiledStep.decisions`)
    saved: tuple[str, ...] = ()
    recomputed: tuple[str, ...] = ()

    @property
    def overhead(self) -> float:
        return self.compute_total / self.compute_plain if self.compute_plain else float("nan")

    def to_json(self) -> dict:
        return {"option": self.option.to_json(), "path": str(self.path),
                "where": None if self.where is None else str(self.where),
                "peak_bytes": self.peak_bytes, "ops": self.ops, "compute_total": self.compute_total,
                "compute_plain": self.compute_plain, "overhead": self.overhead,
                "recompute_ops": self.recompute_ops, "loss": self.loss, "cost": self.cost,
                "blocks": list(self.blocks), "notes": list(self.notes), "fake": self.fake,
                "floor": None if self.floor is None else self.floor.to_json(),
                "saved": list(self.saved), "recomputed": list(self.recomputed)}


def build_model(spec: str, seed: int = 0, sets: dict | None = None, fake: bool = False):
    """`(model, batch, loss_fn)` as `dtrf torch record` builds it: seeded, then
    `spec.build` with the factory keywords `sets` (batch, seq, dtype, --set keys)."""
    from .spec import build
    torch.manual_seed(seed)
    return build(spec, fake=fake, **(sets or {}))


def record_option(spec: str, option: CheckpointOption | str, path: str | Path, *,
                  cost: str = "flops", seed: int = 0, sets: dict | None = None,
                  optimizer: str | None = None, autocast: str | None = None,
                  fake: bool = False, plain: OptionRecording | None = None) -> OptionRecording:
    """Record SPEC's training step under `option` as a DTR log at `path`.

    `plain`: a recording of the same spec with option none, whose compute is
    the overhead's denominator (recorded here, to a temporary file, when not
    given or when `option` is none itself). `fake`: the model built under a
    FakeTensorMode (block and sac; a compiled step needs real tensors). Raises
    `RecordError` (its subclass `CheckpointOptionError` for an option that does
    not apply)."""
    if isinstance(option, str):
        option = parse_option(option)
    if option.kind == "compile" and fake:
        raise CheckpointOptionError("a compiled step is recorded from real tensors: drop --fake")
    model, batch, loss_fn = build_model(spec, seed, sets, fake=fake)
    recorded = record_built(model, batch, loss_fn, option, path, cost=cost,
                            optimizer=optimizer, autocast=autocast)
    if option.kind == "none":
        return recorded
    if plain is None:
        with tempfile.TemporaryDirectory(prefix="dtrf-plain-") as folder:
            plain = record_option(spec, CheckpointOption("none"), Path(folder) / "plain.log",
                                  cost=cost, seed=seed, sets=sets, optimizer=optimizer,
                                  autocast=autocast, fake=fake)
    return _with_plain(recorded, plain.compute_total)


def _with_plain(recorded: OptionRecording, compute_plain: int) -> OptionRecording:
    return replace(recorded, compute_plain=compute_plain)


def record_built(model, batch, loss_fn, option: CheckpointOption, path: str | Path, *,
                 cost: str = "flops", optimizer: str | None = None,
                 autocast: str | None = None) -> OptionRecording:
    """`record_option` for a model already built (compute_plain: this log's own
    compute when the option is none, else 0 until `record_option` fills it).
    The recording's option names the block class it found (`block:CLASS`)."""
    from .step import record
    blocks: list[str] = []
    notes: tuple[str, ...] = ()
    plan: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    if option.kind == "none":
        summary = record(model, batch, loss_fn, path, cost=cost, optimizer=optimizer,
                         autocast=autocast)
    elif option.kind in ("block", "sac"):
        option = replace(option, block=option.block or find_block_class(model))
        with checkpointed(model, option) as blocks:
            summary = record(model, batch, loss_fn, path, cost=cost, optimizer=optimizer,
                             autocast=autocast)
    else:
        from .compiled_step import record_compiled
        summary, plan, notes = record_compiled(
            model, batch, loss_fn, path, knob=option.knob, solver=option.solver, cost=cost,
            optimizer=optimizer, autocast=autocast)
    total, recomputed = _log_compute(summary.path)
    if option.kind == "compile":
        recomputed = len(plan[1])
    return OptionRecording(option=option, path=summary.path, where=summary.where,
                           peak_bytes=summary.peak, ops=summary.ops, compute_total=total,
                           compute_plain=total if option.kind == "none" else 0,
                           recompute_ops=recomputed, loss=summary.loss, cost=summary.cost,
                           blocks=tuple(blocks), notes=notes, floor=summary.floor,
                           fake=summary.fake, saved=plan[0], recomputed=plan[1])


def _log_compute(path: Path) -> tuple[int, int]:
    """The log's total op cost and its ops under phase `recompute`."""
    from ..trace.cache import load_program
    program = load_program(path, cache=False)
    recomputed = 0
    if program.where is not None:
        recomputed = sum(1 for phase in program.where.column("phase") if phase == "recompute")
    return int(program.op_cost.sum()), recomputed
