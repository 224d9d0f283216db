"""Every table of a recording, declared once: columns, Arrow types, units, docs.

A recording is a folder of Parquet tables plus `run.json`. This module is the
single declaration of that format: the writer builds its Arrow schemas from
it, the database layer builds its typed (possibly empty) views from it, and
`docs/recording-format.md` is generated from it (`render_format_doc`; run
`python -m dtrforensics.recorder.schema` to rewrite the file, a test checks
that the committed file is up to date).

Versioning: `FORMAT_VERSION` is "MAJOR.MINOR". A minor bump only adds columns,
tables or run.json keys (old readers ignore them); a major bump changes the
meaning or type of something that exists. Readers refuse a newer major.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from ..engine import hooks
from ..engine.hooks import EVENT_KINDS
from ..errors import DataError
from ..fsutil import atomic_path

FORMAT_VERSION = "1.4"
RUN_FILE = "run.json"
PARTIAL_MARK = ".partial-"   # `.<name>.partial-<pid>`: a recording being written
OLD_MARK = ".old-"           # `.<name>.old-<pid>`: a replaced recording being deleted
DOC_PATH = Path("docs") / "recording-format.md"
META_FORMAT = b"dtrforensics.recording_format"
META_TABLE = b"dtrforensics.table"

KIND_TYPE = pa.dictionary(pa.int8(), pa.string())
WHERE_TYPE = pa.dictionary(pa.int32(), pa.string())
I64, F64, BOOL, STR = pa.int64(), pa.float64(), pa.bool_(), pa.string()


class RecordingFormatError(DataError, ValueError):
    """A recording this version cannot read (newer major format, malformed version)."""


def parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(x) for x in str(text).split("."))
    except ValueError:
        raise RecordingFormatError(f"malformed recording format version {text!r}") from None
    return major, minor


def check_version(found: str, where: str = "recording") -> None:
    """Refuse a recording written in a newer MAJOR format than this reader knows."""
    major, _ = parse_version(found)
    ours, _ = parse_version(FORMAT_VERSION)
    if major > ours:
        raise RecordingFormatError(
            f"{where} uses recording format {found}, newer than the {FORMAT_VERSION} this "
            f"dtrforensics reads (major {major} > {ours}): upgrade dtrforensics to read it")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str            # "bytes", "ns", "count", "id", "index", "score", "" ...
    doc: str
    nullable: bool = False
    source: str | None = None   # runs table only: dotted key path into run.json


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    columns: tuple[Column, ...]
    file: str | None = None     # Parquet file in the recording; None: derived (runs)
    optional: bool = False      # may be absent (its view is then empty but typed)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def arrow_schema(self) -> pa.Schema:
        """The schema as written, with the format version in its metadata."""
        return self._schema

    @cached_property
    def _schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns],
                         metadata={META_FORMAT: FORMAT_VERSION.encode(),
                                   META_TABLE: self.name.encode()})

    def _ordered(self, columns: Mapping[str, pa.Array]) -> list[pa.Array]:
        names = set(self.column_names)
        if set(columns) != names:
            raise ValueError(f"table {self.name}: missing columns "
                             f"{sorted(names - set(columns))}, unknown columns "
                             f"{sorted(set(columns) - names)}")
        return [columns[name] for name in self.column_names]

    def record_batch(self, columns: Mapping[str, pa.Array]) -> pa.RecordBatch:
        """A batch of this table from arrays keyed by column name (in any order): data
        lands under its name whatever the declared column order."""
        return pa.RecordBatch.from_arrays(self._ordered(columns), schema=self._schema)

    def arrow_table(self, columns: Mapping[str, pa.Array]) -> pa.Table:
        """`record_batch` for a whole table."""
        return pa.Table.from_arrays(self._ordered(columns), schema=self._schema)

    def query_schema(self) -> pa.Schema:
        """The schema as SQL sees it (dictionary columns read back as plain strings)."""
        return pa.schema([pa.field(c.name, _plain(c.type), nullable=c.nullable)
                          for c in self.columns])


def _plain(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def C(name, type_, unit, doc, nullable=False, source=None) -> Column:  # noqa: N802
    return Column(name, type_, unit, doc, nullable, source)


def event_timings() -> dict[str, str]:
    """When each event kind fires, relative to the state change: the first sentence of
    its entry in the engine's observer documentation (`engine/hooks.py`)."""
    text = hooks.__doc__.split("When each kind fires", 1)[1]
    items = re.findall(r"^- `(\w+)`: (.*?)(?=^- `|\Z)", text, flags=re.M | re.S)
    timings = {}
    for kind, body in items:
        flat = " ".join(body.split())
        timings[kind] = re.split(r"(?<=\.)\s", flat, maxsplit=1)[0]
    return {kind: timings[kind] for kind in EVENT_KINDS}


