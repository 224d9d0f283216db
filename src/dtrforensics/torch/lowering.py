"""The engine's schedule of a joint graph lowered into forward and backward graphs.

`lower(joint, schedule)` walks the engine's events (`schedule.py`) in `seq`
order and builds one graph in the schedule's order, then cuts it where the
backward starts (the first tangent's CONSTANT):

- a **compute** of an op is a copy of the node that wrote the op, its
  arguments read from the values holding their tensors *now*; a
  **rematerialization** is another copy of the same node, placed where the
  engine rebuilds it (nested rebuilds come first, in the engine's order), and
  every later reader of its tensors reads the copy;
- an **eviction** (pressure, or a dead free) of a storage ends the life of
  every value holding one of its tensors: a `dtr_drop` node takes them all,
  so FX's generated code drops the last reference to them right there (a
  value lives from its node to its last use, and a drop is the last use);
- an **allocation check**, in a checking graph, is a `dtr_check` node that
  compares the live storage bytes with the engine's memory there (`backend.py`);
- what the backward reads of the forward crosses as a saved output of the
  forward graph (a primal included); what the forward returns must be
  resident when it returns, and must never be evicted after (its caller holds
  it): the joint log pins it where the forward ends (`joint.py`), so no
  schedule does either; one that did would be refused.

A random op the schedule reruns keeps the generator's state from before its
first run (`dtr_rng_state`, held until its last rerun) and reruns under it
(`dtr_rerun_random`), so a rebuilt dropout mask is the original. An op that
writes its arguments, or one whose node wrote several log ops, is refused
where the schedule reruns it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import fx

from ..engine.hooks import (
    E_DEPTH,
    E_FLAG,
    E_KIND,
    E_MEMORY,
    E_OP,
    E_STORAGE,
    E_TENSOR,
    EV_ALLOC_CHECK,
    EV_COMPUTE,
    EV_EVICT,
    EV_FREE_DEAD,
    EV_MATERIALIZE,
    FLAG_COLLATERAL,
    FLAG_REMAT,
)
from .joint import JointLog, NotExpressibleError


def dtr_drop(*values) -> None:
    """The point where the engine frees a storage: the last use of its values."""


class CheckPoints:
    """Where `dtr_check` nodes report; `backend.LiveCheck` replaces `hook`, and
    `states` (told of each generator state `dtr_rng_state` keeps)."""

    hook = None
    states = None


def dtr_check(index: int) -> None:
    """An allocation check of the schedule: the live bytes are compared here."""
    if CheckPoints.hook is not None:
        CheckPoints.hook(index)


def _generator_state(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _set_generator_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def dtr_rng_state(device: torch.device) -> torch.Tensor:
    """The generator's state before a random op the schedule reruns (outside any
    dispatch mode: bookkeeping, not a storage of the step)."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        state = _generator_state(device)
    if CheckPoints.states is not None:
        CheckPoints.states(state)
    return state


