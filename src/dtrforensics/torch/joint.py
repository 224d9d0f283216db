"""AOTAutograd's joint forward-backward graph of a step, written as a DTR log.

`capture_joint` runs the joint graph (placeholders: the primals, then the
tangents) node by node on fake tensors under the recorder (`recorder.py`), so
the log has the recorder's accounting: a storage per new output, views as
aliases, `flops` costs, and each storage released when the last value
holding it dies, a value dying after its last use in the graph (as the
Python code FX generates for a graph frees it). Every primal is a CONSTANT
before the first op; the tangents are CONSTANTs where the backward starts
(the first node after the last forward one, as the default partitioner
draws the line), after a BACKWARD annotation: autograd makes them then. The
graph's outputs (forward outputs, gradients) stay referenced to the end, and
what the forward returns is pinned where the forward ends (a `PIN` line,
docs/semantics.md §2.1): its caller holds it from there, so no schedule may
evict it after (the lowering could not drop it).

Beside the log it keeps what the lowering (`lowering.py`) needs: which node
wrote each op of the log, and which log tensor each node's value is.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
from dataclasses import dataclass, field, replace

import torch
from torch import fx

from ..trace.parser import parse_lines
from ..trace.program import Program
from .costs import is_repeatable, timed_call
from .log import LogWriter
from .recorder import RecordError, StepRecorder


class NotExpressibleError(RecordError):
    """A graph or schedule the lowering cannot express: what and why."""


@dataclass
class JointLog:
    """The joint graph's log, its program, and the map between them."""

    graph: fx.GraphModule
    num_fwd_outputs: int
    lines: list[str]
    program: Program
    op_node: dict[int, fx.Node]          # op id -> the node that wrote it (its first op)
    node_tensors: dict[fx.Node, list]    # node -> the tensor id of each flattened output (None: no tensor)
    placeholder_tensor: dict[fx.Node, int]
    backward_op: int                      # the first op of the backward (the first tangent's CONSTANT)
    secondary_ops: set[int] = field(default_factory=set)   # ops a node wrote after its first
    op_context: list = field(default_factory=list)          # (module, chain, phase, source) per op

    def op_module(self, op: int | None) -> str | None:
        if op is None or not 0 <= op < len(self.op_context) or self.op_context[op] is None:
            return None
        return self.op_context[op][0]

    def write(self, path) -> None:
        text_log = LogWriter()
        text_log.lines = list(self.lines)
        text_log.write(path)

    def forward_outputs(self) -> list:
        return list(_outputs(self.graph)[:self.num_fwd_outputs])

    def backward_outputs(self) -> list:
        return list(_outputs(self.graph)[self.num_fwd_outputs:])


def _outputs(gm: fx.GraphModule) -> list:
    out = next(iter(gm.graph.find_nodes(op="output")))
    return list(torch.utils._pytree.tree_leaves(out.args[0], is_leaf=lambda x: x is None))


def last_forward_node(gm: fx.GraphModule) -> fx.Node:
    """The last node of the forward, as the default partitioner finds it."""
    from torch._functorch.partitioners import _has_tag_is_forward, _is_primal
    last = None
    for node in gm.graph.nodes:
        if _has_tag_is_forward(node) or _is_primal(node):
            last = node
    if last is None:
        raise NotExpressibleError("the joint graph has no forward node")
    return last


