"""The runs table of a sweep folder, declared once with the recording format's
`Table`/`Column`: the store writes its Parquet schema from it and
`docs/sweep-format.md` is generated from it (run `python -m
dtrforensics.sweep.schema` to rewrite the file; a test checks the committed
file is current)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..recorder.schema import REPO_ROOT, Column, Table, table_doc, write_doc

DOC_PATH = Path("docs") / "sweep-format.md"
SWEEP_FILE = "sweep.json"
STR, I32, I64, F64 = pa.string(), pa.int32(), pa.int64(), pa.float64()


def _c(name: str, type_: pa.DataType, unit: str, doc: str, source: str | None = None) -> Column:
    return Column(name, type_, unit, doc, nullable=True, source=source)


RUNS = Table("runs", file="runs/part-*.parquet", doc=(
    "One row per finished run of the sweep (a point and its confirmation reruns), "
    "appended in batches as runs finish: each flushed batch is one part file, so a "
    "killed sweep loses at most its unflushed rows and resumes by skipping the "
    "(policy, budget, rep) keys already stored."), columns=(
    _c("policy", STR, "", "eviction policy"),
    _c("budget", I64, "bytes", "memory budget of the run"),
    _c("rep", I32, "", "0: the point's run; k >= 1: k-th confirmation rerun (fresh process)"),
    _c("ratio", F64, "", "requested ratio (grid/refinement) or budget / peak"),
    _c("stage", STR, "", "grid | interior | refine | exact | repeat: who asked for the point"),
    _c("status", STR, "", "ok (completed) | fail (oom, thrashed) | unresolved (timeout)"),
    _c("outcome", STR, "", "engine outcome: ok | oom | thrashed | timeout"),
    _c("overhead", F64, "x", "(model + remat compute) / model compute; null for timeout"),
    _c("clock", I64, "ns", "final clock"),
    _c("remat_compute", I64, "ns", "total rematerialization compute"),
    _c("evictions", I64, "", "pressure evictions"),
    _c("remats", I64, "", "rematerializations"),
    _c("max_depth", I64, "", "maximum nesting depth"),
    _c("peak_memory", I64, "bytes", "highest resident memory"),
    _c("max_pinned_bytes", I64, "bytes",
       "most pinned bytes at an allocation check that had to free memory"),
    _c("max_pinned_depth", I64, "", "depth at that check"),
    _c("interval_lo", I64, "bytes", "budget-interval certificate: lowest budget with this "
                                    "identical execution (null: timeout)"),
    _c("interval_hi", I64, "bytes", "highest such budget (null: unbounded, or timeout)"),
    _c("victims_sha256", STR, "", "SHA-256 of the pressure-victim sequence"),
    _c("oom_op_id", I64, "", "OOM: top-level op id"),
    _c("oom_request", I64, "bytes", "OOM: bytes the failing allocation asked for"),
    _c("oom_pinned", I64, "bytes", "OOM: pinned bytes at failure"),
    _c("oom_depth", I64, "", "OOM: nesting depth at failure"),
    _c("wall_seconds", F64, "s", "wall time of the replay"),
    _c("cpu_seconds", F64, "s", "CPU time of the replay in the process that ran it "
                               "(null: a run stored before runs recorded it)"),
    _c("worker", STR, "", "host:pid of the process that ran it"),
    _c("finished_at", pa.timestamp("ms", tz="UTC"), "", "when the run finished"),
))


SWEEPS = Table("sweeps", doc=(
    f"Derived from each sweep folder's {SWEEP_FILE} when `dtrf sql` opens sweeps: one row "
    "per sweep."), columns=(
    _c("sweep_id", STR, "", "The sweep folder's name (the runs view has it too)."),
    _c("path", STR, "", "The sweep folder."),
    _c("trace", STR, "", "Trace short name.", "trace.name"),
    _c("trace_sha256", STR, "", "SHA-256 of the trace log.", "trace.sha256"),
    _c("peak", I64, "bytes", "Unconstrained peak memory of the trace.", "trace.peak"),
    _c("model_compute", I64, "ns", "Model compute of the trace.", "trace.model_compute"),
    _c("range_lo", I64, "bytes", "Lowest budget of the range: floor(ratio_from x peak).",
       "range_bytes.0"),
    _c("range_hi", I64, "bytes", "Highest budget of the range.", "range_bytes.1"),
    _c("ratio_from", F64, "", "--from.", "params.ratio_from"),
    _c("ratio_to", F64, "", "--to.", "params.ratio_to"),
    _c("step", F64, "", "--step (null: no grid).", "params.step"),
    _c("policies", pa.list_(STR), "", "--policy, in order.", "params.policies"),
    _c("exact", pa.bool_(), "", "--exact.", "params.exact"),
    _c("max_runs", I64, "", "--max-runs (exact walk runs per policy).", "params.max_runs"),
    _c("resolution", I64, "bytes", "--resolution.", "params.resolution"),
    _c("sweep_status", STR, "", "running | killed | complete | stopped | interrupted (above).",
       "status"),
    _c("stored_runs", I64, "", "Runs stored when the sweep last wrote its description.",
       "runs"),
    _c("updated", STR, "", "When the sweep last wrote its description (ISO 8601, UTC).",
       "updated"),
))


def render_sweep_doc() -> str:
    """The text of docs/sweep-format.md, generated from `RUNS`."""
    return "\n".join([
        "# Sweep format",
        "",
        "<!-- Generated from src/dtrforensics/sweep/schema.py by "
        "`python -m dtrforensics.sweep.schema`: do not edit by hand. -->",
        "",
        "A sweep (`dtrf sweep`) is one folder:",
        "",
        "```",
        f"<sweep>/{SWEEP_FILE}            parameters, trace identity, status",
        f"<sweep>/{RUNS.file}",
        "```",
        "",
        "`dtrf holes` and `dtrf plot` read it through the questions of `queries/sweep/`; "
        "`dtrf export SWEEP -f csv|parquet` writes the runs table sorted by "
        "(policy, budget, rep).",
        "",
        "`dtrf sql QUERY SWEEP...` opens one or several sweep folders as DuckDB views, "
        "read-only as recordings are: `runs` (every stored run, the table below, with a "
        "leading `sweep_id`: the folder's name) and `sweeps` (one row per sweep, from "
        f"its {SWEEP_FILE}). For example, the failing certificates of a sweep: "
        "`dtrf sql \"SELECT interval_lo, interval_hi FROM runs WHERE status = 'fail' "
        "AND rep = 0 ORDER BY 1\" SWEEP`. Give sweeps or recordings, not both.",
        "",
        "## Identity, resuming and extending",
        "",
        f"`{SWEEP_FILE}` holds the sweep's `identity`: the SHA-256 of the trace's "
        "SHA-256, the policies and their files' hashes, and every parameter a resume "
        "may not change. Each part file carries it in its Parquet key-value metadata "
        "(`dtrf.sweep.identity`, beside `dtrf.sweep.trace_sha256`); a part carrying "
        "another (a stranger copied in), like an unreadable one, is skipped with a "
        "warning by readers and moved into `runs/corrupt/` by a resumed sweep, which "
        "reruns its points. A sweep made before parts carried an identity (no "
        "`identity` in its description) reads its own unmarked parts.",
        "",
        "Rerunning `dtrf sweep` on the folder resumes it. A larger (or smaller) "
        "`--max-runs`, another `--resolution`, a wider range (`--from` lower, `--to` "
        "higher) or `--exact` on a sampled sweep extend it instead: every stored run "
        "is kept, a walk probe inside a stored certificate takes it instead of running, "
        f"and `{SWEEP_FILE}` then holds the new parameters. Any other change is refused.",
        "",
        f"`status` in `{SWEEP_FILE}`: `running` (`killed` when its writer is gone), "
        "`complete` (the call ran to its end: every stage, the walk to its run limit), "
        "`stopped` (stopped at a deadline: `run_sweep(deadline=...)`), `interrupted` "
        "(an error or Ctrl-C). All but a live `running` sweep resume. Every view of a "
        "sweep says the same (`concepts.sweep_status`): `dtrf holes`, and the `sweeps` "
        "view of `dtrf sql`, whose `sweep_status` is computed when `dtrf sql` opens the "
        "sweep.",
        "",
        "## The lock",
        "",
        "While a sweep writes to its folder it holds `sweep.lock`, which names it: "
        "`PID HOST STARTED`. The lock is made whole under a temporary name, locked with "
        "`flock` (an exclusive lock on the open file, which the sweep keeps open to its "
        "end), and hard-linked onto `sweep.lock`: the link fails when a lock is there, so "
        "of many processes taking it at once exactly one gets it, and a lock that exists "
        "is never empty. The kernel drops the `flock` when its process dies, however "
        "(kill -9 too), and a sweep's forked workers close their copy of the file, so a "
        "lock that no process holds is stale: its sweep is `killed`, and the next sweep "
        "of the folder takes it over with a warning. A taker waits for the stale lock's "
        "`flock` and removes it only while `sweep.lock` still names that file, so two "
        "takers never both win. A lock no process holds whose pid is a live process of "
        "this host (a lock of a version before `flock`) is still held: if no such sweep "
        "runs (a pid reused), delete the lock. The folder's file system must support "
        "`flock` and hard links (local file systems and NFS do).",
        "",
        *table_doc(RUNS, f"`{RUNS.file}`"),
        *table_doc(SWEEPS, "A view of `dtrf sql`"),
    ])


if __name__ == "__main__":
    print(write_doc(REPO_ROOT, DOC_PATH, render_sweep_doc()))
