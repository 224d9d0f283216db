"""`dtrf compare-policies` and what policies from files change around it:
dominance spans, the command on the embedded trace, stale policy files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import dtrf

from dtrforensics.analyses.policy_comparison import dominance

MIN_SIZE = "examples/policies/min_evictee.py:dtr_min_64kib"


def point(budget, status, overhead=None, lo=None, hi=None):
    return {"budget": budget, "status": status, "overhead": overhead,
            "interval_lo": lo, "interval_hi": hi}


def test_sampled_dominance_compares_shared_budgets_only():
    points = {"a": [point(10, "fail"), point(20, "ok", 2.0), point(30, "ok", 1.5),
                    point(35, "ok", 1.0)],
              "b": [point(10, "ok", 3.0), point(20, "ok", 1.0), point(30, "ok", 1.5)]}
    spans = dominance(points, ("a", "b"), 100, False, (10, 40))
    assert [(s.lo, s.hi, s.best) for s in spans] == [(10, 20, ("b",)), (30, 30, ("a", "b"))]
    assert spans[0].overhead_min == 1.0 and spans[0].overhead_max == 3.0


def test_exact_dominance_covers_every_byte():
    points = {"a": [point(12, "fail", None, 0, 19), point(25, "ok", 2.0, 20, None)],
              "b": [point(10, "fail", None, 5, 14), point(17, "ok", 1.0, 15, 29),
                    point(40, "ok", 3.0, 30, None)]}
    spans = dominance(points, ("a", "b"), 100, True, (10, 50))
    assert [(s.lo, s.hi, s.best) for s in spans] == [
        (10, 14, ()), (15, 29, ("b",)), (30, 50, ("a",))]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "sweep"
    res = dtrf("compare-policies", "hole-rnn-seed16", "--policy", f"dtr,{MIN_SIZE}",
               "--from", "0.8", "--to", "1.0", "--exact", "--jobs", "1", "-o", out, "--json")
    assert res.code == 0, res.err
    return out, json.loads(res.out)


def test_compare_policies_agrees_with_the_sweeps_own_holes(compared):
    out, doc = compared
    holes = json.loads(dtrf("holes", out, "--json").out)
    for standing in doc["policies"]:
        pol = holes["policies"][standing["policy"]]
        regions = [r for r in pol["failure_regions_bytes_detail"] if r["hole"]]
        assert standing["holes"] == len(regions)
        assert standing["hole_bytes"] == sum(r["hi"] - r["lo"] + 1 for r in regions)
    assert [p["policy"] for p in doc["policies"]] == ["dtr", MIN_SIZE]


def test_exact_comparison_spans_tile_the_range(compared):
    _, doc = compared
    spans = doc["dominance"]
    lo, hi = doc["range_bytes"]
    assert spans[0]["lo"] == lo and spans[-1]["hi"] == hi
    assert all(a["hi"] + 1 == b["lo"] for a, b in zip(spans, spans[1:]))
    assert all(a["best"] != b["best"] for a, b in zip(spans, spans[1:]))


def test_compare_policies_draws_its_figure(compared):
    _, doc = compared
    assert doc["figures"] and all(open(p, "rb").read(4) for p in doc["figures"])


def test_the_figure_is_drawn_again_only_when_it_would_change(compared, tmp_path):
    """Asked again on the finished sweep, the command leaves its figure files as
    they are (the same key: same content, same drawing code); a file that is not
    that figure any more (another key, cut short, damaged, removed) makes it draw
    both again."""
    from dtrforensics.render.figure_files import KEY_FIELD, figure_key, png_text, svg_has
    out, doc = compared
    png, svg = (Path(p) for p in doc["figures"])
    key = png_text(png, KEY_FIELD)
    assert key is not None and svg_has(svg, key)
    args = ("compare-policies", "hole-rnn-seed16", "--policy", f"dtr,{MIN_SIZE}", "--from",
            "0.8", "--to", "1.0", "--exact", "--jobs", "1", "-o", out, "--json")
    before = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (png, svg)]
    again = dtrf(*args)
    assert json.loads(again.out)["figures"] == doc["figures"] and "replaced" not in again.err
    assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in (png, svg)] == before
    other = "another figure".ljust(len(key))
    changes = (lambda: png.write_bytes(png.read_bytes().replace(key.encode(), other.encode())),
               lambda: svg.write_text(svg.read_text().replace(key, other)),
               lambda: png.write_bytes(png.read_bytes()[:-100]),          # cut short
               lambda: png.write_bytes(png.read_bytes()[:-40] + bytes(28) + png.read_bytes()[-12:]),
               lambda: svg.write_text(svg.read_text()[:4000]),
               png.unlink)
    for change in changes:
        change()
        redrawn = dtrf(*args)
        assert redrawn.code == 0 and f"replaced {svg}" in redrawn.err
        assert png_text(png, KEY_FIELD) == key and svg_has(svg, key)
    assert figure_key(doc) != figure_key({**doc, "peak": doc["peak"] + 1})
    (tmp_path / "not.png").write_bytes(b"GIF89a")
    assert png_text(tmp_path / "not.png", KEY_FIELD) is None


def test_a_partial_comparisons_verdict_says_what_is_uncertified(compared, tmp_path):
    """Cut short by --max-runs, each policy's verdict line gives its holes so far
    and the bytes left uncertified, its first success as the interval the
    certificates leave; the finished comparison's gives neither."""
    partial = dtrf("compare-policies", "hole-rnn-seed16", "--policy", "dtr,lru", "--from", "0.8",
                   "--to", "1.0", "--exact", "--max-runs", "6", "--jobs", "1", "--no-progress",
                   "-o", tmp_path / "cut", "--json").json()
    for standing, line in zip(partial["policies"], partial["verdict"]["lines"]):
        assert not standing["holes_complete"] and not standing["first_success_exact"]
        assert line.startswith(f"{standing['policy']}: ")
        assert f" so far, {standing['uncertified_bytes']:,} B uncertified" in line
        assert (f"first success between {standing['first_success_lowest_possible']:,} and "
                f"{standing['first_success']:,} B") in line
    assert "best over the most certified budgets: " in " ".join(partial["verdict"]["lines"])
    _, doc = compared
    assert all(s["holes_complete"] for s in doc["policies"])
    assert not any("so far" in line or "between" in line or "certified" in line
                   for line in doc["verdict"]["lines"])