def _context(node: fx.Node, phase: str) -> tuple:
    """(module, chain, phase, source) of a node, from what dynamo kept of it."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    paths = [_module_path(v[0]) for v in stack.values() if isinstance(v, tuple) and v]
    paths = [p for p in paths if p]
    trace = node.meta.get("stack_trace") or ""
    source = None
    for line in reversed(trace.strip().splitlines()):
        line = line.strip()
        if line.startswith("File "):
            parts = line.split('"')
            if len(parts) >= 3:
                number = parts[2].split(",")[1].strip().removeprefix("line ") if "," in parts[2] else ""
                source = f"{parts[1].rsplit('/', 1)[-1]}:{number}"
            break
    module = paths[-1] if paths else None
    chain = " > ".join(paths) if paths else None
    return (module, chain, phase, source)


def _module_path(text: str) -> str:
    """dynamo's `L['self'].blocks[0].attn` (or `L['model']._modules['blocks']...`)
    as `blocks.0.attn`."""
    text = re.sub(r"^[LG]\['[^']*'\]\.?", "", str(text))
    text = re.sub(r"\.?_modules\['([^']*)'\]", r".\1", text)
    text = re.sub(r"\[(\d+)\]", r".\1", text)
    return text.strip(".")


class _Runner(fx.Interpreter):
    """Runs the joint graph node by node under the recorder, noting the log lines
    each node wrote and the log names of its values."""

    def __init__(self, gm, recorder: StepRecorder, log: LogWriter, tangents: list,
                 returned: list):
        super().__init__(gm, garbage_collect_values=True)
        self.recorder, self.log = recorder, log
        self.tangents = tangents
        self.returned = returned            # the forward's outputs (nodes, None or constants)
        self.last_forward = gm.meta.get("dtr_last_forward") or last_forward_node(gm)
        self.backward_started = False
        self.spans: dict[fx.Node, tuple[int, int]] = {}
        self.names: dict[fx.Node, list] = {}
        self.backward_line = None
        self.seen_last = False

    def run_node(self, n: fx.Node):
        if self.seen_last and not self.backward_started and n.op != "placeholder":
            self._start_backward()      # before the first backward node, or the output
        phase = "backward" if self.backward_started else "forward"
        self.log.context = _context(n, phase)
        start = len(self.log.lines)
        result = super().run_node(n)
        self.spans[n] = (start, len(self.log.lines))
        if n.op not in ("placeholder", "output"):
            self.names[n] = [self._name(t) for t in _flat(result)]
        if n is self.last_forward:
            self.seen_last = True
        return result

    def _start_backward(self) -> None:
        self.backward_started = True
        self._pin_returned()
        self.log.annotate("BACKWARD")
        self.backward_line = len(self.log.lines)
        self.log.context = (None, None, "backward", None)
        for t in self.tangents:
            self.recorder.name_of(t)

    def _pin_returned(self) -> None:
        """What the forward returns is its caller's from here on: pinned."""
        values = [self.env.get(node) for node in self.returned if isinstance(node, fx.Node)]
        names = [self.recorder.name_of(v) for v in values if isinstance(v, torch.Tensor)]
        for name in dict.fromkeys(names):
            self.log.pin(name)

    def _name(self, t):
        if not isinstance(t, torch.Tensor):
            return None
        return self.recorder.name_of(t)


def _flat(value) -> list:
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value]


def capture_joint(gm: fx.GraphModule, joint_inputs, num_fwd_outputs: int) -> JointLog:
    """The joint graph `gm` (AOTAutograd's, as a partition function receives it)
    as a DTR log; `joint_inputs` are its (fake) inputs, primals then tangents."""
    from torch._functorch.partitioners import _is_primal, _is_tangent
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    flat = list(joint_inputs[0]) + list(joint_inputs[1]) if isinstance(joint_inputs, tuple) \
        else list(joint_inputs)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    bad = [p.name for p in placeholders if not (_is_primal(p) or _is_tangent(p))]
    if bad:
        raise NotExpressibleError(f"the joint graph has inputs that are neither primals nor "
                                  f"tangents ({', '.join(bad)}): random seeds or tokens")
    # the fake inputs AOTAutograd traced with: their storages are the real
    # inputs' (sizes, and inputs sharing one storage share it here too)
    mode = detect_fake_mode(flat) or FakeTensorMode()
    fakes = flat
    primals = [f for p, f in zip(placeholders, fakes) if _is_primal(p)]
    tangents = [f for p, f in zip(placeholders, fakes) if _is_tangent(p)]
    log = LogWriter()
    recorder = StepRecorder(log, "flops", lambda: "in the joint graph", fake=True)
    written = _input_writes_forward(gm)
    recorder.update_in_place([f for p, f in zip(placeholders, fakes) if p in written])
    runner = _Runner(gm, recorder, log, [t for t in tangents if isinstance(t, torch.Tensor)],
                     _outputs(gm)[:num_fwd_outputs])
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(mode)
            stack.enter_context(recorder)
            log.context = (None, None, None, None)
            for t in primals:
                if isinstance(t, torch.Tensor):
                    recorder.name_of(t)
            outputs = runner.run(*fakes)
            for p, t in zip(placeholders, fakes):
                runner.names[p] = [runner._name(t)]
            recorder.close()
            del outputs
    finally:
        recorder.close()
        if gc_was_enabled:
            gc.enable()
    return _joint_log(gm, num_fwd_outputs, log, runner, placeholders)