def where_columns(which: str, type_: pa.DataType = STR, chain: bool = False) -> tuple[Column, ...]:
    """Where `which` (an op) ran in the model, from the log's where-file
    (docs/torch.md, "Where each op ran"): null for logs without one (the 2020 logs)."""
    found = (
        C("module", type_, "", f"Module path of {which} (`named_modules()`'s name of the "
          "innermost module running, e.g. `layers.0.input_layernorm`; a backward op's is "
          "the forward module its autograd node came from); null where none or unknown.",
          nullable=True),
        C("module_chain", type_, "", f"The modules around {which}, outermost first, "
          "joined by ` > `.", nullable=True),
        C("phase", type_, "", f"Phase of {which}: forward, loss, backward, optimizer or "
          "recompute (inside torch.utils.checkpoint); null for constants made before the "
          "step.", nullable=True),
        C("source", type_, "", f"`file:line` of the innermost user frame when {which} ran "
          "(a backward op: its forward op's).", nullable=True),
    )
    return found if chain else tuple(c for c in found if c.name != "module_chain")


# --- the tables --------------------------------------------------------------------

EVENTS = Table("events", file="events.parquet", doc=(
    "Every engine event of the run, in order: one row per event. Each row carries "
    "the state it was taken in (clock, depth, memory, pool). Event kinds and when "
    "they fire (from engine/hooks.py): "
    + "; ".join(f"`{kind}` {when.rstrip('.')}" for kind, when in event_timings().items())
    + "."), columns=(
    C("seq", I64, "index", "Position of the event in the run, from 0 (strictly increasing, no gaps)."),
    C("kind", KIND_TYPE, "", "One of: " + ", ".join(EVENT_KINDS) + "."),
    C("op_id", I64, "id", "Current top-level op (0-based op id; the papers number ops "
      "from 1). While pinning, the last computed op's id."),
    C("clock", I64, "ns", "Simulated clock (starts at 1; every compute adds its op's cost)."),
    C("depth", I64, "count", "Materializations in progress, the top-level one counting 1 "
      "(0 outside any, e.g. dead frees between ops)."),
    C("tensor_id", I64, "id", "materialize/alloc_check/compute/oom: the tensor being "
      "materialized or computed; evict: the tensor whose allocation needs the room; "
      "free_dead: the released tensor; pin: the pinned tensor."),
    C("storage_id", I64, "id", "evict/free_dead: the storage freed; otherwise the "
      "storage of `tensor_id`."),
    C("bytes", I64, "bytes", "alloc_check/oom: the request; evict/free_dead/pin: the "
      "storage's size; compute: the tensor's size (0 for a view). Null for materialize.",
      nullable=True),
    C("memory", I64, "bytes", "Resident bytes at the event (for compute: after the op's "
      "outputs were added, before already-defined siblings are subtracted)."),
    C("pinned_bytes", I64, "bytes", "alloc_check, evict, oom: memory - pool_bytes, the "
      "resident bytes that cannot be evicted when the allocation needs room; null for "
      "other kinds (since format 1.3; filled on every row before).", nullable=True),
    C("pool_bytes", I64, "bytes", "Bytes of the evictable pool."),
    C("pool_size", I64, "count", "Storages in the evictable pool."),
    C("budget", I64, "bytes", "The run's memory budget (the same on every row)."),
    C("request", I64, "bytes", "The allocation being made (alloc_check, evict, oom); "
      "null otherwise.", nullable=True),
    C("decision", I64, "index", "evict: the decision index (0-based count of pressure "
      "evictions before it; joins decisions.decision); null otherwise.", nullable=True),
    C("remat", BOOL, "", "compute: a rematerialization (not the op's first, scheduled "
      "computation); null for other kinds.", nullable=True),
    C("collateral", BOOL, "", "compute: a sibling output made defined by its op's "
      "computation (no cost of its own); null for other kinds.", nullable=True),
    C("must_free", BOOL, "", "alloc_check: memory + request > budget (memory must be "
      "freed); null for other kinds.", nullable=True),
    C("cost", I64, "ns", "compute: the op's cost (0 for a collateral row; the primary "
      "rows sum to clock - 1); null for other kinds.", nullable=True),
    *where_columns("the op the event names (evict, free_dead: the op that made the "
                   "storage; other kinds: the op of `tensor_id`)", WHERE_TYPE),
))

