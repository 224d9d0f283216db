"""The whole training step: optimizer states from the start and `optimizer.step()`
recorded, autocast, activation checkpointing recorded as it recomputes; and the
floor that `traces info` and `torch record` print."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from cli import dtrf
from live_count import LiveBytesTracker
from torch import nn
from torch.utils.checkpoint import checkpoint

from dtrforensics.engine.replay import replay
from dtrforensics.torch import RecordError, record
from dtrforensics.torch.optim import state_tensors, steady_optimizer
from dtrforensics.torch.recorder import constants_of
from dtrforensics.torch.spec import build
from dtrforensics.trace.parser import parse_file

# Values are compared bitwise: one intra-op thread sums in the same order every
# run (and on a shared 2-core machine it is the faster setting).
pytestmark = pytest.mark.usefixtures("one_thread")


def gpt(fake=False):
    torch.manual_seed(0)
    return build("zoo:gpt", fake=fake)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def after_backward(records):
    start = next(i for i, r in enumerate(records) if r.get("ANNOTATION") == "BACKWARD")
    return records[start:]


@pytest.mark.parametrize("name,states", [("sgd", 1), ("adam", 3), ("adamw", 3)])
def test_optimizer_states_exist_from_the_start_and_its_step_is_recorded(name, states, tmp_path):
    """Every parameter's update is a MUTATE (a new version); every state's (momentum,
    moments, step counts) a CALL whose result is a view of the state."""
    model, batch, loss_fn = gpt()
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    record(model, batch, loss_fn, tmp_path / "o.log", optimizer=name)
    plain = record(*gpt(), tmp_path / "p.log")
    records = lines(tmp_path / "o.log")
    constants = sum(r["INSTRUCTION"] == "CONSTANT" for r in records)
    base = sum(r["INSTRUCTION"] == "CONSTANT" for r in lines(tmp_path / "p.log"))
    assert constants == base + states * len(params)      # momentum / step, exp_avg, exp_avg_sq
    assert base == len(params) + len(list(model.buffers())) + 1   # the batch: views of one storage
    param_names = {f"x{i}" for i in range(len(params))}   # parameters are named first
    state_names = {f"x{i}" for i in range(base, constants)}   # states after the batch
    step = after_backward(records)
    mutated = {r["ARGS"][i] for r in step if r["INSTRUCTION"] == "MUTATE" for i in r["MUTATE"]}
    assert param_names <= mutated
    assert state_names <= updated_in_place(step)
    assert not mutated & names_on(records, state_names)
    assert all(not torch.equal(p, q) for p, q in zip(params, before))   # the step ran
    assert all(p.grad is not None for p in params)
    assert plain.ops < parse_file(tmp_path / "o.log").n_ops


def names_on(records, roots):
    """`roots` and every name that is a view of one of them (or of such a view)."""
    found, pending = set(roots), {}
    for r in records:
        if r["INSTRUCTION"] == "CALL":
            pending = {name: r["ARGS"] for name in r["RESULT"]}
        elif r["INSTRUCTION"] == "ALIAS" and r["ALIAS"] != "-1" and \
                pending[r["NAME"]][int(r["ALIAS"])] in found:
            found.add(r["NAME"])
    return found


def updated_in_place(records):
    """Names an in-place op (`add_`, `lerp_`, ...) returns a view of: the tensors it updated."""
    found, pending = set(), {}
    for r in records:
        if r["INSTRUCTION"] == "CALL" and r["NAME"].endswith("_"):
            pending = {name: r["ARGS"] for name in r["RESULT"]}
        elif r["INSTRUCTION"] == "ALIAS" and r["NAME"] in pending and r["ALIAS"] != "-1":
            found.add(pending[r["NAME"]][int(r["ALIAS"])])
    return found


@pytest.mark.parametrize("spec,sizes,name", [("zoo:gpt", {}, "adamw"), ("zoo:gpt", {}, "adam"),
                                             ("zoo:mlp", {"batch": 1, "layers": 8}, "sgd")])
def test_optimizer_step_memory_is_live_storage_plus_new_parameter_versions(spec, sizes, name,
                                                                            tmp_path):
    """The log's peak is the live storage peak with each parameter counted a second
    time at each op that writes it (its new version beside the old, which the
    unconstrained run then frees), states written in place; a DTR run keeps every
    old version pinned (the parameters' bytes, counted from PyTorch), so the floor
    holds them, and fake mode gives the same log. With `mlp` at batch 1 the update
    is the peak."""
    torch.manual_seed(0)
    model, batch, loss_fn = build(spec, **sizes)
    params = list(model.parameters())
    opt = steady_optimizer(name, params)
    states = state_tensors(opt)
    with LiveBytesTracker(constants_of(model, batch) + states, in_place=states) as tracker:
        real = record(model, batch, loss_fn, tmp_path / "r.log", optimizer=opt)
    assert real.peak == tracker.versioned_peak
    least = real.floor
    assert least.old_version_bytes == sum(p.untyped_storage().nbytes() for p in params)
    program = parse_file(tmp_path / "r.log")
    assert replay(program, budget=least.floor - 1).summary.outcome != "ok"
    torch.manual_seed(0)
    record(*build(spec, fake=True, **sizes), tmp_path / "f.log", fake=True, optimizer=name)
    assert (tmp_path / "f.log").read_bytes() == (tmp_path / "r.log").read_bytes()


def test_an_optimizer_of_other_tensors_is_refused(tmp_path):
    model, batch, loss_fn = gpt()
    stranger = steady_optimizer("sgd", [torch.zeros(3, requires_grad=True)])
    with pytest.raises(RecordError, match="not the model's parameters"):
        record(model, batch, loss_fn, tmp_path / "x.log", optimizer=stranger)
    assert not (tmp_path / "x.log").exists()


def test_autocast_bf16_casts_in_the_log_and_fake_equals_real(tmp_path):
    full = record(*gpt(), tmp_path / "full.log")
    mixed = record(*gpt(), tmp_path / "bf16.log", autocast="bf16")
    names = [r.get("NAME") for r in lines(tmp_path / "bf16.log") if r["INSTRUCTION"] == "CALL"]
    assert "_to_copy" in names and mixed.loss != full.loss
    record(*gpt(fake=True), tmp_path / "fake.log", fake=True, autocast="bf16")
    assert (tmp_path / "fake.log").read_bytes() == (tmp_path / "bf16.log").read_bytes()
    with pytest.raises(RecordError, match="unknown autocast"):
        record(*gpt(), tmp_path / "x.log", autocast="fp8")


class Checkpointed(nn.Module):
    def __init__(self, use_checkpoint):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
                                    for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = x + (checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x))
        return x


def test_activation_checkpointing_is_recorded_as_it_recomputes(tmp_path):
    runs = {}
    for flag in (False, True):
        torch.manual_seed(0)
        model = Checkpointed(flag)
        x = torch.randn(16, 32)
        summary = record(model, (x, None), lambda out, _: out.square().mean(), tmp_path / f"{flag}.log")
        calls = [r["NAME"] for r in after_backward(lines(tmp_path / f"{flag}.log"))
                 if r["INSTRUCTION"] == "CALL"]
        runs[flag] = summary, calls.count("gelu"), [p.grad for p in model.parameters()]
    (plain, plain_gelus, plain_grads), (ckpt, ckpt_gelus, ckpt_grads) = runs[False], runs[True]
    assert (plain_gelus, ckpt_gelus) == (0, 4)          # each block's forward runs again in backward
    assert ckpt.peak < plain.peak and ckpt.loss == plain.loss
    assert all(torch.allclose(a, b) for a, b in zip(plain_grads, ckpt_grads))


FAST_FLOORS = [("gpt", "adamw"), ("resnet", None), ("unet", "sgd")]
ZOO_FLOORS = FAST_FLOORS + [pytest.param(name, optimizer, marks=pytest.mark.slow)
                            for name in ("gpt", "resnet", "lstm", "unet", "mlp", "encoder", "moe")
                            for optimizer in (None, "sgd", "adam", "adamw")
                            if (name, optimizer) not in FAST_FLOORS]


@pytest.mark.parametrize("name,optimizer", ZOO_FLOORS)
def test_no_policy_completes_a_zoo_step_one_byte_below_its_floor(name, optimizer, tmp_path):
    """The floor is a bound on the zoo's logs too (tests/test_floor.py proves it on
    hand-written, generated and random ones), with and without an optimizer."""
    torch.manual_seed(0)
    least = record(*build(f"zoo:{name}"), tmp_path / "z.log", optimizer=optimizer).floor
    program = parse_file(tmp_path / "z.log")
    from oracle import SCORE_KINDS
    for policy in SCORE_KINDS:
        assert replay(program, budget=least.floor - 1, policy=policy).summary.outcome != "ok", policy


def test_torch_record_says_when_the_state_is_nearly_all_of_the_peak(tmp_path):
    """One sample through eight layers: parameters and gradients are the step."""
    args = ["torch", "record", "zoo:mlp", "-o", str(tmp_path / "mlp.log"), "--batch", "1",
            "--set", "layers=8"]
    bounds = dtrf(*args, "--json").json()["floor"]
    assert bounds["state_bound"] and not bounds["above_peak_bytes"]
    text = " ".join(dtrf(*args).ok().split())
    assert "parameters, gradients and optimizer states are" in text
    assert "no budget below" in text


def test_torch_record_says_why_the_floor_lies_above_the_peak(tmp_path):
    """With SGD the old version of every parameter stays pinned in a DTR run, while
    the unconstrained run frees it: one line says how many bytes, and why."""
    args = ["torch", "record", "zoo:mlp", "-o", str(tmp_path / "mlp.log"), "--batch", "1",
            "--set", "layers=8", "--optimizer", "sgd"]
    bounds = dtrf(*args, "--json").json()["floor"]
    assert bounds["floor_op_id"] == -1 and bounds["above_peak_bytes"] > 0
    assert bounds["floor_bytes"] == bounds["peak_bytes"] + bounds["above_peak_bytes"]
    text = " ".join(dtrf(*args).ok().split())
    assert f"the floor lies {bounds['above_peak_bytes']:,} B above the unconstrained peak" in text
    assert bounds["old_version_bytes"] == bounds["freed_constant_bytes"] > 0
    assert (f"frees {bounds['freed_constant_bytes']:,} B of them: old versions of tensors written "
            "in place") in text
    assert "parameters, gradients and optimizer states are" not in text
