"""The whole training step: an optimizer in its steady state, and mixed precision.

A recorded step with an optimizer is a step of a running loop, not the first:
the optimizer's states (momentum buffers, Adam's moments and step counts)
exist before it starts, as the second step of a real loop sees them. They are
made by the library itself, one `optimizer.step()` on zero gradients at
learning rate 0 before recording (it changes no parameter), then
`zero_grad(set_to_none=True)` as the default loop does; the recorded step is
forward, loss, backward, `optimizer.step()`. The optimizers use their default
implementation for the device (the per-parameter loop on CPU).
"""

from __future__ import annotations

import contextlib

import torch

from .recorder import RecordError

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
}
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def steady_optimizer(name, params: list[torch.Tensor]):
    """The optimizer `name` over `params` with its states made, grads set to None.

    `name` may also be an optimizer over `params`, stepped as it is (its states, if
    it has any, are the step's constants)."""
    if name is None:
        return None
    if isinstance(name, torch.optim.Optimizer):
        own = {id(p) for p in params}
        if any(id(p) not in own for group in name.param_groups for p in group["params"]):
            raise RecordError("the optimizer given updates tensors that are not the model's "
                              "parameters in this recording (a real model recorded in fake "
                              "mode gets fake copies): name it instead (sgd, adam, adamw)")
        return name
    if name not in OPTIMIZERS:
        raise RecordError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    trained = [p for p in params if p.requires_grad]
    optimizer = OPTIMIZERS[name](trained)
    rates = [group["lr"] for group in optimizer.param_groups]
    with torch.no_grad():
        for p in trained:
            p.grad = torch.zeros_like(p)
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    optimizer.step()
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def state_tensors(optimizer) -> list[torch.Tensor]:
    """The optimizer's state tensors, in parameter order, each state in its own order."""
    if optimizer is None:
        return []
    found = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            found += [v for v in optimizer.state[p].values() if isinstance(v, torch.Tensor)]
    return found


def autocast_context(name: str | None):
    """`torch.autocast` on CPU for the forward pass and the loss, or nothing."""
    if name is None:
        return contextlib.nullcontext()
    if name not in AUTOCAST:
        raise RecordError(f"unknown autocast {name!r}; known: {', '.join(AUTOCAST)}")
    return torch.autocast("cpu", dtype=AUTOCAST[name])
