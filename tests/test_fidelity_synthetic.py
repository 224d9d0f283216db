"""The replay against the reference simulator on our own synthetic logs, in every
clone: no public trace needed (tests/reference/record.py made the results with
simrd; docs/semantics.md is the specification).

Six logs (a chain, residual blocks with in-place adds, a recurrent unroll with
shared weights and copies, a mix with tied sizes, and two small logs holding
every corner of the format: COPY_FROM, views of views, mutated views and
constants, duplicated arguments, zero sizes and costs), every reference policy,
budgets on both sides of every change of outcome, out of memory and thrashed
runs among them, and one byte below an interval's edge.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from pathlib import Path

import pytest
from public import OOM_FIELDS

from dtrforensics.engine.replay import replay
from dtrforensics.trace import parse_lines

REFERENCE = Path(__file__).parent / "reference"


def _rows() -> list[dict]:
    with open(REFERENCE / "synthetic.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@functools.lru_cache(maxsize=None)
def _program(log: str, sha256: str):
    text = gzip.decompress((REFERENCE / "logs" / log).read_bytes()).decode()
    assert hashlib.sha256(text.encode()).hexdigest() == sha256, \
        f"{log} is not the log the reference ran: run tests/reference/record.py again"
    return parse_lines(text.splitlines(keepends=True), log, log.split(".")[0])


def test_the_reference_covers_every_policy_outcome_and_instruction():
    rows = _rows()
    assert {r["policy"] for r in rows} == {"dtr", "no-staleness", "no-size", "compute-only",
                                           "lru", "size", "msps"}
    assert {r["outcome"] for r in rows} == {"ok", "oom", "thrashed"}
    assert any(r["ratio"] is None for r in rows)          # one byte below an interval
    logs = {r["log"] for r in rows}
    assert len(logs) == 6
    seen = set()
    for log in logs:
        for line in gzip.decompress((REFERENCE / "logs" / log).read_bytes()).splitlines():
            record = json.loads(line)
            seen.add(record["INSTRUCTION"])
            if record["INSTRUCTION"] == "ALIAS" and int(record["ALIAS"]) >= 0:
                seen.add("view")
    assert seen >= {"CONSTANT", "CALL", "MUTATE", "COPY", "COPY_FROM", "RELEASE", "view"}


def _by_log():
    groups: dict[str, list[dict]] = {}
    for row in _rows():
        groups.setdefault(row["log"], []).append(row)
    return sorted(groups.items())


@pytest.mark.parametrize("log,rows", _by_log(), ids=[log for log, _ in _by_log()])
def test_replay_matches_the_reference_on_synthetic_logs(log, rows):
    program = _program(log, rows[0]["log_sha256"])
    for ref in rows:
        result = replay(program, budget=ref["budget"], policy=ref["policy"])
        s = result.summary
        got = {
            "first_victims": result.victims[:len(ref["first_victims"])].tolist(),
            "peak": s.peak, "model_compute": s.model_compute, "outcome": s.outcome,
            "clock": s.clock, "remat_compute": s.remat_compute, "evictions": s.evictions,
            "dead_frees": s.dead_frees, "distinct_evicted": s.distinct_evicted,
            "stream_distinct": s.stream_distinct, "remats": s.remats,
            "max_depth": s.max_depth, "ops_done": s.ops_done,
            "max_pinned_at_check": [s.max_pinned.bytes, s.max_pinned.depth, s.max_pinned.op_id],
            "victims_sha256": s.victims_sha256, "budget_interval": list(s.budget_interval),
            "oom": None if s.oom is None else {k: getattr(s.oom, v)
                                               for k, v in OOM_FIELDS.items()},
        }
        assert got == {k: ref[k] for k in got}, (ref["policy"], ref["budget"])
