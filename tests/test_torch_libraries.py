"""Models nobody here wrote (transformers, timm, torchvision, `nn.TransformerEncoder`,
a Mixtral-style MoE) record in real mode with the memory truth and without
changing loss or gradients; in fake mode (built by their factory under fake
mode) their logs equal the real ones byte for byte; and their logs work with
every dtrf command.

Every row is recorded once in real mode (under the live-storage tracker) and
shared by the tests that read it: the configurations are tiny (two layers, a
few dozen wide) and activations outweigh parameters, so the logs have
something to evict."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from libraries import require  # noqa: E402

require("transformers", "timm", "torchvision")

from cli import dtrf as run_dtrf  # noqa: E402
from live_count import LiveBytesTracker  # noqa: E402

from dtrforensics.sweep import holes  # noqa: E402
from dtrforensics.torch import RecordError, record  # noqa: E402
from dtrforensics.torch.optim import state_tensors, steady_optimizer  # noqa: E402
from dtrforensics.torch.recorder import constants_of  # noqa: E402
from dtrforensics.torch.spec import build  # noqa: E402
from dtrforensics.torch.step import _forward  # noqa: E402

# Values are compared bitwise: one intra-op thread sums in the same order every
# run (and on a shared 2-core machine it is the faster setting).
pytestmark = pytest.mark.usefixtures("one_thread")

# Decoders with grouped-query attention (4 heads, 2 key-value heads), rotary
# positions and SDPA; Mistral's sliding window is shorter than the sequence.
DECODER = {"seq": 32, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 128}
# Issue 26's table and the models people train today, small: (spec, options).
TABLE = {
    "llama": ("hf:LlamaForCausalLM", DECODER),
    "mistral": ("hf:mistral", {**DECODER, "sliding_window": 16}),
    "qwen2": ("hf:qwen2", DECODER),
    "gpt2": ("hf:gpt2", {"seq": 32, "hidden_size": 32, "num_attention_heads": 4,
                         "vocab_size": 128}),
    "bert": ("hf:BertForSequenceClassification", {"seq": 32, "hidden_size": 32,
                                                  "intermediate_size": 64,
                                                  "num_attention_heads": 4, "vocab_size": 128}),
    "vit": ("timm:vit_tiny_patch16_224", {"image_size": 32, "depth": 2, "patch_size": 8,
                                          "embed_dim": 32, "num_heads": 2, "num_classes": 10}),
    # 64 pixels: at 32 the last stage is 1 x 1 and fake strides differ (docs/torch.md).
    "convnext": ("timm:convnext_atto", {"image_size": 64, "depths": (1, 1, 1, 1),
                                        "dims": (8, 16, 32, 64), "num_classes": 10}),
    "encoder": ("zoo:encoder", {}),
    "resnet18": ("torchvision:resnet18", {"image_size": 32, "num_classes": 10}),
    "mobilenet": ("torchvision:mobilenet_v3_small", {"image_size": 32, "num_classes": 10}),
    "moe": ("zoo:moe", {}),
    # an encoder-decoder whose `_shift_right` writes through views, and the two
    # `hf:` names that did not build (a start token, per-stage lists)
    "t5": ("hf:t5", {"seq": 16, "hidden_size": 32, "d_ff": 64, "num_attention_heads": 2,
                     "d_kv": 16, "vocab_size": 128}),
    "whisper": ("hf:whisper", {"seq": 16, "hidden_size": 32, "encoder_ffn_dim": 64,
                               "decoder_ffn_dim": 64, "vocab_size": 128}),
    "swin": ("hf:swin", {"batch": 1, "image_size": 56, "embed_dim": 16, "depths": [1, 1],
                         "num_heads": [2, 4], "num_labels": 10}),
}
# Routing reads router outputs: the MoE is real mode only; so is Whisper's decoder,
# whose position embedding indexes with values fake mode does not have. The
# torchvision networks take the longest under fake mode.
FAKE_TOO = [pytest.param(k, marks=[pytest.mark.slow] if k in ("resnet18", "mobilenet") else [])
            for k in TABLE if k not in ("moe", "whisper")]
# Rows where an in-place write to a tensor the step made is the peak: the log
# counts its new version beside the old one (docs/torch.md, "Memory truth").
WRITE_AT_PEAK = {"convnext"}


def built(key, fake=False):
    spec, options = TABLE[key]
    torch.manual_seed(0)
    return build(spec, fake=fake, **options)


@dataclass
class Real:
    path: Path
    peak: int
    live_peak: int
    versioned_peak: int
    loss: float
    grads: dict


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Each row recorded once in real mode, on one thread, when a test first asks."""
    folder, done = tmp_path_factory.mktemp("library-logs"), {}

    def get(key) -> Real:
        if key not in done:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                model, batch, loss_fn = built(key)
                with LiveBytesTracker(constants_of(model, batch)) as tracker:
                    summary = record(model, batch, loss_fn, folder / f"{key}.log")
            finally:
                torch.set_num_threads(threads)
            done[key] = Real(summary.path, summary.peak, tracker.peak, tracker.versioned_peak,
                             summary.loss, {n: p.grad for n, p in model.named_parameters()})
        return done[key]
    return get


