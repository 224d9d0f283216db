"""Memory truth and determinism of recorded zoo models.

The log's unconstrained peak (what `dtrf traces info` reports) must equal the
peak of live storage bytes measured independently during the same step, to
the byte; with `flops` costs the log must not depend on the run or on fake mode.
"""

from __future__ import annotations

import json
import weakref

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from dtrforensics.cli.main import app  # noqa: E402
from dtrforensics.torch import record  # noqa: E402
from dtrforensics.torch.recorder import constants_of  # noqa: E402
from dtrforensics.torch.zoo import ZOO  # noqa: E402

MODELS = ["gpt", "resnet", "lstm", "unet", "mlp"]


class LiveBytesTracker(TorchDispatchMode):
    """Live storage bytes, knowing nothing of log names or reference counts: a
    storage counts from the first op that reads or returns it until PyTorch
    frees it; the peak is the maximum after any op."""

    def __init__(self, existing=()):
        super().__init__()
        self.live = 0
        self._seen: set[int] = set()
        for t in existing:
            self._see(t)
        self.peak = self.live

    def _see(self, t) -> None:
        storage = t.untyped_storage()
        if storage._cdata in self._seen:
            return
        self._seen.add(storage._cdata)
        self.live += storage.nbytes()
        weakref.finalize(storage, self._free, storage._cdata, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        self.peak = max(self.peak, self.live)
        return out


def build(name):
    torch.manual_seed(0)
    return ZOO[name]()


@pytest.mark.parametrize("name", MODELS)
def test_log_peak_equals_live_storage_peak_to_the_byte(name, tmp_path):
    model, batch, loss_fn = build(name)
    with LiveBytesTracker(constants_of(model, batch)) as tracker:
        summary = record(model, batch, loss_fn, tmp_path / "m.log")
    info = CliRunner().invoke(app, ["traces", "info", str(tmp_path / "m.log"), "--json"])
    assert json.loads(info.stdout)["peak_bytes"] == summary.peak == tracker.peak
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
