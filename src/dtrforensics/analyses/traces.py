"""What the tool says about a trace before replaying it: size, unconstrained peak,
model compute, the single-op bottleneck, the floor, op counts, hashes and cache status."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..engine.baseline import baseline
from ..trace import registry
from ..trace.cache import cache_path
from ..trace.program import Program
from .floor import floor


def _op_ref(program: Program, op_id: int) -> dict[str, Any]:
    """An op as both numberings: ours (0-based) and the papers' (1-based)."""
    return {"id": op_id, "paper_id": op_id + 1, "name": program.op_name(op_id)}


def summarize(program: Program, path: Path) -> dict[str, Any]:
    """The numbers `traces list` shows for one trace."""
    base = baseline(program)
    return {
        "name": program.name,
        "ops": program.n_ops,
        "tensors": program.n_tensors,
        "storages": int(len(program.storage_ids())),
        "peak_bytes": base.peak,
        "peak_op": _op_ref(program, base.peak_op_id) if base.peak_op_id >= 0 else None,
        "model_compute_ns": base.model_compute,
        "bottleneck_bytes": base.bottleneck_bytes,
        "bottleneck_op": _op_ref(program, base.bottleneck_op_id),
        "path": str(path),
    }


def describe(program: Program, path: Path, cache_status: str) -> dict[str, Any]:
    """Everything `traces info` shows."""
    info = summarize(program, path)
    names = [program.op_names[i] for i in program.op_name_id.tolist()]
    counts = Counter(n for n in names if n != "constant")
    published = registry.known_sha256(path)
    info.update({
        "sha256": program.sha256,
        "published_sha256": published,
        "verified": None if published is None else published == program.sha256,
        "file_bytes": path.stat().st_size,
        "commands": program.n_commands,
        "constants": names.count("constant"),
        "backward_ops": int(program.op_backward.sum()),
        "distinct_op_names": len(counts),
        "top_ops": [{"name": n, "count": c} for n, c in counts.most_common(10)],
        "cache": {"status": cache_status, "path": str(cache_path(program.sha256))},
        "floor": floor(program).to_json(),
    })
    return info
