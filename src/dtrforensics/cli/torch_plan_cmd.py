"""`dtrf torch plan SPEC [--target BYTES | --ratio R]`: DTR against PyTorch's own
checkpointing at the same bytes (`torch/plan.py`), the answer first.

Registered into the `dtrf torch` group; PyTorch is imported only when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import BriefOption, JsonOption, print_json, reporting_replaced, require_figures
from .errors import CommandError
from .options import (
    POLICY_HELP,
    at_least,
    check_budget,
    check_jobs,
    check_policy,
    check_ratio,
    check_seed,
    check_size,
    factory_settings,
    number,
    output_file,
    output_folder,
    seconds,
)


def register(app: typer.Typer) -> None:
    group = next((g.typer_instance for g in app.registered_groups if g.name == "torch"), None)
    if group is None:
        group = typer.Typer(help="Record DTR logs from your own PyTorch models.", no_args_is_help=True)
        app.add_typer(group, name="torch")
    group.command("plan")(plan_cmd)


def plan_cmd(
    spec: Annotated[str, typer.Argument(help="zoo:NAME, hf:ARCH, timm:NAME, torchvision:NAME, or package.module:factory returning (model, batch, loss_fn).", show_default=False)],
    target: Annotated[int | None, typer.Option(callback=check_budget, help="Memory target in bytes: the cheapest option that fits it, DTR there, the knob that meets it.", show_default=False)] = None,
    ratio: Annotated[float | None, typer.Option(callback=check_ratio, help="The target as a fraction of the plain step's peak: floor(ratio x peak) bytes.", show_default=False)] = None,
    option: Annotated[list[str] | None, typer.Option("--option", help="A checkpointing option to record: block[:CLASS], sac[:matmul|:module:function][@CLASS], compile[:KNOB[:SOLVER]]; repeatable (default: block and sac:matmul).", show_default=False)] = None,
    knob: Annotated[bool, typer.Option("--knob/--no-knob", help="Map torch.compile's activation_memory_budget knob to real peak.")] = True,
    knob_step: Annotated[float, typer.Option(callback=number(0.0, 1.0, above=True), help="The knob's grid step.")] = 0.1,
    knob_tolerance: Annotated[float, typer.Option(callback=number(0.0, 1.0, above=True), help="Refine between adjacent knobs whose plans differ until they are this close.")] = 0.01,
    knob_from: Annotated[float, typer.Option(callback=number(0.0, 1.0), help="The knob's grid starts here.")] = 0.0,
    knob_to: Annotated[float, typer.Option(callback=number(0.0, 1.0), help="The knob's grid ends here.")] = 1.0,
    solver: Annotated[str, typer.Option(help="The knob's solver: dp, greedy or ilp.")] = "dp",
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
    max_runs: Annotated[int, typer.Option(callback=at_least(1), help="DTR's exact walk: at most this many runs (the same command resumes it).")] = 2000,
    max_seconds: Annotated[float | None, typer.Option(callback=seconds, help="DTR's exact walk: stop after this many seconds (the same command resumes it).", show_default=False)] = None,
    jobs: Annotated[int | None, typer.Option(callback=check_jobs, help="Worker processes of DTR's walk (default 1: in this process).", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", callback=output_folder, help="The plan's folder: the logs recorded and DTR's sweep; resumed when it holds the same step (default recordings/plans/<spec>-<key>/).", show_default=False)] = None,
    figure: Annotated[Path | None, typer.Option(callback=output_file, help="Draw the figure here (.png or .svg): bytes against overhead.", show_default=False)] = None,
    cost: Annotated[str, typer.Option(help="Cost model: flops (deterministic) or measured (wall time).")] = "flops",
    batch: Annotated[int | None, typer.Option(callback=check_size, help="Batch size (passed to the factory as batch=).")] = None,
    seq: Annotated[int | None, typer.Option(callback=check_size, help="Sequence length (passed as seq=).")] = None,
    image_size: Annotated[int | None, typer.Option("--image-size", callback=check_size, help="Image side in pixels (passed as image_size=).")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32, float64, float16 or bfloat16 (passed as dtype=).")] = None,
    sizes: Annotated[list[str] | None, typer.Option("--set", help="Another factory keyword or hf: config key, KEY=VALUE; repeatable.")] = None,
    optimizer: Annotated[str | None, typer.Option(help="Add optimizer.step() in its steady state: sgd, adam or adamw.", show_default=False)] = None,
    seed: Annotated[int, typer.Option(callback=check_seed, help="torch.manual_seed before building the model.")] = 0,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """DTR against PyTorch's own activation checkpointing at the same bytes: the step's peak and floor, DTR's exact map of the budget axis, each checkpointing option's real peak and overhead, the torch.compile knob mapped to real peak (every change of plan; a lower knob peaking higher diffed), and for a target the cheapest option that fits."""
    if target is not None and ratio is not None:
        raise CommandError("give at most one of --target or --ratio")
    if figure is not None:
        require_figures("dtrf torch plan --figure")
    given = {"batch": batch, "seq": seq, "image_size": image_size, "dtype": dtype}
    sets = {k: v for k, v in {"batch": batch, "seq": seq, "image_size": image_size,
                              **factory_settings(sizes or [], given)}.items() if v is not None}
    try:
        from ..torch import RecordError
        from ..torch.plan import PlanSettings, default_folder, plan
        from ..torch.spec import parse_dtype
    except ImportError as exc:
        raise CommandError(f"dtrf torch needs PyTorch ({exc}): pip install 'dtrforensics[torch]'") from None
    from ..errors import OptionError
    settings = PlanSettings(options=tuple(option) if option is not None else PlanSettings.options,
                            knob=knob, knob_step=knob_step, knob_tolerance=knob_tolerance,
                            knob_range=(knob_from, knob_to),
                            solver=solver, policy=policy, max_runs=max_runs,
                            max_seconds=max_seconds, jobs=jobs or 1, cost=cost)
    try:
        if dtype is not None:
            sets["dtype"] = parse_dtype(dtype)
        folder = out if out is not None else default_folder(spec, sets, optimizer, seed)
        result = plan(spec, folder, target=target, ratio=ratio, settings=settings, seed=seed,
                      optimizer=optimizer, **sets)
    except (RecordError, OptionError, ValueError) as exc:
        raise CommandError(f"{spec}: {exc}") from None
    except SystemExit as exc:
        raise CommandError(f"{spec}: the model's code called sys.exit({exc.code!r}) while the "
                           "step was built or recorded") from None
    _show(result, figure, as_json, brief)


def _show(result, figure: Path | None, as_json: bool, brief: bool) -> None:
    from ..render.plan import plan_json, plan_lines, plan_verdict
    from ..render.verdict import with_verdict
    if figure is not None:
        from ..render.plan import figure as draw
        from ..render.plan import save_figure
        with reporting_replaced(figure):
            save_figure(draw(result), figure)
    verdict = plan_verdict(result)
    if as_json:
        doc = {**plan_json(result), "figure": None if figure is None else str(figure)}
        print_json(with_verdict(doc, verdict, brief=brief))
        return
    from ..render.console import wide_console
    from ..render.lines import say
    from .common import verdict_first
    if verdict_first(wide_console(), verdict, brief=brief):
        return
    for line in plan_lines(result):
        say(line)
    if figure is not None:
        say(f"figure: {figure}")
