"""The answer first (issue 40): every long output opens with a verdict of at most
8 lines of at most 80 columns -- what happened, the numbers that decide it (the
result's own, in the model's words where the log has a where-file), the next
`dtrf` command -- and `--brief` prints it alone, `--json` carries it.

Each command runs on the embedded trace (`hole-rnn-seed16`) and on a
hand-written log with a where-file; the verdict's next command is run too.
"""

from __future__ import annotations

import json
import shlex

import pytest
from cli import dtrf
from logdsl import Log
from logs import placed, w

from dtrforensics.render.verdict import MAX_LINES, WIDTH, Verdict, verdict_lines

HOLE = "hole@25200000B"          # inside the embedded trace's hole: OOM at op 18
OK = "hole@0.92"                 # completes
ABOVE = "hole@0.95"


def ok(cwd, *args: str, width: int = 200) -> str:
    return dtrf(*args, cwd=cwd, columns=width).ok()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder with an exact sweep across the hole, a recording inside it, and
    a small model's log with a where-file (`model.log`), its sweep and a
    recording of its failure."""
    root = tmp_path_factory.mktemp("verdict")
    ok(root, "sweep", "hole", "--from", "0.85", "--to", "0.95", "--exact", "--jobs", "1",
       "--no-progress", "-o", "sweep")
    ok(root, "run", "hole", "--budget", "25200000", "--record", "rec")
    log = (Log().const("w", 10).call("a", "f", ["w"], 10, 40).call("b", "f", ["a"], 10, 40)
           .call("c", "g", ["a", "b"], 10, 50).release("a").release("b").release("c"))
    placed(log, [w("embed", None), w("block.0", line=3), w("block.1", line=4),
                 w("head", line=5)], root / "model.log")
    ok(root, "sweep", "model.log", "--from", "0.5", "--to", "1", "--exact", "--jobs", "1",
       "--no-progress", "-o", "model-sweep")
    ok(root, "run", "model.log", "--budget", "139", "--record", "model-rec")
    return root


MODEL = "model.log@139B"         # fails allocating c, made by `head`
MODEL_OK = "model.log@200B"

COMMANDS = {
    "replay": ("replay", HOLE),
    "oom": ("oom", HOLE),
    "diff": ("diff", OK, HOLE),
    "reevict": ("reevict", OK, HOLE),
    "regime": ("regime", OK, ABOVE),
    "show": ("show", "rec"),
    "intervene": ("intervene", "hole", "--budget", "25200000", "--force-victim", "4@0"),
    "explain": ("explain", "hole", "--budget", "25200000", "--jobs", "1"),
    "holes": ("holes", "sweep"),
    "edges": ("edges", "sweep"),
    "sweep": ("sweep", "hole", "--from", "0.9", "--to", "0.93", "--exact", "--jobs", "1",
              "--no-progress", "-o", "sweep2"),
    "compare-policies": ("compare-policies", "hole", "--from", "0.9", "--to", "0.93",
                         "--exact", "--policy", "dtr,lru", "--jobs", "1", "--no-progress",
                         "-o", "compare"),
    "model oom": ("oom", MODEL),
    "model replay": ("replay", MODEL),
    "model diff": ("diff", MODEL_OK, MODEL),
    "model explain": ("explain", "model.log", "--budget", "139", "--jobs", "1"),
    "model intervene": ("intervene", "model.log", "--budget", "139", "--retain", "1"),
    "model reevict": ("reevict", MODEL_OK, MODEL),
    "model regime": ("regime", MODEL_OK, MODEL),
    "model show": ("show", "model-rec"),
    "model holes": ("holes", "model-sweep"),
    "model edges": ("edges", "model-sweep"),
}


def opening(stdout: str) -> list[str]:
    """The lines before the output's first blank line: its verdict."""
    return stdout.split("\n\n", 1)[0].splitlines()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_verdict_comes_first_fits_and_brief_prints_it_alone(folder, name):
    """The verdict opens the output within MAX_LINES lines of WIDTH, `--brief` and
    `--json --brief` print it alone, and the command it names next runs."""
    args = COMMANDS[name]
    full = ok(folder, *args)
    verdict = opening(full)
    assert 2 <= len(verdict) <= MAX_LINES, full
    assert all(len(line) <= WIDTH for line in verdict), verdict
    assert verdict[-1].startswith("next: dtrf ") or verdict[-2].startswith("next: dtrf ")
    assert len(full.splitlines()) > len(verdict) + 1          # details follow
    assert ok(folder, *args, "--brief").splitlines() == verdict
    data = json.loads(ok(folder, *args, "--json"))
    assert data["verdict"]["text"] == verdict
    brief = json.loads(ok(folder, *args, "--json", "--brief"))
    assert brief == {"verdict": data["verdict"]}
    next_command_runs(folder, brief)
    # a narrower terminal gets the same words in narrower lines
    narrow = ok(folder, *args, "--brief", width=60).splitlines()
    assert all(len(line) <= 60 or " " not in line.strip() for line in narrow), narrow
    assert words(narrow) == words(verdict)


