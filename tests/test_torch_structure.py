"""The recorder's log on tiny programs, against logs written out by hand."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from logdsl import Log  # noqa: E402

from dtrforensics.torch import record  # noqa: E402
from dtrforensics.torch.log import LogWriter  # noqa: E402
from dtrforensics.torch.recorder import StepRecorder  # noqa: E402


def recorded(fn, *tensors) -> list[dict]:
    """The log records of running `fn(*tensors)` under the recorder (flops costs)."""
    log = LogWriter()
    recorder = StepRecorder(log, "flops", lambda: "in the test")
    with recorder:
        for t in tensors:
            recorder.name_of(t)
        fn(*tensors)
    recorder.close()
    return [json.loads(line) for line in log.lines]


def expected(log: Log) -> list[dict]:
    return [dict(r, ALIAS=str(r["ALIAS"])) if "ALIAS" in r else r for r in log.lines]


def test_view_chain_aliases_the_root_storage_and_views_live_as_long_as_it():
    def step(x):
        y = x.view(16)
        z = y.view(2, 8).t()
        w = z * 2
        del y, z, w

    want = (Log().const("x0", 64)
            .call("x1", "view", ["x0"], 1, 64, [0])
            .call("x2", "view", ["x1"], 1, 64, [0])
            .call("x3", "t", ["x2"], 1, 64, [0])
            .call("x4", "mul", ["x3"], 32, 64)       # 16 elements read, 16 written
            .release("x4"))
    assert recorded(step, torch.zeros(4, 4)) == expected(want)


def test_in_place_relu_is_a_mutate_of_the_tensor_it_writes():
    def step(x):
        y = x + 1
        y.relu_()
        torch.relu_(y[0])
        del y

    want = (Log().const("x0", 64)
            .call("x1", "add", ["x0"], 32, 64)
            .mutate("relu_", ["x1"], [0], 32)
            .call("x2", "select", ["x1"], 1, 64, [0])
            .mutate("relu_", ["x2"], [0], 8)
            # a write through a view is a new version of the whole storage: the
            # base's name is rebound to it (an alias of the written view), the old released
            .call("x3", "alias", ["x2"], 1, 64, [0])
            .release("x1")
            .release("x3").release("x2"))            # every name of the storage, in order
    assert recorded(step, torch.zeros(4, 4)) == expected(want)


def test_split_and_max_give_one_result_per_output():
    def step(x):
        a, b = x.split(2)
        values, indices = x.max(dim=1)
        del a, b, values, indices

    want = (Log().const("x0", 64)
            .call(["x1", "x2"], "split", ["x0"], 1, [64, 64], [0, 0])
            .call(["x3", "x4"], "max", ["x0"], 24, [16, 32])   # float32 values, int64 indices
            .release("x3").release("x4"))
    assert recorded(step, torch.zeros(4, 4)) == expected(want)


def test_a_tensor_that_dies_mid_step_is_released_there():
    def step(x):
        y = x.exp()
        z = y.sin()
        del y
        w = z.cos()
        del z, w

    want = (Log().const("x0", 64)
            .call("x1", "exp", ["x0"], 32, 64)
            .call("x2", "sin", ["x1"], 32, 64)
            .release("x1")
            .call("x3", "cos", ["x2"], 32, 64)
            .release("x2").release("x3"))
    assert recorded(step, torch.zeros(4, 4)) == expected(want)


def _linear_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    batch = (torch.ones(3, 2), None)
    loss_fn = lambda out, _: out.sum()  # noqa: E731
    return model, batch, loss_fn


def _first_backward(log: Log, w: str, x: str, base: int) -> Log:
    """Forward, loss and backward of `sum(x @ w.t())` with names from x{base} on."""
    n = [f"x{base + i}" for i in range(9)]
    return (log.call(n[0], "t", [w], 1, 8, [0])
            .call(n[1], "mm", [x, n[0]], 12, 12)
            .call(n[2], "sum", [n[1]], 4, 4)
            .release(n[1])
            .backward()
            .call(n[3], "ones_like", [n[2]], 2, 4)
            .call(n[4], "expand", [n[3]], 1, 4, [0])
            .call(n[5], "t", [n[4]], 1, 4, [0])
            .call(n[6], "mm", [n[5], x], 12, 8)
            .call(n[7], "t", [n[6]], 1, 8, [0])
            .call(n[8], "t", [n[7]], 1, 8, [0]))


def test_gradient_accumulates_into_grad_in_place(tmp_path):
    model, batch, loss_fn = _linear_step()
    record(model, batch, loss_fn, tmp_path / "first.log")
    first = _first_backward(Log().const("x0", 8).const("x1", 24), "x0", "x1", 2)
    # AccumulateGrad keeps the new gradient (a view of the mm result) as .grad
    first.copy("x11", "x10").release("x5").release("x6").release("x7").release("x4")
    assert [json.loads(x) for x in (tmp_path / "first.log").read_text().splitlines()] == expected(first)

    record(model, batch, loss_fn, tmp_path / "second.log")
    second = _first_backward(Log().const("x0", 8).const("x1", 8).const("x2", 24), "x0", "x2", 3)
    # .grad (constant x1) exists now: the new gradient is added into it, then dies
    (second.mutate("add_", ["x1", "x11"], [0], 6)
     .release("x9").release("x10").release("x11")
     .release("x6").release("x7").release("x8").release("x5"))
    assert [json.loads(x) for x in (tmp_path / "second.log").read_text().splitlines()] == expected(second)