DECISIONS = Table("decisions", file="decisions.parquet", doc=(
    "One row per pressure eviction (a heuristic choice), in order. The state is taken "
    "when the victim was chosen, before it is evicted."), columns=(
    C("decision", I64, "index", "Decision index, from 0 (the `K` of --force-victim S@K)."),
    C("seq", I64, "index", "seq of the matching `evict` event."),
    C("op_id", I64, "id", "Current top-level op."),
    C("clock", I64, "ns", "Clock at the choice."),
    C("depth", I64, "count", "Nesting depth at the choice."),
    C("tensor_id", I64, "id", "The tensor being materialized (whose allocation needs room)."),
    C("request", I64, "bytes", "Bytes of that allocation."),
    C("memory", I64, "bytes", "Resident bytes before the eviction."),
    C("pinned_bytes", I64, "bytes", "memory - pool_bytes before the eviction."),
    C("shortfall", I64, "bytes", "memory + request - budget before the choice (> 0)."),
    C("pool_size", I64, "count", "Storages in the pool (the candidates, before any "
      "intervention excluded some)."),
    C("pool_bytes", I64, "bytes", "Bytes of the pool."),
    C("victim", I64, "id", "Storage evicted."),
    C("victim_bytes", I64, "bytes", "Its size."),
    C("score", F64, "score", "Its score under the run's policy (may be +inf)."),
    C("compute", I64, "ns", "Its own compute (sum of its distinct producing ops' costs)."),
    C("fwd_compute", I64, "ns", "Compute of its evicted forward neighbourhood (0 for "
      "policies that do not read it)."),
    C("bwd_compute", I64, "ns", "Compute of its evicted backward neighbourhood."),
    C("staleness", I64, "ns", "clock - its last access."),
    C("runner_up", I64, "id", "Second-best storage among those scanned (the scan stops "
      "at the first zero score); null if the victim was the only one.", nullable=True),
    C("runner_up_score", F64, "score", "Its score.", nullable=True),
    C("margin", F64, "score", "runner_up_score - score (0 = a tie broken by pool order; "
      "negative only for a forced victim); null without a runner-up or when both "
      "scores are +inf.", nullable=True),
    C("relative_margin", F64, "", "margin / runner_up_score (0 = tie, 1 = the victim "
      "scored 0); null when runner_up_score is null, 0 or +inf.", nullable=True),
))

CANDIDATES = Table("candidates", file="candidates.parquet", optional=True, doc=(
    "Only with scores=all: one row per storage scored at each decision, in scan "
    "order (storages excluded by an intervention are not scored)."), columns=(
    C("decision", I64, "index", "Decision index (joins decisions.decision)."),
    C("storage_id", I64, "id", "The candidate storage."),
    C("position", I64, "index", "0-based position in the scan (pool order)."),
    C("score", F64, "score", "Its score (may be +inf)."),
    C("compute", I64, "ns", "Its own compute."),
    C("fwd_compute", I64, "ns", "Evicted forward-neighbourhood compute."),
    C("bwd_compute", I64, "ns", "Evicted backward-neighbourhood compute."),
    C("size", I64, "bytes", "Its size."),
    C("staleness", I64, "ns", "clock - its last access."),
    C("rank", I64, "index", "The policy's preference, 1 = its choice: score ascending, "
      "and among equal scores the later pool position first (the scan keeps the last "
      "of equal minima)."),
    C("chosen", BOOL, "", "Whether this storage was evicted at this decision (differs "
      "from rank = 1 only under --force-victim)."),
))

