"""Helpers for tests against the real Timeshare app on a local Ray Serve."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

API_KEY = "test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_chaos_model(repo: Path, name: str, *, fallback: list[dict] | None = None,
                     hang_s: float = 2.0, deadline_ms: float = 400) -> None:
    """A chaos classifier (deploy.chaos) on iris, from the iris-mlp2x16 weights."""
    src = repo / "iris-mlp2x16"
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg.update(name=name, architecture="deploy.chaos:chaos_mlp", deadline_ms=deadline_ms,
               fallback=fallback or [], cache={"mode": "none"}, batch_wait_ms=0)
    cfg["architecture_kwargs"] = {**cfg["architecture_kwargs"], "hang_s": hang_s}
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(src / "1" / "model.safetensors", repo / name / "1" / "model.safetensors")
    (repo / name / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


HANG, FAIL = -1000.0, -2000.0


def iris_rows(n: int = 1, control: float | None = None) -> np.ndarray:
    x = np.tile(np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32), (n, 1))
    if control is not None:
        x[0, 0] = control
    return x


def v2_body(name: str, x: np.ndarray, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs": [{"name": name, "shape": list(x.shape),
                                        "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
    if params:
        body["parameters"] = params
    return body


class RedisServer:
    """A private redis-server on a free port that tests may stop and restart."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@dataclass
class App:
    url: str
    repo: Path
    handle: Any
    redis: RedisServer | None
    receiver: Any
    call_log: Path
    grpc: str | None = None  # host:port of the gRPC listener (router.grpc_v2)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def wait_for(self, predicate, timeout_s: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")
