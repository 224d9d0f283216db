"""Record one run: replay with a `Recorder` attached, into a named folder.

The default folder is `recordings/<trace>-<policy>-<ratio or budget>-<hash>/`
(relative to the current directory), where `<hash>` is the first 8 hex digits
of a SHA-256 over the trace's SHA-256, the budget in bytes, the policy and the
interventions: the same run always lands in the same place, different runs
never collide.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..engine.policies import POLICIES, get_policy
from ..engine.replay import (
    DEFAULT_THRASH_FACTOR,
    Interventions,
    RunResult,
    replay,
    resolve_budget,
)
from ..trace.program import Program
from .writer import Recorder

DEFAULT_ROOT = Path("recordings")


def policy_key(policy: str) -> str:
    """The policy as a run's identity: a policy from a file with its content's SHA-256,
    so an edited file never reuses a recording of its former self."""
    if policy in POLICIES:
        return policy
    return f"{policy}#{get_policy(policy).custom.source_sha256}"


def policy_label(policy: str) -> str:
    """The policy in a folder name: a policy from a file as FILESTEM.NAME."""
    path, sep, name = policy.rpartition(":")
    return f"{Path(path).stem}.{name}" if sep and path.endswith(".py") else policy


def run_hash(trace_sha256: str, budget: int, policy: str,
             interventions: Interventions | None) -> str:
    """8 hex digits identifying (trace, budget, policy, interventions)."""
    iv = (interventions or Interventions()).to_json()
    text = "\n".join([trace_sha256, str(int(budget)), policy,
                      json.dumps(iv, sort_keys=True, separators=(",", ":"))])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def default_recording_dir(program: Program, budget: int, ratio: float | None, policy: str,
                          interventions: Interventions | None = None,
                          root: Path = DEFAULT_ROOT) -> Path:
    amount = repr(float(ratio)) if ratio is not None else f"{int(budget)}B"
    short = run_hash(program.sha256, budget, policy_key(policy), interventions)
    return Path(root) / f"{program.name}-{policy_label(policy)}-{amount}-{short}"


def record_run(program: Program, *, ratio: float | None = None, budget: int | None = None,
               policy: str = "dtr", out_dir: str | Path | None = None,
               scores: str = "victims", timeout: float | None = None,
               interventions: Interventions | None = None, overwrite: bool = False,
               thrash_factor: float = DEFAULT_THRASH_FACTOR) -> tuple[RunResult, Path]:
    """Replay `program` and record it; returns the result and the recording folder.

    A run ending in oom, thrashed or timeout is a complete recording (its outcome
    is in run.json). Raises `RecordingExistsError` (a ValueError) before running if
    the folder exists and `overwrite` is false. An exception during the run leaves
    no folder behind.
    """
    budget_bytes, ratio = resolve_budget(program, budget, ratio)
    policy_name = policy if isinstance(policy, str) else policy.name
    target = Path(out_dir) if out_dir is not None else default_recording_dir(
        program, budget_bytes, ratio, policy_name, interventions)
    recorder = Recorder(target, scores=scores, overwrite=overwrite)
    recorder.check_target()
    amount = {"ratio": ratio} if ratio is not None else {"budget": budget_bytes}
    try:
        result = replay(program, **amount, policy=policy, observers=[recorder],
                        timeout=timeout, interventions=interventions,
                        thrash_factor=thrash_factor)
    except BaseException:
        recorder.abort()
        raise
    return result, recorder.path