def test_a_changed_policy_file_is_not_resumed(tmp_path):
    policy = tmp_path / "p.py"
    policy.write_text("from dtrforensics.policy import policy, ratio\n\n@policy\n"
                      "def p(compute, size, staleness):\n    return ratio(compute, size, staleness)\n")
    args = ("sweep", "hole-rnn-seed16", "--policy", f"{policy}:p", "--from", "0.9", "--to",
            "1.0", "--step", "0.05", "--jobs", "1", "--out", tmp_path / "s", "--no-progress")
    assert dtrf(*args).code == 0
    policy.write_text(policy.read_text().replace("staleness)\n", "staleness) * 2.0\n"))
    again = dtrf(*args)
    assert again.code == 2 and "changed since the sweep started" in again.err


def test_a_changed_policy_file_is_recorded_again(tmp_path):
    policy = tmp_path / "p.py"
    policy.write_text("from dtrforensics.policy import policy\n\n@policy\n"
                      "def p(size):\n    return 1.0 / size\n")
    spec = f"hole-rnn-seed16@0.93:{policy}:p"
    first = dtrf("replay", spec, "--cache", tmp_path / "cache")
    assert first.code == 0, first.err
    policy.write_text(policy.read_text().replace("1.0 / size", "float(size)"))
    second = dtrf("replay", spec, "--cache", tmp_path / "cache")
    assert second.code == 0
    assert len(list((tmp_path / "cache").iterdir())) == 2


def _count_preparations(monkeypatch, log):
    """Every per-trace preparation appends its name to `log`, a file, so that
    worker processes forked from this one count theirs too."""
    from dtrforensics.engine import replay as replay_module
    from dtrforensics.sweep import backends
    from dtrforensics.trace import cache, parser

    for module, name in ((cache, "load_program"), (parser, "parse_file"),
                         (replay_module, "kernel_graph"), (replay_module, "baseline"),
                         (backends, "_install")):
        real = getattr(module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            with open(log, "a") as fh:
                fh.write(f"{_name}\n")
            return _real(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_policies_of_one_trace_share_its_preparation(tmp_path, monkeypatch, jobs):
    """Four policies over seven budgets: the log is loaded (parsed), compiled
    into the kernel's graph, its baseline replayed and installed for the runs
    once, in this process; forked workers inherit it all and redo none."""
    from dtrforensics.analyses.policy_comparison import compare_policies
    from dtrforensics.synth.generator import SynthSpec, generate

    trace = tmp_path / "synth-resnet-3.log"
    trace.write_text(generate(SynthSpec(kind="resnet", seed=3)))
    log = tmp_path / "preparations"
    _count_preparations(monkeypatch, log)
    policies = ("dtr", "no-staleness", "no-size", "compute-only")
    result = compare_policies(str(trace), policies, ratio_from=0.3, ratio_to=0.9, step=0.1,
                              out=tmp_path / f"sweep{jobs}", jobs=jobs)
    assert sum(s.points for s in result.policies) == 4 * 7
    made = log.read_text().split()
    assert sorted(made) == sorted(["load_program", "parse_file", "kernel_graph", "baseline",
                                   "_install"]) or sorted(made) == sorted(
        ["load_program", "kernel_graph", "baseline", "_install"])   # parsed earlier: cached
    monkeypatch.undo()
    alone = [compare_policies(str(trace), (p,), ratio_from=0.3, ratio_to=0.9, step=0.1,
                              out=tmp_path / f"alone-{p}", jobs=1) for p in policies]
    assert [s.__dict__ for s in result.policies] == [a.policies[0].__dict__ for a in alone]
