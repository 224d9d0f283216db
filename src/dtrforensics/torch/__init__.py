"""Bring your own model: record a PyTorch training step as a DTR log.

`record(model, batch, loss_fn, path, cost="flops", fake=False)` writes a log
that every dtrf command reads; `zoo` holds built-in models. Needs the
`torch` extra (`pip install dtrforensics[torch]`).
"""

from .backend import BudgetNotMet, dtr_backend
from .recorder import RecordError
from .step import RecordSummary, record

__all__ = ["BudgetNotMet", "RecordError", "RecordSummary", "dtr_backend", "record"]
