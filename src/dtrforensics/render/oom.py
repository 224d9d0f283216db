"""An OOM's pinned frontier (`analyses.oom.OomReport`) as a tree and a fact panel.

A deep frontier (hundreds of nested rematerializations) is shown as its outer
`HEAD` levels, one collapsed node for the middle, and its inner `TAIL` levels.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..analyses.oom import Level, OomReport
from .labels import failure_label, op_label, short_source
from .tables import FitPanel, FitTable
from .units import fmt_bytes, fmt_exact_bytes

HEAD = 3            # outer levels always shown
TAIL = 5            # inner levels always shown
NESTED_MAX = 12     # up to this many shown nodes the tree is nested, beyond it flat
MODULES_SHOWN = 10  # modules in the by-module table (the JSON has every one)


@dataclass(frozen=True)
class Collapsed:
    """Consecutive middle levels shown as one node."""
    first_depth: int
    last_depth: int
    ops: tuple[tuple[str, int], ...]     # op name, count; most frequent first
    new_locked_bytes: int

    @property
    def count(self) -> int:
        return self.last_depth - self.first_depth + 1


def collapse(levels: tuple[Level, ...] | list[Level], full: bool = False,
             head: int = HEAD, tail: int = TAIL) -> list[Level | Collapsed]:
    """The levels to show: all with `full` or a short chain, else the first `head`,
    one `Collapsed` node for the middle, and the last `tail`."""
    levels = list(levels)
    if full or len(levels) <= head + tail + 1:
        return levels
    middle = levels[head:len(levels) - tail]
    ops = Counter(lv.op_name for lv in middle)
    return [*levels[:head],
            Collapsed(middle[0].depth, middle[-1].depth,
                      tuple(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
                      sum(lv.new_locked_bytes for lv in middle)),
            *levels[-tail:]]


def _level_label(lv: Level, last: bool) -> Text:
    text = Text()
    text.append(f"d{lv.depth} ", style="dim")
    text.append(lv.tensor, style="bold red" if last else "bold")
    text.append(f" ← {lv.op_name} ", style="cyan")
    text.append(f"[{op_label(lv.op_id)}{', remat' if lv.remat else ''}]", style="dim")
    if lv.module:
        text.append(f" {lv.module}", style="green")
    if lv.locked_bytes:
        text.append(f"  locks {fmt_bytes(lv.locked_bytes)}")
        if lv.new_locked_bytes != lv.locked_bytes:
            text.append(f" ({fmt_bytes(lv.new_locked_bytes)} new)")
    text.append(f"  Σ {fmt_bytes(lv.cumulative_bytes)}", style="magenta")
    return text


def _collapsed_label(c: Collapsed) -> Text:
    ops = ", ".join(f"{name} ×{n}" for name, n in c.ops[:6])
    if len(c.ops) > 6:
        ops += f" and {len(c.ops) - 6} more op kinds"
    return Text(f"{c.count} levels d{c.first_depth}–d{c.last_depth} collapsed ({ops}); "
                f"they lock {fmt_bytes(c.new_locked_bytes)} more  (--full shows them)",
                style="yellow")


def _overlap(r: OomReport) -> list[tuple[str, str]]:
    """The chain's locks and the storages pinned for good can be the same storages:
    say so when their sum exceeds the pinned total."""
    excess = r.locked_total + r.pinned_storage_bytes - r.pinned
    if excess <= 0:
        return []
    return [("overlap", f"locked by the chain + pinned for good exceed pinned by "
                        f"{fmt_exact_bytes(excess)}: some storages are both")]


def oom_view(r: OomReport, full: bool = False) -> Group:
    """The frontier tree (collapsed unless `full`) above the failure's facts."""
    shown = collapse(r.frontier, full)
    title = Text(f"OOM at {failure_label(r.op_id, r.op_name, r.final_pins)}: "
                 f"allocating {r.tensor} "
                 f"({fmt_exact_bytes(r.request)}) at depth {r.depth}"
                 + (f" in {r.tensor_module}" if r.tensor_module else ""), style="bold red")
    tree = Tree(title)
    nested = len(shown) <= NESTED_MAX
    node = tree
    for item in shown:
        label = (_collapsed_label(item) if isinstance(item, Collapsed)
                 else _level_label(item, item.depth == r.depth))
        child = node.add(label)
        if nested:
            node = child
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    rows = [
        ("failing allocation", (f"{r.tensor} (tensor {r.tensor_id}, made by "
                                f"{op_label(r.tensor_op_id, r.tensor_op)})")),
        *_where_rows(r),
        ("request", fmt_exact_bytes(r.request)),
        ("budget", fmt_exact_bytes(r.budget)),
        ("memory", fmt_exact_bytes(r.memory)),
        ("pinned", fmt_exact_bytes(r.pinned)),
        ("shortfall", f"{fmt_exact_bytes(r.shortfall)} after the pool drained (memory + "
                      "request - budget; `dtrf replay` gives it at the start of each check)"),
        ("pool", f"{r.pool_size} storages, {r.pool_bytes:,} B: "
                 + ("empty, nothing left to evict" if r.pool_empty
                    else "NOT empty (interventions excluded the rest)")),
        ("locked by the chain", (f"{fmt_exact_bytes(r.locked_total)} over {r.depth} "
                                 f"levels, root {r.root_tensor}")),
        ("pinned for good", fmt_exact_bytes(r.pinned_storage_bytes) + " (constants, outputs)"),
        *_overlap(r),
        ("depth at peak pinned", "-" if r.peak_pinned is None else
         f"{r.depth_at_peak_pinned} (peak {fmt_exact_bytes(r.peak_pinned)} at "
         f"{op_label(r.peak_pinned_op_id)})"),
        ("maximum nesting depth", f"{r.max_depth} (first at {op_label(r.max_depth_op_id)})"),
    ]
    if not r.chain_from_events:
        rows.append(("warning", "the events rebuild a different chain than run.json"))
    for k, v in rows:
        facts.add_row(k, v)
    panel = FitPanel(facts, title=f"{r.run_id}", title_align="left", expand=False)
    return Group(tree, panel, *by_module_view(r))


