"""The one output rule of every benchmark: one JSON object on stdout, the same in --json FILE."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["emit", "stdout_to_stderr"]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point fd 1 at stderr meanwhile: Ray's driver echoes raylet/worker lines on stdout (e.g.
    at shutdown), and stdout is kept for the one JSON object."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def emit(result: dict[str, Any], path: str | None, *, indent: int | None = 2) -> dict[str, Any]:
    text = json.dumps(result, indent=indent)
    print(text)
    if path:
        Path(path).write_text(text + "\n")
    return result
