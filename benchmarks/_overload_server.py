"""The Timeshare ingress as Ray Serve runs it, minus Ray: for ``benchmarks.overload_http`` and
the edge's integration tests.

``python -m benchmarks._overload_server --repo R --port P [--edge on|off] [--deadline-ms 500]``

The real ``router.ingress.Ingress`` class (its own ``__init__``: catalog, pipeline, cache,
breakers, recorders, the CPU pool in-process as ``cpu_pool.placement: ingress`` places it, the
HTTP app with the edge mounted) is built in this process and its ASGI app served by uvicorn on
loopback. What is left out, on purpose and said in every report: Ray Serve's proxy and its
queue in front of the replica (``max_ongoing_requests`` / ``max_queued_requests``).

:func:`make_device_model` writes the model the load runs against: the ``deploy.chaos`` iris
classifier whose control row holds the device ``device_ms`` per request (a sleep: device busy,
host CPU free, as with a GPU kernel), ``max_batch_size`` 1 so the capacity is fixed, no cache, and
a labelled rules fallback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from benchmarks._serve_net import free_port

__all__ = ["DEVICE_MODEL", "HANG", "PATH", "Server", "infer_body", "make_device_model",
           "serve"]

DEVICE_MODEL = "device-bound"
HANG = -1000.0  # deploy.chaos's control value: this row holds the device for hang_s
PATH = f"/v2/models/{DEVICE_MODEL}/infer"


def infer_body(priority: str, deadline_ms: float) -> str:
    """A v2 body for the device model: one control row (holds the device), the class and
    deadline in ``parameters``."""
    return json.dumps({
        "inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32",
                    "data": [HANG, 3.5, 1.4, 0.2]}],
        "parameters": {"priority": priority, "deadline_ms": deadline_ms}})


def make_device_model(repo: Path, *, device_ms: float, name: str = DEVICE_MODEL) -> None:
    """Write ``name`` into ``repo`` from the demo ``iris-mlp2x16`` weights (see module doc)."""
    src = repo / "iris-mlp2x16"
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg.update(name=name, architecture="deploy.chaos:chaos_mlp", deadline_ms=500,
               max_batch_size=1, batch_wait_ms=0, cache={"mode": "none"},
               fallback=[{"kind": "default", "outputs": {"logits": [[0.0, 0.0, 0.0]]}}])
    cfg["architecture_kwargs"] = {**cfg["architecture_kwargs"], "hang_s": device_ms / 1000.0,
                                  "hang_value": HANG}
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "1" / "model.safetensors", repo / name / "1" / "model.safetensors")
    (repo / name / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


async def _build(repo: str, state_dir: str, *, edge: bool, deadline_ms: float,
                 edge_overrides: dict | None = None):
    from common.trust import TrustSettings
    from router.edge import EdgeSettings
    from router.ingress import Ingress
    from router.settings import AppSettings, CallLogSettings, CpuPoolSettings

    settings = AppSettings(
        repository=repo, state_dir=state_dir, default_deadline_ms=deadline_ms,
        cpu_pool=CpuPoolSettings(placement="ingress", memory_budget_mb=256, threads=1),
        call_log=CallLogSettings(path=str(Path(state_dir) / "calllog.jsonl")),
        edge=EdgeSettings(enabled=edge, **(edge_overrides or {})),
        # the operator allows the chaos factory its device-bound model names (common.trust)
        trust=TrustSettings(allowed_modules=("deploy.demo_models", "deploy.chaos")))
    # Ingress is the class Ray Serve wraps; its own class (the wrapper's base) is built here.
    cls = Ingress.func_or_class.__mro__[1]  # type: ignore[attr-defined]
    ingress = object.__new__(cls)
    await cls.__init__(ingress, settings, {}, None)
    return ingress.__serve_build_asgi_app__()


async def serve(repo: str, port: int, *, edge: bool, deadline_ms: float,
                edge_overrides: dict | None = None) -> None:
    """Build the ingress over ``repo`` and serve it on 127.0.0.1:``port`` until cancelled."""
    import uvicorn

    with tempfile.TemporaryDirectory(prefix="ts-ovl-state-") as state:
        app = await _build(repo, state, edge=edge, deadline_ms=deadline_ms,
                           edge_overrides=edge_overrides)
        # backlog: 600 slow clients plus the normal traffic must be accepted to be judged
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                access_log=False, backlog=4096, timeout_keep_alive=30)
        await uvicorn.Server(config).serve()


class Server:
    """``benchmarks._overload_server`` in its own process."""

    def __init__(self, repo: Path, *, edge: bool, deadline_ms: float,
                 edge_json: str | None = None) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "benchmarks._overload_server", "--repo", str(repo),
               "--port", str(self.port), "--edge", "on" if edge else "off",
               "--deadline-ms", str(deadline_ms)]
        if edge_json:
            cmd += ["--edge-json", edge_json]
        self.proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 120.0) -> None:
        url = f"http://127.0.0.1:{self.port}"
        stop = time.monotonic() + timeout_s
        while time.monotonic() < stop:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                r = httpx.get(f"{url}/v2/models/{DEVICE_MODEL}/ready", timeout=2)
                if r.status_code == 200 and r.json().get("ready"):
                    warm_body = infer_body("interactive", 5000)
                    for _ in range(5):  # warm: first forward passes, lazy imports
                        httpx.post(url + PATH, content=warm_body, timeout=10)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError("server not ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--edge", choices=("on", "off"), default="on")
    ap.add_argument("--deadline-ms", type=float, default=500.0)
    ap.add_argument("--edge-json", default=None, help="EdgeSettings overrides as JSON.")
    a = ap.parse_args()
    overrides = json.loads(a.edge_json) if a.edge_json else None
    asyncio.run(serve(a.repo, a.port, edge=a.edge == "on", deadline_ms=a.deadline_ms,
                      edge_overrides=overrides))


if __name__ == "__main__":
    main()
