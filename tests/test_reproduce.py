"""`dtrf reproduce --quick`: the studies' ResNet-32 and U-Net claims, computed and judged.

Every claim of the quick subset must be a `match` or `sharper` (the two score
variants the studies never define are `not reproducible`); the report and its
figures are written; a second reproduction reuses the first one's runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import dtrf
from public import program_or_skip

from dtrforensics.reproduce import claims as C

UNDEFINED = {"holes.variant.nbhd_penalty", "holes.variant.t_control"}


def test_outcome_runs_merge_equal_neighbours():
    text = C.outcomes_text((0.1, 0.2, 0.3, 0.4), ("ok", "oom", "oom", "ok"))
    assert text == "0.1 ok, 0.2-0.3 oom, 0.4 ok"


def test_judge():
    assert C.judge("1.38x", "1.38x") == (C.MATCH, "")
    assert C.judge("1.38x", "1.39x") == (C.DIFFERS, "")
    assert C.judge("oom", "oom", sharper_note="exactly 5 B") == (C.SHARPER, "exactly 5 B")
    assert C.megabytes(889_795_480) == "889.8 MB"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    program_or_skip("resnet32")
    program_or_skip("unet")
    out = tmp_path_factory.mktemp("reproduce")
    result = dtrf("reproduce", "--quick", "--json", "-o", out, cwd=out)
    assert result.code == 0, result.err
    return out, json.loads(result.out)


def test_quick_reproduction_matches_every_claim(quick):
    _, doc = quick
    by_id = {c["id"]: c for c in doc["claims"]}
    assert {"resnet32.hole", "resnet32.oom_0.104.depth", "resnet32.retention.overhead",
            "unet.hole", "unet.grid_0.42"} <= set(by_id)
    for c in doc["claims"]:
        expected = {C.NOT_REPRODUCIBLE} if c["id"] in UNDEFINED else {C.MATCH, C.SHARPER}
        assert c["verdict"] in expected, c
    assert by_id["unet.hole"]["verdict"] == C.SHARPER       # byte-exact edges from the certificate
    assert by_id["resnet32.retention.control"]["ours"] == "oom"


def test_quick_report_and_figures(quick):
    out, doc = quick
    report = (out / "report.md").read_text()
    assert doc["report"] == str(out / "report.md")
    assert "| ResNet-32 OOM at 0.104: nesting depth | 118 | 118 | match |" in report
    for stem in ("resnet32-frontier", "resnet32-retention"):
        png = out / f"{stem}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"({stem}.png)" in report


def test_quick_reproduction_through_the_policy_api_twin_agrees(quick, tmp_path):
    """`--policy` reaches every DTR claim: DTR written through the policy API
    gives every claim the same answer as the built-in."""
    twin = Path(__file__).resolve().parents[1] / "examples" / "policies" / "reference.py"
    result = dtrf("reproduce", "--quick", "--json", "-o", tmp_path, "--policy", f"{twin}:dtr",
                  cwd=tmp_path)
    assert result.code == 0, result.err
    ours = {c["id"]: c["ours"] for c in json.loads(result.out)["claims"]}
    assert ours == {c["id"]: c["ours"] for c in quick[1]["claims"]}


def test_reproduce_refuses_a_policy_with_findings(tmp_path):
    result = dtrf("reproduce", "--findings", "--policy", "no-size", "-o", tmp_path, cwd=tmp_path)
    assert result.code == 2 and "compare-policies" in result.err
