"""Strict JSON documents out of analysis results."""

from __future__ import annotations

from typing import Any

from ..jsonsafe import nan_notes, strict_dumps


def dumps(value: Any, *, indent: int | None = None) -> str:
    """One strict JSON document: infinities spelled as strings, a NaN as null, and a
    document (an object) that held a NaN gets a `notes` list saying where."""
    notes = nan_notes(value)
    if notes and isinstance(value, dict):
        existing = value.get("notes")
        value = {**value, "notes": ([*existing] if isinstance(existing, list) else
                                    [existing] if existing is not None else []) + notes}
    return strict_dumps(value, indent=indent, default=str)
