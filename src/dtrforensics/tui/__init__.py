"""The interactive replay view (Textual). Its one door for the CLI is
`run_replay_app`: the CLI imports it inside `dtrf replay --tui`, never a module
of this package, and nothing here imports the CLI (both sit above `render/`)."""

from __future__ import annotations


def run_replay_app(recording, ops: tuple[int, int] | None = None) -> None:
    """Open a recording allocation by allocation until the user quits."""
    from .app import ReplayApp
    ReplayApp(recording, ops=ops).run()
