"""Where tests find the public DTR traces and the reference results.

Traces: $DTRF_TRACES (a folder holding dtr-2020/), default ../shared/traces
beside the repository. Reference: $DTRF_REFERENCE, default
../shared/reference/dtr-simrd.jsonl. Tests that need them skip with a reason.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
SKIP_TRACES = "public DTR traces not found: set DTRF_TRACES to the folder holding dtr-2020/"
SKIP_REFERENCE = "reference results not found: set DTRF_REFERENCE to dtr-simrd.jsonl"
# A reference result's `oom` key -> the field of our summary's oom (and the oracle's):
# the public results and tests/reference/synthetic.jsonl name them alike.
OOM_FIELDS = {"op": "op_id", "request": "request", "memory_usage": "memory",
              "pinned": "pinned", "depth": "depth", "tensor": "tensor",
              "root_tensor": "root_tensor", "budget": "budget"}


def traces_dir() -> Path | None:
    env = os.environ.get("DTRF_TRACES")
    path = Path(env) if env else SHARED / "traces"
    return path if path.is_dir() else None


def reference_file() -> Path | None:
    env = os.environ.get("DTRF_REFERENCE")
    path = Path(env) if env else SHARED / "reference" / "dtr-simrd.jsonl"
    return path if path.is_file() else None


@functools.lru_cache(maxsize=None)
def reference_lines() -> tuple[dict, ...]:
    path = reference_file()
    if path is None:
        return ()
    with open(path, encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@functools.lru_cache(maxsize=None)
def trace_file(short_name: str) -> Path | None:
    root = traces_dir()
    if root is None:
        return None
    for path in sorted(root.glob("**/*.log")):
        if path.name.split("-")[0] == short_name:
            return path
    return None


@functools.lru_cache(maxsize=None)
def _program(short_name: str):
    from dtrforensics.trace import parse_file
    return parse_file(trace_file(short_name))


def program_or_skip(short_name: str):
    if traces_dir() is None:
        pytest.skip(SKIP_TRACES)
    if trace_file(short_name) is None:
        pytest.skip(f"trace {short_name!r} not found under {traces_dir()}")
    return _program(short_name)


def reference_params(is_fast):
    """One pytest param per non-timeout reference line; slow unless is_fast(line)."""
    lines = [ln for ln in reference_lines() if ln["outcome"] != "timeout"]
    if not lines:
        return [pytest.param(None, id="no-reference", marks=pytest.mark.skip(reason=SKIP_REFERENCE))]
    return [pytest.param(ln, id=f"{ln['trace']}-{ln['heuristic']}-{ln['ratio']}",
                         marks=[] if is_fast(ln) else [pytest.mark.slow])
            for ln in lines]
