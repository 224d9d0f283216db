"""Forensic analysis of Dynamic Tensor Rematerialization (DTR)."""

__version__ = "0.1.0"