STORAGES = Table("storages", file="storages.parquet", doc=(
    "Static: one row per storage of the trace."), columns=(
    C("storage_id", I64, "id", "Storage id = tensor id of its owning tensor."),
    C("size", I64, "bytes", "Its size."),
    C("tensor", STR, "", "Name of the owning tensor (as in the log, e.g. x7977)."),
    C("op_id", I64, "id", "Op producing the owning tensor (0-based)."),
    C("paper_op", I64, "id", "The same op in the papers' 1-based numbering (op_id + 1)."),
    C("op_name", STR, "", "That op's name."),
    C("compute", I64, "ns", "Sum of the costs of the distinct ops producing any of its tensors."),
    C("n_tensors", I64, "count", "Tensors sharing it (1 + views)."),
    C("constant", BOOL, "", "Produced by a constant (a parameter or input: pinned)."),
    *where_columns("the op that made it (a parameter's or buffer's: its module)"),
))

TENSORS = Table("tensors", file="tensors.parquet", doc=(
    "Static: one row per tensor of the trace."), columns=(
    C("tensor_id", I64, "id", "Tensor id (creation order)."),
    C("name", STR, "", "Name in the log (`<name>$` for a mutation result)."),
    C("op_id", I64, "id", "Producing op (0-based)."),
    C("output_index", I64, "index", "Position among its op's outputs."),
    C("storage_id", I64, "id", "Its storage."),
    C("size", I64, "bytes", "Its size (0 for a view)."),
    C("view_of_arg", I64, "index", "For a view: the index of the op argument it views; "
      "null otherwise.", nullable=True),
))

OPS = Table("ops", file="ops.parquet", doc="Static: one row per op (compute command).", columns=(
    C("op_id", I64, "id", "0-based op id, in schedule order (constants included)."),
    C("paper_op", I64, "id", "op_id + 1, the papers' numbering."),
    C("name", STR, "", "Op name (`constant` for parameters and inputs)."),
    C("cost", I64, "ns", "Its cost."),
    C("n_outputs", I64, "count", "Number of output tensors."),
    C("total_size", I64, "bytes", "Bytes its outputs allocate (views count 0)."),
    C("backward", BOOL, "", "After the BACKWARD annotation."),
    C("line", I64, "index", "1-based line of the log it comes from."),
    C("first_tensor", I64, "id", "Id of its first output (outputs are consecutive)."),
    C("outputs", pa.list_(STR), "", "Names of its output tensors, in order."),
    C("args", pa.list_(I64), "id", "Its argument tensor ids, in order (duplicates kept)."),
    *where_columns("the op", chain=True),
))


def _run(name, type_, unit, source, doc) -> Column:
    return Column(name, type_, unit, doc, nullable=True, source=source)


