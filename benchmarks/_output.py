"""The one output rule of every benchmark: one JSON object on stdout, the same in --json FILE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["emit"]


def emit(result: dict[str, Any], path: str | None, *, indent: int | None = 2) -> dict[str, Any]:
    text = json.dumps(result, indent=indent)
    print(text)
    if path:
        Path(path).write_text(text + "\n")
    return result
