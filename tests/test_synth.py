"""Synthetic traces (dtrforensics.synth): valid logs in the public format, seeded
and reproducible, exercising every instruction kind; the engine replays them."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from cli import dtrf_process

from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import replay
from dtrforensics.synth.generator import (
    KINDS,
    SMALL_LOG_FEATURES,
    SynthSpec,
    _SmallLog,
    generate,
    random_small_log,
    write,
)
from dtrforensics.trace import parse_lines
from dtrforensics.trace.parser import parse_file

INSTRUCTIONS = {"ANNOTATE", "CONSTANT", "MEMORY", "ALIAS", "CALL", "MUTATE", "COPY",
                "COPY_FROM", "RELEASE"}
RATIOS = (0.2, 0.35, 0.5, 0.65, 0.8, 1.0)


def parse_text(text: str, name: str = "synth"):
    return parse_lines(text.splitlines(keepends=True), f"<{name}>", name)


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def small_spec(kind: str, seed: int, **kw) -> SynthSpec:
    return SynthSpec(kind=kind, seed=seed, depth=kw.pop("depth", 4), **kw)


# --- format ------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_generated_logs_parse_for_many_seeds(kind):
    for seed in range(12):
        spec = small_spec(kind, seed, width=1 + seed % 3, backward=seed % 4 != 3)
        program = parse_text(generate(spec), f"{kind}{seed}")
        assert program.n_ops > 5
        assert baseline(program).peak > 0


def test_field_style_matches_the_public_logs():
    text = generate(SynthSpec(kind="mixed", seed=5, depth=4, view_prob=0.5, mutate_prob=0.5))
    lines = text.splitlines()
    assert lines[0] == '{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}'
    assert text.endswith("\n")
    for line in lines:
        rec = json.loads(line)
        assert line == json.dumps(rec, sort_keys=True, separators=(",", ":"))
        kind = rec["INSTRUCTION"]
        if kind == "MEMORY":
            assert re.fullmatch(r"\d+", rec["MEMORY"])
        elif kind == "ALIAS":
            assert re.fullmatch(r"-1|\d+", rec["ALIAS"])
        elif kind in ("CALL", "MUTATE"):
            assert re.fullmatch(r"\d+", rec["TIME"])
        if kind == "MUTATE":
            assert all(isinstance(i, int) for i in rec["MUTATE"])
        for key in ("NAME", "DST", "SRC"):
            if key in rec and kind not in ("CALL", "MUTATE", "ANNOTATE"):
                assert re.fullmatch(r"x\d+", rec[key])
        for name in rec.get("RESULT", []) + rec.get("ARGS", []):
            assert re.fullmatch(r"x\d+", name)


@pytest.mark.parametrize("kind", KINDS)
def test_structured_logs_contain_the_planted_building_blocks(kind):
    text = generate(SynthSpec(kind=kind, seed=1, depth=6, view_prob=0.6, tuple_prob=0.6,
                              mutate_prob=0.5))
    recs = records(text)
    kinds = Counter(r["INSTRUCTION"] for r in recs)
    assert kinds["CALL"] and kinds["MUTATE"] and kinds["COPY"] and kinds["RELEASE"]
    assert any(r["INSTRUCTION"] == "ALIAS" and r["ALIAS"] != "-1" for r in recs)      # views
    assert any(r["INSTRUCTION"] == "CALL" and len(r["RESULT"]) >= 2 for r in recs)    # tuples
    assert {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"} in recs
    program = parse_text(text)
    assert program.op_backward.any() and not program.op_backward.all()
    # views of views: a view tensor whose argument is itself a view
    alias = program.tensor_alias.tolist()
    assert any(a >= 0 and alias[_viewed(program, t)] >= 0 for t, a in enumerate(alias))


def _viewed(program, t: int) -> int:
    """The argument tensor that view tensor t views."""
    op = int(program.tensor_op[t])
    return int(program.op_args[program.op_arg_ptr[op] + program.tensor_alias[t]])


def test_rnn_weights_are_shared_and_their_gradients_accumulate():
    spec = SynthSpec(kind="rnn", seed=2, depth=5, mutate_prob=0.0)
    program = parse_text(generate(spec))
    names = [program.op_names[i] for i in program.op_name_id.tolist()]
    # a shared weight is an argument of one forward op per step
    args = program.op_args.tolist()
    per_arg = Counter(args[program.op_arg_ptr[o]:program.op_arg_ptr[o + 1]][2]
                      for o in range(program.n_ops) if names[o] == "addmm")
    assert max(per_arg.values()) >= spec.depth
    assert names.count("add") > spec.depth                     # gradient accumulation


def test_backward_consumes_saved_activations_and_releases_them():
    text = generate(SynthSpec(kind="chain", seed=3, depth=5))
    recs = records(text)
    start = recs.index({"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"})
    saved = {r["DST"] for r in recs[:start] if r["INSTRUCTION"] == "COPY"}
    used = {a for r in recs[start:] if r["INSTRUCTION"] == "CALL" for a in r["ARGS"]}
    released = {r["NAME"] for r in recs[start:] if r["INSTRUCTION"] == "RELEASE"}
    assert saved and saved <= released
    assert len(saved & used) >= len(saved) // 2


def test_no_backward_means_no_saved_references():
    text = generate(SynthSpec(kind="chain", seed=4, depth=3, backward=False))
    kinds = Counter(r["INSTRUCTION"] for r in records(text))
    assert kinds["COPY"] == 0 and kinds["ANNOTATE"] == 1
    for kind in KINDS:
        program = parse_text(generate(SynthSpec(kind=kind, seed=4, depth=3, backward=False)))
        assert not program.op_backward.any()


# --- determinism ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_text_different_seed_different_text(kind):
    a = generate(small_spec(kind, 7))
    assert a == generate(small_spec(kind, 7))
    assert a != generate(small_spec(kind, 8))
    assert random_small_log(7) == random_small_log(7)
    assert random_small_log(7) != random_small_log(8)


def test_write_writes_generate_text(tmp_path):
    spec = small_spec("resnet", 3)
    path = write(spec, tmp_path / "sub" / "r.log")
    assert path.read_bytes() == generate(spec).encode("utf-8")
    assert parse_file(path).n_ops == parse_text(generate(spec)).n_ops


def test_spec_validation():
    for bad in (dict(kind="vgg"), dict(depth=0), dict(width=0), dict(view_prob=1.5),
                dict(size_range=(10, 5)), dict(cost_range=(-1, 5))):
        with pytest.raises(ValueError):
            generate(SynthSpec(**bad))


# --- random_small_log -------------------------------------------------------------------

def test_random_small_log_has_every_instruction_kind_in_every_log():
    seen = Counter()
    for seed in range(40):
        text = random_small_log(seed, n_ops=20 + seed)
        kinds = {r["INSTRUCTION"] for r in records(text)}
        assert kinds == INSTRUCTIONS, (seed, INSTRUCTIONS - kinds)
        seen.update(kinds)
        program = parse_text(text, f"small{seed}")
        assert program.n_ops >= 20 + seed
    assert set(seen) == INSTRUCTIONS


def test_random_small_log_plants_every_semantic_corner():
    for seed in range(20):
        gen = _SmallLog(seed, 30)
        text = gen.build()
        assert gen.features == set(SMALL_LOG_FEATURES)
        recs = records(text)
        program = parse_text(text)
        defined = {n for r in recs for n in r.get("RESULT", [])} | {
            r["NAME"] for r in recs if r["INSTRUCTION"] == "CONSTANT"} | {
            r["DST"] for r in recs if r["INSTRUCTION"] == "COPY"}
        # RELEASE of a name the log never defined
        assert any(r["INSTRUCTION"] == "RELEASE" and r["NAME"] not in defined for r in recs)
        # a tuple op one of whose outputs is released right away
        assert any(r["INSTRUCTION"] == "CALL" and len(r["RESULT"]) >= 2 for r in recs)
        # duplicate arguments, zero-cost ops, zero-size outputs, equal sizes and costs
        assert any(r["INSTRUCTION"] == "CALL" and len(set(r["ARGS"])) < len(r["ARGS"])
                   for r in recs)
        names = [program.op_names[i] for i in program.op_name_id.tolist()]
        assert any(c == 0 and n != "constant" for c, n in zip(program.op_cost.tolist(), names))
        costs = Counter((c, int(t)) for c, t, n in zip(program.op_cost.tolist(),
                                                       program.op_total_size.tolist(), names)
                        if n != "constant")
        assert max(costs.values()) >= 2                      # equal cost and size: ties
        assert (program.tensor_size == 0).sum() > (program.tensor_alias >= 0).sum()
        # views of views and mutations of views
        alias = program.tensor_alias.tolist()
        assert any(a >= 0 and alias[_viewed(program, t)] >= 0 for t, a in enumerate(alias))
        assert _mutates_a_view(recs)
        # several references to one tensor
        assert any(r["INSTRUCTION"] == "COPY" for r in recs)
        assert sum(r["INSTRUCTION"] == "COPY_FROM" for r in recs) >= 1


def _mutates_a_view(recs: list[dict]) -> bool:
    """Some MUTATE changes a name that holds a view (ALIAS >= 0)."""
    is_view: dict[str, bool] = {}
    found = False
    for r in recs:
        kind = r["INSTRUCTION"]
        if kind == "ALIAS":
            is_view[r["NAME"]] = r["ALIAS"] != "-1"
        elif kind == "CONSTANT":
            is_view[r["NAME"]] = False
        elif kind in ("COPY", "COPY_FROM"):
            is_view[r["DST"]] = is_view[r["SRC"]]
        elif kind == "MUTATE":
            for i in r["MUTATE"]:
                found = found or is_view[r["ARGS"][i]]
                is_view[r["ARGS"][i]] = False
    return found


# --- replay ----------------------------------------------------------------------------

def _programs():
    for kind in KINDS:
        for seed in range(3):
            yield parse_text(generate(small_spec(kind, seed, depth=3 + seed)), f"{kind}{seed}")
    for seed in range(12):
        yield parse_text(random_small_log(seed, 25 + 3 * seed), f"small{seed}")


def test_engine_replays_synthetic_logs_at_many_ratios():
    for program in _programs():
        peak = baseline(program).peak
        for ratio in RATIOS:
            s = replay(program, ratio=ratio).summary
            assert s.outcome in ("ok", "oom", "thrashed"), (program.name, ratio, s.error)
        for budget in (peak, peak + 1, 2 * peak):
            s = replay(program, budget=budget).summary
            assert s.outcome == "ok", (program.name, budget)
            assert s.evictions == 0 and s.remat_compute == 0, (program.name, budget)
            assert s.peak_memory <= peak


def test_every_policy_runs_on_small_logs():
    from dtrforensics.engine.policies import get_policy
    program = parse_text(random_small_log(11, 40))
    from oracle import POLICIES
    for policy in POLICIES:
        get_policy(policy)
        for ratio in (0.3, 0.6, 1.0):
            assert replay(program, ratio=ratio, policy=policy).summary.outcome in (
                "ok", "oom", "thrashed")


# --- CLI -------------------------------------------------------------------------------

def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return dtrf_process(*args, columns=200, env={"DTRF_CACHE": str(tmp_path / "cache")},
                        installed=True, timeout=120)


def test_cli_writes_parseable_logs(tmp_path):
    out = tmp_path / "r.log"
    proc = _run(tmp_path, "synth", "resnet", "--seed", "3", "--depth", "4", "--width", "2",
                "--view-prob", "0.5", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    program = parse_file(out)
    base = baseline(program)
    line = proc.stdout.strip()
    assert "\n" not in line
    assert f"{program.n_ops:,} ops" in line and f"{program.n_tensors:,} tensors" in line
    assert f"{base.peak:,}" in line and f"{base.model_compute:,}" in line
    assert out.read_text() == generate(SynthSpec(kind="resnet", seed=3, depth=4, width=2,
                                                 view_prob=0.5))

    small = tmp_path / "s.log"
    proc = _run(tmp_path, "synth", "small", "--seed", "5", "--ops", "30", "--json",
                "-o", str(small))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ops"] == parse_file(small).n_ops
    assert small.read_text() == random_small_log(5, 30)


def test_cli_help_and_errors(tmp_path):
    proc = _run(tmp_path, "synth", "--help")
    assert proc.returncode == 0
    for option in ("--seed", "--depth", "--width", "--size-min", "--size-max", "--cost-min",
                   "--cost-max", "--view-prob", "--tuple-prob", "--mutate-prob",
                   "--no-backward", "--output"):
        assert option in proc.stdout
    proc = _run(tmp_path, "synth", "vgg", "-o", str(tmp_path / "x.log"))
    assert proc.returncode == 2 and "unknown kind" in proc.stderr


# --- search ----------------------------------------------------------------------------

def test_find_hole_reproduces_the_reported_trace(tmp_path):
    """rnn, depth 1, width 1, 3 size levels, seed 16 (24 ops, 7,384 bytes): ok at
    0.916, failing at 0.918, ok at 0.920; overhead 1.5352 at 0.920, 1.1366 at 0.922.
    Holes and switches are the sweep's own (queries/sweep), read from kept sweeps."""
    from dtrforensics.sweep.holes import analyze
    from dtrforensics.sweep.store import SweepStore
    from dtrforensics.synth.search import find_hole
    params = {"kind": ("rnn",), "depth": (1,), "width": (1,), "size_levels": (3,)}
    (found,) = find_hole([16], params, lo="0.9", hi="0.93", step="0.002", fine_step="0.0005",
                         workdir=tmp_path)
    assert found.n_ops == 24 and found.file_bytes == 7384 and found.peak == 27_446_976
    (hole,) = found.coarse.holes
    assert (hole.below.ratio, hole.lo.ratio, hole.hi.ratio, hole.above.ratio) == \
        (0.916, 0.918, 0.918, 0.92)
    assert hole.outcomes == "oom"
    (sw,) = found.coarse.switches
    assert (sw.lo.ratio, sw.hi.ratio) == (0.92, 0.922) and sw.factor > 1.35
    assert found.fine is not None and found.fine.step == 0.0005
    assert any(h.below.ratio < h.lo.ratio <= h.hi.ratio < h.above.ratio
               for h in found.fine.holes)
    assert float("0.9185") in SweepStore(found.fine.sweep).read_runs().column("ratio").to_pylist()
    a, b = found.exact_switch
    assert (a.hi, b.lo) == (25_288_251, 25_288_252)
    assert round(a.overhead, 4) == 1.5352 and round(b.overhead, 4) == 1.1366
    # the kept sweep answers `dtrf holes` with the same regions
    again = analyze(found.coarse.sweep).policy("dtr")
    assert again.failure_regions == found.coarse.holes