def words(lines: list[str]) -> list[str]:
    return [w for w in " ".join(lines).split() if w != "\\"]


def next_command_runs(folder, data: dict) -> None:
    """The verdict's `next:` command (of a `--json --brief` document) runs."""
    words = shlex.split(data["verdict"]["next"])
    assert words[0] == "dtrf"
    res = dtrf(*words[1:], cwd=folder, columns=200)
    assert res.code == 0, (words, res.err)


def test_the_oom_verdict_gives_the_reports_numbers(folder):
    report = json.loads(ok(folder, "oom", HOLE, "--json"))
    text = " ".join(" ".join(report["verdict"]["text"]).split())
    assert text.startswith("OOM: ")
    for key in ("budget", "request", "memory", "pinned", "shortfall"):
        assert f"{report[key]:,} B" in text, key
    assert f"op {report['op_id']} " in text and report["op_name"] in text
    assert report["verdict"]["next"] == f"dtrf explain hole --budget {report['budget']}"
    assert " in " not in report["verdict"]["headline"]   # no where-file: no module said


def test_verdicts_speak_in_module_paths_where_the_log_has_them(folder):
    oom = json.loads(ok(folder, "oom", MODEL, "--json"))
    assert oom["op_module"] == "head"
    assert oom["verdict"]["headline"].endswith(f"op {oom['op_id']} (paper #"
                                               f"{oom['op_id'] + 1}) g in head")
    assert "allocating c in head (forward) at model.py:5:" in " ".join(oom["verdict"]["lines"])
    replay = json.loads(ok(folder, "replay", MODEL, "--json"))
    assert "failing check: c in head" in " ".join(replay["verdict"]["lines"])
    explain = json.loads(ok(folder, "explain", "model.log", "--budget", "139", "--jobs", "1",
                            "--json"))
    assert "failure: allocating c in head at depth" in " ".join(explain["verdict"]["lines"])


def test_runs_and_diffs_state_outcomes_and_budgets(folder):
    diff = json.loads(ok(folder, "diff", OK, HOLE, "--json"))
    text = " ".join(diff["verdict"]["text"])
    for run in ("a", "b"):
        assert f"{run} {diff[run]['outcome']} at {diff[run]['budget']:,} B" in text
    assert f"stream entry {diff['first_divergence']['position']:,}" in text
    assert diff["verdict"]["next"] == f"dtrf oom {HOLE}"        # b fails: its frontier next
    holes = json.loads(ok(folder, "holes", "sweep", "--json"))
    lo, hi = holes["policies"]["dtr"]["failure_regions_bytes"][0]
    assert f"dtr: 1 hole, first {lo:,}-{hi:,} B ({hi - lo + 1:,} B)" in \
        " ".join(holes["verdict"]["text"])