@pytest.mark.parametrize("key", list(TABLE))
def test_real_mode_records_with_memory_truth(key, real):
    row = real(key)
    info = run_dtrf("traces", "info", row.path, "--json").json()
    assert info["peak_bytes"] == row.peak == row.versioned_peak
    assert (row.peak == row.live_peak) == (key not in WRITE_AT_PEAK)


@pytest.mark.parametrize("key", list(TABLE))
def test_recording_changes_no_loss_and_no_gradient(key, real):
    row = real(key)
    plain, (inputs, targets), loss_fn = built(key)
    loss = loss_fn(_forward(plain, inputs, None), targets)
    loss.backward()
    assert row.loss == loss.item()
    assert [n for n, _ in plain.named_parameters()] == list(row.grads)
    for name, p in plain.named_parameters():
        q = row.grads[name]
        assert (p.grad is None) == (q is None), name
        assert p.grad is None or torch.equal(p.grad, q), name


@pytest.mark.parametrize("key", FAKE_TOO)
def test_fake_log_built_under_fake_mode_equals_real_log(key, real, tmp_path):
    fake_model, fake_batch, loss_fn = built(key, fake=True)
    assert all(type(p).__name__ == "FakeTensor" for p in fake_model.parameters())
    fake = record(fake_model, fake_batch, loss_fn, tmp_path / "fake.log", fake=True)
    assert fake.fake and fake.peak == real(key).peak
    assert (tmp_path / "fake.log").read_bytes() == real(key).path.read_bytes()


