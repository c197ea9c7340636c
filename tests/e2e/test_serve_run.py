"""End to end: start the app with `serve run deploy/config.yaml` as a user would, talk HTTP.

The test lays out a working folder like a checkout (deploy/config.yaml with a free port, the
routes file, a small demo repository at var/model_repository) and runs the real `serve` command
there. RAY_ADDRESS=local makes `serve run` start its own Ray instance even when the integration
tests' instance is up in this process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from deploy.demo_data import load_splits

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def workdir(demo_repo_master, tmp_path) -> tuple[Path, int, int]:
    port, listener_port = _free_port(), _free_port()
    (tmp_path / "deploy").mkdir()
    cfg = yaml.safe_load((ROOT / "deploy" / "config.yaml").read_text())
    cfg["http_options"]["port"] = port
    cfg["applications"][0]["args"]["listener"]["port"] = listener_port
    cfg["applications"][0]["args"]["grpc"]["port"] = _free_port()
    (tmp_path / "deploy" / "config.yaml").write_text(yaml.safe_dump(cfg))
    shutil.copy(ROOT / "deploy" / "routes.yaml", tmp_path / "deploy" / "routes.yaml")
    shutil.copytree(demo_repo_master, tmp_path / "var" / "model_repository")
    return tmp_path, port, listener_port


def _assert_grpc_serves(cwd: Path, x: np.ndarray, y: np.ndarray) -> None:
    """The config's gRPC listener (router.grpc_v2) answers the unmodified tritonclient.grpc."""
    import tritonclient.grpc as tg

    cfg = yaml.safe_load((cwd / "deploy" / "config.yaml").read_text())
    client = tg.InferenceServerClient(f"127.0.0.1:{cfg['applications'][0]['args']['grpc']['port']}")
    try:
        assert client.is_server_ready() and client.is_model_ready("digits-small")
        inp = tg.InferInput("pixels", list(x.shape), "FP32")
        inp.set_data_from_numpy(x.astype(np.float32))
        pred = client.infer("digits-small", [inp], client_timeout=30).as_numpy("logits").argmax(1)
        assert (pred == y).mean() > 0.9
    finally:
        client.close()


def _assert_bounded_graphs_run_inline(port: int, x: np.ndarray) -> None:
    """The ingress's in-process CPU pool runs digits-small (TorchScript without loops) on its
    loop once measured, and keeps an eager (safetensors + Python architecture) model off it."""
    base = f"http://127.0.0.1:{port}"
    skip = {"cache_skip_read": True, "cache_skip_write": True}
    for model, name, row in (("digits-small", "pixels", x[0]),
                             ("iris-mlp2x16", "features", np.ones(4, np.float32))):
        body = {"inputs": [{"name": name, "shape": [1, len(row)], "datatype": "FP32",
                            "data": row.tolist()}], "parameters": skip}
        for _ in range(10):
            r = httpx.post(f"{base}/v2/models/{model}/infer", json=body, timeout=30)
            assert r.status_code == 200, r.text
    device = httpx.get(f"{base}/v2/status", timeout=30).json()["pools"]["cpu"]["device"]
    assert device["inline_chunks"] > 0, device
    assert not any(k.startswith("digits-small@") for k in device["not_inline"]), device
    assert "runs Python code" in device["not_inline"]["iris-mlp2x16@1"], device


@pytest.mark.parametrize("ray_settings", ["ray_defaults", "make_serve"])
def test_serve_run_config_answers_over_http(workdir, ray_settings):
    """Under Ray's defaults (``serve run`` by hand) and under the settings ``make serve`` uses
    (``deploy.ray_env``: throughput-optimized mode with direct ingress)."""
    from deploy.ray_env import serve_environment

    cwd, port, listener_port = workdir
    serve_bin = Path(sys.executable).with_name("serve")
    env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"}
    if ray_settings == "make_serve":
        env = serve_environment(env)
    log = open(cwd / "serve.log", "w")
    proc = subprocess.Popen([str(serve_bin), "run", "deploy/config.yaml"], cwd=cwd, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, (cwd / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            pytest.fail("app not ready in 240 s:\n" + (cwd / "serve.log").read_text()[-3000:])
        split = load_splits("digits")
        x, y = split.test_x[:64], split.test_y[:64]
        body = {"inputs": [{"name": "pixels", "shape": list(x.shape), "datatype": "FP32",
                            "data": x.reshape(-1).tolist()}],
                "parameters": {"caller": "e2e", "priority": "realtime"}}
        for model in ("digits-small", "digits-large", "digits"):
            r = httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)
            assert r.status_code == 200, r.text
            out = r.json()["outputs"][0]
            pred = np.asarray(out["data"]).reshape(out["shape"]).argmax(1)
            assert (pred == y).mean() > 0.9
        route = r.json()["parameters"]["route"]
        assert '"route":"digits"' in route and '"strategy":"cascade"' in route
        bad_body = {"inputs": [{"name": "pixels", "shape": [1, 3], "datatype": "FP32",
                                "data": [1, 2, 3]}]}
        # the listener (router.listener) answers the same API as Serve's port
        for base in (url, f"http://127.0.0.1:{listener_port}"):
            bad = httpx.post(f"{base}/v2/models/digits-small/infer", json=bad_body)
            assert bad.status_code == 400 and bad.json()["field"] == "inputs.pixels"
        lr = httpx.post(f"http://127.0.0.1:{listener_port}/v2/models/digits-small/infer",
                        json=body, timeout=30)
        assert lr.status_code == 200, lr.text
        out = lr.json()["outputs"][0]
        assert (np.asarray(out["data"]).reshape(out["shape"]).argmax(1) == y).mean() > 0.9
        assert httpx.get(f"http://127.0.0.1:{listener_port}/v2/health/ready").status_code == 200
        _assert_bounded_graphs_run_inline(listener_port, x[:1])
        _assert_grpc_serves(cwd, x, y)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # serve run shuts the app and its Ray down on ^C
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
