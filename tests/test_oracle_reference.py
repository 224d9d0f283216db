"""The test oracle (tests/oracle.py) against the reference simulator's results.

Each non-timeout line of the reference file (../shared/reference/dtr-simrd.jsonl)
is one point: the oracle replays the same trace with the same heuristic and
budget and must reproduce the outcome, the clock, the counters, the victim
sequence (hash and first 50 with op id and clock), the forensic fields and the
OOM details. Points the reference ran quickly (ResNet-32 and U-Net, under 2 s)
are in the default run; everything else is marked `slow`.

Traces and reference are found as tests/public.py says.
"""

from __future__ import annotations

import pytest
from oracle import run
from public import OOM_FIELDS, program_or_skip, reference_lines, reference_params

from dtrforensics.engine.baseline import baseline, budget_for_ratio

FAST_TRACES = ("resnet32", "unet")
FAST_SECS = 2.0



def _is_fast(line: dict) -> bool:
    return line["trace"] in FAST_TRACES and line["secs"] < FAST_SECS


@pytest.mark.public
@pytest.mark.parametrize("ref", reference_params(_is_fast))
def test_oracle_matches_reference(ref):
    program = program_or_skip(ref["trace"])
    res = run(program, ref["budget"], ref["heuristic"])

    assert res.model_compute == ref["model_compute"]
    # Victim order first: the most informative failure when executions diverge.
    got_first = [list(v) for v in res.victims[:50]]
    if got_first != ref["first_victims"]:
        i = next((k for k, (a, b) in enumerate(zip(got_first, ref["first_victims"])) if a != b),
                 min(len(got_first), len(ref["first_victims"])))
        pytest.fail(f"first divergent victim at pressure eviction #{i}: oracle "
                    f"{got_first[i] if i < len(got_first) else None} vs reference "
                    f"{ref['first_victims'][i] if i < len(ref['first_victims']) else None}")

    got = {
        "outcome": res.outcome,
        "clock": res.clock,
        "remat_compute": res.remat_compute,
        "evictions": res.evictions,
        "dead_frees": res.dead_frees,
        "distinct_evicted": res.distinct_evicted,
        "remats": res.remats,
        "max_depth": res.max_depth,
        "victims_sha256": res.victims_sha256,
        "max_pinned_at_check": list(res.max_pinned),
        "ops_done": res.ops_done,
    }
    want = {k: ref[k] for k in got}
    for optional, value in (("budget_interval", list(res.budget_interval)),
                            ("stream_distinct", res.stream_distinct)):
        if optional in ref:
            got[optional] = value
            want[optional] = ref[optional]
    assert got == want
    if ref["outcome"] == "ok":
        assert res.overhead == pytest.approx(ref["overhead"], rel=1e-12)

    if ref["oom"] is None:
        assert res.oom is None
    else:
        assert res.oom is not None
        assert {k: res.oom[v] for k, v in OOM_FIELDS.items()} == ref["oom"]


@pytest.mark.public
def test_reference_budgets_from_baseline():
    """The budgets the reference ran at are floor(ratio * peak) of our baseline."""
    lines = reference_lines()
    if not lines:
        pytest.skip("reference file dtr-simrd.jsonl not found (set DTRF_REFERENCE)")
    checked = 0
    for short_name in FAST_TRACES:
        program = program_or_skip(short_name)
        base = baseline(program)
        for ln in lines:
            if ln["trace"] != short_name:
                continue
            assert (base.peak, base.model_compute) == (ln["peak"], ln["model_compute"])
            assert budget_for_ratio(ln["ratio"], base.peak) == ln["budget"]
            checked += 1
    assert checked > 0
