"""Errors raised by the pool (model loading and the device workers). Its refusal of work whose
deadline it cannot meet, ``RequestExpired``, is shared with the fallback chain: it lives in
``common.fallback_types``."""

from __future__ import annotations

__all__ = ["ModelLoadError", "ModelRefused", "DeviceOutOfMemory", "ModelNotLoaded"]


class ModelLoadError(Exception):
    """A model config or weight file could not be loaded; names the file and the field.

    ``state`` is what the model's status shows: ``failed`` (it was tried and did not work: a
    bad config, a corrupt file, a failed warm-up); :class:`ModelRefused` says ``refused``.
    """

    state = "failed"

    def __init__(self, path: str, message: str, *, field: str | None = None) -> None:
        where = f"{path}" + (f" [{field}]" if field else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.field = field
        self.detail = message

    def __reduce__(self):
        return (_rebuild_load_error, (type(self), self.path, self.detail, self.field))


class ModelRefused(ModelLoadError):
    """Refused at the trust boundary (``common.trust``) before anything from it ran: a module
    outside the operator's allowlist, a pickled archive, a format the operator switched off."""

    state = "refused"


def _rebuild_load_error(cls: type[ModelLoadError], path: str, message: str,
                        field: str | None) -> ModelLoadError:
    return cls(path, message, field=field)


class DeviceOutOfMemory(Exception):
    """The device ran out of memory even after evicting and retrying once (CPU/fallback path)."""


class ModelNotLoaded(Exception):
    """The worker has no such model (not added, removed, or failed to load)."""
