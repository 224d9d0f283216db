"""PyTorch's own checkpointing recorded (`torch/checkpointing.py`): per block,
SAC and the compiled step at a knob.

Memory truth: the log's peak equals an independent live-storage count
(`live_count.LiveBytesTracker`) of the same step run plainly, with no recorder.
Values: checkpointing changes no value (loss and gradients bitwise equal to
the plain step's); the compiled step's decompositions reassociate sums, so
its values are close, not equal.
"""

from __future__ import annotations

import gc
import json

import pytest

torch = pytest.importorskip("torch")

from live_count import LiveBytesTracker  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from dtrforensics.cli.main import app  # noqa: E402
from dtrforensics.torch.checkpointing import (  # noqa: E402
    CheckpointOption,
    CheckpointOptionError,
    blocks_of,
    build_model,
    checkpointed,
    find_block_class,
    parse_option,
    record_built,
    record_option,
)
from dtrforensics.torch.compiled_step import compiled, warm_up  # noqa: E402
from dtrforensics.torch.recorder import RecordError, constants_of  # noqa: E402
from dtrforensics.torch.step import _forward  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


class CompiledTracker(LiveBytesTracker):
    """The live count, seeing a compiled step's graphs' ops (as the recorder does)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


def _plain_run(model, batch, loss_fn, tracker_type=LiveBytesTracker):
    """The step run with no recorder, under the live count: its peak, loss, gradients."""
    inputs, targets = batch
    gc.disable()
    try:
        with tracker_type(constants_of(model, batch)) as tracker:
            loss = loss_fn(_forward(model, inputs, None), targets)
            loss.backward()
            value = float(loss.detach())
            del loss
            gc.collect()
    finally:
        gc.enable()
    return tracker.peak, value, _grads(model)


def _grads(model):
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _live_peak_of_option(spec, option, sets):
    """The option's step run plainly (a model of its own), under the live count."""
    model, batch, loss_fn = build_model(spec, 0, sets)
    if option.kind == "none":
        return _plain_run(model, batch, loss_fn)
    if option.kind in ("block", "sac"):
        with checkpointed(model, option):
            return _plain_run(model, batch, loss_fn)
    with compiled(model, option.knob, option.solver):
        warm_up(model, batch, loss_fn)
        return _plain_run(model, batch, loss_fn, CompiledTracker)


def _check_option(spec, text, sets, tmp_path, tolerance=0.0):
    """Recorded peak = live count of the plain run of the option; loss and
    gradients = the plain step's (within `tolerance`, relative to the largest
    gradient; bitwise when 0)."""
    option = parse_option(text)
    live_peak, _, _ = _live_peak_of_option(spec, option, sets)
    model, batch, loss_fn = build_model(spec, 0, sets)
    recording = record_built(model, batch, loss_fn, option, tmp_path / "o.log")
    plain_model, plain_batch, plain_loss_fn = build_model(spec, 0, sets)
    _, plain_loss, plain_grads = _plain_run(plain_model, plain_batch, plain_loss_fn)
    assert recording.peak_bytes == live_peak
    grads = _grads(model)
    assert grads.keys() == plain_grads.keys()
    if tolerance == 0.0:
        assert recording.loss == plain_loss
        for name, grad in grads.items():
            assert torch.equal(grad, plain_grads[name]), name
    else:
        assert recording.loss == pytest.approx(plain_loss, rel=tolerance)
        for name, grad in grads.items():
            scale = plain_grads[name].abs().max().item() or 1.0
            assert (grad - plain_grads[name]).abs().max().item() <= tolerance * scale, name
    return recording


# --- options ----------------------------------------------------------------------

@pytest.mark.parametrize("text, label", [
    ("none", "no checkpointing"),
    ("block", "checkpoint each block"),
    ("block:GPTNeoXLayer", "checkpoint each GPTNeoXLayer"),
    ("sac", "SAC matmul over each block"),
    ("sac:matmul@Block", "SAC matmul over each Block"),
    ("sac:mymod:fn", "SAC mymod:fn over each block"),
    ("compile:0.5", "compile knob 0.5 (dp)"),
    ("compile:0:greedy", "compile knob 0 (greedy)"),
    ("compile", "compile knob 1 (dp)"),
])
def test_options_parse_label_and_print_back(text, label):
    option = parse_option(text)
    assert option.label == label
    assert parse_option(str(option)) == option
    assert CheckpointOption.parse(text) == option


@pytest.mark.parametrize("text", ["nothing", "none:x", "block:1x", "sac:nope", "sac:mod:",
                                  "sac@1", "compile:1.5", "compile:-0.1", "compile:nan",
                                  "compile:x", "compile:0.5:simplex"])
def test_bad_options_are_refused(text):
    with pytest.raises(CheckpointOptionError):
        parse_option(text)


