"""Edges of a sweep (`analyses.edges.EdgesReport`) as lines of text, every byte written out."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ..analyses.edges import Edge, EdgeSide, EdgesReport
from .units import fmt_count


def _side(s: EdgeSide) -> str:
    if s.overhead is None:
        return f"{s.budget:,} B ({s.outcome})"
    return f"{s.budget:,} B ({s.outcome}, {s.overhead:.4f}x)"


def edge_lines(i: int, e: Edge) -> list[Text]:
    between = "adjacent budgets" if e.gap_bytes == 0 else f"{e.gap_bytes:,} B between them"
    lines = [Text(f"{i}. {e.kind} edge: {_side(e.below)} -> {_side(e.above)}; {between}",
                  style="bold")]
    if e.decisive is None:
        lines.append(Text("   both runs decide every budget comparison alike"))
    else:
        d = e.decisive
        lead = "decisive comparison" if d.same_state else "first differing comparison (runs had parted)"
        lines.append(Text(f"   {lead}: {d.text}"))
    if e.first_divergent_victim is not None:
        v = e.first_divergent_victim
        lines.append(Text(f"   first divergent victim (stream position {v.position:,}, "
                          f"{v.cause}): below {v.below}; above {v.above}"))
    lines.append(Text(f"   recordings: {e.below.recording} {e.above.recording}", style="dim"))
    return lines


def edges_view(r: EdgesReport) -> Group:
    head = (f"{r.trace} ({r.policy}): {fmt_count(r.found, 'edge')} in {r.sweep}"
            + (f"; the first {len(r.edges)} diffed" if r.found > len(r.edges) else ""))
    parts = [Text(head, style="bold")]
    for i, e in enumerate(r.edges, 1):
        parts += edge_lines(i, e)
    if r.uncertified_bytes:
        hidden = (f"{r.unlocated} more lie in uncertified budgets (between certified "
                  "neighbours that differ)" if r.unlocated else "more may lie there")
        parts.append(Text(f"{r.uncertified_bytes:,} B of the range are uncertified: {hidden}; "
                          "extend the sweep (dtrf holes SWEEP says how) to locate them",
                          style="yellow"))
    return Group(*parts)
