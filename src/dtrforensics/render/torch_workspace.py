"""`dtrf torch run`'s workspace lines: scratch memory of the ops, apart from live bytes."""

from __future__ import annotations


def workspace_lines(doc: dict) -> list[str]:
    """Lines for the `workspaces` and `reserved_workspace` of an `ExecuteResult.to_json()`
    document; none where workspaces were not measured."""
    ws = doc.get("workspaces")
    lines = []
    if ws is not None:
        if ws["largest"]:
            where = f" in {ws['module']}" if ws.get("module") else ""
            largest = (f"largest {ws['largest']:,} bytes at op {ws['op_id']} "
                       f"({ws['op_name']}){where}")
        else:
            largest = "none: no op allocated scratch memory beyond its outputs"
        lines.append(f"workspaces (not in the live bytes; {ws['method']}): {largest}; "
                     f"{ws['total']:,} bytes over {ws['with_workspace']:,} of "
                     f"{ws['op_runs']:,} op runs; live bytes plus the running op's own "
                     f"allocations at most {ws['peak_with_workspaces']:,} bytes, budget "
                     f"{doc.get('budget_asked', doc['budget']):,}")
    if doc.get("reserved_workspace"):
        lines.append(f"workspace reserve {doc['reserved_workspace']:,} bytes: the engine ran at "
                     f"{doc['budget']:,} of the {doc['budget_asked']:,} bytes asked for")
    return lines