def test_llama_step_as_recorded_at_seven_billion_in_miniature(tmp_path):
    """The Llama-2-7B benchmark's step (bf16 autocast, AdamW) on the tiny Llama:
    memory truth to the byte (each parameter's new version counted beside the old
    at its writes, states written in place), nothing changed by recording, fake
    log equal."""
    model, batch, loss_fn = built("llama")
    params = list(model.parameters())
    opt = steady_optimizer("adamw", params)
    states = state_tensors(opt)
    with LiveBytesTracker(constants_of(model, batch) + states, in_place=states) as tracker:
        summary = record(model, batch, loss_fn, tmp_path / "real.log", optimizer=opt,
                         autocast="bf16")
    assert summary.peak == tracker.versioned_peak
    plain, (inputs, targets), plain_loss_fn = built("llama")
    plain_opt = steady_optimizer("adamw", list(plain.parameters()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = plain_loss_fn(_forward(plain, inputs, None), targets)
    loss.backward()
    plain_opt.step()
    assert summary.loss == loss.item()
    for p, q in zip(plain.parameters(), params):
        assert torch.equal(p.grad, q.grad) and torch.equal(p, q)
    fake_model, fake_batch, fake_loss_fn = built("llama", fake=True)
    record(fake_model, fake_batch, fake_loss_fn, tmp_path / "fake.log", fake=True,
           optimizer="adamw", autocast="bf16")
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


class TruncInitialised(torch.nn.Module):
    """Initialised as ViT, DeiT, DINOv2 and ModernBERT are: `nn.init.trunc_normal_`,
    whose redraw loop reads random values (`mask.any()`)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        torch.nn.init.trunc_normal_(self.lin.weight, std=0.02)

    def forward(self, x):
        return self.lin(x)


def trunc_initialised():
    torch.manual_seed(0)
    return TruncInitialised(), (torch.randn(4, 8), torch.randint(0, 4, (4,))), torch.nn.CrossEntropyLoss()


class PaddingWarned(torch.nn.Module):
    """Calls transformers' padding warning on its input ids, as MegatronBERT and
    DeBERTa-v2 do: an index by a list and a scalar read of the ids."""

    def __init__(self):
        super().__init__()
        from types import SimpleNamespace
        self.config = SimpleNamespace(pad_token_id=0, bos_token_id=None, eos_token_id=None)
        self.embed = torch.nn.Embedding(16, 8)

    def forward(self, ids):
        from transformers.modeling_utils import PreTrainedModel
        PreTrainedModel.warn_if_padding_and_no_attention_mask(self, ids, None)
        return self.embed(ids).sum(1)


def padding_warned():
    import transformers.modeling_utils  # noqa: F401 (the library patched under fake mode)
    torch.manual_seed(0)
    ids = torch.randint(0, 16, (2, 6))
    return PaddingWarned(), (ids, torch.randint(0, 8, (2,))), torch.nn.CrossEntropyLoss()


@pytest.mark.parametrize("factory", ["trunc_initialised", "padding_warned"])
def test_fake_mode_builds_and_records_what_reads_values_only_to_draw_or_warn(factory, tmp_path):
    """`trunc_normal_` of a fake tensor is a clamped normal draw (its values do not
    matter), and the padding warning's reads of the input ids are answered 0 with
    the same ops run: each builds and records under fake mode, its log equal to
    the real one byte for byte."""
    import test_torch_libraries as here
    real = record(*getattr(here, factory)(), tmp_path / "real.log")
    fake = record(*build(f"test_torch_libraries:{factory}", fake=True), tmp_path / "fake.log",
                  fake=True)
    assert fake.fake and fake.peak == real.peak
    assert (tmp_path / "fake.log").read_bytes() == (tmp_path / "real.log").read_bytes()


# --- every command ------------------------------------------------------------------

# Ratios around each log's first completing budget: the exact sweep walks a
# few dozen executions, not the thousands of the whole range.
SWEEP = {
    "llama": (0.561, 0.5625),
    "gpt2": (0.545, 0.556),
    "bert": (0.585, 0.595),
    "vit": (0.86, 0.866),
    "encoder": (0.869, 0.875),
    "resnet18": (0.9988, 0.9992),
}


def dtrf(*args) -> str:
    return run_dtrf(*args).ok()


@pytest.mark.parametrize("key", [pytest.param(k, marks=[] if k == "llama" else [pytest.mark.slow])
                                 for k in SWEEP])
def test_library_log_works_with_every_command(key, real, tmp_path):
    path = real(key).path
    low, high = SWEEP[key]
    with contextlib.chdir(tmp_path):
        sweep = json.loads(dtrf("sweep", path, "--from", low, "--to", high, "--exact", "--jobs", 1,
                                "--no-progress", "--out", "sweep", "--json"))
        assert sweep["status"] == "complete"
        x = holes.analyze(tmp_path / "sweep").policy("dtr").exact
        assert x.coverage == 1.0 and x.gaps == [] and x.overlaps == []
        assert x.merged[0].outcome == "oom"
        first_ok = next(m for m in x.merged if m.outcome == "ok")
        ok, fail = first_ok.lo, first_ok.lo - 1
        reported = json.loads(dtrf("holes", "sweep", "--json"))["policies"]["dtr"]
        assert reported["first_success"]["budget"] == ok and reported["first_success"]["exact"]
        edges = json.loads(dtrf("edges", "sweep", "--json"))["edges"]
        assert any((e["below"]["budget"], e["above"]["budget"]) == (fail, ok) for e in edges)

        runs = {b: json.loads(dtrf("run", path, "--budget", b, "--json")) for b in (ok, fail)}
        assert (runs[ok]["outcome"], runs[fail]["outcome"]) == ("ok", "oom")
        for b, name in ((ok, "ok"), (fail, "fail")):
            dtrf("run", path, "--budget", b, "--record", name)
        assert f"{runs[ok]['evictions']:,}" in dtrf("show", "ok")
        counts = json.loads(dtrf("sql", "SELECT outcome, count(*) AS n FROM runs GROUP BY outcome "
                                 "ORDER BY outcome", "ok", "fail", "--json"))
        assert [(r["outcome"], r["n"]) for r in counts] == [("ok", 1), ("oom", 1)]
        (first,) = json.loads(dtrf("sql", "SELECT victim FROM decisions ORDER BY seq LIMIT 1",
                                   "fail", "--json"))
        compared = json.loads(dtrf("diff", "fail", "ok", "--json"))
        assert (compared["a"]["outcome"], compared["b"]["outcome"]) == ("oom", "ok")
        oom = json.loads(dtrf("oom", "fail", "--json"))
        assert oom["request"] > oom["budget"] - oom["memory"]
        assert json.loads(dtrf("replay", "fail", "--json"))["outcome"] == "oom"
        intervened = json.loads(dtrf("intervene", path, "--budget", fail, "--retain",
                                     first["victim"], "--record-root", "", "--json"))
        assert intervened["control_matches"]
        explained = json.loads(dtrf("explain", path, "--budget", fail, "--jobs", 1, "--json"))
        assert explained["baseline"]["outcome"] == "oom"