def test_an_option_made_directly_is_checked_and_gets_the_defaults():
    assert CheckpointOption("compile") == parse_option("compile:1:dp")
    assert CheckpointOption("compile", knob=0.5).label == "compile knob 0.5 (dp)"
    for bad in (dict(kind="bogus"), dict(kind="compile", knob=2.0),
                dict(kind="compile", solver="simplex")):
        with pytest.raises(CheckpointOptionError):
            CheckpointOption(**bad)


def test_the_block_found_is_the_repeated_layer_not_its_parts():
    model, _, _ = build_model("zoo:gpt", 0, {"layers": 3})
    assert find_block_class(model) == "DecoderBlock"
    assert [name for name, _ in blocks_of(model, None)] == ["blocks.0", "blocks.1", "blocks.2"]
    with pytest.raises(CheckpointOptionError, match="no module of class 'Nope'"):
        blocks_of(model, "Nope")
    with pytest.raises(CheckpointOptionError, match="no repeated block"):
        find_block_class(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_the_model_is_as_it_was_after_checkpointing():
    model, _, _ = build_model("zoo:gpt", 0, None)
    with checkpointed(model, parse_option("block")) as names:
        assert all("forward" in vars(model.get_submodule(n)) for n in names)
    assert not any("forward" in vars(m) for m in model.modules())


# --- memory truth and values ------------------------------------------------------

@pytest.mark.parametrize("spec, sets", [("zoo:gpt", {"batch": 4}), ("zoo:resnet", None),
                                        ("zoo:encoder", None)])
@pytest.mark.parametrize("text", ["block", "sac", "sac:matmul"])
def test_checkpointed_peak_is_the_live_peak_and_values_are_the_plain_steps(spec, sets, text, tmp_path):
    recording = _check_option(spec, text, sets, tmp_path)
    assert recording.recompute_ops > 0 and recording.blocks


def test_checkpointing_lowers_the_peak_and_sac_recomputes_less(tmp_path):
    plain = record_option("zoo:gpt", "none", tmp_path / "none.log", sets={"batch": 4})
    block = record_option("zoo:gpt", "block", tmp_path / "block.log", sets={"batch": 4}, plain=plain)
    sac = record_option("zoo:gpt", "sac", tmp_path / "sac.log", sets={"batch": 4}, plain=plain)
    assert block.peak_bytes < plain.peak_bytes and sac.peak_bytes < plain.peak_bytes
    assert plain.recompute_ops == 0 and plain.overhead == 1.0
    assert 0 < sac.recompute_ops < block.recompute_ops
    assert 1.0 < sac.overhead < block.overhead
    assert block.compute_plain == sac.compute_plain == plain.compute_total
    assert block.option == parse_option("block:DecoderBlock")


def _ops_by_phase(path, phase):
    from dtrforensics.trace.cache import load_program
    program = load_program(path, cache=False)
    where = program.where
    return [(module, program.op_name(op)) for op, (ph, module) in
            enumerate(zip(where.column("phase"), where.column("module"))) if ph == phase]


def test_recomputed_ops_are_the_blocks_forward_ops_in_the_blocks(tmp_path):
    """Every op in phase recompute ran in a checkpointed block, the block's own
    ops (the residual adds of `DecoderBlock.forward`) under the block's name;
    they are forward ops of the blocks again (fewer: recomputation stops once
    backward has what it needs); SAC recomputes no matrix product."""
    from collections import Counter
    sets = {"batch": 4}
    plain = record_option("zoo:gpt", "none", tmp_path / "none.log", sets=sets)
    forward = Counter(op for module, op in _ops_by_phase(tmp_path / "none.log", "forward")
                      if module and module.startswith("blocks."))
    for text in ("block", "sac"):
        recording = record_option("zoo:gpt", text, tmp_path / f"{text}.log", sets=sets, plain=plain)
        recomputed = _ops_by_phase(tmp_path / f"{text}.log", "recompute")
        assert len(recomputed) == recording.recompute_ops > 0
        assert all(module.split(".")[:2] in (["blocks", "0"], ["blocks", "1"]) for module, _ in recomputed)
        assert ("blocks.0", "add") in recomputed and ("blocks.1", "add") in recomputed
        assert not Counter(op for _, op in recomputed) - forward
    assert not {"mm", "bmm", "addmm"} & {op for _, op in recomputed}


def save_nothing(ctx, op, *args, **kwargs):
    """A user's SAC policy: recompute everything (a bool answer)."""
    return False


def test_a_users_policy_function_is_used(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    recording = _check_option("zoo:gpt", "sac:test_torch_checkpointing:save_nothing",
                              {"batch": 4}, tmp_path)
    block = record_option("zoo:gpt", "block", tmp_path / "b.log", sets={"batch": 4})
    assert recording.recompute_ops >= block.recompute_ops


@pytest.mark.parametrize("spec", ["zoo:mlp", pytest.param("zoo:gpt", marks=pytest.mark.slow)])
def test_compiled_step_peak_is_the_live_peak_and_values_close(spec, tmp_path):
    recording = _check_option(spec, "compile:0.5", None, tmp_path, tolerance=1e-5)
    assert recording.recompute_ops == len(recording.recomputed) > 0
    assert recording.saved and set(recording.saved).isdisjoint(recording.recomputed)
    assert "1 graph(s) compiled" in recording.notes[0]


@pytest.mark.slow
@pytest.mark.parametrize("text", ["none", "block", "sac", "compile:1", "compile:0.5",
                                  "compile:0:greedy"])
@pytest.mark.parametrize("spec, sets", [
    ("hf:gpt_neox", {"num_hidden_layers": 2, "batch": 4, "seq": 64}),
    ("timm:vit_tiny_patch16_224", {"image_size": 32, "batch": 2, "depth": 2}),
])
def test_library_models_every_option(spec, sets, text, tmp_path):
    pytest.importorskip(spec.partition(":")[0].replace("hf", "transformers"))
    tolerance = 1e-5 if text.startswith("compile") else 0.0
    _check_option(spec, text, sets, tmp_path, tolerance=tolerance)


# --- the command ------------------------------------------------------------------

@pytest.mark.parametrize("spec, option, text", [("zoo:gpt", "block", "block:DecoderBlock"),
                                                ("zoo:mlp", "compile:0.5", "compile:0.5:dp")])
def test_torch_record_checkpoint_writes_a_log_every_command_reads(tmp_path, spec, option, text):
    from dtrforensics.trace.cache import load_program
    log = tmp_path / "m.log"
    out = CliRunner().invoke(app, ["torch", "record", spec, "--checkpoint", option,
                                   "-o", str(log), "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["checkpoint"]["option"]["text"] == text
    assert summary["checkpoint"]["recompute_ops"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.log", "m.log.where.json"]
    assert load_program(log, cache=False).where is not None
    info = CliRunner().invoke(app, ["traces", "info", str(log), "--json"])
    assert info.exit_code == 0 and json.loads(info.stdout)["peak_bytes"] == summary["peak_bytes"]
    run = CliRunner().invoke(app, ["run", str(log), "--ratio", "1"])
    assert run.exit_code == 0, run.output


@pytest.mark.parametrize("option, says", [("compile:2", "knob"), ("sac:nope", "unknown SAC policy"),
                                          ("block:Nope", "no module of class 'Nope'"),
                                          ("sac:no_such_module:fn", "cannot import")])
def test_torch_record_refuses_a_bad_checkpoint_option_in_one_line(tmp_path, option, says):
    from cli import dtrf
    out = tmp_path / "x.log"
    result = dtrf("torch", "record", "zoo:gpt", "--checkpoint", option, "-o", out, cwd=tmp_path)
    assert result.code == 2 and result.traceback is None
    assert result.err.strip().count("\n") == 0 and says in result.err
    assert not out.exists()


def test_a_compiled_step_that_runs_eagerly_under_the_recorder_is_refused(tmp_path, monkeypatch):
    """Dynamo runs eager code while a mode that does not ignore compile internals
    is on; recorded so, the log would be the eager step: refused, not written."""
    from dtrforensics.torch import compiled_step
    from dtrforensics.torch.recorder import StepRecorder
    monkeypatch.setattr(compiled_step, "CompiledStepRecorder", StepRecorder)
    model, batch, loss_fn = build_model("zoo:mlp", 0, None)
    with pytest.raises(RecordError, match="did not run as compiled"):
        record_built(model, batch, loss_fn, parse_option("compile:0.5"), tmp_path / "c.log")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["block", "sac"])
def test_checkpointed_logs_are_the_same_in_fake_mode(text, tmp_path):
    real = record_option("zoo:gpt", text, tmp_path / "real.log")
    fake = record_option("zoo:gpt", text, tmp_path / "fake.log", fake=True, plain=real)
    assert fake.fake and fake.loss is None and not real.fake
    assert (tmp_path / "fake.log").read_bytes() == (tmp_path / "real.log").read_bytes()


def test_a_compiled_step_needs_real_tensors_and_ilp_needs_scipy(tmp_path):
    with pytest.raises(CheckpointOptionError, match="real tensors"):
        record_option("zoo:mlp", "compile:0.5", tmp_path / "c.log", fake=True)
    try:
        import scipy  # noqa: F401
    except ImportError:
        with pytest.raises(RecordError, match="needs scipy"):
            record_option("zoo:mlp", "compile:0.5:ilp", tmp_path / "c.log")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_compiled_steps_are_deterministic_and_a_lower_knob_recomputes_more(tmp_path):
    high = record_option("zoo:gpt", "compile:1", tmp_path / "a.log")
    again = record_option("zoo:gpt", "compile:1", tmp_path / "b.log", plain=high)
    low = record_option("zoo:gpt", "compile:0", tmp_path / "c.log", plain=high)
    assert (tmp_path / "a.log").read_bytes() == (tmp_path / "b.log").read_bytes()
    assert again.saved == high.saved and again.recomputed == high.recomputed
    assert set(high.recomputed) < set(low.recomputed)
    assert low.overhead > high.overhead
