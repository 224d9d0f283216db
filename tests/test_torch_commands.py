"""Recorded zoo logs work with every dtrf command, and sweep exactly."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf  # noqa: E402

from dtrforensics.sweep import holes  # noqa: E402
from dtrforensics.torch import record  # noqa: E402
from dtrforensics.torch.zoo import ZOO  # noqa: E402

# Values are compared bitwise: one intra-op thread sums in the same order every
# run (and on a shared 2-core machine it is the faster setting).
pytestmark = pytest.mark.usefixtures("one_thread")

# Below the first completing budget of each zoo model at its default size.
SWEEP_FROM = {"gpt": 0.75, "resnet": 0.6, "lstm": 0.75, "unet": 0.75, "mlp": 0.75}


def invoke(*args) -> str:
    return dtrf(*args).ok()


def zoo_log(name, folder):
    torch.manual_seed(0)
    path = folder / f"{name}.log"
    record(*ZOO[name](), path)
    return path


# Every command reads any DTR log the same way: the default suite runs two zoo
# shapes (views and attention, skips) beside the Llama of test_torch_libraries,
# which meets every command too; `make test-full` all five.
SLOW = {"resnet", "lstm", "mlp"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else [])
                                  for n in SWEEP_FROM])
def test_zoo_log_sweeps_exactly_and_works_with_every_command(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = zoo_log(name, tmp_path)
    info = json.loads(invoke("traces", "info", path, "--json"))
    sweep = json.loads(invoke("sweep", path, "--from", SWEEP_FROM[name], "--to", 1.0, "--exact",
                              "--jobs", 1, "--no-progress", "--out", tmp_path / "sweep", "--json"))
    assert sweep["status"] == "complete"
    x = holes.analyze(tmp_path / "sweep").policy("dtr").exact
    assert x.coverage == 1.0 and x.gaps == [] and x.overlaps == []
    for a, b in zip(x.partition, x.partition[1:]):
        assert b.lo == a.hi + 1
    assert x.merged[0].outcome == "oom" and x.merged[-1].outcome == "ok"
    assert x.merged[-1].hi == info["peak_bytes"]
    first_ok = next(m for m in x.merged if m.outcome == "ok")
    ok, fail = first_ok.lo, first_ok.lo - 1

    runs = {b: json.loads(invoke("run", path, "--budget", b, "--json")) for b in (ok, fail)}
    assert (runs[ok]["outcome"], runs[fail]["outcome"]) == ("ok", "oom")
    # Run specs take ratios (floor(r x peak) bytes): one in the middle of each interval.
    fail_interval = next(m for m in reversed(x.merged) if m.hi < first_ok.lo)
    spec_ok, spec_fail = (f"{path}@{(m.lo + m.hi) / 2 / info['peak_bytes']:.6f}"
                          for m in (first_ok, fail_interval))

    oom = json.loads(invoke("oom", spec_fail, "--json"))
    assert oom["trace"] == name and oom["request"] > oom["budget"] - oom["memory"]
    compared = json.loads(invoke("diff", spec_fail, spec_ok, "--json"))
    assert (compared["a"]["outcome"], compared["b"]["outcome"]) == ("oom", "ok")
    assert json.loads(invoke("replay", spec_fail, "--json"))["outcome"] == "oom"
    explained = json.loads(invoke("explain", path, "--budget", fail, "--json"))
    assert explained["baseline"]["outcome"] == "oom"
    invoke("run", path, "--budget", ok, "--record", tmp_path / "rec")
    invoke("export", tmp_path / "rec", "--format", "perfetto", "-o", tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text())