def dtr_rerun_random(state: torch.Tensor, device: torch.device, op, *args, **kwargs):
    """Rerun random `op` under the generator state of its first run (as
    `torch.utils.checkpoint`'s `preserve_rng_state`), the generator left as it was."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        now = _generator_state(device)
        _set_generator_state(device, state)
    try:
        return op(*args, **kwargs)
    finally:
        with _disable_current_modes():
            _set_generator_state(device, now)


for _f in (dtr_drop, dtr_check, dtr_rng_state, dtr_rerun_random):
    torch.fx.node.has_side_effect(_f)


@dataclass
class Lowered:
    """The forward and backward graphs of a schedule, and what they do."""

    forward: fx.GraphModule
    backward: fx.GraphModule
    victims: list[int] = field(default_factory=list)       # pressure evictions, storage ids in order
    dead_frees: int = 0
    remats: int = 0
    check_memory: list[int] = field(default_factory=list)  # engine memory at each check, in order
    saved: int = 0
    check_ops: list[int] = field(default_factory=list)     # the log op of each check, in order


class _Builder:
    """One graph in the schedule's order (see the module docstring)."""

    def __init__(self, joint: JointLog, checking: bool):
        self.joint, self.program, self.checking = joint, joint.program, checking
        self.graph = fx.Graph()
        self.version: dict[int, fx.Node] = {}
        self.env_placeholders: dict[fx.Node, fx.Node] = {}
        self.cut: fx.Node | None = None
        self.result = None
        storages = joint.program.tensor_storage.tolist()
        self.storage_tensors: dict[int, list[int]] = {}
        for tid, sid in enumerate(storages):
            self.storage_tensors.setdefault(sid, []).append(tid)
        self.tensor_op = joint.program.tensor_op.tolist()
        self.victims: list[int] = []
        self.dead = 0
        self.remats = 0
        self.checks: list[int] = []
        self.check_ops: list[int] = []
        self.forward_tensors = _tensor_ids(joint, joint.forward_outputs())
        self.held: set[int] = set()        # storages of the forward's outputs, once returned
        self.rng: dict[int, fx.Node] = {}   # random op rerun by the schedule -> its generator state
        self.rerun: set[int] = set()

    def reruns(self, events: np.ndarray) -> None:
        """The ops the schedule rebuilds (a random one keeps its generator state)."""
        remat = (events[:, E_KIND] == EV_COMPUTE) & (events[:, E_FLAG] & FLAG_REMAT != 0) \
            & (events[:, E_FLAG] & FLAG_COLLATERAL == 0)
        self.rerun = {self.tensor_op[t] for t in events[remat, E_TENSOR].tolist()}

    def placeholders(self) -> None:
        for p in self.joint.graph.graph.find_nodes(op="placeholder"):
            new = self.graph.placeholder(p.name)
            new.meta = dict(p.meta)
            self.env_placeholders[p] = new
            tid = self.joint.placeholder_tensor.get(p)
            if tid is not None:
                self.version[tid] = new

    def arg(self, a):
        if not isinstance(a, fx.Node):
            return a
        if a in self.env_placeholders:
            return self.env_placeholders[a]
        tensors = self.joint.node_tensors.get(a)
        if not tensors or tensors[0] is None or len(tensors) != 1:
            raise NotExpressibleError(f"node {a.name} is read as a value but holds no single tensor")
        node = self.version.get(tensors[0])
        if node is None:
            raise NotExpressibleError(f"node {a.name} (tensor {tensors[0]}) is read while evicted")
        return node

    def compute(self, op: int, remat: bool) -> None:
        if self.program.is_constant(op):
            return
        if op in self.joint.secondary_ops:
            raise NotExpressibleError(f"op {op} ({self.program.op_name(op)}) is not the first "
                                      "op its node wrote; it cannot be rerun alone")
        node = self.joint.op_node[op]
        if remat:
            _check_rerunnable(node, op, self.program)
            self.remats += 1
        new = self._random_copy(node, op, remat) if _is_random(node) and op in self.rerun \
            else self.graph.node_copy(node, self.arg)
        outputs = set(self.program.op_outputs_of(op))
        tensors = self.joint.node_tensors[node]
        many = isinstance(node.meta.get("val"), (tuple, list))
        for i, tid in enumerate(tensors):
            if tid is None or tid not in outputs or tid in self.version:
                continue
            if many:
                item = self.graph.call_function(operator.getitem, (new, i))
                item.meta["val"] = node.meta["val"][i]
                self.version[tid] = item
            else:
                self.version[tid] = new

    def _random_copy(self, node: fx.Node, op: int, remat: bool) -> fx.Node:
        """A random op the schedule reruns: its first run keeps the generator's
        state, each rerun runs under it."""
        device = _device_of(node)
        if not remat:
            state = self.rng[op] = self.graph.call_function(dtr_rng_state, (device,))
            state.meta["val"] = _fake_state(node, device)
            return self.graph.node_copy(node, self.arg)
        args = tuple(fx.map_arg(node.args, self.arg))
        kwargs = dict(fx.map_arg(node.kwargs, self.arg))
        new = self.graph.call_function(dtr_rerun_random, (self.rng[op], device, node.target, *args),
                                       kwargs)
        new.meta = dict(node.meta)
        return new

    def free(self, sid: int, pressure: bool) -> None:
        if sid in self.held:
            raise NotExpressibleError(f"the schedule evicts storage {sid}, which the forward "
                                      "returns to its caller (who holds it)")
        values = []
        for tid in self.storage_tensors.get(sid, ()):
            node = self.version.pop(tid, None)
            if node is not None:
                values.append(node)
        if values:
            self.graph.call_function(dtr_drop, tuple(dict.fromkeys(values)))
        if pressure:
            self.victims.append(sid)
        else:
            self.dead += 1

    def start_backward(self) -> None:
        missing = [t for t in self.forward_tensors if t is not None and t not in self.version]
        if missing:
            raise NotExpressibleError(f"the schedule evicts tensor {missing[0]}, an output of the "
                                      "forward, before the forward returns")
        self.cut_outputs = [None if t is None else self.version[t] for t in self.forward_tensors]
        storages = self.program.tensor_storage
        self.held = {int(storages[t]) for t in self.forward_tensors if t is not None}
        self.cut = self.graph.call_function(dtr_drop, ())

    def event(self, e: list) -> None:
        kind = e[E_KIND]
        if kind == EV_MATERIALIZE:
            if self.cut is None and e[E_DEPTH] == 1 and e[E_OP] >= self.joint.backward_op:
                self.start_backward()
        elif kind == EV_COMPUTE:
            if not e[E_FLAG] & FLAG_COLLATERAL:
                self.compute(self.tensor_op[e[E_TENSOR]], bool(e[E_FLAG] & FLAG_REMAT))
        elif kind == EV_EVICT:
            self.free(e[E_STORAGE], True)
        elif kind == EV_FREE_DEAD:
            self.free(e[E_STORAGE], False)
        elif kind == EV_ALLOC_CHECK:
            if self.program.is_constant(e[E_OP]):
                return      # a constant exists before the graph that reads it runs
            if self.checking:
                self.graph.call_function(dtr_check, (len(self.checks),))
            self.checks.append(e[E_MEMORY])
            self.check_ops.append(e[E_OP])

    def finish(self) -> list:
        if self.cut is None:
            self.start_backward()
        self.backward_values = _tensor_ids(self.joint, self.joint.backward_outputs())
        # what the engine still holds at the end (a rebuilt storage nothing
        # references any more stays until evicted) lives to the end here too
        kept = [n for n in self.version.values() if n.op != "placeholder"]
        if kept:
            self.graph.call_function(dtr_drop, tuple(dict.fromkeys(kept)))
        outs = []
        for t in self.backward_values:
            if t is None:
                outs.append(None)
            elif t not in self.version:
                raise NotExpressibleError(f"gradient tensor {t} is not resident at the end")
            else:
                outs.append(self.version[t])
        return outs


