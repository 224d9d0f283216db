"""Widgets of the replay view (`dtrforensics.tui.app.ReplayApp`)."""

from .candidates import CandidatesTable
from .run_strip import RunStrip
from .stack import StackView
from .step_list import StepList
from .step_panel import StepPanel

__all__ = ["CandidatesTable", "RunStrip", "StackView", "StepList", "StepPanel"]
