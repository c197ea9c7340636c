"""The model repository on disk: ``<root>/<model>/config.yaml`` + ``<root>/<model>/<version>/``.

``ModelRepository.scan()`` returns a whole new snapshot each time (never patched in place). A bad
``config.yaml`` is reported with the file and field and only hides that model. A version folder
counts once its weight file exists and has not changed for ``settle_s`` seconds, so a copy in
progress is not picked up half-written (copying to a temporary name and renaming is best).

The repository is a trust boundary (``common.trust``): a config naming a module outside the
operator's allowlist, or TorchScript when the operator disabled it, is refused here with the
reason, before anything is imported or loaded (``pool.errors.ModelRefused``). Errors name files
relative to the repository.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from common.trust import TrustSettings, check_import_path, config_import_paths
from pool.config import ModelConfig
from pool.errors import ModelLoadError, ModelRefused
from pool.loader import WEIGHT_FILES, shown_path

__all__ = ["VersionEntry", "ModelEntry", "RepositorySnapshot", "ModelRepository", "version_order"]


_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it


def version_order(version: str) -> tuple[int, int | str]:
    """Sort key: numeric versions numerically, after any non-numeric names."""
    return (1, int(version)) if version.isdigit() else (0, version)


@dataclass(frozen=True, slots=True)
class VersionEntry:
    name: str
    version: str
    path: Path
    signature: tuple[int, int]  # (mtime_ns, size) of the weight file: a change means reload


@dataclass(frozen=True, slots=True)
class ModelEntry:
    name: str
    config: ModelConfig | None
    error: str | None
    versions: tuple[VersionEntry, ...]  # oldest first
    problem: ModelLoadError | None = None  # the config's error: its file, field and state


@dataclass(frozen=True, slots=True)
class RepositorySnapshot:
    models: dict[str, ModelEntry]

    def entry(self, name: str) -> ModelEntry | None:
        return self.models.get(name)


class ModelRepository:
    """Reads a model repository folder. Pure reads; no models are loaded here."""

    def __init__(
        self,
        root: Path | str,
        *,
        settle_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        trust: TrustSettings = TrustSettings(),
    ) -> None:
        self.root = Path(root)
        self.trust = trust
        self.settle_s = settle_s
        self._clock = clock
        # Parsed configs by (path, mtime_ns, size): a poll re-reads only files that changed.
        self._configs: dict[Path, tuple[tuple[int, int], ModelConfig | ModelLoadError]] = {}

    def scan(self) -> RepositorySnapshot:
        if not self.root.is_dir():
            raise FileNotFoundError(f"model repository {str(self.root)!r} does not exist")
        models: dict[str, ModelEntry] = {}
        for model_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            if model_dir.name.startswith((".", "_")):
                continue
            models[model_dir.name] = self._scan_model(model_dir)
        live = {self.root / name / "config.yaml" for name in models}
        self._configs = {p: v for p, v in self._configs.items() if p in live}
        return RepositorySnapshot(models)

    def _config(self, model_dir: Path) -> ModelConfig:
        path = model_dir / "config.yaml"
        try:
            st = path.stat()
            sig = (st.st_mtime_ns, st.st_size)
        except OSError:
            sig = (0, -1)
        cached = self._configs.get(path)
        if cached is None or cached[0] != sig:
            try:
                result: ModelConfig | ModelLoadError = read_config(model_dir, trust=self.trust)
            except ModelLoadError as e:
                result = e
            cached = (sig, result)
            self._configs[path] = cached
        if isinstance(cached[1], ModelLoadError):
            raise cached[1]
        return cached[1]

    def _scan_model(self, model_dir: Path) -> ModelEntry:
        try:
            config = self._config(model_dir)
        except ModelLoadError as e:
            return ModelEntry(model_dir.name, None, str(e), (), e)
        weight_name = WEIGHT_FILES[config.format]
        now = self._clock()
        versions = []
        for vdir in model_dir.iterdir():
            if not vdir.is_dir() or vdir.name.startswith((".", "_")):
                continue
            weights = vdir / weight_name
            try:
                st = weights.stat()
            except OSError:
                continue  # not (yet) a version
            if now - st.st_mtime < self.settle_s:
                continue  # still being written
            versions.append(VersionEntry(config.name, vdir.name, vdir,
                                         (st.st_mtime_ns, st.st_size)))
        versions.sort(key=lambda v: version_order(v.version))
        return ModelEntry(config.name, config, None, tuple(versions))


def read_config(model_dir: Path, *, trust: TrustSettings = TrustSettings()) -> ModelConfig:
    """Parse ``model_dir/config.yaml``; raise ModelLoadError naming the file and field.

    Also refuses (without importing anything) what ``trust`` does not allow.
    """
    path = model_dir / "config.yaml"
    shown = shown_path(path, 2)
    try:
        raw = yaml.load(path.read_text(), Loader=_SafeLoader)
    except FileNotFoundError:
        raise ModelLoadError(shown, "missing config.yaml") from None
    except yaml.YAMLError as e:
        raise ModelLoadError(shown, f"not valid YAML ({e})".replace("\n", " ")) from None
    if not isinstance(raw, dict):
        raise ModelLoadError(shown, f"expected a mapping, got {type(raw).__name__}")
    raw.setdefault("name", model_dir.name)
    try:
        config = ModelConfig.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or None
        raise ModelLoadError(shown, err["msg"], field=field) from None
    if config.name != model_dir.name:
        raise ModelLoadError(
            shown, f"name {config.name!r} does not match folder {model_dir.name!r}", field="name"
        )
    check_trust(config, trust, shown)
    return config


def check_trust(config: ModelConfig, trust: TrustSettings, shown: str) -> None:
    """Refuse a config that names code or a format the operator does not allow."""
    if config.format == "torchscript" and not trust.allow_torchscript:
        raise ModelRefused(shown, "TorchScript is disabled by the operator (app setting "
                           "trust.allow_torchscript: false); use safetensors", field="format")
    for field, path in config_import_paths(config.fallback, config.architecture):
        try:
            check_import_path(path, allow=trust.allowlist, what=field)
        except ValueError as e:
            raise ModelRefused(shown, str(e), field=field) from None
