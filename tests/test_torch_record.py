"""`record` and `dtrf torch record`: recording changes nothing, cost models,
and bad input (one clear error naming the op and module, no file left behind)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf  # noqa: E402
from torch import nn  # noqa: E402

from dtrforensics.cli.errors import CommandError  # noqa: E402
from dtrforensics.torch import RecordError, record  # noqa: E402
from dtrforensics.torch.recorder import VALUE_READS  # noqa: E402
from dtrforensics.torch.spec import build  # noqa: E402
from dtrforensics.torch.zoo import ZOO  # noqa: E402
from dtrforensics.trace.parser import parse_file  # noqa: E402

# Values are compared bitwise: one intra-op thread sums in the same order every
# run (and on a shared 2-core machine it is the faster setting).
pytestmark = pytest.mark.usefixtures("one_thread")


def fresh(name):
    torch.manual_seed(0)
    return ZOO[name]()


def plain_step(model, batch, loss_fn):
    inputs, targets = batch
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return loss.item()


@pytest.mark.parametrize("name", ["gpt", "resnet"])
def test_recording_changes_no_loss_gradient_or_buffer(name, tmp_path):
    plain = fresh(name)
    loss = plain_step(*plain)
    recorded = fresh(name)
    summary = record(*recorded, tmp_path / "r.log", cost="measured")
    assert summary.loss == loss
    for (pname, p), (_, q) in zip(plain[0].named_parameters(), recorded[0].named_parameters()):
        assert torch.equal(p.grad, q.grad), pname
    for (bname, b), (_, c) in zip(plain[0].named_buffers(), recorded[0].named_buffers()):
        assert torch.equal(b, c), bname


def test_measured_costs_are_wall_times_and_leave_memory_alone(tmp_path):
    flops = record(*fresh("resnet"), tmp_path / "f.log")
    measured = record(*fresh("resnet"), tmp_path / "m.log", cost="measured")
    assert measured.peak == flops.peak and measured.ops == flops.ops
    f, m = parse_file(tmp_path / "f.log"), parse_file(tmp_path / "m.log")
    assert ((m.op_cost > 0) == (f.op_cost > 0)).all()      # constants cost 0, every op >= 1
    assert (m.op_names == f.op_names) and (m.op_cost != f.op_cost).any()


class Tagged(torch.Tensor):
    """A tensor subclass the recorder does not know."""


class Probe(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.body = body

    def forward(self, x):
        return self.body(self.inner(x))


def _raises(tmp_path, body, loss_fn=lambda out, _: out.sum(), inputs=None, match="", fake=False):
    model = Probe(body)
    inputs = torch.ones(2, 4) if inputs is None else inputs
    with pytest.raises(RecordError, match=match) as info:
        record(model, (inputs, None), loss_fn, tmp_path / "bad.log", fake=fake)
    assert list(tmp_path.iterdir()) == [], "no partial log, no temporary file"
    assert "\n" not in str(info.value)
    return str(info.value)


def positives(y):
    """Data-dependent in every way: a shape from `nonzero`, a scalar read, a list read."""
    picked = y[(y > 0).nonzero(as_tuple=True)]
    scale = float(picked.numel()) + (y.sum() > 0).item() + sum(y[0, :2].tolist())
    return picked * scale


def test_real_mode_records_data_dependent_ops_as_they_ran(tmp_path):
    torch.manual_seed(0)
    model = Probe(positives)
    inputs = torch.randn(3, 4)
    expected = (model.inner(inputs) > 0).sum().item()
    summary = record(model, (inputs, None), lambda out, _: out.sum(), tmp_path / "dd.log")
    program = parse_file(tmp_path / "dd.log")
    names = [program.op_name(i) for i in range(program.n_ops)]
    reads = [i for i, name in enumerate(names) if name == "_local_scalar_dense"]
    assert "nonzero" in names and reads                     # `.item()`: a read of a resident value
    assert all(int(program.op_total_size[i]) == 0 for i in reads)   # it makes no tensor
    selected = names.index("index")
    assert int(program.op_total_size[selected]) == expected * 4   # this batch's selection (float32)
    assert summary.loss is not None


def reads_values(y):
    """Every kind of read of values that makes no tensor."""
    torch._assert_async((y.abs() >= 0).all())
    torch.linalg.cholesky(torch.eye(2))
    same = torch.allclose(y, y) and torch.equal(y, y)
    return y * (2 + y.sum().item()) if same else y


def test_value_reads_are_logged_as_zero_byte_reads_of_what_they_read(tmp_path):
    """So that a DTR run (and the real one) has the tensor resident at the read."""
    record(Probe(reads_values), (torch.randn(3, 4), None), lambda out, _: out.sum(), tmp_path / "r.log")
    program = parse_file(tmp_path / "r.log")
    reads = [i for i in range(program.n_ops) if program.op_name(i) in VALUE_READS]
    assert {program.op_name(i) for i in reads} == \
        {"_assert_async", "_linalg_check_errors", "allclose", "equal", "_local_scalar_dense"}
    assert all(int(program.op_total_size[i]) == 0 and len(program.op_args_of(i)) > 0 for i in reads)


def test_fake_mode_refuses_values_it_does_not_have_naming_op_and_module(tmp_path):
    message = _raises(tmp_path, lambda y: y[y.nonzero(as_tuple=True)], match="nonzero", fake=True)
    assert "in module <lambda>" not in message and "Probe" in message and "real mode" in message


def test_sparse_tensors_are_refused(tmp_path):
    _raises(tmp_path, lambda y: y, inputs=torch.ones(2, 4).to_sparse(), match="sparse")


def test_unknown_tensor_subclasses_are_refused(tmp_path):
    _raises(tmp_path, lambda y: y, inputs=torch.ones(2, 4).as_subclass(Tagged), match="Tagged")


def test_non_scalar_loss_is_refused(tmp_path):
    _raises(tmp_path, lambda y: y, loss_fn=lambda out, _: out, match="scalar")


def test_a_model_that_raises_is_reported_with_its_module(tmp_path):
    def body(_):
        raise ValueError("broken layer")
    message = _raises(tmp_path, body, match="broken layer")
    assert "Probe" in message


def raising_factory():
    raise RuntimeError("no weights here")


def two_things():
    return 1, 2


def test_factory_specs_report_what_is_wrong():
    with pytest.raises(RecordError, match="no weights here"):
        build("test_torch_record:raising_factory")
    with pytest.raises(RecordError, match="must return"):
        build("test_torch_record:two_things")
    with pytest.raises(RecordError, match="unknown zoo model"):
        build("zoo:nope")
    with pytest.raises(RecordError, match="does not take seq"):
        build("zoo:resnet", seq=8)


def test_cli_records_and_prints_peak_ops_and_path(tmp_path):
    out = tmp_path / "mlp.log"
    text = dtrf("torch", "record", "zoo:mlp", "-o", out, "--batch", "4", "--set", "layers=2").ok()
    program = parse_file(out)
    assert str(out) in text and f"{program.n_ops:,} ops" in text
    bad = dtrf("torch", "record", "zoo:mlp", "-o", tmp_path / "x.log", "--set", "layers")
    assert bad.code == 2 and bad.traceback is None and len(bad.error_lines) == 1, bad.err


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    """Through main() in this process (test_cli.py runs `dtrf torch record` as a
    process, from the console script)."""
    out = tmp_path / "x.log"
    result = dtrf("torch", "record", "test_torch_record:raising_factory", "-o", out,
                  cwd=tmp_path)
    assert result.code == 2 and result.traceback is None
    assert result.err.strip().count("\n") == 0 and "no weights here" in result.err
    assert not out.exists()


def test_hf_model_types_get_their_standard_head_and_token_ids_that_fit():
    """An encoder's standard head is its masked LM (its causal head needs
    `is_decoder`); a special token id of the full vocabulary is cleared when the
    small one does not have it, and kept when it does or when given."""
    pytest.importorskip("transformers")
    from dtrforensics.torch.named import hf_config
    assert hf_config("bert")[1].__name__ == "BertForMaskedLM"
    assert hf_config("llama")[1].__name__ == "LlamaForCausalLM"
    small, _ = hf_config("gpt2")
    assert (small.vocab_size, small.bos_token_id, small.eos_token_id) == (1024, None, None)
    assert hf_config("gpt2", vocab_size=50257)[0].eos_token_id == 50256
    assert hf_config("gpt2", eos_token_id=7)[0].eos_token_id == 7


def test_hf_encoder_decoders_and_per_stage_configs_build_from_the_small_shape():
    """`hf:t5` needs a decoder start token its config no longer has (and took
    sequence classification), `hf:whisper` a start token inside the smaller
    vocabulary and heads that divide its width, `hf:swin` per-stage lists, which
    the small shape's integers do not fit: each builds and computes its loss; a
    start token can be given, and a list (`--set num_heads=[2,4]`) reaches the config."""
    pytest.importorskip("transformers")
    from dtrforensics.torch.named import hf, hf_config
    config, model_class = hf_config("t5")
    assert model_class.__name__ == "T5ForConditionalGeneration"
    assert config.decoder_start_token_id == config.pad_token_id == 0
    assert hf_config("t5", decoder_start_token_id=3)[0].decoder_start_token_id == 3
    for arch, options in (("t5", {"seq": 8}), ("whisper", {"seq": 8}),
                          ("swin", {"num_heads": [2, 4], "depths": [1, 1], "embed_dim": 16,
                                    "image_size": 56, "batch": 1})):
        torch.manual_seed(0)
        model, (inputs, targets), loss_fn = hf(arch, **options)
        assert torch.isfinite(loss_fn(model(**inputs), targets)), arch
    swin = hf_config("swin")[0]
    assert isinstance(swin.num_heads, (list, tuple)) and len(swin.num_heads) == len(swin.depths)


def test_set_takes_lists_and_nested_keys():
    """`--set num_heads=[2,4]` gives a list, `--set text_config.hidden_size=64` a
    nested dict (which `hf:` merges into the nested config); a key set both whole
    and by its parts, or a malformed list, is one error."""
    from dtrforensics.cli.options import factory_settings
    assert factory_settings(["num_heads=[2,4]", "ratios=[0.5, 1]", "none=[]",
                             "text_config.hidden_size=64", "text_config.act=gelu"], {}) == \
        {"num_heads": [2, 4], "ratios": [0.5, 1], "none": [],
         "text_config": {"hidden_size": 64, "act": "gelu"}}
    for pairs in (["a=1", "a.b=2"], ["a.b=2", "a=1"], ["a..b=1"], ["x=[1,,2]"], ["x=[1,1e999]"]):
        with pytest.raises(CommandError):
            factory_settings(pairs, {})
    pytest.importorskip("transformers")
    from dtrforensics.torch.named import hf_config
    clip = hf_config("clip", vision_config={"hidden_size": 64, "num_attention_heads": 2})[0]
    assert (clip.vision_config.hidden_size, clip.vision_config.num_attention_heads) == (64, 2)
    with pytest.raises(RecordError, match="vision_config has no key nope"):
        hf_config("clip", vision_config={"nope": 1})
    with pytest.raises(RecordError, match="not a nested config"):
        hf_config("llama", hidden_size={"a": 1})


def converted_llama(convert: str, fake: bool = False):
    """A tiny Llama as factories write it: built, then converted (`.to(...)`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dtrforensics.torch.spec import fake_context
    config = LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                         use_cache=False)
    torch.manual_seed(0)
    with fake_context() if fake else torch.no_grad():
        model = LlamaForCausalLM(config)
        model = {"to(bfloat16)": lambda: model.to(torch.bfloat16), "half()": model.half,
                 "bfloat16()": model.bfloat16, "to(cpu)": lambda: model.to("cpu"),
                 "to(cpu, float16)": lambda: model.to("cpu", torch.float16)}[convert]()
        ids = torch.randint(64, (2, 8))
    return model, ({"input_ids": ids, "labels": ids}, None), lambda out, _targets: out.loss


@pytest.mark.parametrize("convert", ["to(bfloat16)", "half()", "bfloat16()", "to(cpu)",
                                     "to(cpu, float16)"])
def test_fake_mode_converts_models_as_factories_do(convert, tmp_path):
    """`_apply(): Couldn't swap Embedding.weight`: a fake parameter with a concrete
    value (weakly referenced) could not be swapped for its converted copy. Now
    converted, and the fake log is the real one's, byte for byte."""
    pytest.importorskip("transformers")
    fake = converted_llama(convert, fake=True)
    dtypes = {p.dtype for p in fake[0].parameters()}
    assert dtypes == {{"half()": torch.float16, "to(cpu, float16)": torch.float16,
                       "to(cpu)": torch.float32}.get(convert, torch.bfloat16)}
    record(*fake, tmp_path / "fake.log", fake=True)
    record(*converted_llama(convert), tmp_path / "real.log")
    assert (tmp_path / "fake.log").read_bytes() == (tmp_path / "real.log").read_bytes()
