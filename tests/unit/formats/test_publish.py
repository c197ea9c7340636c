"""The publish API on the real ingress app in-process (real pipeline, in-process CPU pool)."""

from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio
import torch
import yaml

from tests.support.app import start_ingress, stop_ingress
from tests.support.formats import config_dict, small_cnn

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY = {"X-API-Key": "publish-key"}
MAX_ARCHIVE = 2 << 20
X = (np.random.default_rng(1).random((2, 64)) * 16).astype(np.float32)


@pytest.fixture(scope="module")
def repo(demo_repo_master, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("publish") / "repo"
    root.mkdir()
    shutil.copytree(demo_repo_master / "digits-small", root / "digits-small")
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(repo, tmp_path_factory):
    state = tmp_path_factory.mktemp("publish-state")
    ing = await start_ingress({
        "repository": str(repo), "state_dir": str(state), "api_key": KEY["X-API-Key"],
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 64},
        "poll_interval_s": 0.2, "publish": {"max_archive_bytes": MAX_ARCHIVE},
    })
    yield ing.__serve_build_asgi_app__()
    await stop_ingress(ing)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(app):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://timeshare") as c:
        yield c


def _tar(files: dict[str, bytes], *, links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def _files(exported: Path, name: str, version: str, **over) -> dict[str, bytes]:
    cfg = yaml.safe_dump(config_dict(name, "onnx", **over))
    return {"config.yaml": cfg.encode(),
            "model.onnx": (exported / "onnx" / version / "model.onnx").read_bytes()}


def _tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*")
                  if p.is_file())


async def _served(client, name: str, version: str | None = None) -> dict:
    path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/infer"
    body = {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [2, 64],
                        "data": X.ravel().tolist()}], "parameters": {"deadline_ms": 30000}}
    for _ in range(150):
        r = await client.post(path, json=body)
        if r.status_code == 200:
            return r.json()
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name}@{version} never served: {r.status_code} {r.text}")


