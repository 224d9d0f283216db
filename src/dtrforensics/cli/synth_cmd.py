"""`dtrf synth KIND ... -o FILE`: write a seeded synthetic DTR log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..synth.generator import KINDS, SynthSpec, generate, random_small_log
from .common import print_json, reporting_replaced
from .errors import CommandError
from .options import between, check_seed, number, output_file

SMALL_KIND = "small"
# Bounds on the generator's options: far above any useful trace, below what would
# exhaust memory or overflow the 64-bit sizes and costs of a log.
MAX_DEPTH = 100_000
MAX_WIDTH = 1_000
MAX_SIZE_LEVELS = 1_000
MAX_OPS = 1_000_000
MAX_AMOUNT = 1 << 48
_DEFAULT = SynthSpec()


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)


def synth(
    kind: Annotated[str, typer.Argument(
        help="Model to generate: chain (a sequence of layers), resnet (residual blocks in "
             "3 stages), rnn (an unrolled recurrent net whose weights are shared by every "
             "step), mixed (random segments of the three), or small (an unstructured "
             "random log mixing every instruction kind, as used by the property tests).",
        show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", "--out", callback=output_file, help="File to write the log to (atomically; its folder must exist).",
        show_default=False)],
    seed: Annotated[int, typer.Option(
        "--seed", "-s", callback=check_seed, help="Random seed: the same seed and options give a byte-identical log.")] = 0,
    depth: Annotated[int, typer.Option(
        "--depth", "--steps", "-d",
        callback=between(1, MAX_DEPTH),
        help="Layers (chain), residual blocks (resnet), unrolled time steps (rnn) or "
             "segments (mixed).")] = _DEFAULT.depth,
    width: Annotated[int, typer.Option(
        "--width", "-w",
        callback=between(1, MAX_WIDTH),
        help="Parallel branches per layer or block, joined by a `cat` op (rnn: gate "
             "matmuls per step). 1 gives a plain sequence.")] = _DEFAULT.width,
    size_min: Annotated[int, typer.Option(
        "--size-min", callback=between(1, MAX_AMOUNT), help="Smallest activation size in bytes (sizes are drawn "
                           "log-uniformly between --size-min and --size-max).")] = _DEFAULT.size_range[0],
    size_max: Annotated[int, typer.Option(
        "--size-max", callback=between(1, MAX_AMOUNT), help="Largest activation size in bytes.")] = _DEFAULT.size_range[1],
    param_min: Annotated[int, typer.Option(
        "--param-min", callback=between(1, MAX_AMOUNT), help="Smallest parameter (weight) size in bytes.")] = _DEFAULT.param_size_range[0],
    param_max: Annotated[int, typer.Option(
        "--param-max", callback=between(1, MAX_AMOUNT), help="Largest parameter (weight) size in bytes.")] = _DEFAULT.param_size_range[1],
    cost_min: Annotated[int, typer.Option(
        "--cost-min", callback=between(1, MAX_AMOUNT), help="Smallest base op cost (TIME, ns) of a conv/matmul; cheaper ops "
                           "(relu, add, views) scale it down, backward ops double it.")] = _DEFAULT.cost_range[0],
    cost_max: Annotated[int, typer.Option(
        "--cost-max", callback=between(1, MAX_AMOUNT), help="Largest base op cost (TIME, ns).")] = _DEFAULT.cost_range[1],
    view_prob: Annotated[float, typer.Option(
        "--view-prob", callback=number(0.0, 1.0), help="Chance (0..1) that a layer output goes through a view "
                            "(ALIAS >= 0), and again through a view of that view.")] = _DEFAULT.view_prob,
    tuple_prob: Annotated[float, typer.Option(
        "--tuple-prob", callback=number(0.0, 1.0), help="Chance (0..1) that a layer has a multi-output batch-norm style "
                             "op (output, two saved statistics, a 0-byte reserve).")] = _DEFAULT.tuple_prob,
    mutate_prob: Annotated[float, typer.Option(
        "--mutate-prob", callback=number(0.0, 1.0), help="Chance (0..1) of an in-place op (MUTATE: relu_, residual add_, "
                              "gradient accumulation add_) instead of its out-of-place form.")] = _DEFAULT.mutate_prob,
    size_levels: Annotated[int, typer.Option(
        "--size-levels", callback=between(0, MAX_SIZE_LEVELS), help="If > 0, activation sizes come from this many fixed levels "
                              "(more equal sizes, hence more score ties).")] = _DEFAULT.size_levels,
    backward: Annotated[bool, typer.Option(
        "--backward/--no-backward",
        help="Emit a training backward pass (saved activations consumed in reverse and "
             "released, gradients accumulated) after the forward pass.")] = _DEFAULT.backward,
    ops: Annotated[int, typer.Option(
        "--ops", callback=between(1, MAX_OPS), help="Kind `small` only: number of operators to aim for (the planted "
                      "corner cases may add a few).")] = 40,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the summary (and the spec) as JSON instead of one line.")] = False,
) -> None:
    """Write a seeded synthetic DTR log (the public logs' exact format) and print a
    one-line summary: ops, tensors, unconstrained peak and model compute."""
    if kind == SMALL_KIND:
        text, spec_json = random_small_log(seed, ops), {"kind": SMALL_KIND, "seed": seed,
                                                         "n_ops": ops}
    else:
        spec = _checked(SynthSpec(
            kind=kind, depth=depth, width=width, size_range=(size_min, size_max),
            param_size_range=(param_min, param_max), cost_range=(cost_min, cost_max),
            view_prob=view_prob, tuple_prob=tuple_prob, mutate_prob=mutate_prob,
            size_levels=size_levels, seed=seed, backward=backward))
        text, spec_json = generate(spec), spec.to_json()
    data = _write_log(output, text, spec_json)
    if as_json:
        print_json(data)
    else:
        from ..render.lines import say
        say(_summary_line(data, kind, seed))


def _checked(spec: SynthSpec) -> SynthSpec:
    if spec.kind not in KINDS:
        raise CommandError(f"unknown kind {spec.kind!r}: choose one of "
                           f"{', '.join(KINDS + (SMALL_KIND,))}")
    try:
        return spec.validate()
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _write_log(output: Path, text: str, spec_json: dict) -> dict:
    """Write the log, parse it back and measure it: the summary `--json` prints."""
    from ..engine.baseline import baseline
    from ..fsutil import atomic_path
    from ..trace.parser import parse_lines
    try:
        with reporting_replaced(output), atomic_path(output) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror}") from None
    program = parse_lines(text.splitlines(keepends=True), str(output))
    base = baseline(program)
    return {"path": str(output), "bytes": len(text.encode("utf-8")), "ops": program.n_ops,
            "tensors": program.n_tensors, "peak_bytes": base.peak,
            "model_compute_ns": base.model_compute, "spec": spec_json}


def _summary_line(data: dict, kind: str, seed: int) -> str:
    from ..render.units import fmt_bytes, fmt_ns
    peak, compute = data["peak_bytes"], data["model_compute_ns"]
    return (f"wrote {data['path']}: {kind} seed {seed}, {data['ops']:,} ops, "
            f"{data['tensors']:,} tensors, peak {peak:,} B ({fmt_bytes(peak)}), "
            f"model compute {compute:,} ns ({fmt_ns(compute)})")
