"""Importing this module writes ``MARKER``: a model config naming it (outside the app's
``trust.allowed_modules``) must be refused without importing it, so the file never appears.

The path is fixed (not an environment variable) because the pool replica that would import it
was started before the test ran."""

import tempfile
from pathlib import Path

MARKER = Path(tempfile.gettempdir()) / "timeshare-refusal-canary-37"
MARKER.write_text("imported: a refused module's top-level code ran")


def make(**kwargs):  # pragma: no cover - must never run in the app
    raise AssertionError("a refused factory ran")
