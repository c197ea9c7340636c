"""Helpers for tests against the real Timeshare app on a local Ray Serve."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.redis import RedisServer


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


@dataclass
class App:
    url: str
    repo: Path
    handle: Any
    redis: RedisServer | None
    receiver: Any
    call_log: Path
    grpc: str | None = None  # host:port of the gRPC listener (router.grpc_v2)
    listener: str | None = None  # base URL of Timeshare's own HTTP listener (router.listener)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def wait_for(self, predicate, timeout_s: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")
