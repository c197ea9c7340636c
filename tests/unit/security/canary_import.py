"""Importing this module creates the canary file named by TIMESHARE_CANARY: a module outside the
operator's allowlist must never be imported, so the file must never appear."""

import os
from pathlib import Path

_path = os.environ.get("TIMESHARE_CANARY")
if _path:
    Path(_path).write_text("imported")


def fn(request):  # pragma: no cover - must never run
    return {"label": [1]}
