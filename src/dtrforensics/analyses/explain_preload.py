"""Imported by `explain`'s fork server only, never by the tool itself: it
loads the compiled kernel and state digests once (a resumed run of the
embedded trace), so the workers forked from the server start ready instead
of loading them again, each, for every search."""

from __future__ import annotations

from ..engine.replay import Interventions, replay
from ..trace import load_trace
from .explain_snapshots import ResumePoints

HOLE_INSIDE = 25_177_836   # a failing budget of the embedded trace


def _warm() -> None:
    program = load_trace("hole")
    points = ResumePoints(even_spacing=1)
    replay(program, budget=HOLE_INSIDE, prefixes=points)
    points.expect(Interventions(control=True))
    replay(program, budget=HOLE_INSIDE, prefixes=points, interventions=Interventions(control=True))


_warm()