def _tensor_ids(joint: JointLog, nodes: list) -> list:
    found = []
    for n in nodes:
        if not isinstance(n, fx.Node):
            found.append(None)
            continue
        tensors = joint.node_tensors.get(n) or [joint.placeholder_tensor.get(n)]
        found.append(tensors[0])
    return found


def _is_random(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and \
        torch.Tag.nondeterministic_seeded in target.tags


def _device_of(node: fx.Node) -> torch.device:
    val = node.meta.get("val")
    for t in (val if isinstance(val, (tuple, list)) else [val]):
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def _fake_state(node: fx.Node, device: torch.device):
    """A fake tensor shaped as the generator's state, for AOTAutograd's bookkeeping
    of what the backward reads."""
    val = node.meta.get("val")
    val = next(t for t in (val if isinstance(val, (tuple, list)) else [val])
               if isinstance(t, torch.Tensor))
    real = dtr_rng_state(device)
    with val.fake_mode:
        return torch.empty(real.shape, dtype=real.dtype, device=real.device)


def _check_rerunnable(node: fx.Node, op: int, program) -> None:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if any(a.is_write for a in target._schema.arguments):
            raise NotExpressibleError(f"the schedule recomputes op {op} ({program.op_name(op)}), "
                                      "which writes its arguments")


def lower(joint: JointLog, events: np.ndarray, checking: bool = False) -> Lowered:
    """The schedule `events` (an engine run of `joint.program`) as forward and
    backward graph modules, in AOTAutograd's partition convention: the forward
    returns its outputs then the saved values; the backward takes the saved
    values then the tangents and returns the gradients."""
    b = _Builder(joint, checking)
    b.reruns(events)
    b.placeholders()
    for e in events.tolist():
        b.event(e)
    bw_outputs = b.finish()
    forward, backward, saved = _split(joint, b, bw_outputs)
    return Lowered(forward, backward, b.victims, b.dead, b.remats, b.checks, saved, b.check_ops)


def _split(joint: JointLog, b: _Builder, bw_outputs: list) -> tuple[fx.GraphModule, fx.GraphModule, int]:
    from torch._functorch.partitioners import _is_tangent
    nodes = list(b.graph.nodes)
    cut = nodes.index(b.cut)
    before, after = nodes[:cut], nodes[cut + 1:]
    early = set(before)
    saved: list[fx.Node] = []
    for n in after:
        for a in n.all_input_nodes:
            if a in early and a not in saved:
                saved.append(a)
    for a in bw_outputs:
        if a is not None and a in early and a not in saved:
            saved.append(a)
    tangents = [n for n in before if n.op == "placeholder" and _is_tangent(n)]
    saved = [n for n in saved if n not in tangents]
    fw = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in before:
        if n.op == "placeholder" and _is_tangent(n):
            continue
        env[n] = fw.node_copy(n, lambda a: env[a])
    fw_out = list(b.cut_outputs) + saved
    out = fw.output(tuple(env[n] if n is not None else None for n in fw_out))
    out.meta["desc"] = _descs(joint, len(b.cut_outputs), len(saved))
    bw = fx.Graph()
    benv: dict[fx.Node, fx.Node] = {}
    for n in saved + tangents:
        p = bw.placeholder(n.name)
        p.meta = dict(n.meta)
        benv[n] = p
    for n in after:
        benv[n] = bw.node_copy(n, lambda a: benv[a])
    bw.output(tuple(benv[n] if n is not None else None for n in bw_outputs))
    root = joint.graph
    return (fx.GraphModule(root, fw), fx.GraphModule(root, bw), len(saved))


def _descs(joint: JointLog, n_outputs: int, n_saved: int) -> list:
    from torch._functorch._aot_autograd.descriptors import SavedForBackwardsAOTOutput
    out = next(iter(joint.graph.graph.find_nodes(op="output")))
    descs = list(out.meta.get("desc") or [None] * n_outputs)[:n_outputs]
    return descs + [SavedForBackwardsAOTOutput(i) for i in range(n_saved)]
