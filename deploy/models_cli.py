"""``timeshare models push DIR`` and ``timeshare models retire NAME VERSION``: the publish API's
command line (``router.publish``).

``DIR`` is either a model folder as it sits in a repository (``config.yaml`` plus version
folders; the highest numbered version is pushed unless ``--version`` says which) or a flat folder
holding ``config.yaml`` and the weight file (``--version`` required). The model name comes from
the config (``--name`` overrides nothing: a mismatch is the server's 422).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
from pathlib import Path

import httpx
import yaml

__all__ = ["pack_dir", "push_main", "retire_main"]


def _pick_version(folder: Path, version: str | None) -> tuple[str, Path]:
    subdirs = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))]
    if not subdirs:  # flat: config.yaml and the weight file side by side
        if version is None:
            raise ValueError(f"{folder}: a flat folder needs --version")
        return version, folder
    if version is not None:
        if not (folder / version).is_dir():
            raise ValueError(f"{folder}: no version folder {version!r}")
        return version, folder / version
    numeric = sorted((p for p in subdirs if p.name.isdigit()), key=lambda p: int(p.name))
    if not numeric:
        raise ValueError(f"{folder}: no numbered version folder; pass --version")
    return numeric[-1].name, numeric[-1]


def pack_dir(folder: Path, version: str | None = None) -> tuple[str, str, bytes]:
    """(model name, version, tar.gz bytes) of the version to push from ``folder``."""
    config = folder / "config.yaml"
    if not config.is_file():
        raise ValueError(f"{folder}: no config.yaml")
    raw = yaml.safe_load(config.read_text()) or {}
    name = str(raw.get("name") or folder.resolve().name)
    version, vdir = _pick_version(folder, version)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(config, arcname="config.yaml")
        for f in sorted(vdir.iterdir()):
            if f.is_file() and f.name != "config.yaml":
                tar.add(f, arcname=f.name, recursive=False)
    return name, version, buf.getvalue()


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default=None, help="operator key (default: $TIMESHARE_API_KEY)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds; the server loads and warms the model before answering")


def _headers(args: argparse.Namespace) -> dict[str, str]:
    key = args.api_key or os.environ.get("TIMESHARE_API_KEY")
    return {"X-API-Key": key} if key else {}


def _report(r: httpx.Response) -> int:
    print(f"{r.status_code} {r.text}", file=sys.stdout if r.is_success else sys.stderr)
    return 0 if r.is_success else 1


def push_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="timeshare models push",
                                 description="publish a model version over the API")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--version", default=None)
    _common(ap)
    args = ap.parse_args(argv)
    try:
        name, version, body = pack_dir(args.dir, args.version)
    except (ValueError, OSError, yaml.YAMLError) as e:
        print(f"cannot push: {e}", file=sys.stderr)
        return 2
    url = f"{args.url}/v2/repository/models/{name}/versions/{version}"
    r = httpx.post(url, content=body, timeout=args.timeout,
                   headers={**_headers(args), "Content-Type": "application/gzip"})
    return _report(r)


def retire_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="timeshare models retire",
                                 description="take a model version out of the repository")
    ap.add_argument("name")
    ap.add_argument("version")
    _common(ap)
    args = ap.parse_args(argv)
    r = httpx.delete(f"{args.url}/v2/repository/models/{args.name}/versions/{args.version}",
                     headers=_headers(args), timeout=args.timeout)
    return _report(r)
