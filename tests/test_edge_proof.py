"""The published, checkable fact behind `dtrf edges` (issue 14's proof).

On the public ResNet-32 trace, an exact sweep of ratios 0.10184-0.10186 has one
edge: 1,024,657,199 B completes and 1,024,657,200 B runs out of memory, and
the comparison that parts them is decided by one byte (the smaller budget is
1 B short where the larger fits with 0 B to spare). The numbers come from the
sweep; the test checks them against the published ones.
"""

from __future__ import annotations

import re

import pytest
from cli import dtrf
from public import SKIP_TRACES, traces_dir

pytestmark = pytest.mark.skipif(traces_dir() is None, reason=SKIP_TRACES)

LAST_OK, FIRST_OOM = 1_024_657_199, 1_024_657_200


@pytest.fixture(scope="module")
def edge_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("proof")
    dtrf("sweep", "resnet32", "--from", "0.10184", "--to", "0.10186", "--exact",
         "-o", "sweep", cwd=root).ok()
    return root


def test_the_resnet32_edge_is_decided_by_one_byte(edge_sweep):
    doc = dtrf("edges", "sweep", "--json", cwd=edge_sweep).json()
    (edge,) = doc["edges"]
    assert (edge["kind"], edge["exact"], edge["gap_bytes"]) == ("outcome", True, 0)
    assert (edge["below"]["budget"], edge["below_outcome"]) == (LAST_OK, "ok")
    assert (edge["above"]["budget"], edge["above_outcome"]) == (FIRST_OOM, "oom")
    d = edge["decisive"]
    assert (d["below_shortfall"], d["above_shortfall"], d["same_state"]) == (1, 0, True)
    assert d["memory"] + d["request"] - LAST_OK == 1


def test_the_edge_reads_whole_at_80_columns(edge_sweep):
    text = " ".join(dtrf("edges", "sweep", cwd=edge_sweep, columns=80).ok().split())
    assert f"{LAST_OK:,} B (ok" in text and f"{FIRST_OOM:,} B (oom)" in text
    assert re.search(rf"{LAST_OK:,} B is 1 B short; {FIRST_OOM:,} B fits, 0 B to spare", text)