def _input_writes_forward(gm: fx.GraphModule) -> set:
    """Move the writes of the graph's inputs (batch norm's running statistics
    copied back into the buffers, at the end of the joint graph) to the end of
    the forward, where the forward graph must run them; the inputs they write.
    Such a write is in place (a view of the input, as the recorder writes an
    optimizer's state): the buffer gets no second version."""
    last = last_forward_node(gm)
    written: set = set()
    for node in list(gm.graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        writes = [a for a, arg in zip(node.args, target._schema.arguments) if arg.is_write]
        if writes and all(isinstance(a, fx.Node) and a.op == "placeholder" for a in writes):
            if node.users:
                raise NotExpressibleError(f"the joint graph reads the result of {node.name}, "
                                          "an in-place write of an input")
            last.append(node)
            last = node
            written.update(writes)
    gm.graph.lint()
    gm.recompile()
    gm.meta["dtr_last_forward"] = last
    return written


def _joint_log(gm, num_fwd_outputs: int, log: LogWriter, runner: _Runner, placeholders) -> JointLog:
    program = parse_lines(log.lines, name="joint")
    line_op = {int(line) - 1: op for op, line in enumerate(program.op_line.tolist())}
    name_tensor = _name_tensors(program, log.lines)
    op_node: dict[int, fx.Node] = {}
    secondary: set[int] = set()
    for node, (start, end) in runner.spans.items():
        ops = [line_op[i] for i in range(start, end) if i in line_op]
        if node.op == "placeholder":
            continue
        for k, op in enumerate(ops):
            op_node[op] = node
            if k:
                secondary.add(op)
    node_tensors = {n: [name_tensor.get(name) if name else None for name in names]
                    for n, names in runner.names.items()}
    placeholder_tensor = {p: node_tensors[p][0] for p in placeholders
                          if node_tensors.get(p) and node_tensors[p][0] is not None}
    backward_op = next((op for line, op in sorted(line_op.items())
                        if line >= runner.backward_line), program.n_ops)
    return JointLog(gm, num_fwd_outputs, list(log.lines), program, op_node, node_tensors,
                    placeholder_tensor, backward_op, secondary, [c for _, c in log.contexts])


def measured_costs(joint: JointLog, joint_inputs) -> JointLog:
    """`joint` with each op's cost the measured wall time of the node that wrote
    it (`costs.timed_call`: ns, the median of three runs under a millisecond,
    never repeating a random op or a write), the joint graph run for real after
    one warm-up run on inputs of the fake inputs' shapes (floating point drawn
    from a generator of its own, integers 0: valid indices), the global
    generators left as they were. A node that wrote several log ops shares its
    time between them by their flops costs."""
    timer = _run_for_real(joint, joint_inputs, timing=True)
    by_node: dict[fx.Node, list[int]] = {}
    for op, node in joint.op_node.items():
        by_node.setdefault(node, []).append(op)
    flops = joint.program.op_cost.tolist()
    lines = list(joint.lines)
    for node, ops in by_node.items():
        ns, total = timer.times.get(node, 1), sum(flops[op] for op in ops)
        for op in ops:
            index = int(joint.program.op_line[op]) - 1
            record = json.loads(lines[index])
            record["TIME"] = str(max(1, ns * flops[op] // max(1, total)))
            lines[index] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return replace(joint, lines=lines, program=parse_lines(lines, name="joint"))


def real_storage_sizes(joint: JointLog, joint_inputs) -> JointLog:
    """`joint` with each new storage's bytes those of a real run of the joint graph
    (on inputs as `measured_costs` makes them), where fake tensors say otherwise:
    a kernel may return a small tensor in a larger storage (aten's `mse_loss`: a
    scalar in its elementwise buffer, 64 bytes for a 4 x 4 input where the fake
    says 4)."""
    timer = _run_for_real(joint, joint_inputs, timing=False)
    program = joint.program
    names = program.tensor_names
    memory_line = {}
    for index, line in enumerate(joint.lines):
        if '"MEMORY"' in line and '"INSTRUCTION":"MEMORY"' in line:
            memory_line.setdefault(json.loads(line)["NAME"], index)
    lines, owner = list(joint.lines), program.tensor_storage.tolist()
    for node, sizes in timer.sizes.items():
        for tid, size in zip(joint.node_tensors.get(node) or (), sizes):
            if tid is None or size is None or owner[tid] != tid or size == program.tensor_size[tid]:
                continue
            index = memory_line[names[program.tensor_name_id[tid]]]
            record = json.loads(lines[index])
            record["MEMORY"] = str(size)
            lines[index] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    if lines == joint.lines:
        return joint
    return replace(joint, lines=lines, program=parse_lines(lines, name="joint"))


@contextlib.contextmanager
def _for_real(joint_inputs):
    """Real inputs of the fake inputs' shapes, and a function making them afresh,
    for a run of the joint graph inside the block: outside any dispatch mode,
    without autograd, the generators left as they were."""
    from torch.utils._python_dispatch import _disable_current_modes
    flat = list(joint_inputs[0]) + list(joint_inputs[1]) if isinstance(joint_inputs, tuple) \
        else list(joint_inputs)
    with _disable_current_modes():
        inputs = _real_inputs(flat)
        devices = sorted({t.device.index or 0 for t in inputs
                          if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            yield inputs, lambda: _real_inputs(flat)


def _run_for_real(joint: JointLog, joint_inputs, timing: bool) -> _Timer:
    """The joint graph run for real, node by node (after a warm-up run when
    timing), on inputs of the fake inputs' shapes, the generators left as they were."""
    with _for_real(joint_inputs) as (inputs, afresh):
        if timing:
            fx.Interpreter(joint.graph).run(*inputs)
            inputs = afresh()
        timer = _Timer(joint.graph, timing)
        timer.run(*inputs)
    return timer


def largest_workspace(joint: JointLog, joint_inputs) -> tuple[int, int | None]:
    """The largest workspace of an op of the joint graph run for real once, with no
    eviction (every op runs once; inputs as `measured_costs` makes them, the
    generators left as they were), measured as `workspace.Meter` measures a step:
    its bytes and the log op that took it (None: no op took scratch)."""
    from .workspace import Meter
    first_op = {node: op for op, node in sorted(joint.op_node.items(), reverse=True)}
    with _for_real(joint_inputs) as (inputs, _):
        device = next((t.device for t in inputs if isinstance(t, torch.Tensor)),
                      torch.device("cpu"))
        meter = Meter(device)
        with meter.session():
            _Metered(joint.graph, meter, first_op).run(*inputs)
    return max(((ws, op) for op, ws, _ in meter.runs if ws > 0), default=(0, None))


class _Metered(fx.Interpreter):
    """Runs a graph node by node, each call measured by `meter` under its log op."""

    def __init__(self, gm, meter, first_op: dict):
        super().__init__(gm, garbage_collect_values=True)
        self.meter, self.first_op = meter, first_op

    def run_node(self, n: fx.Node):
        if n.op != "call_function":
            return super().run_node(n)
        with self.meter.around(self.first_op.get(n, -1), 0):
            return super().run_node(n)


def _real_inputs(fakes: list) -> list:
    gen = torch.Generator().manual_seed(0)
    out = []
    for f in fakes:
        if not isinstance(f, torch.Tensor):
            out.append(f)
            continue
        real = torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=f.device)
        if real.is_floating_point():
            real.copy_(torch.randn(f.shape, generator=gen, dtype=f.dtype))
        else:
            real.zero_()
        out.append(real)
    return out


class _Timer(fx.Interpreter):
    """Runs a graph node by node: each call's wall time in `times` (ns, when
    timing) and the bytes of each output's storage in `sizes`."""

    def __init__(self, gm, timing: bool = True):
        super().__init__(gm, garbage_collect_values=True)
        self.timing = timing
        self.times: dict[fx.Node, int] = {}
        self.sizes: dict[fx.Node, list] = {}

    def run_node(self, n: fx.Node):
        if n.op != "call_function":
            return super().run_node(n)
        if self.timing:
            target = n.target
            aten = isinstance(target, torch._ops.OpOverload)
            writes = aten and any(a.is_write for a in target._schema.arguments)
            out, self.times[n] = timed_call(lambda: fx.Interpreter.run_node(self, n),
                                            aten and is_repeatable(target, writes))
        else:
            out = super().run_node(n)
        self.sizes[n] = [t.untyped_storage().nbytes() if isinstance(t, torch.Tensor) else None
                         for t in _flat(out)]
        return out


def _name_tensors(program: Program, lines: list[str]) -> dict[str, int]:
    """Every log name -> its tensor id (a COPY's new name -> its source's tensor)."""
    found = {program.tensor_names[nid]: tid for tid, nid in enumerate(program.tensor_name_id.tolist())}
    for line in lines:
        if '"COPY"' in line:
            record = json.loads(line)
            if record.get("SRC") in found:
                found[record["DST"]] = found[record["SRC"]]
    return found


__all__ = ["JointLog", "NotExpressibleError", "capture_joint", "measured_costs",
           "real_storage_sizes"]
