"""Explicit load/unload state of the repository API, kept in a small JSON file.

The ingress writes it (``POST /v2/repository/models/{name}/unload``); every pool replica reads it
on each repository poll, so all replicas converge without a broadcast, and the choice survives a
restart. The file lives in the state directory (default ``<repo>/.timeshare``), which repository
scans skip.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["ControlFile"]


class ControlFile:
    def __init__(self, state_dir: Path | str) -> None:
        self.path = Path(state_dir) / "unloaded.json"

    def unloaded(self) -> frozenset[str]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return frozenset()
        except (OSError, ValueError):
            return frozenset()  # unreadable control file: serve everything rather than nothing
        return frozenset(str(x) for x in data.get("unloaded", []))

    def set_unloaded(self, name: str, unloaded: bool) -> None:
        names = set(self.unloaded())
        (names.add if unloaded else names.discard)(name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".unloaded-")
        with os.fdopen(fd, "w") as f:
            json.dump({"unloaded": sorted(names)}, f)
        os.replace(tmp, self.path)  # atomic: readers never see a half-written file
