"""Forensic analysis of Dynamic Tensor Rematerialization (DTR)."""

import importlib

__version__ = "0.1.0"

# Submodules reached as attributes (`dtrforensics.policy`, `dtrforensics.api`),
# imported on first use so `import dtrforensics` stays light.
_LAZY = ("api", "policy")


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
