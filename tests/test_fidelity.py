"""The replay engine against every reference result (docs/semantics.md; ../shared/reference).

A forensic replay that makes one different decision tells a false story, so
each point must agree on everything the reference recorded. Points the
reference needed more than FAST_SECS for run under `make test-full`; the
default suite still covers every trace.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from public import OOM_FIELDS, program_or_skip, reference_params

from dtrforensics.engine.replay import replay

FAST_SECS = 12.0



def _first_divergence(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        if list(a) != list(b):
            return i, a, b
    if len(got) != len(want):
        i = min(len(got), len(want))
        return i, got[i] if i < len(got) else None, want[i] if i < len(want) else None
    return None


# The reference heuristics written through the policy API (docs/policies.md).
API_TWINS = Path(__file__).parent.parent / "examples" / "policies" / "reference.py"


@pytest.mark.public
@pytest.mark.parametrize("ref", reference_params(lambda ln: ln["secs"] < FAST_SECS))
def test_replay_matches_reference(ref):
    check_against_reference(ref, ref["heuristic"])


@pytest.mark.public
@pytest.mark.parametrize("ref", reference_params(lambda ln: ln["secs"] < FAST_SECS))
def test_policy_api_twin_matches_reference(ref):
    """The same formula from a file makes every decision the reference made."""
    check_against_reference(ref, f"{API_TWINS}:{ref['heuristic'].replace('-', '_')}")


def check_against_reference(ref, policy: str) -> None:
    program = program_or_skip(ref["trace"])
    result = replay(program, ratio=ref["ratio"], policy=policy)
    s = result.summary

    divergence = _first_divergence(result.victims[:50].tolist(), ref["first_victims"])
    assert divergence is None, (
        f"first divergent victim at pressure eviction #{divergence[0]}: "
        f"ours {divergence[1]} vs reference {divergence[2]} (storage, op id, clock)")
    got = {
        "budget": s.budget, "peak": s.peak, "model_compute": s.model_compute,
        "outcome": s.outcome, "clock": s.clock, "remat_compute": s.remat_compute,
        "evictions": s.evictions, "dead_frees": s.dead_frees,
        "distinct_evicted": s.distinct_evicted, "remats": s.remats, "max_depth": s.max_depth,
        "victims_sha256": s.victims_sha256, "ops_done": s.ops_done,
        "max_pinned_at_check": [s.max_pinned.bytes, s.max_pinned.depth, s.max_pinned.op_id],
    }
    if "budget_interval" in ref:
        got["budget_interval"] = list(s.budget_interval)
    if "stream_distinct" in ref:
        got["stream_distinct"] = s.stream_distinct
    assert got == {k: ref[k] for k in got}
    assert s.overhead == pytest.approx(ref["overhead"], rel=1e-12)
    if ref["oom"] is None:
        assert s.oom is None
    else:
        assert {k: getattr(s.oom, v) for k, v in OOM_FIELDS.items()} == ref["oom"]
