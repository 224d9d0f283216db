"""Strict JSON documents out of analysis results."""

from __future__ import annotations

import json
from typing import Any

from ..jsonsafe import json_safe


def dumps(value: Any, *, indent: int | None = None) -> str:
    """One strict JSON document (non-finite floats spelled as strings)."""
    return json.dumps(json_safe(value), indent=indent, allow_nan=False, default=str)
