"""A recording's per-op timeline (the shipped `run/op_timeline` query) as arrays."""

from __future__ import annotations

import numpy as np

from .. import db
from ..recorder.reader import Recording

TIMELINE_SQL = ("SELECT op_id, memory_max, coalesce(pinned_max, 0) AS pinned_max, depth_max, "
                "evictions, remats FROM op_timeline ORDER BY op_id")


def op_timeline(rec: Recording) -> dict[str, np.ndarray]:
    """One entry per top-level op that ran, in op order: the most memory and pinned
    bytes (0 when no check pinned any), the deepest nesting, evictions and remats."""
    with db.connect([rec]) as con:
        db.install_query(con, "run/op_timeline")
        return {k: np.asarray(v) for k, v in con.sql(TIMELINE_SQL).fetchnumpy().items()}
