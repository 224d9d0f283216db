"""`dtrf torch run SPEC`: one real training step of SPEC under DTR, beside its simulation.

Registered into the `dtrf torch` group; PyTorch is imported only when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import validate
from .common import log_files, print_json, reporting_replaced
from .errors import CommandError
from .options import (
    POLICY_HELP,
    check_budget,
    check_policy,
    check_ratio,
    check_seed,
    check_size,
    factory_settings,
    new_recording_folder,
    output_file,
)


def register(app: typer.Typer) -> None:
    group = next((g.typer_instance for g in app.registered_groups if g.name == "torch"), None)
    if group is None:
        group = typer.Typer(help="Record DTR logs from your own PyTorch models.", no_args_is_help=True)
        app.add_typer(group, name="torch")
    group.command("run")(run_cmd)


def check_steps(param: typer.CallbackParam, value: int) -> int:
    """Callback of --steps: 1 to `execute.MAX_STEPS` (10,000)."""
    from .. import validate
    return validate.at_least(value, 1, param.opts[0], maximum=10_000)


def check_cost(param: typer.CallbackParam, value: str) -> str:
    """Callback of --cost: a cost model's name (`validate.COST_MODELS`)."""
    from .. import validate
    return validate.choice(value, validate.COST_MODELS, param.opts[0])


def check_inner(param: typer.CallbackParam, value: str) -> str:
    """Callback of --inner: an inner compiler's name (`validate.INNER_COMPILERS`)."""
    from .. import validate
    return validate.choice(value, validate.INNER_COMPILERS, param.opts[0])


def check_reserve(param: typer.CallbackParam, value: str | None) -> str | int | None:
    """Callback of --reserve-workspace: auto, or bytes (0 or more)."""
    if value is None or value == "auto":
        return value
    from .. import validate
    try:
        number = int(value.replace(",", "").replace("_", ""))
    except ValueError:
        raise typer.BadParameter(f"a number of bytes or auto, got {value!r}") from None
    return validate.at_least(number, 0, param.opts[0])


def run_cmd(
    spec: Annotated[str, typer.Argument(help="zoo:NAME, hf:ARCH, timm:NAME, torchvision:NAME, or package.module:factory returning (model, batch, loss_fn).",
                                        show_default=False)],
    budget: Annotated[int | None, typer.Option(callback=check_budget, help="Budget in bytes.")] = None,
    ratio: Annotated[float | None, typer.Option(callback=check_ratio, help="Budget as a fraction of the step's peak: floor(ratio x peak) bytes.")] = None,
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
    cost: Annotated[str, typer.Option(callback=check_cost, help="Cost model of the recorded log: flops (deterministic) or measured.")] = "flops",
    record: Annotated[Path | None, typer.Option(callback=new_recording_folder, help="Write the real run as a recording (Parquet tables) in this folder, which must not exist yet.", show_default=False)] = None,
    log: Annotated[Path | None, typer.Option(callback=output_file, help="Also keep the step's DTR log at this path.", show_default=False)] = None,
    batch: Annotated[int | None, typer.Option(callback=check_size, help="Batch size (passed to the factory as batch=).")] = None,
    seq: Annotated[int | None, typer.Option(callback=check_size, help="Sequence length (passed as seq=).")] = None,
    image_size: Annotated[int | None, typer.Option("--image-size", callback=check_size, help="Image side in pixels (passed as image_size=).")] = None,
    optimizer: Annotated[str | None, typer.Option(help="Add optimizer.step() in its steady state, as `torch record` has it: sgd, adam or adamw.", show_default=False)] = None,
    steps: Annotated[int, typer.Option(callback=check_steps, help="Run this many training steps (above 1: needs --optimizer), each under the recorded step's schedule, each checked against the plain step of the same number: every loss, memory at every check, the final parameters and optimizer states.")] = 1,
    sizes: Annotated[list[str] | None, typer.Option("--set", help="Another factory keyword or hf: config key, KEY=VALUE (e.g. layers=4); repeatable.")] = None,
    seed: Annotated[int, typer.Option(callback=check_seed, help="torch.manual_seed before building the model.")] = 0,
    workspaces: Annotated[bool, typer.Option("--workspaces", help="Measure kernel workspaces (scratch memory an op allocates and frees inside itself, beyond its outputs) around each op of the real step and report them apart from the live bytes; its timings then include the measuring.")] = False,
    reserve_workspace: Annotated[str | None, typer.Option("--reserve-workspace", callback=check_reserve, metavar="BYTES|auto", help="Run the engine at the budget less this reserve for workspaces (auto: the largest workspace of a measuring run at the unconstrained budget), so the allocator's total stays within the budget; implies --workspaces. With --compiled: each graph is planned at the budget less the reserve (auto: the largest workspace of the joint graph run once when compiling).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: the fields of `dtrf run --json` measured on the real step, the real measures and the simulation.")] = False,
    inner: Annotated[str, typer.Option("--inner", callback=check_inner, help="With --compiled: the compiler of the lowered graphs, aot_eager (checked against the engine) or inductor (needs a C++ compiler; its fusions change what is allocated, so nothing is checked and values are compared within a tolerance).")] = "aot_eager",
    compiled: Annotated[bool, typer.Option("--compiled", help="Run the step compiled with torch.compile and dtr_backend (the engine's schedule of AOTAutograd's joint graph lowered into its forward and backward graphs, aot_eager) beside the plain aot_eager step, then one more step measured: the allocator's peak against the budget plus the ops' workspaces; --log keeps the joint graph's log, --cost measured plans with each op's wall time, the joint graph run once when compiling (docs/runtime.md).")] = False,
) -> None:
    """Run one training step of SPEC for real under DTR (evicting and recomputing real tensors) and compare it with the simulation; exit 3 when the real step differs from it (decisions, live bytes at an allocation check, or values). With --steps N, N steps under the same schedule; exit 3 names the first step that differs."""
    validate.budget_or_ratio(budget, ratio)
    if inner != "aot_eager" and not compiled:
        raise CommandError("--inner needs --compiled")
    if compiled:
        return _run_compiled(spec, budget, ratio, policy, log, optimizer, steps, seed, as_json, {"batch": batch, "seq": seq, "image_size": image_size}, sizes,
                             {"--record": record is not None, "--workspaces": workspaces},
                             cost=cost, inner=inner, reserve=reserve_workspace)
    try:
        import torch

        from ..torch import RecordError
        from ..torch.execute import BudgetError, NotFaithfulError, execute
        from ..torch.spec import build
    except ImportError as exc:
        raise CommandError(f"dtrf torch needs PyTorch ({exc}): pip install 'dtrforensics[torch]'") from None
    from ..errors import OptionError
    from ..render.torch_run import run_lines
    given = {"batch": batch, "seq": seq, "image_size": image_size}
    options = {**given, **factory_settings(sizes or [], given)}
    try:
        torch.manual_seed(seed)
        model, data, loss_fn = build(spec, **options)
        with reporting_replaced(*log_files(log)):
            result = execute(model, data, loss_fn, budget=budget, ratio=ratio, policy=policy,
                             cost=cost, optimizer=optimizer, log_path=log, record_dir=record,
                             steps=steps, workspaces=workspaces,
                             reserve_workspace=reserve_workspace)
    except BudgetError as exc:
        from ..render.floor import budget_refusal
        raise CommandError(f"{spec}: {budget_refusal(exc.budget, exc.floor.to_json())}") from None
    except (RecordError, OptionError, ValueError) as exc:
        raise CommandError(f"{spec}: {exc}") from None
    except NotFaithfulError as exc:   # a step not the same each time it runs: exit 3
        raise NotFaithfulError(exc.reason, spec) from None
    except SystemExit as exc:       # the user's model code, not a verdict: exit 2
        raise CommandError(f"{spec}: the model's code called sys.exit({exc.code!r}) while the "
                           "step was built, recorded or run") from None
    doc = result.to_json()
    _show(doc, as_json, run_lines)
    if doc["mismatch"] is not None:     # shown first, then one line and exit 3
        raise NotFaithfulError(doc["mismatch"], spec)