RUNS = Table("runs", doc=(
    "Derived by the database layer from each recording's run.json: one row per "
    "recording."), columns=(
    C("run_id", STR, "", "The recording directory's name (every view has it)."),
    C("path", STR, "", "The recording directory."),
    _run("trace", STR, "", "trace.name", "Trace short name."),
    _run("trace_sha256", STR, "", "trace.sha256", "SHA-256 of the trace log."),
    _run("policy", STR, "", "policy", "Eviction policy."),
    _run("ratio", F64, "", "ratio", "Budget ratio, null when given in bytes."),
    _run("budget", I64, "bytes", "budget", "Budget."),
    _run("scores", STR, "", "scores", "`victims` or `all` (candidates recorded)."),
    _run("outcome", STR, "", "outcome", "ok, oom, thrashed, timeout or error."),
    _run("overhead", F64, "", "summary.overhead", "(model + remat compute) / model compute."),
    _run("clock", I64, "ns", "summary.clock", "Final clock."),
    _run("model_compute", I64, "ns", "summary.model_compute", "Baseline model compute."),
    _run("remat_compute", I64, "ns", "summary.remat_compute", "Rematerialization compute."),
    _run("peak", I64, "bytes", "summary.peak", "Baseline (unconstrained) peak memory."),
    _run("peak_memory", I64, "bytes", "summary.peak_memory", "Peak memory of this run."),
    _run("evictions", I64, "count", "summary.evictions", "Pressure evictions."),
    _run("dead_frees", I64, "count", "summary.dead_frees", "Eager (dead) evictions."),
    _run("distinct_evicted", I64, "count", "summary.distinct_evicted",
         "Distinct pressure victims."),
    _run("remats", I64, "count", "summary.remats", "Rematerializations."),
    _run("collateral_remats", I64, "count", "summary.collateral_remats",
         "Sibling outputs recomputed along."),
    _run("max_depth", I64, "count", "summary.max_depth", "Maximum nesting depth."),
    _run("max_pinned_bytes", I64, "bytes", "summary.max_pinned.bytes",
         "Most pinned bytes at an allocation check that had to free memory."),
    _run("max_pinned_depth", I64, "count", "summary.max_pinned.depth", "Depth there."),
    _run("max_pinned_op", I64, "id", "summary.max_pinned.op_id", "Op there."),
    _run("ops_done", I64, "count", "summary.ops_done", "Ops started."),
    _run("victims_sha256", STR, "", "summary.victims_sha256",
         "SHA-256 of the pressure victim sequence (as the reference computes it)."),
    _run("oom_op_id", I64, "id", "summary.oom.op_id", "OOM: current top-level op."),
    _run("oom_tensor", STR, "", "summary.oom.tensor", "OOM: the failing tensor's name."),
    _run("oom_tensor_id", I64, "id", "summary.oom.tensor_id", "OOM: its id."),
    _run("oom_request", I64, "bytes", "summary.oom.request", "OOM: the failing request."),
    _run("oom_pinned", I64, "bytes", "summary.oom.pinned", "OOM: pinned bytes."),
    _run("oom_depth", I64, "count", "summary.oom.depth", "OOM: nesting depth."),
    _run("oom_root_tensor", STR, "", "summary.oom.root_tensor",
         "OOM: the tensor at the root of the chain."),
    _run("oom_final_pins", BOOL, "", "summary.oom.final_pins",
         "OOM: while pinning, after op oom_op_id: the final pins (semantics §2.3) or a "
         "PIN line (§2.2); null in recordings made before it was recorded."),
    _run("started_at", STR, "", "started_at", "Start (UTC, ISO 8601)."),
    _run("finished_at", STR, "", "finished_at", "End (UTC, ISO 8601)."),
    _run("wall_seconds", F64, "s", "summary.wall_seconds", "Replay wall time."),
    _run("tool_version", STR, "", "tool.version", "dtrforensics version that recorded it."),
    _run("format_version", STR, "", "format_version", "Recording format version."),
))

TABLES: dict[str, Table] = {t.name: t for t in (EVENTS, DECISIONS, CANDIDATES, STORAGES,
                                                 TENSORS, OPS, RUNS)}
FILE_TABLES: tuple[Table, ...] = tuple(t for t in TABLES.values() if t.file)

RUN_JSON: tuple[tuple[str, str], ...] = (
    ("format_version", "Recording format version (this document's)."),
    ("trace", "`name`, `sha256` and `source` (log path) of the trace."),
    ("budget", "Budget in bytes."),
    ("ratio", "Budget ratio, or null when the budget was given in bytes."),
    ("policy", "Eviction policy name."),
    ("scores", "`victims` (decisions only) or `all` (candidates.parquet written)."),
    ("interventions", "Interventions applied (retain, retain_ops, forbid, force)."),
    ("remat_limit", "Rematerialization compute (ns) above which the run counts as thrashed."),
    ("timeout", "Wall-clock limit in seconds, or null."),
    ("tool", "`name` and `version` of the recorder."),
    ("command_line", "sys.argv of the recording process."),
    ("started_at", "Start time (UTC, ISO 8601)."),
    ("finished_at", "End time (UTC, ISO 8601)."),
    ("outcome", "ok, oom, thrashed, timeout or error: a recording is complete whatever "
                "the outcome."),
    ("summary", "The full run summary (`dtrf run --json`)."),
    ("frontier", "OOM only: the pinned frontier (chain of in-progress materializations "
                 "with the bytes each level holds locked); null otherwise."),
    ("tables", "The manifest: per Parquet file its name (`file`), `rows`, size in "
               "`bytes` and `sha256` (size and checksum since format 1.1). Opening a "
               "recording checks the folder against it: a missing, truncated or altered "
               "table, or any file or folder besides `run.json` and the tables listed, is "
               "an error naming it."),
    ("run_sha256", "Since format 1.2: SHA-256 of this file's content without this key "
                   "(keys sorted, compact JSON). An edited run.json is an error."),
)