def _logits(reply: dict) -> np.ndarray:
    out = reply["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def _want(seed: int) -> np.ndarray:
    with torch.inference_mode():
        return small_cnn(seed)(torch.from_numpy(X)).numpy()


async def test_archives_go_live_and_versions_retire(client, repo, exported_master):
    url = "/v2/repository/models/pub/versions"
    r = await client.post(f"{url}/1", content=_tar(_files(exported_master, "pub", "1")),
                          headers={**KEY, "Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text
    assert r.json()["new_model"] is True and r.json()["files"] == ["config.yaml", "model.onnx"]
    reply = await _served(client, "pub")
    np.testing.assert_allclose(_logits(reply), _want(1), atol=1e-4)
    # Version 2 as multipart (one file per part); the default moves to it once it is warm.
    files = _files(exported_master, "pub", "2")
    r = await client.post(f"{url}/2", headers=KEY,
                          files={n: (n, data) for n, data in files.items()})
    assert r.status_code == 201, r.text
    for _ in range(100):
        reply = await _served(client, "pub")
        if reply["model_version"] == "2":
            break
        await asyncio.sleep(0.1)
    np.testing.assert_allclose(_logits(reply), _want(2), atol=1e-4)
    # Same version again: conflict, nothing changed.
    r = await client.post(f"{url}/2", content=_tar(files), headers=KEY)
    assert r.status_code == 409 and r.json()["field"] == "version"
    # Versions share one config: a different one is a conflict naming the field.
    r = await client.post(f"{url}/3", headers=KEY, content=_tar(
        _files(exported_master, "pub", "2", max_batch_size=32)))
    assert r.status_code == 409 and r.json()["field"] == "max_batch_size", r.text
    assert not (repo / "pub" / "3").exists()
    r = await client.delete(f"{url}/1", headers=KEY)
    assert r.status_code == 200 and not (repo / "pub" / "1").exists()
    assert (await client.delete(f"{url}/1", headers=KEY)).status_code == 404
    assert (await client.delete(f"{url}/2")).status_code == 401
    assert not [p for p in repo.iterdir() if p.name.startswith(".publish")]


@pytest.mark.parametrize("case", ["no-key", "corrupt", "bad-config", "traversal", "symlink",
                                  "absolute", "oversize", "factory", "bad-weights", "warm-up"])
async def test_bad_archives_get_4xx_naming_file_and_field_and_change_nothing(
        client, repo, exported_master, case):
    files = _files(exported_master, "bad", "1")
    headers = {**KEY, "Content-Type": "application/x-tar"}
    body = None
    want: tuple[int, str, str | None]
    if case == "no-key":
        headers.pop("X-API-Key")
        want = (401, "", None)
    elif case == "corrupt":
        body = _tar(files)[:-300] + b"\x00garbage" * 40
        want = (400, "archive", None)
    elif case == "bad-config":
        files = _files(exported_master, "bad", "1",
                       inputs=[{"name": "pixels", "dtype": "FLOAT", "shape": [64]}])
        want = (422, "bad/config.yaml", "inputs.0.dtype")
    elif case == "traversal":
        files["../../escaped.yaml"] = b"x: 1"
        want = (400, "../../escaped.yaml", None)
    elif case == "symlink":
        body = _tar(files, links={"model.onnx.link": "/etc/passwd"})
        want = (400, "model.onnx.link", None)
    elif case == "absolute":
        files["/tmp/abs.yaml"] = b"x: 1"
        want = (400, "/tmp/abs.yaml", None)
    elif case == "oversize":
        body = b"\0" * (MAX_ARCHIVE + 1)
        want = (413, "archive", "body")
    elif case == "factory":  # code outside the operator's allowlist: refused, not imported
        cfg = config_dict("bad", "safetensors", architecture="os:system")
        files = {"config.yaml": yaml.safe_dump(cfg).encode(), "model.safetensors": b"{}"}
        want = (422, "bad/config.yaml", "architecture")
    elif case == "bad-weights":
        files["model.onnx"] = b"not an onnx graph"
        want = (422, "bad/1/model.onnx", "format")
    else:  # loads, but the config's input shape does not fit the graph
        files = _files(exported_master, "bad", "1",
                       inputs=[{"name": "pixels", "dtype": "FP32", "shape": [32]}])
        want = (422, "bad/1/model.onnx", "inputs")
    before = _tree(repo)
    r = await client.post("/v2/repository/models/bad/versions/1",
                          content=body if body is not None else _tar(files), headers=headers)
    status, file, field = want
    assert r.status_code == status, r.text
    if status != 401:
        assert r.json()["file"] == file and r.json().get("field") == field, r.json()
    assert _tree(repo) == before
    assert not (repo / "bad").exists()


async def test_cli_push_and_retire_over_real_http(app, client, repo, exported_master, tmp_path):
    import uvicorn

    from deploy.models_cli import push_main, retire_main
    from tests.support.ports import free_port

    folder = tmp_path / "cli-pub"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(config_dict("cli-pub", "onnx")))
    shutil.copytree(exported_master / "onnx" / "1", folder / "1")
    shutil.copytree(exported_master / "onnx" / "2", folder / "2")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        url = ["--url", f"http://127.0.0.1:{port}", "--api-key", KEY["X-API-Key"]]
        assert await asyncio.to_thread(push_main, [str(folder), *url]) == 0  # newest: 2
        assert sorted(p.name for p in (repo / "cli-pub").iterdir()) == ["2", "config.yaml"]
        np.testing.assert_allclose(_logits(await _served(client, "cli-pub")), _want(2),
                                   atol=1e-4)
        assert await asyncio.to_thread(push_main, [str(folder), *url]) == 1  # 409: exists
        assert await asyncio.to_thread(retire_main, ["cli-pub", "2", *url]) == 0
        assert not (repo / "cli-pub" / "2").exists()
    finally:
        server.should_exit = True
        await serving
