"""Run arguments of the forensic analyses: recordings, or run specs recorded on the fly.

A run argument is a recording folder, or a run spec `TRACE@RATIO[:POLICY]`
(`inceptionv4@0.235`, `lstm@0.264:dtr`, `path/to/log@0.5:lru`) or
`TRACE@BYTESB[:POLICY]` with the budget in bytes (`resnet32@1024657200B`). A spec is
recorded once into the cache folder (default `recordings/cache/`, relative to
the current directory) under the recorder's default name, which identifies
trace, budget and policy: a later analysis of the same spec reuses it, and
records it again if the cached recording is damaged. A cached
recording made with scores="victims" is re-recorded when candidates are needed.

`open_together` opens several recordings in one DuckDB connection, on which
the shipped queries the SQL names are installed as it runs (db.QueriesOnDemand),
and says which run_id each one got.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import db, validate
from ..engine.policies import get_policy
from ..engine.replay import resolve_budget
from ..errors import DataError, OptionError
from ..recorder import manifest
from ..recorder.reader import (
    NotARecordingError,
    Recording,
    open_recording,
)
from ..recorder.record import default_recording_dir, record_run

DEFAULT_CACHE = Path("recordings") / "cache"


@dataclass(frozen=True)
class RunIdentity:
    """The fields that name a run, first in every result about one run (diff's and
    regime's two runs, oom, reevict's runs, replay's window)."""
    run_id: str              # the run's id in the connection that opened it
    trace: str               # the trace's name
    policy: str
    ratio: float | None      # null: the budget was given in bytes
    budget: int              # bytes
    outcome: str             # ok, oom, thrashed, error or timeout

    @staticmethod
    def of(rec: Recording, run_id: str) -> dict:
        """The identity fields of a recording's run, as keyword arguments."""
        run = rec.run
        return {"run_id": run_id, "trace": run["trace"]["name"], "policy": run["policy"],
                "ratio": run.get("ratio"), "budget": run["budget"], "outcome": rec.outcome}


class RunSpecError(OptionError):
    """A run argument that is neither a recording nor a valid run spec."""


@dataclass(frozen=True)
class RunSpec:
    """`TRACE@RATIO[:POLICY]` or `TRACE@BYTESB[:POLICY]`: exactly one of `ratio`
    (budget = floor(ratio x peak)) and `budget` (bytes) is set."""
    trace: str
    ratio: float | None
    policy: str = "dtr"
    budget: int | None = None

    @classmethod
    def parse(cls, text: str) -> RunSpec:
        """`TRACE@RATIO[:POLICY]` or `TRACE@BYTESB[:POLICY]` -> RunSpec; raises RunSpecError."""
        trace, at, rest = str(text).rpartition("@")
        if not at or not trace:
            raise RunSpecError(f"{text!r} is neither a recording folder nor a run spec "
                               "TRACE@RATIO[:POLICY] or TRACE@BYTESB[:POLICY] "
                               "(e.g. inceptionv4@0.235, resnet32@1024657200B)")
        amount, _, policy = rest.partition(":")
        ratio, budget = None, None
        if amount.endswith("B"):
            digits = amount[:-1].replace(",", "").replace("_", "")
            if not digits.isdigit():
                raise RunSpecError(f"run spec {text!r}: {amount!r} is not a budget in bytes "
                                   "(a whole number > 0 followed by B)")
            try:
                budget = validate.budget(int(digits), "the budget")
            except OptionError as exc:
                raise RunSpecError(f"run spec {text!r}: {exc}") from None
        else:
            try:
                ratio = validate.ratio(float(amount), "the ratio")
            except ValueError as exc:
                why = exc if isinstance(exc, OptionError) else (
                    f"{amount!r} is not a budget ratio (or a budget in bytes such as 1024657200B)")
                raise RunSpecError(f"run spec {text!r}: {why}") from None
        policy = policy or "dtr"
        try:
            get_policy(policy)
        except ValueError as exc:
            raise RunSpecError(f"run spec {text!r}: {exc}") from None
        return cls(trace, ratio, policy, budget)

    def __str__(self) -> str:
        amount = f"{self.budget}B" if self.budget is not None else repr(self.ratio)
        return f"{self.trace}@{amount}:{self.policy}"


def resolve_run(text: str | os.PathLike, *, scores: str = "victims",
                cache: str | os.PathLike = DEFAULT_CACHE,
                on_record: Callable[[RunSpec, Path], None] | None = None) -> Recording:
    """A recording folder, or a run spec recorded into `cache` (reused when present).

    scores="all" asks for candidate scores: a cached recording without them is
    recorded again. `on_record(spec, folder)` is called before a replay starts.
    """
    path = Path(text)
    if path.exists():
        return open_recording(path)
    if isinstance(text, os.PathLike) or "@" not in str(text):
        raise NotARecordingError(f"no such recording: {text} (a run spec is written "
                                 "TRACE@RATIO[:POLICY] or TRACE@BYTESB[:POLICY], e.g. "
                                 "inceptionv4@0.235 or resnet32@1024657200B)")
    spec = RunSpec.parse(str(text))
    return record_spec(spec, scores=scores, cache=cache, on_record=on_record)


def record_spec(spec: RunSpec, *, scores: str = "victims",
                cache: str | os.PathLike = DEFAULT_CACHE,
                on_record: Callable[[RunSpec, Path], None] | None = None) -> Recording:
    from ..trace import load_trace
    program = load_trace(spec.trace)
    budget, ratio = resolve_budget(program, spec.budget, spec.ratio)
    folder = default_recording_dir(program, budget, ratio, spec.policy, root=Path(cache))
    if folder.exists():
        try:
            rec = open_recording(folder)
        except DataError:
            manifest.discard_damaged(folder)     # a damaged cache entry is recorded again
        else:
            if scores != "all" or rec.run.get("scores") == "all":
                return rec
    if on_record is not None:
        on_record(spec, folder)
    _, where = record_run(program, ratio=spec.ratio, budget=spec.budget, policy=spec.policy,
                          out_dir=folder, scores=scores, overwrite=True)
    return open_recording(where)


# Recordings whose Parquet files total at most this are read into memory when
# an analysis opens them together (db.connect's load_below): `dtrf edges` on
# the demo's hole then takes 2.8 s instead of 3.6 s, each query binding no
# file. In memory the rows take several times their Parquet size (two LSTM
# recordings with every candidate: 11 MB of files, 183 MB more at the peak).
LOAD_BELOW = 4 * 2**20


def open_together(recordings: Sequence[Recording], *, every_query: bool = False,
                  in_memory: bool = True) -> tuple[db.QueriesOnDemand, list[str]]:
    """One connection over the recordings (each folder once) on which a shipped
    query is installed when SQL run through it names it (with `every_query`, all
    of them at once, for SQL that lists them); returns it and the run_id of each
    recording, in the order given. in_memory: small recordings are read into
    memory (LOAD_BELOW); False for a connection running a user's SQL, which
    keeps the views (a statement that would change their rows fails, as on
    the files) and reads nothing the query does not."""
    unique: list[Recording] = []
    for rec in recordings:
        if all(rec.path.resolve() != u.path.resolve() for u in unique):
            unique.append(rec)
    con = db.QueriesOnDemand(db.connect(unique, load_below=LOAD_BELOW if in_memory else 0))
    if every_query:
        con.installed.update(db.install_queries(con.connection))
    by_path = {p: r for r, p in con.sql("SELECT run_id, path FROM runs").fetchall()}
    return con, [by_path[str(rec.path.resolve())] for rec in recordings]


def same_trace(recordings: Sequence[Recording]) -> None:
    """Raise RunSpecError unless every recording replays the same trace (same log
    SHA-256; logs parsed from memory have none and are compared by name)."""
    keys = {rec.run["trace"].get("sha256") or f"name:{rec.run['trace']['name']}"
            for rec in recordings}
    if len(keys) > 1:
        names = ", ".join(f"{rec.run_id} ({rec.run['trace']['name']})" for rec in recordings)
        raise RunSpecError(f"these recordings replay different traces: {names}")


def check_same_trace(texts: Sequence[str | os.PathLike]) -> None:
    """Raise RunSpecError unless the run arguments (recordings or run specs) name
    the same trace, before anything is recorded: a run spec is judged by the log
    its trace name finds, a recording by its run.json."""
    from ..trace import load_trace
    keys: dict[str, str] = {}
    for text in texts:
        path = Path(text)
        if path.exists():
            trace = open_recording(path).run["trace"]
            key, name = trace.get("sha256") or f"name:{trace['name']}", trace["name"]
        elif "@" in str(text):
            program = load_trace(RunSpec.parse(str(text)).trace)
            key, name = program.sha256 or f"name:{program.name}", program.name
        else:
            continue                # resolve_run says what is wrong with it
        keys.setdefault(key, f"{text} ({name})")
    if len(keys) > 1:
        raise RunSpecError(f"these runs replay different traces: {', '.join(keys.values())}; "
                           "nothing was recorded")


__all__ = ["DEFAULT_CACHE", "NotARecordingError", "RunSpec", "RunSpecError", "check_same_trace",
           "open_together",
           "record_spec", "resolve_run", "same_trace"]
