"""Trace layer: DTR logs -> compiled `Program` (parse, cache, registry)."""

from .parser import TraceError, parse_file, parse_lines
from .program import Program

__all__ = ["Program", "TraceError", "parse_file", "parse_lines"]
