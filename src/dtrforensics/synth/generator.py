"""Seeded synthetic DTR logs with planted structure (issue: synthetic traces).

The output is byte-for-byte in the style of the public DTR prototype logs
(docs/semantics.md §2.1): one compact JSON object per line with sorted keys, a
`{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}` first line, `MEMORY`, `TIME`
and `ALIAS` values as decimal strings, tensor names `x<N>` numbered in order of
appearance.

Two entry points:

* `generate(spec)` builds a model out of composable blocks (chains, residual
  blocks, recurrent unrolls with shared weights, tuple outputs, views and views
  of views, in-place ops) and, when `spec.backward`, a training-style backward
  pass: forward ops keep references (`COPY`) to the activations their backward
  needs, the backward consumes them in reverse order and releases them, and
  gradients accumulate (`add` or in-place `add_`) where a value or a shared
  weight is used more than once.
* `random_small_log(seed, n_ops)` is a small, unstructured but valid log that
  mixes every instruction kind and semantic corner (COPY_FROM, RELEASE of
  unknown names, several references to one tensor, views of views, mutation of
  a view and of a constant, tuple ops with a released sibling, duplicated
  arguments, zero costs, zero sizes, equal sizes and costs). Property tests use
  it to compare the engine with the oracle.

Both are pure functions of their parameters: a `numpy.random.Generator` seeded
from the spec drives every choice, so the same seed and parameters give the
same text. Generated logs keep one invariant the tests rely on: a constant
(pinned) tensor never loses its last reference before the last operator, so
the unconstrained peak is a true bound and any budget >= peak replays with
zero evictions.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..fsutil import atomic_path

KINDS = ("chain", "resnet", "rnn", "mixed")

__all__ = ["KINDS", "SynthSpec", "generate", "write", "random_small_log"]


# --------------------------------------------------------------------------- #
# Spec
# --------------------------------------------------------------------------- #

@dataclass(frozen=True)
class SynthSpec:
    """What to generate. Every random choice is drawn from `seed`.

    kind        chain | resnet | rnn | mixed.
    depth       layers (chain), residual blocks (resnet), unrolled steps (rnn),
                segments (mixed).
    width       parallel branches per layer/block (joined by `cat`), or gate
                matmuls per step (rnn). 1 = a plain sequence.
    size_range  activation sizes in bytes, inclusive, drawn log-uniformly and
                rounded to `align` bytes.
    param_size_range  parameter (weight) sizes in bytes.
    cost_range  base op cost in ns (a conv/matmul); other ops scale it down.
    view_prob   chance that a layer output goes through a view (and again, a
                view of that view).
    tuple_prob  chance that a layer uses a multi-output op (batch-norm style:
                output, 2 saved statistics, a 0-byte reserve released at once).
    mutate_prob chance of an in-place op (`relu_`, residual `add_`, gradient
                accumulation `add_`) instead of its out-of-place form.
    size_levels if > 0, activation sizes come from this many fixed levels (more
                equal sizes, so more score ties).
    backward    emit a training backward pass after the forward.
    name_base   number of the first tensor name (`x<name_base>`).
    """

    kind: str = "chain"
    depth: int = 8
    width: int = 1
    size_range: tuple[int, int] = (1 << 20, 1 << 24)
    param_size_range: tuple[int, int] = (1 << 10, 1 << 16)
    cost_range: tuple[int, int] = (50_000, 2_000_000)
    view_prob: float = 0.2
    tuple_prob: float = 0.3
    mutate_prob: float = 0.2
    size_levels: int = 0
    seed: int = 0
    backward: bool = True
    name_base: int = 1000
    align: int = 256

    def validate(self) -> "SynthSpec":
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        if self.width < 1:
            raise ValueError(f"width must be >= 1, got {self.width}")
        for label, (lo, hi) in (("size_range", self.size_range),
                                ("param_size_range", self.param_size_range),
                                ("cost_range", self.cost_range)):
            if lo < 0 or hi < lo:
                raise ValueError(f"{label} must satisfy 0 <= lo <= hi, got ({lo}, {hi})")
        for label in ("view_prob", "tuple_prob", "mutate_prob"):
            p = getattr(self, label)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{label} must be in [0, 1], got {p}")
        if self.size_levels < 0 or self.name_base < 0 or self.align < 1:
            raise ValueError("size_levels and name_base must be >= 0 and align >= 1")
        return self

    def with_(self, **changes) -> "SynthSpec":
        return replace(self, **changes)

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("size_range", "param_size_range", "cost_range"):
            out[key] = list(out[key])
        return out


# --------------------------------------------------------------------------- #
# Log writer: the public logs' exact field style
# --------------------------------------------------------------------------- #

def _dump(record: dict) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


class LogWriter:
    """Emits instruction lines and hands out fresh `x<N>` names."""

    def __init__(self, name_base: int = 1000):
        self.lines: list[str] = [_dump({"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"})]
        self.counter = name_base
        self.n_ops = 0

    def fresh(self) -> str:
        name = f"x{self.counter}"
        self.counter += 1
        return name

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def annotate(self, what: str) -> None:
        self.lines.append(_dump({"INSTRUCTION": "ANNOTATE", "ANNOTATION": what}))

    def constant(self, size: int) -> str:
        name = self.fresh()
        self.lines.append(_dump({"INSTRUCTION": "CONSTANT", "NAME": name}))
        self.lines.append(_dump({"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(int(size))}))
        self.n_ops += 1
        return name

    def call(self, op: str, args: list[str], outs: list[tuple[int, int]], time: int) -> list[str]:
        """outs: (MEMORY bytes, ALIAS index or -1) per result."""
        results = [self.fresh() for _ in outs]
        self.lines.append(_dump({"INSTRUCTION": "CALL", "RESULT": results, "NAME": op,
                                 "ARGS": list(args), "TIME": str(int(time))}))
        for name, (size, alias) in zip(results, outs):
            self.lines.append(_dump({"INSTRUCTION": "MEMORY", "NAME": name,
                                     "MEMORY": str(int(size))}))
            self.lines.append(_dump({"INSTRUCTION": "ALIAS", "NAME": name,
                                     "ALIAS": str(int(alias))}))
        self.n_ops += 1
        return results

    def mutate(self, op: str, args: list[str], indices: list[int], time: int) -> None:
        self.lines.append(_dump({"INSTRUCTION": "MUTATE", "NAME": op, "ARGS": list(args),
                                 "MUTATE": [int(i) for i in indices], "TIME": str(int(time))}))
        self.n_ops += 1

    def copy(self, src: str) -> str:
        dst = self.fresh()
        self.lines.append(_dump({"INSTRUCTION": "COPY", "DST": dst, "SRC": src}))
        return dst

    def copy_from(self, dst: str, src: str) -> None:
        self.lines.append(_dump({"INSTRUCTION": "COPY_FROM", "DST": dst, "SRC": src}))

    def release(self, name: str) -> None:
        self.lines.append(_dump({"INSTRUCTION": "RELEASE", "NAME": name}))


# --------------------------------------------------------------------------- #
# Structured models with an autograd-style backward
# --------------------------------------------------------------------------- #

@dataclass(eq=False)
class _Val:
    """A forward value: the name that holds it and its logical size."""
    name: str
    size: int
    grad: bool          # requires a gradient
    uid: int = 0
    const: bool = False  # the CONSTANT's own name: released only after the last op


@dataclass(eq=False)
class _Node:
    """One tape entry: what the backward of a forward op needs."""
    op: str
    inputs: list[_Val]          # inputs that receive gradients (duplicates kept)
    outputs: list[_Val]         # outputs whose gradients flow in
    saved: list[str]            # names kept alive for the backward
    cost: int
    view: bool = False          # the backward is a view of the incoming gradient


class _Model:
    def __init__(self, spec: SynthSpec):
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.log = LogWriter(spec.name_base)
        self.tape: list[_Node] = []
        self.params: list[_Val] = []
        self.deferred: list[str] = []
        self._uid = 0
        lo, hi = spec.size_range
        self.levels: list[int] = []
        if spec.size_levels > 0:
            self.levels = sorted({self._round(v) for v in self._geom(lo, hi, spec.size_levels)})

    # -- random draws ---------------------------------------------------------
    @staticmethod
    def _geom(lo: int, hi: int, n: int) -> list[float]:
        if n == 1 or lo == hi:
            return [float(hi)]
        lo_ = max(lo, 1)
        return [math.exp(math.log(lo_) + (math.log(hi) - math.log(lo_)) * i / (n - 1))
                for i in range(n)]

    def _round(self, value: float) -> int:
        a = self.spec.align
        lo, hi = self.spec.size_range
        out = int(round(value / a)) * a
        return int(min(max(out, lo), hi))

    def _loguniform(self, lo: int, hi: int) -> float:
        if lo == hi:
            return float(lo)
        if lo <= 0:
            return float(self.rng.uniform(lo, hi))
        return math.exp(self.rng.uniform(math.log(lo), math.log(hi)))

    def act_size(self) -> int:
        if self.levels:
            return int(self.levels[int(self.rng.integers(len(self.levels)))])
        return self._round(self._loguniform(*self.spec.size_range))

    def param_size(self) -> int:
        lo, hi = self.spec.param_size_range
        value = self._loguniform(lo, hi)
        return int(max(lo, min(hi, int(round(value / 4)) * 4)))

    def cost(self, scale: float = 1.0) -> int:
        return int(self._loguniform(*self.spec.cost_range) * scale)

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def _val(self, name: str, size: int, grad: bool) -> _Val:
        self._uid += 1
        return _Val(name, int(size), grad, self._uid)

    # -- leaves -----------------------------------------------------------------
    def param(self, size: int | None = None) -> _Val:
        size = self.param_size() if size is None else int(size)
        v = self._val(self.log.constant(size), size, True)
        v.const = True
        self.params.append(v)
        return v

    def buffer(self, size: int) -> _Val:
        """A constant that needs no gradient (inputs, running statistics, states)."""
        v = self._val(self.log.constant(size), size, False)
        v.const = True
        return v

    def release(self, v: _Val) -> None:
        # A constant's own name keeps it referenced until after the last op: the
        # reference runtime never frees a pinned storage, the baseline does, so an
        # early last release would make the baseline peak too low a bound.
        if v.const:
            self.deferred.append(v.name)
        else:
            self.log.release(v.name)

    # -- forward op ---------------------------------------------------------------
    def fwd(self, op: str, args: list[_Val], outs: list[tuple[int, int]], cost: int, *,
            save: tuple[_Val, ...] = (), save_outputs: tuple[int, ...] = (),
            drop_outputs: tuple[int, ...] = (), grad_outputs: int = 1,
            bw_scale: float = 2.0, view_backward: bool = False) -> list[_Val]:
        """A CALL plus its autograd bookkeeping, in the order the public logs show:
        COPY the inputs saved for backward, CALL, COPY saved outputs, release
        the outputs nobody uses."""
        needs_grad = self.spec.backward and any(a.grad for a in args)
        saved = [self.log.copy(v.name) for v in save] if needs_grad else []
        names = self.log.call(op, [a.name for a in args], outs, cost)
        results = [self._val(n, size, needs_grad and i < grad_outputs)
                   for i, (n, (size, _)) in enumerate(zip(names, outs))]
        if needs_grad:
            saved += [self.log.copy(results[i].name) for i in save_outputs]
            self.tape.append(_Node(op, [a for a in args if a.grad], results[:grad_outputs],
                                   saved, max(0, int(cost * bw_scale)), view_backward))
        for i in drop_outputs:
            self.release(results[i])
        return results

    def inplace(self, op: str, target: _Val, others: list[_Val], cost: int, *,
                save_result: bool = False) -> _Val:
        """MUTATE `target` (argument 0): the name now holds a new value."""
        self.log.mutate(op, [target.name] + [o.name for o in others], [0], cost)
        needs_grad = self.spec.backward and (target.grad or any(o.grad for o in others))
        new = self._val(target.name, target.size, needs_grad)
        if needs_grad:
            saved = [self.log.copy(new.name)] if save_result else []
            self.tape.append(_Node(op, [a for a in [target, *others] if a.grad], [new],
                                   saved, max(0, int(cost * 2.0))))
        return new

    # -- layers --------------------------------------------------------------------
    def maybe_view(self, x: _Val) -> _Val:
        """With view_prob, replace x by a view of it (and maybe a view of that view)."""
        for op in ("view", "transpose"):
            if not self.chance(self.spec.view_prob):
                break
            (v,) = self.fwd(op, [x], [(x.size, 0)], self.cost(0.002) + 1000,
                            view_backward=True)
            self.release(x)
            x = v
        return x

    def relu(self, x: _Val) -> _Val:
        if self.chance(self.spec.mutate_prob):
            return self.inplace("relu_", x, [], self.cost(0.2), save_result=True)
        (y,) = self.fwd("relu", [x], [(x.size, -1)], self.cost(0.2), save_outputs=(0,))
        self.release(x)
        return y

    def norm(self, x: _Val) -> _Val:
        """Batch-norm style tuple op: output, two saved statistics, a 0-byte reserve."""
        stat = max(4, self.param_size() // 16 * 4)
        gamma, beta = self.param(stat), self.param(stat)
        mean, var = self.buffer(stat), self.buffer(stat)
        y, *_ = self.fwd("batch_norm", [x, gamma, beta, mean, var],
                         [(x.size, -1), (stat, -1), (stat, -1), (0, -1)], self.cost(0.5),
                         save=(x, gamma), save_outputs=(1, 2), drop_outputs=(1, 2, 3))
        self.release(x)
        return y

    def conv(self, x: _Val, out_size: int, op: str = "convolution") -> _Val:
        w = self.param()
        (y,) = self.fwd(op, [x, w], [(out_size, -1)], self.cost(), save=(x, w))
        return y

    def unit(self, x: _Val, out_size: int, *, act: bool = True) -> _Val:
        """`width` parallel conv[-norm][-relu] branches on x, joined by `cat`."""
        width = self.spec.width
        part = max(self.spec.align, out_size // width // self.spec.align * self.spec.align)
        branches = []
        for _ in range(width):
            h = self.conv(x, part if width > 1 else out_size)
            if self.chance(self.spec.tuple_prob):
                h = self.norm(h)
            if act:
                h = self.relu(h)
            branches.append(self.maybe_view(h))
        self.release(x)
        if width == 1:
            return branches[0]
        (y,) = self.fwd("cat", branches, [(sum(b.size for b in branches), -1)],
                        self.cost(0.1))
        for b in branches:
            self.release(b)
        return y

    def add(self, a: _Val, b: _Val) -> _Val:
        """a + b; in place (`add_` on a) with mutate_prob. Consumes a, not b."""
        if self.chance(self.spec.mutate_prob):
            return self.inplace("add_", a, [b], self.cost(0.1))
        (y,) = self.fwd("add", [a, b], [(a.size, -1)], self.cost(0.1))
        self.release(a)
        return y

    # -- blocks ------------------------------------------------------------------
    def chain_layers(self, x: _Val, n: int) -> _Val:
        for _ in range(n):
            x = self.unit(x, self.act_size())
        return x

    def resnet_blocks(self, x: _Val, n: int, stages: int = 3) -> _Val:
        per_stage = max(1, math.ceil(n / stages))
        size = x.size
        for i in range(n):
            down = i > 0 and i % per_stage == 0
            if down:
                size = self.act_size()
            h = self.unit(self._keep(x), size)
            h = self.unit(h, size, act=False)
            if down or x.size != size:
                shortcut = self.conv(x, size, "downsample_convolution")
                self.release(x)
            else:
                shortcut = x
            out = self.add(h, shortcut)
            self.release(shortcut)
            x = self.relu(out)
        return x

    def _keep(self, v: _Val) -> _Val:
        """A second reference to v (COPY), so that a consumer may release it."""
        return _Val(self.log.copy(v.name), v.size, v.grad, v.uid)

    def rnn_steps(self, x: _Val, steps: int) -> _Val:
        hidden = self.act_size()
        gate = max(self.spec.align, hidden // 2 // self.spec.align * self.spec.align)
        width = self.spec.width
        w_ih = [self.param() for _ in range(width)]
        w_hh = [self.param() for _ in range(width)]
        bias = self.param()
        (h,) = self.fwd("linear", [x, w_ih[0]], [(hidden, -1)], self.cost(), save=(x, w_ih[0]))
        self.release(x)
        c = self.buffer(gate)
        for _ in range(steps):
            xt = self.buffer(self.act_size())
            gates = []
            for k in range(width):
                w = w_hh[k]
                if self.chance(self.spec.view_prob):      # `t` of a shared weight
                    (w,) = self.fwd("t", [w], [(w.size, 0)], 2000, view_backward=True)
                (a,) = self.fwd("addmm", [bias, xt, w_ih[k]], [(gate, -1)], self.cost(0.5),
                                save=(xt, w_ih[k]))
                (b,) = self.fwd("mm", [h, w], [(gate, -1)], self.cost(0.5), save=(h, w))
                if w is not w_hh[k]:
                    self.release(w)
                gates.append(self.add(a, b))
                self.release(b)
            if self.chance(self.spec.view_prob) and width == 1:   # split into views
                parts = self.fwd("split", gates, [(gate, 0)] * 3, 3000, grad_outputs=3,
                                 view_backward=False)
                self.release(gates[0])
                gates = parts
            outs = self.fwd("lstm_cell", gates + [c], [(hidden, -1), (gate, -1), (gate, -1)],
                            self.cost(0.3), save=tuple(gates) + (c,), save_outputs=(2,),
                            drop_outputs=(2,), grad_outputs=2)
            for g in gates:
                self.release(g)
            self.release(h)
            self.release(c)
            self.release(xt)
            h, c = self.maybe_view(outs[0]), outs[1]
        self.release(c)
        return h

    # -- whole model -------------------------------------------------------------
    def build(self) -> str:
        spec = self.spec
        x = self.buffer(self.act_size())
        if spec.kind == "chain":
            y = self.chain_layers(x, spec.depth)
        elif spec.kind == "resnet":
            y = self.resnet_blocks(self.unit(x, self.act_size()), spec.depth)
        elif spec.kind == "rnn":
            y = self.rnn_steps(x, spec.depth)
        else:
            y = x
            for _ in range(spec.depth):
                pick = int(self.rng.integers(3))
                n = 1 + int(self.rng.integers(3))
                if pick == 0:
                    y = self.chain_layers(y, n)
                elif pick == 1:
                    y = self.resnet_blocks(y, n, stages=1)
                else:
                    y = self.rnn_steps(y, n)
        self.loss_and_backward(y)
        return self.log.text()

    def loss_and_backward(self, y: _Val) -> None:
        target = self.buffer(64)
        w = self.param()
        (logits,) = self.fwd("linear", [y, w], [(self.param_size(), -1)], self.cost(0.2),
                             save=(y, w))
        self.release(y)
        loss, _ = self.fwd("nll_loss_forward", [logits, target], [(4, -1), (4, -1)],
                           self.cost(0.02), save=(logits, target), save_outputs=(1,),
                           drop_outputs=(1,))
        self.release(logits)
        grads: dict[int, str] = {}
        if self.spec.backward and loss.grad:
            self.log.annotate("BACKWARD")
            (seed,) = self.log.call("ones_like", [loss.name], [(4, -1)], 25_000)
            grads[loss.uid] = seed
            self.backward(grads)
        self.release(loss)
        self.release(target)
        # Gradients of parameters stay referenced (pinned at the end); inputs and
        # states lose their last reference after the last operator, as in the
        # public logs.
        for name in self.deferred:
            self.log.release(name)

    def backward(self, grads: dict[int, str]) -> None:
        for node in reversed(self.tape):
            gouts = [grads.pop(v.uid) for v in node.outputs if v.uid in grads]
            if not gouts or not node.inputs:
                for g in gouts:
                    self.log.release(g)
                for s in node.saved:
                    self.log.release(s)
                continue
            name = f"{node.op.removesuffix('_forward')}_backward"
            if node.view:
                # The gradient of a view is a view of the incoming gradient.
                (g,) = self.log.call(name, [gouts[0]], [(node.inputs[0].size, 0)], node.cost)
                results = [g]
            else:
                outs = [(inp.size, -1) for inp in node.inputs]
                results = self.log.call(name, gouts + node.saved, outs, node.cost)
            for g in gouts:
                self.log.release(g)
            for s in node.saved:
                self.log.release(s)
            for inp, g in zip(node.inputs, results):
                self.accumulate(grads, inp, g)

    def accumulate(self, grads: dict[int, str], inp: _Val, g: str) -> None:
        old = grads.get(inp.uid)
        if old is None:
            grads[inp.uid] = g
            return
        if self.chance(self.spec.mutate_prob):
            self.log.mutate("add_", [old, g], [0], self.cost(0.05))
            self.log.release(g)
        else:
            (new,) = self.log.call("add", [old, g], [(inp.size, -1)], self.cost(0.05))
            self.log.release(old)
            self.log.release(g)
            grads[inp.uid] = new


def generate(spec: SynthSpec) -> str:
    """The log text for `spec` (same spec -> same text)."""
    return _Model(spec.validate()).build()


def write(spec: SynthSpec, path: str | Path) -> Path:
    """Write the log for `spec` to `path`, whole or not at all (its folders are made)."""
    path = Path(path)
    with atomic_path(path, make_parents=True) as tmp:
        tmp.write_text(generate(spec), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- #
# Small unstructured logs for property tests
# --------------------------------------------------------------------------- #

# Every corner random_small_log plants at least once per log.
SMALL_LOG_FEATURES = (
    "constant", "zero_size_constant", "call", "tuple_release_sibling", "view_of_view",
    "mutate", "mutate_view", "mutate_constant", "mutate_two", "copy", "copy_from",
    "release", "release_unknown", "duplicate_args", "tie", "zero_cost",
)

_SIZES = (0, 8, 64, 64, 256, 256, 1024, 4096, 4096, 4096)
_COSTS = (0, 1, 10, 10, 100, 100, 1000, 1000)


class _SmallLog:
    """A mirror of the parser's name map and reference counts, so that every
    step is valid: only names that hold a reference are used or released, and
    a constant tensor keeps a reference until after the last operator."""

    def __init__(self, seed: int, n_ops: int):
        self.rng = np.random.default_rng(seed)
        self.n_target = n_ops
        self.log = LogWriter(name_base=int(self.rng.integers(1, 90_000)))
        self.tensor_of: dict[str, int] = {}
        self.live: list[str] = []             # names holding a reference
        self.refs: list[int] = []
        self.size: list[int] = []             # logical size (MEMORY line)
        self.const: list[bool] = []           # a CONSTANT tensor (pinned storage)
        self.backward = False
        self.features: set[str] = set()

    # -- draws ---------------------------------------------------------------------
    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def draw_size(self) -> int:
        if self.rng.random() < 0.7:
            return int(self.pick(_SIZES))
        return int(self.rng.integers(1, 1500)) * 8

    def draw_cost(self) -> int:
        if self.rng.random() < 0.6:
            return int(self.pick(_COSTS))
        return int(self.rng.integers(0, 5000))

    def op_name(self, base: str) -> str:
        return f"{base}_backward" if self.backward else base

    # -- state ---------------------------------------------------------------------
    def _new_tensor(self, name: str, size: int, const: bool = False) -> None:
        self.tensor_of[name] = len(self.refs)
        self.refs.append(1)
        self.size.append(int(size))
        self.const.append(const)
        self.live.append(name)

    def releasable(self, name: str, times: int = 1) -> bool:
        t = self.tensor_of[name]
        return not self.const[t] or self.refs[t] > times

    def any_live(self) -> str:
        if not self.live:
            self.constant()
        return self.pick(self.live)

    # -- instructions ----------------------------------------------------------------
    def constant(self, size: int | None = None) -> str:
        size = self.draw_size() if size is None else size
        name = self.log.constant(size)
        self._new_tensor(name, size, const=True)
        return name

    def call(self, args: list[str], outs: list[tuple[int, int]], base: str = "op",
             cost: int | None = None) -> list[str]:
        names = self.log.call(self.op_name(base), args, outs,
                              self.draw_cost() if cost is None else cost)
        for name, (size, _) in zip(names, outs):
            self._new_tensor(name, size)
        return names

    def random_outs(self, args: list[str], n: int) -> list[tuple[int, int]]:
        outs = []
        for _ in range(n):
            if self.rng.random() < 0.25:
                k = int(self.rng.integers(len(args)))
                outs.append((self.size[self.tensor_of[args[k]]], k))
            else:
                outs.append((self.draw_size(), -1))
        return outs

    def mutate(self, args: list[str], indices: list[int], base: str = "op_") -> None:
        self.log.mutate(self.op_name(base), args, indices, self.draw_cost())
        for i in indices:
            name = args[i]
            old = self.tensor_of[name]
            self.refs[old] -= 1
            # the name now holds the new tensor `<old>$` (not a constant)
            self.tensor_of[name] = len(self.refs)
            self.refs.append(1)
            self.size.append(self.size[old])
            self.const.append(False)

    def copy(self, src: str) -> str:
        dst = self.log.copy(src)
        self.tensor_of[dst] = self.tensor_of[src]
        self.refs[self.tensor_of[src]] += 1
        self.live.append(dst)
        return dst

    def copy_from(self, dst: str, src: str) -> None:
        self.log.copy_from(dst, src)
        self.refs[self.tensor_of[dst]] -= 1
        self.tensor_of[dst] = self.tensor_of[src]
        self.refs[self.tensor_of[src]] += 1

    def release(self, name: str) -> None:
        self.log.release(name)
        self.refs[self.tensor_of[name]] -= 1
        self.live.remove(name)

    # -- steps (each plants one feature) -------------------------------------------
    def step(self, kind: str) -> None:
        getattr(self, f"_s_{kind}")()
        self.features.add(kind)

    def _s_constant(self) -> None:
        self.constant()

    def _s_zero_size_constant(self) -> None:
        self.constant(0)

    def _s_call(self) -> None:
        args = [self.any_live() for _ in range(1 + int(self.rng.integers(3)))]
        n = 1 if self.rng.random() < 0.75 else 2 + int(self.rng.integers(2))
        self.call(args, self.random_outs(args, n))

    def _s_tuple_release_sibling(self) -> None:
        args = [self.any_live() for _ in range(1 + int(self.rng.integers(2)))]
        outs = [(self.draw_size(), -1) for _ in range(2 + int(self.rng.integers(2)))]
        if self.rng.random() < 0.5:
            outs[-1] = (0, -1)                       # a 0-byte reserve, like batch-norm
        names = self.call(args, outs, "batch_norm")
        self.release(self.pick(names[1:]))           # output 0 stays alive

    def _s_view_of_view(self) -> None:
        base = self.any_live()
        size = self.size[self.tensor_of[base]]
        (v1,) = self.call([base], [(size, 0)], "view", cost=self.pick((0, 5, 5)))
        (v2,) = self.call([v1], [(size, 0)], "transpose", cost=self.pick((0, 5, 5)))
        if self.rng.random() < 0.5:
            self.release(v1)                         # the view of a view outlives its base view
        if self.rng.random() < 0.5 and self.releasable(base):
            self.release(base)
        if self.rng.random() < 0.3:
            (v3,) = self.call([v2], [(size, 0)], "slice")
            self.mutate([v3, self.any_live()], [0], "copy_")

    def _mutable(self) -> list[str]:
        return [n for n in self.live if self.releasable(n)]

    def _s_mutate(self) -> None:
        targets = self._mutable()
        if not targets:
            self._s_call()
            targets = self._mutable()
        target = self.pick(targets)
        others = [self.any_live() for _ in range(int(self.rng.integers(3)))]
        args = [target] + others
        order = self.rng.permutation(len(args)).tolist()
        args = [args[i] for i in order]
        self.mutate(args, [order.index(0)], self.pick(("add_", "relu_", "mul_")))

    def _s_mutate_view(self) -> None:
        base = self.any_live()
        (v,) = self.call([base], [(self.size[self.tensor_of[base]], 0)], "view")
        self.mutate([v, self.any_live()], [0], "add_")

    def _s_mutate_constant(self) -> None:
        c = self.constant()
        keep = self.copy(c)                           # the constant keeps a reference
        self.mutate([c], [0], "mul_")
        if self.rng.random() < 0.5:
            self.call([keep, c], [(self.size[self.tensor_of[c]], -1)], "sub")

    def _s_mutate_two(self) -> None:
        a = self.pick(self._mutable() or [self.call([self.any_live()], [(64, -1)])[0]])
        b = self.copy(a) if self.rng.random() < 0.5 else self.pick(self._mutable())
        if b == a:
            b = self.call([a], [(self.draw_size(), -1)])[0]
        if not self.releasable(a, 2 if self.tensor_of[a] == self.tensor_of[b] else 1):
            b = self.call([a], [(self.draw_size(), -1)])[0]
        self.mutate([a, b, self.any_live()], [0, 1], "_foreach_add_")

    def _s_copy(self) -> None:
        self.copy(self.any_live())

    def _s_copy_from(self) -> None:
        dsts = [n for n in self.live if self.releasable(n)]
        if not dsts:
            dsts = self.call([self.any_live()], [(self.draw_size(), -1)])
        dst = self.pick(dsts)
        srcs = [n for n in self.live if self.tensor_of[n] != self.tensor_of[dst]]
        src = self.pick(srcs) if srcs else self.constant()
        self.copy_from(dst, src)

    def _s_release(self) -> None:
        names = [n for n in self.live if self.releasable(n)]
        if names:
            self.release(self.pick(names))

    def _s_release_unknown(self) -> None:
        self.log.release(f"x{self.log.counter + 1_000_000 + int(self.rng.integers(1000))}")

    def _s_duplicate_args(self) -> None:
        a = self.any_live()
        args = [a, a, self.any_live()]
        self.call(args, self.random_outs(args, 1), "mul")

    def _s_tie(self) -> None:
        # Two ops with the same inputs, sizes and costs: equal scores.
        args = [self.any_live()]
        size, cost = self.pick((64, 256, 4096)), self.pick((10, 100, 1000))
        for _ in range(2):
            self.call(args, [(size, -1)], "twin", cost=cost)

    def _s_zero_cost(self) -> None:
        args = [self.any_live()]
        self.call(args, [(self.draw_size(), -1)], "free_op", cost=0)

    RANDOM_STEPS = (("call", 30), ("constant", 8), ("copy", 10), ("release", 16),
                    ("mutate", 7), ("view_of_view", 6), ("tuple_release_sibling", 6),
                    ("copy_from", 4), ("release_unknown", 2), ("duplicate_args", 3),
                    ("tie", 3), ("zero_cost", 3), ("mutate_view", 2))

    def build(self) -> str:
        kinds = [k for k, _ in self.RANDOM_STEPS]
        weights = np.array([w for _, w in self.RANDOM_STEPS], dtype=float)
        weights /= weights.sum()
        plan = list(SMALL_LOG_FEATURES)
        plan = [plan[i] for i in self.rng.permutation(len(plan))]
        # Planted features are spread over the run, interleaved with random steps.
        while plan or self.log.n_ops < self.n_target:
            if not self.backward and self.log.n_ops >= self.n_target // 2:
                self.log.annotate("BACKWARD")
                self.backward = True
            if plan and self.rng.random() < 0.4:
                self.step(plan.pop())
            else:
                self.step(kinds[int(self.rng.choice(len(kinds), p=weights))])
        # The end: most names are released (constants too, now that no operator
        # follows); the rest stay referenced and are pinned by the lowering.
        for name in list(self.live):
            if self.rng.random() < 0.75:
                self.release(name)
        return self.log.text()


def random_small_log(seed: int, n_ops: int = 40) -> str:
    """A small random but valid log exercising every instruction kind and
    semantic rule (see SMALL_LOG_FEATURES); same seed -> same text.

    It has at least `n_ops` operators (constants included); every feature is
    planted at least once, which may add a few more on small `n_ops`. An
    `ANNOTATE BACKWARD` marker sits halfway; at the end most names are released
    (constants too) and the rest stay referenced, so the lowering pins them."""
    if n_ops < 1:
        raise ValueError(f"n_ops must be >= 1, got {n_ops}")
    return _SmallLog(int(seed), int(n_ops)).build()