def test_a_long_verdict_keeps_its_headline_and_command_within_8_lines():
    v = Verdict("a headline " * 12, tuple("detail number 1,234,567 B " * 5 for _ in range(6)),
                "dtrf explain hole --budget 25200000 --policy dtr --max-attempts 64")
    lines = verdict_lines(v)
    assert len(lines) <= MAX_LINES and all(len(line) <= WIDTH for line in lines)
    assert " ".join(lines).count("detail") < 30                 # the last details gave way
    assert lines[0].startswith("a headline") and lines[-1].startswith("next: dtrf explain")
    assert all(line.count("1,234,567") == line.count("1,234,567 B") for line in lines)
    with pytest.raises(ValueError):
        Verdict("h", tuple("x" for _ in range(7)))


def _said(data: dict) -> str:
    """The verdict's drawn lines as one line of words."""
    return " ".join(" ".join(data["verdict"]["text"]).split())


def test_each_verdict_states_its_results_own_numbers(folder):
    explain = json.loads(ok(folder, *COMMANDS["explain"], "--json"))
    fix = explain["fixes"][0]
    assert explain["verdict"]["next"] == ("dtrf intervene hole --budget 25200000 "
                                          + " ".join(fix["args"]))
    assert f"{len(explain['fixes'])} changes of {len(explain['attempts'])} tried" in \
        _said(explain)
    iv = json.loads(ok(folder, *COMMANDS["intervene"], "--json"))
    assert f"{iv['baseline']['outcome']} -> {iv['intervention']['outcome']}" in _said(iv)
    assert iv["verdict"]["next"].startswith("dtrf diff recordings/interventions/")
    edges = json.loads(ok(folder, "edges", "sweep", "--json"))
    e = edges["edges"][0]
    assert (f"first: {e['below']['budget']:,} B {e['below']['outcome']}, "
            f"{e['above']['budget']:,} B {e['above']['outcome']}") in _said(edges)
    below, above = (str((folder / e[k]["recording"]).relative_to(folder))   # relative or not
                    for k in ("below", "above"))
    assert edges["verdict"]["next"] == f"dtrf diff {below} {above}"   # from here, as it runs
    regime = json.loads(ok(folder, "regime", OK, ABOVE, "--json"))
    for run in ("a", "b"):
        assert f"{run}: {regime[run]['outcome']} at {regime[run]['budget']:,} B" in _said(regime)
    reevict = json.loads(ok(folder, "reevict", OK, HOLE, "--json"))
    for run in reevict["runs"]:
        p = run["pressure"]
        assert (f"{p['evictions']:,} pressure evictions of {p['distinct_storages']:,} "
                "storages") in _said(reevict)
    show = json.loads(ok(folder, "show", "rec", "--json"))
    oom = show["run"]["summary"]["oom"]
    assert f"fails at op {oom['op_id']} " in _said(show)
    assert f"allocating {oom['tensor']}, {oom['request']:,} B" in _said(show)
    assert show["verdict"]["next"] == "dtrf oom rec"
    replay = json.loads(ok(folder, "replay", OK, "--json"))
    assert f"budget {replay['budget']:,} " in _said(replay)


def test_the_diff_verdict_names_the_divergent_victims_module(folder):
    diff = json.loads(ok(folder, "diff", MODEL_OK, MODEL, "--json"))
    entry = diff["first_divergence"]["a"]
    assert entry["module"] == "block.0"
    assert f"a frees {entry['victim']} in block.0" in _said(diff)


def test_the_reproduction_verdict_counts_the_claims_and_names_those_off():
    from dtrforensics.render.verdicts import reproduction_verdict
    from dtrforensics.reproduce.claims import Claim
    from dtrforensics.reproduce.protocol import Reproduction
    claims = [Claim("a.x", "holes", "x", "1", "1", "match"),
              Claim("b.y", "holes", "y", "2 GB", "3 GB", "differs"),
              Claim("c.z", "dtr", "z", "-", "-", "sharper")]
    v = reproduction_verdict(Reproduction(quick=True, claims=claims), "out")
    assert v.headline == "3 claims: 1 match, 1 differs, 1 sharper"
    assert v.lines == ("b.y: differs; published 2 GB, ours 3 GB",)
    assert v.next == "dtrf reproduce -o out"            # the quick subset: the whole next
    full = reproduction_verdict(Reproduction(quick=False, claims=claims), "out")
    assert full.next == "dtrf reproduce --findings -o out"
