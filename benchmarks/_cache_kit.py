"""Shared pieces of ``benchmarks.cache``: the model, timing helpers and a Redis to measure
against (the one at the given URL when it answers, else a private ``redis-server``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import torch

from router.cache import CachedAnswer

__all__ = ["answers", "compute_for", "expect", "mlp", "pct", "redis_server", "timed"]


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    )
    return net.eval()


def compute_for(net: torch.nn.Module, x: np.ndarray) -> Callable[[], Awaitable[Any]]:
    async def compute() -> tuple[CachedAnswer, bool]:
        with torch.inference_mode():
            logits = net(torch.from_numpy(x)).numpy()
        return CachedAnswer(outputs={"logits": logits}, served_by="cpu:mlp@1", version="1"), True

    return compute


def pct(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1e3
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 4),
        "p99_ms": round(float(np.percentile(ms, 99)), 4),
        "n": len(samples_s),
    }


async def timed(
    fn: Callable[[], Awaitable[Any]],
    n: int,
    before: Callable[[], None] | None = None,
    check: Callable[[Any], None] | None = None,
) -> list[float]:
    out = []
    for _ in range(n):
        if before:
            before()
        t0 = time.perf_counter()
        result = await fn()
        out.append(time.perf_counter() - t0)
        if check:
            check(result)
    return out


def expect(tier: str) -> Callable[[Any], None]:
    def check(result: Any) -> None:
        if result[1].tier != tier:
            raise RuntimeError(f"expected a {tier} hit, got {result[1]}")

    return check


# -- Redis ---------------------------------------------------------------------------------------


def answers(url: str) -> bool:
    from urllib.parse import urlparse

    p = urlparse(url)
    try:
        with socket.create_connection((p.hostname or "127.0.0.1", p.port or 6379), 0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_server(url: str) -> tuple[str | None, subprocess.Popen[bytes] | None, str]:
    if answers(url):
        return url, None, "existing server"
    binary = shutil.which("redis-server")
    if binary is None:
        return None, None, f"no Redis at {url} and no redis-server binary"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(500):
        if answers(url):
            return url, proc, "started redis-server"
        time.sleep(0.01)
    proc.kill()
    return None, None, "redis-server did not start"
