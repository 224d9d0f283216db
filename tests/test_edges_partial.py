"""Edges of a partial exact sweep (issue 27): only byte-exact edges are told as
edges, and the text says how many more lie in the uncertified budgets (each
checked here against a replay at every budget of its gap)."""

from __future__ import annotations

import pytest
from rich.console import Console
from sweeps import hole_log

from dtrforensics.analyses.edges import edges
from dtrforensics.engine.replay import replay
from dtrforensics.render.edges import edges_view
from dtrforensics.sweep import holes, runner
from dtrforensics.sweep.store import SweepParams


@pytest.mark.parametrize("max_runs", [3, 6])
def test_partial_sweep_edges_are_exact_and_the_rest_are_counted(tmp_path, max_runs):
    log = tmp_path / "hole.log"
    log.write_text(hole_log().text())
    runner.run_sweep(str(log), SweepParams(0.3, 1.0, exact=True, max_runs=max_runs),
                     tmp_path / "s", jobs=1)
    report = edges(tmp_path / "s", cache=tmp_path / "cache")
    program = hole_log().program()
    outcome = {}

    def ok(b: int) -> bool:
        if b not in outcome:
            outcome[b] = replay(program, budget=b).summary.outcome == "ok"
        return outcome[b]

    for e in report.edges:
        assert e.exact and e.gap_bytes == 0 and e.above.budget == e.below.budget + 1
        if e.kind == "outcome":
            assert ok(e.below.budget) != ok(e.above.budget)
    x = holes.analyze(tmp_path / "s").policy("dtr")
    assert report.uncertified_bytes == x.certain.uncertified_bytes > 0
    parts = sorted(x.exact.partition, key=lambda i: i.lo)
    hidden = 0
    for a, b in zip(parts, parts[1:]):
        if a.hi + 1 != b.lo and (a.outcome == "ok") != (b.outcome == "ok"):
            hidden += 1
            assert any(ok(c) != ok(c + 1) for c in range(a.hi, b.lo))     # a real edge inside
    assert report.unlocated >= hidden
    console = Console(record=True, width=300)
    console.print(edges_view(report))
    text = console.export_text()
    assert f"{report.uncertified_bytes:,} B of the range are uncertified" in text
    if report.unlocated:
        assert f"{report.unlocated} more lie in uncertified budgets" in text
