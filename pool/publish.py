"""Publishing a model version into the repository: validated fully, then made visible at once.

``Publisher.publish(name, version, files)`` takes the files of an uploaded archive (see
``pool._private.archive`` for how names, kinds and sizes are checked) and:

1. checks the model and version names and that exactly ``config.yaml`` plus the config's weight
   file are there (nothing else: no code rides along);
2. parses the config with the repository's own reader, so the schema and the operator's trust
   settings apply (a factory outside ``trust.allowed_modules`` or TorchScript when
   ``trust.allow_torchscript`` is off is refused, nothing imported); for a model that already
   exists the uploaded config must equal the live one (versions share one config);
3. writes the files under ``<repo>/.publish-<id>/<name>/`` (a hidden folder: the repository
   scan skips it), loads the version from there with the real loader and runs the warm-up
   forward passes (``pool._private.chunk.warm_up``);
4. renames the version folder (or, for a new model, the model folder) into place: one
   ``rename(2)`` on the same filesystem, so pools see all of it or nothing.

Any refusal raises :class:`PublishRefused` (an HTTP status, the file and the field) and removes
the staging folder: a refused archive leaves nothing behind. ``retire`` takes a version out the
same way (renamed to a hidden name, then deleted). Ray-free.
"""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from common.trust import TrustSettings
from pool._private.archive import ArchiveError, read_parts, read_tar
from pool._private.chunk import warm_up
from pool.config import ModelConfig
from pool.errors import ModelLoadError
from pool.loader import WEIGHT_FILES, load_module
from pool.repository import read_config

__all__ = ["NAME_PATTERN", "PublishRefused", "PublishSettings", "Published", "Publisher"]

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"  # a published model's name and version
_NAME = re.compile(NAME_PATTERN)


