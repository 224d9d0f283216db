"""Trace layer: DTR logs -> compiled `Program` (parse, cache, registry)."""

from .parser import TraceError, parse_file, parse_lines
from .program import Program

__all__ = ["Program", "TraceError", "parse_file", "parse_lines"]


def load_trace(spec: str):
    """A short name (`resnet32`) or a path to a log -> its compiled Program (cached)."""
    from .cache import load_program
    from .registry import resolve_trace
    return load_program(resolve_trace(spec))
