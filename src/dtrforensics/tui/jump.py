"""What the jump box accepts: an op, a paper op, a storage or a step."""

from __future__ import annotations

from dataclasses import dataclass

HELP = "op 460 | #461 (paper op) | s 612 (storage) | step 120"
_KINDS = {"op": "op", "o": "op", "s": "storage", "storage": "storage", "step": "step"}


@dataclass(frozen=True)
class JumpTarget:
    kind: str            # 'op' (0-based top-level op), 'storage' or 'step'
    number: int


def parse_jump(text: str) -> JumpTarget:
    """`op 460` or `460` (op id), `#461` (the papers' 1-based op), `s 612` /
    `storage 612`, `step 120`; raises ValueError saying what it expects."""
    words = text.strip().lower().split()
    if len(words) == 1 and words[0].startswith("#"):
        kind, value = "paper", words[0][1:]
    elif len(words) == 1:
        kind, value = "op", words[0]
    elif len(words) == 2 and words[0] in _KINDS:
        kind, value = _KINDS[words[0]], words[1]
    else:
        raise ValueError(f"cannot read {text.strip()!r}: {HELP}")
    try:
        number = int(value.replace(",", "").replace("_", ""))
    except ValueError:
        raise ValueError(f"{value!r} is not a number: {HELP}") from None
    if kind == "paper":
        if number < 1:
            raise ValueError("paper op numbers start at #1")
        return JumpTarget("op", number - 1)
    if number < 0:
        raise ValueError(f"{kind} {number} is negative")
    return JumpTarget(kind, number)
