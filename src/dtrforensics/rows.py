"""Rows of a DuckDB query as dicts: the one way analyses read query results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fetch_dicts(con: Any, sql: str, params: Sequence = ()) -> list[dict]:
    """Run `sql` with `params` on a DuckDB connection or cursor; each row as a dict
    (column name -> Python value), in the query's order."""
    rel = con.execute(sql, list(params))
    names = [d[0] for d in rel.description]
    return [dict(zip(names, row)) for row in rel.fetchall()]
