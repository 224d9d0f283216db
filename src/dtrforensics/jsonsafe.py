"""Strict JSON values: JSON has no infinity, and a DTR score is +inf for a storage
accessed this instant, so non-finite floats travel as the strings "inf", "-inf"
and "nan". One definition, used by analyses' `to_json`, exports and the CLI."""

from __future__ import annotations

import math
from typing import Any


def finite(x: float | None) -> float | str | None:
    """A float, or its name when it is not finite."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def json_safe(value: Any) -> Any:
    """Nested dicts/lists/tuples with every non-finite float replaced by its name."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