# --- documentation -------------------------------------------------------------------

def type_name(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return f"{t.value_type} (dictionary)"
    if pa.types.is_list(t):
        return f"list<{t.value_type}>"
    return {"bool": "bool", "double": "float64"}.get(str(t), str(t))


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_format_doc() -> str:
    """The text of docs/recording-format.md, generated from the declarations above."""
    out = [
        "# Recording format",
        "",
        "<!-- Generated from src/dtrforensics/recorder/schema.py by "
        "`python -m dtrforensics.recorder.schema`: do not edit by hand. -->",
        "",
        f"Format version **{FORMAT_VERSION}**. A recording is one folder:",
        "",
        "```",
        f"<name>/{RUN_FILE}",
        *[f"<name>/{t.file}" + ("    (only with scores=all)" if t.optional else "")
          for t in FILE_TABLES],
        "```",
        "",
        "Each Parquet file's schema metadata holds the format version "
        f"(`{META_FORMAT.decode()}`) and the table name (`{META_TABLE.decode()}`). "
        "Versions are MAJOR.MINOR: a minor version only adds columns, tables or run.json "
        "keys, or leaves a column null on rows where it never applied (1.3: "
        "`events.pinned_bytes`; 1.4 adds `module`, `phase` and `source` to ops, "
        "storages and events); readers refuse a newer major version.",
        "",
        "A recording is written into a hidden sibling folder `.<name>.partial-<pid>` and "
        "renamed to `<name>` once complete, whatever the run's outcome (ok, oom, thrashed, "
        "timeout). A process killed mid-run leaves only the partial folder, which readers "
        "skip with a warning. Replacing a recording writes the new one, renames the old "
        "one aside (`.<name>.old-<pid>`), renames the new one into place, then deletes "
        "the old one.",
        "",
        "Identifiers follow docs/semantics.md §3: op ids are 0-based (the papers count "
        "from 1: `paper_op`), storage ids are the tensor id of the owning tensor. Null "
        "means \"does not apply to this row\". In SQL (`dtrforensics.db.connect`, "
        "`dtrf sql`), every table is a view with a leading `run_id` column, the "
        "recording folder's name.",
        "",
        f"## {RUN_FILE}",
        "",
        "| key | meaning |",
        "|---|---|",
        *[f"| `{k}` | {_escape(doc)} |" for k, doc in RUN_JSON],
        "",
    ]
    for table in TABLES.values():
        where = f"`{table.file}`" if table.file else f"derived from `{RUN_FILE}`"
        out += table_doc(table, where)
    return "\n".join(out)


def table_doc(table: Table, where: str) -> list[str]:
    """A table's section of a generated format document: its doc and its columns."""
    out = [f"## {table.name}", "", f"{where}. {table.doc}", "",
           "| column | type | unit | null | meaning |", "|---|---|---|---|---|"]
    for c in table.columns:
        out.append(f"| `{c.name}` | {type_name(c.type)} | {c.unit} | "
                   f"{'yes' if c.nullable else ''} | {_escape(c.doc)} |")
    out.append("")
    return out


def write_doc(root: Path, relative: Path, text: str) -> Path:
    """Write a generated document under the repository root `root`."""
    path = root / relative
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


REPO_ROOT = Path(__file__).resolve().parents[3]

if __name__ == "__main__":
    print(write_doc(REPO_ROOT, DOC_PATH, render_format_doc()))
