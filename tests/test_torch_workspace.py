"""Kernel workspaces of the real step: measured around each op, reported apart
from the live storage bytes, and reserved in the budget when asked."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf
from torch import nn

from dtrforensics.torch import RecordError
from dtrforensics.torch.execute import execute
from dtrforensics.torch.workspace import Meter, workspace_of

pytestmark = pytest.mark.usefixtures("one_thread")


class Attention(nn.Module):
    """One attention layer: on CPU, scaled_dot_product_attention's kernels take
    scratch memory inside themselves (forward and backward)."""

    def __init__(self, width: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = (t.reshape(b, s, self.heads, w // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, w))


def attention():
    torch.manual_seed(0)
    return Attention(), (torch.randn(2, 64, 32), torch.randn(2, 64, 32)), nn.functional.mse_loss


def mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, (torch.randn(8, 16), torch.randn(8, 4)), nn.functional.mse_loss


def no_scratch():
    """Linear layers, a ReLU and a product-sum loss: no op takes memory beyond its outputs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, (torch.randn(8, 16), torch.randn(8, 4)), lambda y, t: (y * t).sum()


def test_an_ops_scratch_memory_is_measured_and_named():
    model, batch, loss_fn = attention()
    result = execute(model, batch, loss_fn, ratio=1.0, workspaces=True)
    ws = result.workspaces
    assert ws.largest > 0
    assert ws.op_name == "_scaled_dot_product_flash_attention_for_cpu_backward"
    assert ws.module == "Attention"
    assert 0 < ws.with_workspace < ws.op_runs and ws.total >= ws.largest
    # apart from the live bytes, which are the engine's at every check ...
    assert result.matches_simulation() and result.peak_live_bytes == result.peak
    # ... while the step's storages and the running op's scratch went over the budget
    assert ws.peak_with_workspaces > result.budget
    assert result.reserved_workspace == 0 and result.to_json()["workspaces"]["largest"] == ws.largest


def test_a_reserve_runs_the_engine_below_the_budget_by_that_much():
    measured = execute(*attention(), ratio=1.0, workspaces=True)
    peak = measured.peak
    measured = measured.workspaces.largest
    auto = execute(*attention(), budget=peak, reserve_workspace="auto")
    assert auto.reserved_workspace == measured > 0
    assert auto.budget == peak - measured
    assert auto.simulated.budget == peak - measured
    assert auto.matches_simulation()
    # with the reserve, live bytes plus the running op's scratch stay within what was asked
    assert auto.workspaces.peak_with_workspaces <= peak
    given = execute(*attention(), budget=peak, reserve_workspace=1000)
    assert (given.budget, given.reserved_workspace) == (peak - 1000, 1000)
    doc = given.to_json()
    assert (doc["budget"], doc["budget_asked"], doc["reserved_workspace"]) == (peak - 1000, peak, 1000)


def test_a_model_without_scratch_reports_none():
    model, batch, loss_fn = no_scratch()
    result = execute(model, batch, loss_fn, ratio=1.0, workspaces=True)
    ws = result.workspaces
    assert ws.op_runs > 0
    assert (ws.largest, ws.op_id, ws.total, ws.with_workspace) == (0, None, 0, 0)
    assert ws.peak_with_workspaces == result.peak_live_bytes
    model, batch, loss_fn = no_scratch()
    auto = execute(model, batch, loss_fn, ratio=1.0, reserve_workspace="auto")
    assert auto.reserved_workspace == 0 and auto.budget == result.budget


def test_without_asking_nothing_is_measured():
    model, batch, loss_fn = attention()
    result = execute(model, batch, loss_fn, ratio=1.0)
    assert result.workspaces is None and result.to_json()["workspaces"] is None


def test_a_workspace_is_the_peak_above_the_start_less_what_the_op_keeps():
    assert workspace_of([]) == (0, 0)
    assert workspace_of([100]) == (0, 100)                 # an output alone
    assert workspace_of([100, 64, -64]) == (64, 164)       # an output and a temporary
    assert workspace_of([64, -64, 100]) == (0, 100)        # the temporary fits under the output
    assert workspace_of([64, -100]) == (64, 64)            # freeing what it was given


def test_torch_run_reports_workspaces_and_reserves_them():
    done = dtrf("torch", "run", "test_torch_workspace:attention", "--ratio", "1.0", "--workspaces")
    assert done.code == 0, done.err
    line = next(x for x in done.out.splitlines() if x.startswith("workspaces"))
    assert "_scaled_dot_product_flash_attention_for_cpu_backward" in line and "Attention" in line
    doc = json.loads(dtrf("torch", "run", "test_torch_workspace:attention", "--ratio", "1.0",
                          "--reserve-workspace", "auto", "--json").out)
    assert doc["reserved_workspace"] == doc["workspaces"]["largest"] > 0
    assert doc["budget"] == doc["budget_asked"] - doc["reserved_workspace"]
    assert doc["workspaces"]["peak_with_workspaces"] <= doc["budget_asked"]
    none = dtrf("torch", "run", "test_torch_workspace:no_scratch", "--ratio", "1.0", "--workspaces")
    assert "workspaces" in none.out and "none: no op allocated scratch memory" in none.out


@pytest.mark.parametrize("value, words", [("1x", "a number of bytes or auto"),
                                          ("-5", ">= 0"),
                                          ("10000000", "leaves nothing of the budget")])
def test_a_bad_reserve_is_one_line_and_exit_2(value, words):
    done = dtrf("torch", "run", "test_torch_workspace:no_scratch", "--budget", "100000",
                "--reserve-workspace", value)
    assert done.code == 2 and done.traceback is None
    assert words in done.err


def test_a_reserve_below_the_floor_says_so():
    with pytest.raises(RecordError, match="less the workspace reserve of 1,000 bytes"):
        model, batch, loss_fn = no_scratch()
        execute(model, batch, loss_fn, budget=7000, reserve_workspace=1000)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_a_cuda_step_measures_workspaces_with_the_allocators_statistics():
    model, batch, loss_fn = attention()
    model = model.cuda()
    batch = tuple(t.cuda() for t in batch)
    result = execute(model, batch, loss_fn, ratio=1.0, workspaces=True)
    assert result.workspaces.method == Meter(torch.device("cuda")).method
    assert result.workspaces.op_runs > 0 and result.matches_simulation()


def test_on_cuda_a_workspace_is_read_from_the_allocators_statistics(monkeypatch):
    """The CUDA path's arithmetic, with the allocator's counters played by a fake
    (this machine has no device): allocated before, peak since the reset, after."""
    state = {"now": 1000, "peak": 0}

    def allocate(n):
        state["now"] += n
        state["peak"] = max(state["peak"], state["now"])

    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: state["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda dev=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda dev=None: state.update(peak=state["now"]))
    meter = Meter(torch.device("cuda"))
    with meter.session():
        with meter.around(7, 500):
            allocate(256)       # the output
            allocate(4096)      # scratch
            allocate(-4096)
        with meter.around(8, 756):
            allocate(128)
    assert meter.runs == [(7, 4096, 500 + 256 + 4096), (8, 0, 756 + 128)]