class PublishSettings(BaseModel):
    """``publish:`` in the app settings: bounds of the publish API."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_archive_bytes: int = Field(
        32 << 20, gt=0, description="Largest upload accepted (413 beyond). The HTTP edge's "
        "max_body_bytes bounds it too.")
    max_unpacked_bytes: int = Field(
        256 << 20, gt=0, description="Largest total size of the archive's files once unpacked "
        "(a compressed archive is inflated only up to this bound).")
    max_files: int = Field(16, ge=2, description="Most files an archive may hold.")


class PublishRefused(Exception):
    """A refused publish or retire: ``status`` (HTTP), ``file`` and ``field`` name the problem."""

    def __init__(self, status: int, file: str, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{file}" + (f" [{field}]" if field else "") + f": {message}")
        self.status, self.file, self.field, self.message = status, file, field, message


@dataclass(frozen=True, slots=True)
class Published:
    name: str
    version: str
    files: tuple[str, ...]
    nbytes: int
    new_model: bool


class Publisher:
    """Publishes and retires versions in the repository at ``root`` (one per ingress)."""

    def __init__(self, root: Path | str, *, trust: TrustSettings = TrustSettings(),
                 settings: PublishSettings | None = None) -> None:
        self.root = Path(root)
        self.trust = trust
        self.settings = settings or PublishSettings()
        self._lock = threading.Lock()  # one publish or retire at a time in this process

    # -- archives -----------------------------------------------------------------------------
    def read_tar(self, data: bytes) -> dict[str, bytes]:
        return self._read(read_tar, data)

    def read_parts(self, parts: list[tuple[str, bytes]]) -> dict[str, bytes]:
        return self._read(read_parts, parts)

    def _read(self, reader, arg) -> dict[str, bytes]:
        try:
            return reader(arg, max_files=self.settings.max_files,
                          max_unpacked_bytes=self.settings.max_unpacked_bytes)
        except ArchiveError as e:
            raise PublishRefused(e.status, e.file, e.message) from None

    # -- publish ------------------------------------------------------------------------------
    def publish(self, name: str, version: str, files: dict[str, bytes]) -> Published:
        """Validate ``files`` as version ``version`` of ``name`` and publish it atomically."""
        _check_names(name, version)
        with self._lock:
            stage = self.root / f".publish-{uuid.uuid4().hex[:12]}"
            try:
                return self._publish(stage, name, version, files)
            finally:
                shutil.rmtree(stage, ignore_errors=True)

    def _publish(self, stage: Path, name: str, version: str,
                 files: dict[str, bytes]) -> Published:
        live_dir = self.root / name
        if (live_dir / version).exists():
            raise PublishRefused(409, f"{name}/{version}", "version already exists (retire it "
                                 "first, or publish a new version)", field="version")
        model_dir = stage / name
        config = self._stage_config(model_dir, name, files)
        weight = WEIGHT_FILES[config.format]
        extra = sorted(set(files) - {"config.yaml", weight})
        if extra:
            raise PublishRefused(422, f"{name}/{version}/{extra[0]}", f"unexpected file; a "
                                 f"format={config.format} version holds config.yaml and {weight}",
                                 field="format")
        if weight not in files:
            raise PublishRefused(422, f"{name}/{version}/{weight}", f"missing: format="
                                 f"{config.format} needs {weight}", field="format")
        vdir = model_dir / version
        vdir.mkdir(parents=True)
        (vdir / weight).write_bytes(files[weight])
        self._validate(vdir, config)
        new_model = not live_dir.exists()
        if new_model:
            _rename(model_dir, live_dir, name)  # config.yaml and the version, at once
        else:
            self._same_config(live_dir, config, name)
            _rename(vdir, live_dir / version, f"{name}/{version}")
        return Published(name, version, tuple(sorted(files)),
                         sum(len(b) for b in files.values()), new_model)

    def _stage_config(self, model_dir: Path, name: str, files: dict[str, bytes]) -> ModelConfig:
        if "config.yaml" not in files:
            raise PublishRefused(422, f"{name}/config.yaml", "missing: an archive holds "
                                 "config.yaml and the weight file", field="config")
        model_dir.mkdir(parents=True)
        (model_dir / "config.yaml").write_bytes(files["config.yaml"])
        try:
            return read_config(model_dir, trust=self.trust)
        except ModelLoadError as e:
            raise PublishRefused(422, e.path, e.detail, field=e.field) from None

    def _validate(self, vdir: Path, config: ModelConfig) -> None:
        """The real loader and the load-time warm-up, on the staged copy."""
        try:
            module = load_module(vdir, config, trust=self.trust)
            warm_up(module.eval(), config)
        except ModelLoadError as e:
            raise PublishRefused(422, e.path, e.detail, field=e.field) from None
        except Exception as e:  # the forward pass of an uploaded model: any failure refuses it
            shown = f"{config.name}/{vdir.name}/{WEIGHT_FILES[config.format]}"
            raise PublishRefused(422, shown, f"warm-up forward failed ({type(e).__name__}: "
                                 f"{e})"[:400], field="inputs") from None

    def _same_config(self, live_dir: Path, config: ModelConfig, name: str) -> None:
        try:
            live = read_config(live_dir, trust=self.trust)
        except ModelLoadError as e:
            raise PublishRefused(409, e.path, f"the live model's config is invalid ({e.detail}); "
                                 "fix it in the repository first", field=e.field) from None
        if live == config:
            return
        mine, theirs = config.model_dump(), live.model_dump()
        field = next(k for k in mine if mine[k] != theirs[k])
        raise PublishRefused(409, f"{name}/config.yaml", f"differs from the live model's config "
                             f"in {field!r} (versions share one config; change it in the "
                             "repository)", field=field)

    # -- retire -------------------------------------------------------------------------------
    def retire(self, name: str, version: str) -> None:
        """Take ``version`` of ``name`` out of the repository (pools unload it on their next
        poll); raises PublishRefused(404) when there is no such version."""
        _check_names(name, version)
        with self._lock:
            vdir = self.root / name / version
            if not vdir.is_dir() or vdir.is_symlink():
                raise PublishRefused(404, f"{name}/{version}", "no such version",
                                     field="version")
            gone = self.root / name / f".retired-{version}-{uuid.uuid4().hex[:8]}"
            vdir.rename(gone)  # invisible at once; then deleted
            shutil.rmtree(gone, ignore_errors=True)


def _check_names(name: str, version: str) -> None:
    for field, value in (("name", name), ("version", version)):
        if not _NAME.fullmatch(value):
            raise PublishRefused(400, value[:130], f"{field} must match {_NAME.pattern}",
                                 field=field)


def _rename(src: Path, dst: Path, shown: str) -> None:
    try:
        src.rename(dst)
    except OSError as e:  # another ingress published the same name at the same time
        raise PublishRefused(409, shown, f"could not publish ({e.strerror}); it was probably "
                             "published concurrently", field="version") from None

