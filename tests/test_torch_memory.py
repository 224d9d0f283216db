"""Memory truth and determinism of recorded zoo models.

The log's unconstrained peak (what `dtrf traces info` reports) must equal the
peak of live storage bytes measured independently during the same step, to
the byte; with `flops` costs the log must not depend on the run or on fake mode.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf  # noqa: E402
from live_count import LiveBytesTracker  # noqa: E402

from dtrforensics.torch import record  # noqa: E402
from dtrforensics.torch.recorder import constants_of  # noqa: E402
from dtrforensics.torch.zoo import ZOO  # noqa: E402

# Values are compared bitwise: one intra-op thread sums in the same order every
# run (and on a shared 2-core machine it is the faster setting).
pytestmark = pytest.mark.usefixtures("one_thread")

MODELS = ["gpt", "resnet", "lstm", "unet", "mlp"]


def build(name):
    torch.manual_seed(0)
    return ZOO[name]()


@pytest.mark.parametrize("name", MODELS)
def test_log_peak_equals_live_storage_peak_to_the_byte(name, tmp_path):
    model, batch, loss_fn = build(name)
    with LiveBytesTracker(constants_of(model, batch)) as tracker:
        summary = record(model, batch, loss_fn, tmp_path / "m.log")
    info = dtrf("traces", "info", tmp_path / "m.log", "--json").json()
    assert info["peak_bytes"] == summary.peak == tracker.peak
    assert summary.peak > sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize("name", MODELS)
def test_flops_logs_are_identical_across_runs_and_in_fake_mode(name, tmp_path):
    from torch._subclasses.fake_tensor import FakeTensorMode

    record(*build(name), tmp_path / "a.log")
    record(*build(name), tmp_path / "b.log")
    fake = record(*build(name), tmp_path / "fake.log", fake=True)
    with FakeTensorMode():
        built_fake = build(name)
    record(*built_fake, tmp_path / "built-fake.log", fake=True)
    text = (tmp_path / "a.log").read_bytes()
    assert fake.fake and fake.loss is None
    assert (tmp_path / "b.log").read_bytes() == text
    assert (tmp_path / "fake.log").read_bytes() == text
    assert (tmp_path / "built-fake.log").read_bytes() == text


def test_writes_through_views_are_new_versions_of_the_whole_storage(tmp_path):
    """T5's `_shift_right` (`view_writes.shift_right`): `copy_` into a slice,
    `fill_` into a select, `masked_fill_` of the whole. The log rebinds every
    name of the written storage to the new version, so each old version dies
    with the write, as PyTorch's bytes do: the log's peak is the live peak (it
    was 32,768 B over, two old versions of the ids kept to the embedding's
    backward), and the fake log is the real one."""
    from view_writes import shift_right
    model, batch, loss_fn = shift_right()
    with LiveBytesTracker(constants_of(model, batch)) as tracker:
        summary = record(model, batch, loss_fn, tmp_path / "m.log")
    assert summary.peak == tracker.peak
    record(*shift_right(), tmp_path / "fake.log", fake=True)
    assert (tmp_path / "fake.log").read_bytes() == (tmp_path / "m.log").read_bytes()


def test_t5_log_peak_is_the_live_peak(tmp_path):
    """transformers' T5 (`view_writes.t5`, one layer each side, tiny): the same."""
    pytest.importorskip("transformers")
    from view_writes import t5
    torch.manual_seed(0)
    model, batch, loss_fn = t5(layers=1, width=32, ff=64, vocab=64, heads=2, batch=8, seq=32)
    with LiveBytesTracker(constants_of(model, batch)) as tracker:
        summary = record(model, batch, loss_fn, tmp_path / "m.log")
    assert summary.peak == tracker.peak
