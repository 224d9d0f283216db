"""Bring your own model: record a PyTorch training step as a DTR log.

`record(model, batch, loss_fn, path, cost="flops", fake=False)` writes a log
that every dtrf command reads; `zoo` holds built-in models; `plan(spec, folder,
target=...)` puts DTR beside PyTorch's own checkpointing (`dtrf torch plan`). Needs the
`torch` extra (`pip install dtrforensics[torch]`).
"""

from .backend import BudgetNotMet, dtr_backend
from .plan import PlanResult, PlanSettings, plan
from .recorder import RecordError
from .step import RecordSummary, record

__all__ = ["BudgetNotMet", "PlanResult", "PlanSettings", "RecordError", "RecordSummary",
           "dtr_backend", "plan", "record"]
