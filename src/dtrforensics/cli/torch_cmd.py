"""`dtrf torch record SPEC -o OUT.log`: record a PyTorch training step as a DTR log.

PyTorch is imported only when the command runs, so other commands stay fast
and work without the `torch` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..render.units import fmt_bytes
from .common import log_files, print_json, reporting_replaced
from .errors import CommandError
from .options import check_seed, check_size, factory_settings, output_file

torch_app = typer.Typer(help="Record DTR logs from your own PyTorch models.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(torch_app, name="torch")


@torch_app.command("record")
def record_cmd(
    spec: Annotated[str, typer.Argument(help="zoo:NAME (gpt, gpt-1b, resnet, lstm, unet, mlp, encoder, moe), "
                                             "hf:ARCH (e.g. hf:llama), timm:NAME, torchvision:NAME, or "
                                             "package.module:factory returning (model, batch, loss_fn).",
                                        show_default=False)],
    output: Annotated[Path, typer.Option("--output", "-o", "--out", callback=output_file, help="Log file to write (atomically).",
                                         show_default=False)],
    cost: Annotated[str, typer.Option(help="Cost model: flops (deterministic) or measured (wall time).")] = "flops",
    fake: Annotated[bool, typer.Option("--fake", help="Fake tensors: exact sizes, no memory, flops costs.")] = False,
    batch: Annotated[Optional[int], typer.Option(callback=check_size, help="Batch size (passed to the factory as batch=).")] = None,
    seq: Annotated[Optional[int], typer.Option(callback=check_size, help="Sequence length (passed as seq=).")] = None,
    image_size: Annotated[Optional[int], typer.Option("--image-size", callback=check_size, help="Image side in pixels (passed as image_size=).")] = None,
    dtype: Annotated[Optional[str], typer.Option(help="float32, float64, float16 or bfloat16 (passed as dtype=).")] = None,
    sizes: Annotated[Optional[list[str]], typer.Option("--set", help="Another factory keyword or hf: config key, KEY=VALUE (e.g. layers=4); repeatable.")] = None,
    optimizer: Annotated[Optional[str], typer.Option(help="Add optimizer.step() in its steady state: sgd, adam or adamw.")] = None,
    autocast: Annotated[Optional[str], typer.Option(help="Mixed precision for forward and loss: bf16 or fp16.")] = None,
    seed: Annotated[int, typer.Option(callback=check_seed, help="torch.manual_seed before building the model.")] = 0,
    checkpoint: Annotated[Optional[str], typer.Option(help="Record PyTorch's own checkpointing of the step: none, block[:CLASS] (torch.utils.checkpoint per block), sac[:matmul|:module:function][@CLASS] (selective), compile[:KNOB[:SOLVER]] (torch.compile's partition at activation_memory_budget KNOB, solver dp, greedy or ilp).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Record one training step (forward, loss, backward) of SPEC as a DTR log."""
    if checkpoint is not None:
        _record_checkpointed(spec, checkpoint, output, cost=cost, fake=fake, seed=seed, dtype=dtype,
                             options={"batch": batch, "seq": seq, "image_size": image_size,
                                      **factory_settings(sizes or [], {"batch": batch, "seq": seq,
                                                                       "image_size": image_size,
                                                                       "dtype": dtype})},
                             optimizer=optimizer, autocast=autocast, as_json=as_json)
        return
    given = {"batch": batch, "seq": seq, "image_size": image_size, "dtype": dtype}
    options = {"batch": batch, "seq": seq, "image_size": image_size, **factory_settings(sizes or [], given)}
    try:
        import torch

        from ..torch import RecordError, record
        from ..torch.spec import build, parse_dtype
    except ImportError as exc:
        raise CommandError(f"dtrf torch needs PyTorch ({exc}): pip install 'dtrforensics[torch]'") from None
    try:
        if dtype is not None:
            options["dtype"] = parse_dtype(dtype)
        torch.manual_seed(seed)
        model, data, loss_fn = build(spec, fake=fake, **options)
        with reporting_replaced(*log_files(output)):
            summary = record(model, data, loss_fn, output, cost=cost, fake=fake,
                             optimizer=optimizer, autocast=autocast)
    except RecordError as exc:
        raise CommandError(f"{spec}: {exc}") from None
    except SystemExit as exc:
        raise CommandError(f"{spec}: the model's code called sys.exit({exc.code!r}) while it was "
                           f"being built or recorded: nothing was written to {output}") from None
    from ..render.floor import floor_lines
    bounds = summary.floor.to_json()
    if as_json:
        print_json({"path": str(summary.path), "peak_bytes": summary.peak, "ops": summary.ops,
                          "cost": summary.cost, "fake": summary.fake, "loss": summary.loss,
                          "floor": bounds})
        return
    from ..render.lines import say
    say(f"peak memory {fmt_bytes(summary.peak)} ({summary.peak:,} bytes), {summary.ops:,} ops "
        f"({summary.cost} costs{', fake tensors' if summary.fake else ''})")
    for line in floor_lines(bounds):
        say(line)
    say(f"wrote {summary.path}")


def _record_checkpointed(spec: str, text: str, output: Path, *, cost: str, fake: bool, seed: int,
                         dtype: str | None, options: dict, optimizer: str | None,
                         autocast: str | None, as_json: bool) -> None:
    """`torch record --checkpoint OPTION`: the step under PyTorch's checkpointing
    (`torch/checkpointing.py`), and its plain step for the overhead."""
    try:
        from ..torch import RecordError
        from ..torch.checkpointing import parse_option, record_option
        from ..torch.spec import parse_dtype
    except ImportError as exc:
        raise CommandError(f"dtrf torch needs PyTorch ({exc}): pip install 'dtrforensics[torch]'") from None
    try:
        option = parse_option(text)
        if dtype is not None:
            options["dtype"] = parse_dtype(dtype)
        with reporting_replaced(*log_files(output)):
            recording = record_option(spec, option, output, cost=cost, seed=seed, sets=options,
                                      optimizer=optimizer, autocast=autocast, fake=fake)
    except RecordError as exc:
        raise CommandError(f"{spec}: {exc}") from None
    except SystemExit as exc:
        raise CommandError(f"{spec}: the model's code called sys.exit({exc.code!r}) while it was "
                           f"being built or recorded: nothing was written to {output}") from None
    from ..render.floor import floor_lines
    from ..render.lines import say
    bounds = recording.floor.to_json()
    if as_json:
        print_json({"path": str(recording.path), "peak_bytes": recording.peak_bytes,
                    "ops": recording.ops, "cost": recording.cost, "fake": recording.fake,
                    "loss": recording.loss, "floor": bounds, "checkpoint": recording.to_json()})
        return
    say(f"peak memory {fmt_bytes(recording.peak_bytes)} ({recording.peak_bytes:,} bytes), "
        f"{recording.ops:,} ops ({recording.cost} costs{', fake tensors' if recording.fake else ''})")
    say(f"{recording.option.label}: {recording.recompute_ops:,} ops recomputed, compute "
        f"{recording.overhead:.3f}x the plain step's")
    for note in recording.notes:
        say(note)
    for line in floor_lines(bounds):
        say(line)
    say(f"wrote {recording.path}")
