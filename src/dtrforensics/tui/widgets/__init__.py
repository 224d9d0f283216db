"""Widgets of the replay view (`dtrforensics.tui.app.ReplayApp`)."""

from .candidates import CandidatesTable
from .stack import StackView
from .step_panel import StepPanel

__all__ = ["CandidatesTable", "StackView", "StepPanel"]
