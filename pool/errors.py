"""Errors raised by the pool (model loading and the device workers). Its refusal of work whose
deadline it cannot meet, ``RequestExpired``, is shared with the fallback chain: it lives in
``common.fallback_types``."""

from __future__ import annotations

__all__ = ["ModelLoadError", "DeviceOutOfMemory", "ModelNotLoaded"]


class ModelLoadError(Exception):
    """A model config or weight file could not be loaded; names the file and the field."""

    def __init__(self, path: str, message: str, *, field: str | None = None) -> None:
        where = f"{path}" + (f" [{field}]" if field else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.field = field
        self.detail = message

    def __reduce__(self):
        return (_rebuild_load_error, (self.path, self.detail, self.field))


def _rebuild_load_error(path: str, message: str, field: str | None) -> ModelLoadError:
    return ModelLoadError(path, message, field=field)


class DeviceOutOfMemory(Exception):
    """The device ran out of memory even after evicting and retrying once (CPU/fallback path)."""


class ModelNotLoaded(Exception):
    """The worker has no such model (not added, removed, or failed to load)."""
