"""Models nobody here wrote (transformers, timm, torchvision, `nn.TransformerEncoder`,
a Mixtral-style MoE) record in real mode with the memory truth and without
changing loss or gradients; in fake mode (built by their factory under fake
mode) their logs equal the real ones byte for byte."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("timm")
pytest.importorskip("torchvision")

from test_torch_memory import LiveBytesTracker  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from dtrforensics.cli.main import app  # noqa: E402
from dtrforensics.torch import RecordError, record  # noqa: E402
from dtrforensics.torch.recorder import constants_of  # noqa: E402
from dtrforensics.torch.spec import build  # noqa: E402
from dtrforensics.torch.step import _forward  # noqa: E402

# The table of issue 26, at small sizes: (spec, options).
TABLE = {
    "llama": ("hf:LlamaForCausalLM", {"seq": 16}),
    "gpt2": ("hf:gpt2", {"seq": 16}),
    "bert": ("hf:BertForSequenceClassification", {"seq": 16}),
    "vit": ("timm:vit_tiny_patch16_224", {"image_size": 32}),
    "encoder": ("zoo:encoder", {}),
    "resnet18": ("torchvision:resnet18", {"image_size": 32}),
    "mobilenet": ("torchvision:mobilenet_v3_small", {"image_size": 32}),
    "moe": ("zoo:moe", {}),
}
# Routing reads router outputs: the MoE is real mode only. The torchvision
# networks take the longest under fake mode.
FAKE_TOO = [pytest.param(k, marks=[pytest.mark.slow] if k in ("resnet18", "mobilenet") else [])
            for k in TABLE if k != "moe"]


def built(key, fake=False):
    spec, options = TABLE[key]
    torch.manual_seed(0)
    return build(spec, fake=fake, **options)


@pytest.mark.parametrize("key", list(TABLE))
def test_real_mode_records_with_memory_truth_and_changes_nothing(key, tmp_path, one_thread):
    model, batch, loss_fn = built(key)
    with LiveBytesTracker(constants_of(model, batch)) as tracker:
        summary = record(model, batch, loss_fn, tmp_path / "m.log")
    info = json.loads(CliRunner().invoke(app, ["traces", "info", str(tmp_path / "m.log"),
                                               "--json"]).stdout)
    assert info["peak_bytes"] == summary.peak == tracker.peak

    plain, (inputs, targets), plain_loss_fn = built(key)
    loss = plain_loss_fn(_forward(plain, inputs, None), targets)
    loss.backward()
    assert summary.loss == loss.item()
    for (name, p), (_, q) in zip(plain.named_parameters(), model.named_parameters()):
        assert (p.grad is None) == (q.grad is None), name
        assert p.grad is None or torch.equal(p.grad, q.grad), name


@pytest.mark.parametrize("key", FAKE_TOO)
def test_fake_log_built_under_fake_mode_equals_real_log(key, tmp_path):
    real = record(*built(key), tmp_path / "real.log")
    fake_model, fake_batch, loss_fn = built(key, fake=True)
    assert all(type(p).__name__ == "FakeTensor" for p in fake_model.parameters())
    fake = record(fake_model, fake_batch, loss_fn, tmp_path / "fake.log", fake=True)
    assert fake.fake and fake.peak == real.peak
    assert (tmp_path / "fake.log").read_bytes() == (tmp_path / "real.log").read_bytes()


def test_moe_routing_in_fake_mode_is_one_line_naming_op_and_module(tmp_path):
    with pytest.raises(RecordError, match=r"nonzero .*SparseMoE.*real mode") as info:
        record(*built("moe", fake=True), tmp_path / "x.log", fake=True)
    assert "\n" not in str(info.value) and not (tmp_path / "x.log").exists()


def test_fake_factory_initialises_as_the_library_does():
    """Initialisers run under fake mode: a clone made by deepcopy is a separate
    parameter of the same fake mode, and ViT's drop-path schedule (a scalar read
    of `linspace`) is answered."""
    model, _, _ = built("encoder", fake=True)
    layers = model[0].layers
    a, b = layers[0].linear1.weight, layers[1].linear1.weight
    assert a is not b and a.fake_mode is b.fake_mode
    assert a.untyped_storage()._cdata != b.untyped_storage()._cdata
    vit, _, _ = build("timm:vit_tiny_patch16_224", fake=True, image_size=32, drop_path_rate=0.1)
    rates = [block.drop_path1.drop_prob for block in vit.blocks if hasattr(block.drop_path1, "drop_prob")]
    assert rates == pytest.approx([0.1 * i / 11 for i in range(1, 12)])
