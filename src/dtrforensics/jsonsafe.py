"""Strict JSON values: JSON has no infinity and no NaN. A DTR score is +inf for a
storage accessed this instant, so infinities travel as the strings "inf" and
"-inf"; a NaN (a loss that diverged, a ratio of nothing) has no value to give and
becomes null, and documents that carried one say so in a note (`nan_notes`). One
definition, used by analyses' `to_json`, exports, run.json and the CLI."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(x: float | None) -> float | str | None:
    """A finite float as is; an infinity as its name; NaN as None."""
    if x is None or math.isfinite(x):
        return x
    return None if math.isnan(x) else ("inf" if x > 0 else "-inf")


def json_safe(value: Any) -> Any:
    """Nested dicts/lists/tuples with every non-finite float replaced (`finite`)."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def nan_paths(value: Any, where: str = "") -> list[str]:
    """Where `value` holds a NaN, as dotted keys and [indices] (e.g. `loss`, `runs[3].overhead`)."""
    if isinstance(value, float) and math.isnan(value):
        return [where or "the value"]
    if isinstance(value, dict):
        return [p for k, v in value.items()
                for p in nan_paths(v, f"{where}.{k}" if where else str(k))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in nan_paths(v, f"{where}[{i}]")]
    return []


def nan_notes(value: Any) -> list[str]:
    """One note per NaN in `value`, saying it is written as null."""
    return [f"{path} is NaN (not a number), written as null: JSON has no NaN"
            for path in nan_paths(value)]


def strict_dumps(value: Any, **kwargs) -> str:
    """JSON text of `value` with non-finite floats replaced; never `NaN` or `Infinity`."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
