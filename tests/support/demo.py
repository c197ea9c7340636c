"""The small demo repository the tests build once per session (tests/conftest.py)."""

from __future__ import annotations

__all__ = ["SMALL_DEMO"]

SMALL_DEMO = ["digits-small", "digits-large", "iris-mlp1x16", "iris-mlp1x64", "iris-mlp2x16"]