def _show(doc: dict, as_json: bool, lines_of) -> None:
    """A run's result as strict JSON, or as the lines `lines_of` draws of it."""
    if as_json:
        print_json(doc)
        return
    from ..render.lines import say
    for line in lines_of(doc):
        say(line)


def _run_compiled(spec: str, budget, ratio, policy, log, optimizer, steps: int, seed: int,
                  as_json: bool, given: dict, sizes, refused: dict, *, cost: str, inner: str,
                  reserve: str | int | None) -> None:
    """`--compiled`: the step compiled with `dtr_backend` beside the plain `aot_eager`
    step (`torch/compiled_run.py`); exit 3 where it differs from the engine."""
    given_refused = [name for name, on in refused.items() if on]
    if given_refused:
        raise CommandError(f"{', '.join(given_refused)} cannot be used with --compiled")
    try:
        import torch

        from ..torch import RecordError
        from ..torch.compiled_run import run_compiled
        from ..torch.spec import build
    except ImportError as exc:
        raise CommandError(f"dtrf torch needs PyTorch ({exc}): pip install 'dtrforensics[torch]'") from None
    from ..errors import NotDeterministicError, OptionError
    from ..render.compiled_run import compiled_lines
    options = {**given, **factory_settings(sizes or [], given)}
    try:
        torch.manual_seed(seed)
        model, data, loss_fn = build(spec, **options)
        with reporting_replaced(*log_files(log)):
            result = run_compiled(model, data, loss_fn, budget=budget, ratio=ratio, policy=policy,
                                  cost=cost, steps=steps, optimizer=optimizer, log_path=log,
                                  inner=inner, reserve_workspace=True if reserve == "auto" else reserve or False)
    except (RecordError, OptionError, ValueError) as exc:
        raise CommandError(f"{spec}: {exc}") from None
    doc = result.to_json()
    _show(doc, as_json, compiled_lines)
    if doc["mismatch"] is not None:
        raise NotDeterministicError(f"{spec}: the compiled step is not faithful to the simulation: "
                                    f"{doc['mismatch']}")
