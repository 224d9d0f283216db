"""How the tool names things in text: ops (both numberings) and runs."""

from __future__ import annotations

from ..trace.program import op_label

__all__ = ["failure_label", "op_label", "run_label", "short_source"]


def failure_label(op_id: int, name: str | None = None, final_pins: bool | None = False) -> str:
    """Where a run failed: 'op 8 (paper #9) mm', or, for a failure while pinning (the
    final pins of docs/semantics.md §2.3, or a PIN line, where the op id stays the
    last computed op's), 'the pins after op 299 (paper #300)' (that op's name would
    read as the failing op's)."""
    if final_pins:
        return f"the pins after {op_label(op_id)}"
    return op_label(op_id, name)


def run_label(trace: str, ratio: float | None, budget: int, policy: str) -> str:
    """'resnet32 ratio 0.104 dtr', or the budget in bytes when no ratio was given."""
    amount = f"ratio {ratio:g}" if ratio is not None else f"{budget:,} B"
    return f"{trace} {amount} {policy}"


def short_source(source: str | None) -> str | None:
    """A where-file's `file:line` as a reader wants it: an installed library's file
    from its package ('transformers/models/gpt2/modeling_gpt2.py:312'), this
    package's likewise ('dtrforensics/torch/zoo.py:69'), a file under the current
    folder relative to it; any other path whole."""
    if not source:
        return source
    import os
    for marker in ("/site-packages/", "/dist-packages/", "/src/dtrforensics/"):
        head, found, tail = source.rpartition(marker)
        if found:
            return ("dtrforensics/" if marker == "/src/dtrforensics/" else "") + tail
    here = os.getcwd() + os.sep
    return source[len(here):] if source.startswith(here) else source