def _where_rows(r: OomReport) -> list[tuple[str, str]]:
    """Where the failing allocation's op ran, when the log says (a where-file)."""
    if not r.tensor_module and not r.tensor_source:
        return []
    where = r.tensor_module or "outside any module"
    rows = [("module", where + (f" ({r.tensor_phase})" if r.tensor_phase else ""))]
    if r.tensor_source:
        rows.append(("source", short_source(r.tensor_source)))
    if r.op_module and r.op_module != r.tensor_module:
        rows.append(("pinned root's module" if r.final_pins else "top-level op's module",
                     r.op_module))
    return rows


def by_module_view(r: OomReport) -> list:
    """What fills the memory at the failure, by module, and the largest storages
    with their modules; nothing for a log without a where-file."""
    if not r.has_where:
        return []
    t = FitTable(box=None, padding=(0, 1, 0, 0))
    for header in ("module", "storages", "bytes", "constants", "share"):
        t.add_column(header, justify="left" if header == "module" else "right")
    shown, rest = r.by_module[:MODULES_SHOWN], r.by_module[MODULES_SHOWN:]
    for m in shown:
        t.add_row(m.module or "-", f"{m.storages:,}", fmt_bytes(m.bytes),
                  fmt_bytes(m.constant_bytes), f"{m.bytes / max(r.memory, 1):.1%}")
    if rest:
        rest_bytes = sum(m.bytes for m in rest)
        t.add_row(f"{len(rest):,} more modules (--json lists all)",
                  f"{sum(m.storages for m in rest):,}", fmt_bytes(rest_bytes),
                  fmt_bytes(sum(m.constant_bytes for m in rest)),
                  f"{rest_bytes / max(r.memory, 1):.1%}")
    big = [Text("Largest resident storages", style="italic")]
    for s in r.largest_storages:
        line = Text(f"  {fmt_bytes(s.size):>10}  storage {s.storage_id} ({s.tensor}) ← "
                    f"{s.op_name}")
        line.append(f" in {s.module}" if s.module else "", style="green")
        if s.source:
            line.append(f", {short_source(s.source)}", style="dim")
        big.append(line)
    return [Text("Resident at the failure, by module (all pinned)", style="italic"), t, *big]
