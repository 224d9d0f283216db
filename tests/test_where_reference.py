"""A log recorded with its where-file is still the reference simulator's log: simrd
(commit eff53cc4, `DTRF_SIMRD`) replays it with the victims, clock and outcome of
our engine, at budgets from the unconstrained peak down into failure. Skipped with
the reason where simrd is not given; the log format is held byte for byte by
tests/test_torch_where.py everywhere."""

from __future__ import annotations

import math
import os
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dtrforensics import api  # noqa: E402
from dtrforensics.torch import record  # noqa: E402
from dtrforensics.torch.zoo import ZOO  # noqa: E402
from dtrforensics.trace.where import where_path  # noqa: E402

SIMRD = os.environ.get("DTRF_SIMRD")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not SIMRD, reason="set DTRF_SIMRD to dtr-prototype's simrd/ folder "
                                         "(commit eff53cc4) to replay the log in the reference"),
]
RATIOS = (1.0, 0.98, 0.95, 0.9, 0.85, 0.8, 0.6, 0.4)


def _simrd_runs(monkeypatch, log: Path, ratios) -> list[dict]:
    """simrd's observed run at each ratio of its own baseline peak (tests/reference/record.py)."""
    monkeypatch.syspath_prepend(SIMRD)
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "reference"))
    import simrd.heuristic as heuristics
    import simrd.heuristic.ablation as ablations
    from record import observed_runtime, run  # the same observer the recorded results use
    from simrd.parse import parse_file
    from simrd.runtime import RuntimeV1, RuntimeV2EagerOptimized
    rows: list[dict] = []

    def work() -> None:
        callback = parse_file(log.read_text().splitlines(keepends=True), start=True).get_closure()
        baseline = RuntimeV1(math.inf, heuristics.Heuristic(), stats=False, trace=False)
        callback(baseline)
        peak = baseline.telemetry.summary["max_memory"]
        compute = baseline.telemetry.summary["model_compute"]
        for ratio in ratios:
            rows.append(run(callback, observed_runtime(RuntimeV2EagerOptimized),
                            ablations.DTR(), int(ratio * peak), compute))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000_000)
    stack = threading.stack_size(1 << 29)
    try:
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    finally:
        threading.stack_size(stack)
        sys.setrecursionlimit(limit)
    return rows


@pytest.mark.parametrize("name", ["gpt", "encoder"])
def test_a_log_with_its_where_file_replays_in_the_reference_with_the_same_victims(monkeypatch, tmp_path,
                                                                                 name):
    model, batch, loss_fn = ZOO[name]()
    log = tmp_path / f"{name}.log"
    record(model, batch, loss_fn, log)
    assert where_path(log).is_file()
    theirs = _simrd_runs(monkeypatch, log, RATIOS)
    assert None not in theirs, "simrd failed one of its own assertions"
    ours = [api.run(log, budget=row["budget"]) for row in theirs]
    assert any(row["outcome"] == "ok" and row["evictions"] for row in theirs)
    assert any(row["outcome"] == "oom" and row["evictions"] for row in theirs)
    for mine, ref in zip(ours, theirs):
        assert (mine.outcome, mine.clock, mine.evictions, mine.victims_sha256) == \
            (ref["outcome"], ref["clock"], ref["evictions"], ref["victims_sha256"]), ref["budget"]
