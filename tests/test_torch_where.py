"""Where each op of a recorded step ran (module path, phase, source line): the
recorder's answers against PyTorch's own module tracker and Python's stack, the
where-file beside the log, and the log itself left as the reference reads it."""

from __future__ import annotations

import json
import os
import traceback

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.module_tracker import ModuleTracker  # noqa: E402

from dtrforensics.torch import log as log_module  # noqa: E402
from dtrforensics.torch import record  # noqa: E402
from dtrforensics.torch.zoo import ZOO  # noqa: E402
from dtrforensics.trace.cache import load_program  # noqa: E402
from dtrforensics.trace.parser import TraceError, parse_file  # noqa: E402
from dtrforensics.trace.where import where_path  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
ZOO_FILE = os.path.abspath(ZOO["gpt"].__code__.co_filename)


def _user_frame(files: tuple[str, ...]) -> str | None:
    """The innermost frame of `files` (or under a folder of `files`) on the stack,
    as `traceback` gives it."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if path in files or path.startswith(tuple(f for f in files if f.endswith(os.sep))):
            return f"{frame.filename}:{frame.lineno}"
    return None


def _record_beside_tracker(monkeypatch, tmp_path, model, batch, loss_fn, files, **kw):
    """Record with PyTorch's ModuleTracker running, noting at every op written its
    `parents` and the innermost frame of `files`; (program, notes by log line)."""
    tracker = ModuleTracker()
    seen: dict[int, tuple] = {}
    op = log_module.LogWriter._op

    def noting(self):
        seen[len(self.lines) + 1] = (set(tracker.parents), tracker.is_bw, _user_frame(files))
        op(self)

    monkeypatch.setattr(log_module.LogWriter, "_op", noting)
    with tracker:
        record(model, batch, loss_fn, tmp_path / "step.log", **kw)
    return load_program(tmp_path / "step.log", cache=False), seen


def _tracker_names(parents: set, root: str) -> set:
    return {p[len(root) + 1:] for p in parents if p.startswith(root + ".")}


@pytest.mark.parametrize("fake", [False, True])
def test_forward_ops_have_the_module_chain_and_line_pytorch_and_the_stack_give(
        monkeypatch, tmp_path, fake):
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO["gpt"](layers=2, width=32, seq=8)
    program, seen = _record_beside_tracker(monkeypatch, tmp_path, model, batch, loss_fn,
                                           (ZOO_FILE,), fake=fake)
    assert program.where is not None
    checked = 0
    for op_id in range(program.n_ops):
        parents, is_bw, frame = seen[int(program.op_line[op_id])]
        phase = program.op_where(op_id, "phase")
        if phase not in ("forward", "loss"):
            continue
        chain = program.op_where(op_id, "chain")
        ours = set(chain.split(" > ")) - {"GPT"} if chain else set()
        assert ours == _tracker_names(parents, "GPT"), (op_id, program.op_name(op_id))
        if ours:
            assert program.op_where(op_id, "module") == chain.split(" > ")[-1]
        assert program.op_where(op_id, "source") == frame, (op_id, program.op_name(op_id))
        checked += 1
    assert checked > 50
    # the chosen ops: the first layer norm is blocks.0.ln1's, at the block's line 68
    first_norm = next(i for i in range(program.n_ops) if program.op_name(i) == "native_layer_norm")
    assert program.op_where(first_norm, "chain") == "blocks.0 > blocks.0.ln1"
    assert program.op_where(first_norm, "source") == f"{ZOO_FILE}:68"


def test_backward_ops_name_the_forward_module_of_their_autograd_node(monkeypatch, tmp_path):
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO["gpt"](layers=2, width=32, seq=8)
    program, seen = _record_beside_tracker(monkeypatch, tmp_path, model, batch, loss_fn,
                                           (ZOO_FILE,))
    backward = [i for i in range(program.n_ops) if program.op_backward[i]]
    assert backward and {program.op_where(i, "phase") for i in backward} == {"backward"}
    # each weight gradient (an mm reading the layer's input) is its Linear's
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            mine = [i for i in backward if program.op_where(i, "module") == name]
            assert any(program.op_name(i) == "mm" for i in mine), name
    # and every backward op named by a module runs inside that module's backward
    # as PyTorch's tracker sees it (its parents hold the module, or the tracker
    # has already left it: backward leaves a module at its inputs' gradients)
    agree = [i for i in backward if program.op_where(i, "module")
             and "GPT." + program.op_where(i, "module") in seen[int(program.op_line[i])][0]]
    named = [i for i in backward if program.op_where(i, "module")]
    assert len(agree) >= 0.8 * len(named)


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.pre = nn.Linear(16, 16)     # the reentrant form needs an input requiring grad
        self.inner = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y = torch.utils.checkpoint.checkpoint(self.inner, self.pre(x),
                                              use_reentrant=self.reentrant)
        return self.head(y)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_forward_runs_again_in_backward_as_recompute(tmp_path, reentrant):
    torch.manual_seed(0)
    model = Checkpointed(reentrant)
    batch = (torch.randn(8, 16), torch.randint(0, 4, (8,)))
    record(model, batch, nn.functional.cross_entropy, tmp_path / "c.log")
    program = load_program(tmp_path / "c.log", cache=False)
    phases = program.where.column("phase")
    modules = program.where.column("module")
    recomputed = {m for m, p in zip(modules, phases) if p == "recompute"}
    assert recomputed == {"inner.0", "inner.1", "inner.2"}
    assert all(program.op_backward[i] for i, p in enumerate(phases) if p == "recompute")
    # the loss is outside the model; the head's weight gradient is the head's
    assert "loss" in phases and {modules[i] for i, p in enumerate(phases) if p == "loss"} == {None}
    assert any(m == "head" and p == "backward" for m, p in zip(modules, phases))
    # the recomputed forward's own backward names the checkpointed modules
    assert {m for m, p in zip(modules, phases) if p == "backward"} >= {"inner.0", "inner.2"}


def test_parameters_are_constants_of_their_module_and_optimizer_ops_have_their_phase(tmp_path):
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO["mlp"]()
    record(model, batch, loss_fn, tmp_path / "m.log", optimizer="adam")
    program = load_program(tmp_path / "m.log", cache=False)
    by_name = {name.rpartition(".")[0] for name, _ in model.named_parameters()}
    constants = [i for i in range(program.n_ops) if program.is_constant(i)]
    owners = {program.op_where(i, "module") for i in constants[:len(by_name) * 2]}
    assert by_name <= owners
    assert program.op_where(constants[0], "phase") is None
    # each update names the module whose parameter, gradient or state it reads
    phases, modules = program.where.column("phase"), program.where.column("module")
    updates = [i for i, p in enumerate(phases) if p == "optimizer"]
    assert updates and {modules[i] for i in updates} == by_name


def test_the_log_with_a_where_file_is_still_a_plain_log(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "g.log"
    summary = record(*ZOO["gpt"](layers=1, width=32, seq=8), path)
    side = where_path(path)
    assert side.name == "g.log.where.json" and side.exists() and summary.where == side
    for line in path.read_text().splitlines():        # the 2020 keys only
        assert set(json.loads(line)) <= {"INSTRUCTION", "NAME", "ARGS", "RESULT", "TIME",
                                         "MEMORY", "ALIAS", "MUTATE", "ANNOTATION",
                                         "DST", "SRC"}
    plain = parse_file(path)
    assert plain.where is None
    loaded = load_program(path)
    assert loaded.where is not None and loaded.n_ops == plain.n_ops
    assert (loaded.op_cost == plain.op_cost).all()
    # a where-file left beside another log is ignored; a broken one is named
    path.write_text(path.read_text() + '{"INSTRUCTION":"ANNOTATE","ANNOTATION":"X"}\n')
    assert load_program(path, cache=False).where is None
    side.write_text("{not json")
    with pytest.raises(TraceError, match="where.json"):
        load_program(path, cache=False)


def test_a_transformers_model_names_its_modules_and_its_library_lines(monkeypatch, tmp_path):
    """GPT-NeoX from its configuration: no frame of the step is the user's, so the
    source is the innermost transformers frame, as `traceback` gives it."""
    transformers = pytest.importorskip("transformers")
    from dtrforensics.torch.spec import build
    torch.manual_seed(0)
    model, batch, loss_fn = build("hf:gpt_neox", seq=16, batch=2, hidden_size=32,
                                  intermediate_size=64, num_attention_heads=4, vocab_size=128)
    library = os.path.dirname(os.path.abspath(transformers.__file__)) + os.sep
    program, seen = _record_beside_tracker(monkeypatch, tmp_path, model, batch, loss_fn,
                                           (library,))
    root = type(model).__name__
    forward = [i for i in range(program.n_ops) if program.op_where(i, "phase") == "forward"]
    assert len(forward) > 50
    for op_id in forward:
        parents, _, frame = seen[int(program.op_line[op_id])]
        chain = program.op_where(op_id, "chain")
        assert set(chain.split(" > ")) - {root} == _tracker_names(parents, root), op_id
        assert program.op_where(op_id, "source") == frame, op_id
    modules = program.where.column("module")
    norm = next(i for i in forward if program.op_name(i) == "native_layer_norm")
    assert modules[norm] == "gpt_neox.layers.0.input_layernorm"
    assert "modeling_gpt_neox.py" in program.op_where(norm, "source") or \
        "/transformers/" in program.op_where(norm, "source")
    # its saved statistics' gradient is computed in backward, in the same module
    assert any(program.op_name(i) == "native_layer_norm_backward" and
               modules[i] == "gpt_neox.layers.0.input_layernorm" for i in range(program.n_ops))


def test_oom_json_names_the_module_of_the_failing_op_and_of_the_largest_storages(
        tmp_path, monkeypatch):
    """zoo:gpt at 0.87 of its peak lies in its feasibility hole (docs/torch.md)."""
    from cli import dtrf
    torch.manual_seed(0)
    record(*ZOO["gpt"](), tmp_path / "gpt.log")
    program = load_program(tmp_path / "gpt.log")
    monkeypatch.chdir(tmp_path)
    report = dtrf("oom", "gpt.log@0.87", "--json").json()
    failing = report["tensor_op_id"]
    assert report["tensor_module"] == program.op_where(failing) is not None
    assert report["tensor_source"] == program.op_where(failing, "source")
    # in the final pins (semantics §2.3) the op id stays the last op's: the module said is
    # the pinned root's maker's
    top = report["frontier"][0]["op_id"] if report["final_pins"] else report["op_id"]
    assert report["op_module"] == program.op_where(top)
    for s in report["largest_storages"]:
        assert s["module"] == program.op_where(int(program.tensor_op[s["storage_id"]]))
    assert sum(m["bytes"] for m in report["by_module"]) == report["memory"]
    for level in report["frontier"]:
        assert level["module"] == program.op_where(level["op_id"])


def test_explain_json_names_the_modules_of_the_retentions_that_remove_the_oom(
        tmp_path, monkeypatch):
    from cli import dtrf
    torch.manual_seed(0)
    record(*ZOO["gpt"](), tmp_path / "gpt.log")
    program = load_program(tmp_path / "gpt.log")
    monkeypatch.chdir(tmp_path)
    found = dtrf("explain", "gpt.log", "--ratio", "0.87", "--json", "--jobs", "1").json()
    module_of = lambda s: program.op_where(int(program.tensor_op[s]))  # noqa: E731
    assert found["fixes"]
    for fix in found["fixes"]:
        storages = fix["retain"] or [fix["force"][0]]
        assert fix["modules"] == [module_of(s) for s in storages]
        assert all(fix["modules"])
    for c in found["candidates"]:
        assert c["module"] == module_of(c["storage"])
    failing = found["baseline"]["oom"]["tensor_id"]
    assert found["failing_module"] == module_of(failing) is not None


def test_diff_json_names_the_modules_of_the_first_divergent_victims(tmp_path, monkeypatch):
    """zoo:gpt at 0.85 (completes) against 0.87 (fails in the hole)."""
    from cli import dtrf
    torch.manual_seed(0)
    record(*ZOO["gpt"](), tmp_path / "gpt.log")
    program = load_program(tmp_path / "gpt.log")
    monkeypatch.chdir(tmp_path)
    report = dtrf("diff", "gpt.log@0.85", "gpt.log@0.87", "--json").json()
    module_of = lambda s: program.op_where(int(program.tensor_op[s]))  # noqa: E731
    for key in ("first_divergence", "first_divergent_choice"):
        for side in ("a", "b"):
            entry = report[key][side]
            assert entry["module"] == module_of(entry["victim"]) is not None
            assert entry["source"] == program.op_where(int(program.tensor_op[entry["victim"]]),
                                                       "source")
    entries = report["divergent_entries"]
    assert {e["run"] for e in entries} == {"a", "b"}
    assert min(e["position"] for e in entries) == report["first_divergence"]["position"]
    assert all(e["module"] == module_of(e["storage"]) for e in entries)


def test_edges_name_the_modules_of_the_first_divergent_victims(tmp_path):
    """zoo:gpt's widest hole opens at 1,172,504 B (docs/torch.md): both runs' first
    different victims are storages of blocks.0.attn, per the where-file."""
    from dtrforensics.analyses.edges import edges
    from dtrforensics.sweep.runner import run_sweep
    from dtrforensics.sweep.store import SweepParams
    torch.manual_seed(0)
    summary = record(*ZOO["gpt"](), tmp_path / "gpt.log")
    program = load_program(tmp_path / "gpt.log")
    params = SweepParams(ratio_from=(1_172_503 - 200) / summary.peak,
                         ratio_to=(1_172_504 + 200) / summary.peak, exact=True)
    run_sweep(program, params, tmp_path / "sweep", jobs=1)
    (edge,) = edges(tmp_path / "sweep", cache=tmp_path / "cache").edges
    assert (edge.below.budget, edge.above.budget) == (1_172_503, 1_172_504)
    victim = edge.first_divergent_victim
    for module, entry in ((victim.below_module, victim.below),
                          (victim.above_module, victim.above)):
        storage = int(entry.split()[2])
        assert module == program.op_where(int(program.tensor_op[storage])) is not None
        assert f" of {module} " in entry


def test_regime_drivers_name_their_makers_modules(tmp_path):
    """zoo:gpt switches regime between 1,252,124 B (2.11x) and 1,252,376 B (1.06x)."""
    from rich.console import Console

    from dtrforensics.analyses.regime import regime
    from dtrforensics.recorder.reader import open_recording
    from dtrforensics.recorder.record import record_run
    from dtrforensics.render.regime import regime_view
    torch.manual_seed(0)
    record(*ZOO["gpt"](), tmp_path / "gpt.log")
    program = load_program(tmp_path / "gpt.log")
    runs = [open_recording(record_run(program, budget=b, out_dir=tmp_path / str(b))[1])
            for b in (1_252_376, 1_252_124)]
    report = regime(*runs)
    assert report.drivers
    for d in report.drivers:
        assert d.module == program.op_where(d.op_id) is not None
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    console.print(regime_view(report))
    assert f"in {report.drivers[0].module}" in console.export_text()


@pytest.mark.parametrize("name", [n for n in ZOO if n != "gpt-1b"])
def test_the_log_is_byte_identical_with_and_without_where_capture(name, tmp_path, monkeypatch):
    """Module hooks and the per-op context change no tensor's lifetime: the log is
    the same as a recording that follows no module and reads no frame."""
    import contextlib

    from dtrforensics.torch import where as where_module
    logs = {}
    for fake in ([False] if name == "moe" else [False, True]):   # MoE routing reads values
        for capture in (True, False):
            if not capture:
                monkeypatch.setattr(where_module.Where, "following_modules",
                                    lambda self: contextlib.nullcontext())
                monkeypatch.setattr(where_module.Where, "now", lambda self, inputs=(): None)
                monkeypatch.setattr(where_module.Where, "constant", lambda self, t: None)
            torch.manual_seed(0)
            path = tmp_path / f"{fake}-{capture}.log"
            record(*ZOO[name](), path, fake=fake)
            logs[fake, capture] = path.read_text()
            assert where_path(path).exists() == capture
            monkeypatch.undo()
        assert logs[fake, True] == logs[fake, False]


def test_a_transformers_model_at_a_failing_budget_speaks_in_its_modules(tmp_path):
    """GPT-NeoX from its configuration, one byte below the lowest budget `dtr`
    completes at: the OOM's failing op and largest storages, the retention that
    removes it and the first divergent victims against the completing run are
    named by their modules, as the where-file has them."""
    pytest.importorskip("transformers")
    from dtrforensics.analyses.diff import diff
    from dtrforensics.analyses.explain import explain
    from dtrforensics.analyses.oom import explain_oom
    from dtrforensics.engine.replay import replay
    from dtrforensics.recorder.reader import open_recording
    from dtrforensics.recorder.record import record_run
    from dtrforensics.torch.spec import build
    torch.manual_seed(0)
    model, batch, loss_fn = build("hf:gpt_neox", seq=16, batch=2, hidden_size=32,
                                  intermediate_size=64, num_attention_heads=4, vocab_size=128)
    summary = record(model, batch, loss_fn, tmp_path / "neox.log")
    program = load_program(tmp_path / "neox.log")
    fails, works = summary.floor.floor, summary.peak
    while works - fails > 1:
        middle = (fails + works) // 2
        if replay(program, budget=middle).summary.outcome == "ok":
            works = middle
        else:
            fails = middle
    module_of = lambda s: program.op_where(int(program.tensor_op[s]))  # noqa: E731
    failing = open_recording(record_run(program, budget=fails, out_dir=tmp_path / "a")[1])
    oom = explain_oom(failing).to_json()
    assert oom["tensor_module"] == program.op_where(oom["tensor_op_id"]) is not None
    assert oom["largest_storages"] and all(
        s["module"] == module_of(s["storage_id"]) for s in oom["largest_storages"])
    found = explain(program, budget=fails, record_root=None, jobs=1).to_json()
    assert found["fixes"] and found["failing_module"] == oom["tensor_module"]
    for fix in found["fixes"]:
        assert fix["modules"] == [module_of(s) for s in fix["retain"] or [fix["force"][0]]]
    completing = open_recording(record_run(program, budget=works, out_dir=tmp_path / "b")[1])
    first = diff(completing, failing).to_json()["first_divergence"]
    for side in ("a", "b"):
        if first[side]["victim"] is not None:
            assert first[side]["module"] == module_of(first[side]["victim"]) is not None
