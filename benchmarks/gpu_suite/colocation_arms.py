"""The two baseline arms of the colocation section, Ray-free, and the open-loop driver.

- :class:`CountLru` with ``from_disk``: a re-creation of stock Ray Serve multiplexing
  (``@serve.multiplexed(max_num_models_per_replica=K)``): LRU by model count, a miss loads the
  model from disk (``torch.load(..., map_location=device, weights_only=True)`` into a module
  built on the meta device, the fastest load a capable user writes), no priorities, no
  deadlines, one request at a time per replica.
- :class:`CountLru` with ``from_host``: the same, but every model's state dict is kept in host
  RAM (pageable) and a miss copies it with ``.to(device)``.
- :class:`PinnedLru` (``host_ram_pinned``): the strongest loop a capable user writes by hand
  in about thirty lines: every state dict page-locked in host memory, a miss copies it with
  ``.to(device, non_blocking=True)`` into a module built on the meta device
  (``load_state_dict(assign=True)``), LRU by bytes against the same budget Timeshare gets, one
  request at a time. The headline ratios are against this arm.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

from benchmarks.gpu_suite._env import pct
from common.fallback_types import RequestExpired

__all__ = ["CountLru", "Loader", "PinnedLru", "drive", "from_disk", "from_host", "make_trace",
           "pinned_states", "summarize"]

Loader = Callable[[int], nn.Module]


class CountLru:
    """One replica serving many models: at most ``k`` on the device, least recently used out."""

    def __init__(self, k: int, load: Loader, device: str, threads: int) -> None:
        self.k, self._load, self.device = k, load, device
        self._lru: OrderedDict[int, nn.Module] = OrderedDict()
        self._lock = asyncio.Lock()  # FIFO: one request at a time, as one replica serves
        self._pool = ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(threads,))
        self.loads, self.load_s = 0, 0.0

    async def __call__(self, idx: int, x: torch.Tensor, _deadline: float) -> torch.Tensor:
        loop = asyncio.get_running_loop()
        async with self._lock:
            model = self._lru.get(idx)
            if model is None:
                if len(self._lru) >= self.k:
                    self._lru.popitem(last=False)
                t0 = time.perf_counter()
                model = await loop.run_in_executor(self._pool, self._load, idx)
                self.load_s += time.perf_counter() - t0
                self.loads += 1
                self._lru[idx] = model
            else:
                self._lru.move_to_end(idx)
            return await loop.run_in_executor(self._pool, self._forward, model, x)

    def _forward(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(x.to(self.device)).cpu()

    def close(self) -> None:
        self._lru.clear()
        self._pool.shutdown(wait=True)


def pinned_states(models: list[nn.Module], pin: bool) -> list[dict[str, torch.Tensor]]:
    """Each model's state dict copied once into page-locked host memory (``pin``; the CPU
    stand-in has no pinned memory)."""
    return [{n: (t.detach().pin_memory() if pin else t.detach().clone())
             for n, t in m.state_dict().items()} for m in models]


class PinnedLru:
    """The hand-written pinned-LRU loop: LRU by bytes, non-blocking copies into meta-built
    modules, one request at a time (one thread)."""

    def __init__(self, states: list[dict[str, torch.Tensor]], skeleton: Callable[[], nn.Module],
                 device: str, budget_bytes: int, threads: int) -> None:
        self._states, self._skeleton, self.device = states, skeleton, device
        self._nbytes = [sum(t.numel() * t.element_size() for t in sd.values()) for sd in states]
        self._budget, self._used = budget_bytes, 0
        self._lru: OrderedDict[int, nn.Module] = OrderedDict()
        self._lock = asyncio.Lock()  # FIFO: one request at a time
        self._pool = ThreadPoolExecutor(1, initializer=torch.set_num_threads, initargs=(threads,))
        self._cpu = device == "cpu"
        self.loads, self.load_s = 0, 0.0

    async def __call__(self, idx: int, x: torch.Tensor, _deadline: float) -> torch.Tensor:
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(self._pool, self._serve,
                                                                    idx, x)

    def _serve(self, idx: int, x: torch.Tensor) -> torch.Tensor:
        model = self._lru.get(idx)
        if model is None:
            t0 = time.perf_counter()
            while self._lru and self._used + self._nbytes[idx] > self._budget:
                old, _ = self._lru.popitem(last=False)
                self._used -= self._nbytes[old]
            with torch.device("meta"):
                model = self._skeleton()
            # copy=True: on the CPU stand-in .to("cpu") would otherwise be no copy at all
            model.load_state_dict({k: v.to(self.device, non_blocking=True, copy=self._cpu)
                                   for k, v in self._states[idx].items()}, assign=True)
            model.eval()
            self._lru[idx] = model
            self._used += self._nbytes[idx]
            self.load_s += time.perf_counter() - t0
            self.loads += 1
        else:
            self._lru.move_to_end(idx)
        with torch.inference_mode():
            return model(x.to(self.device, non_blocking=True)).cpu()

    def close(self) -> None:
        self._lru.clear()
        self._pool.shutdown(wait=True)


def from_disk(paths: list[str], skeleton: Callable[[], nn.Module], device: str) -> Loader:
    def load(idx: int) -> nn.Module:
        with torch.device("meta"):
            m = skeleton()
        sd = torch.load(paths[idx], map_location=device, weights_only=True)
        m.load_state_dict(sd, assign=True)
        return m.eval()
    return load


def from_host(state: list[dict[str, torch.Tensor]], skeleton: Callable[[], nn.Module],
              device: str) -> Loader:
    def load(idx: int) -> nn.Module:
        with torch.device("meta"):
            m = skeleton()
        # copy=True: on the CPU stand-in .to("cpu") would otherwise be no copy at all
        m.load_state_dict({k: v.to(device, copy=True) for k, v in state[idx].items()},
                          assign=True)
        return m.eval()
    return load


Call = Callable[[int, torch.Tensor, float], Awaitable[object]]


async def drive(trace: list[tuple[float, int]], call: Call, x: torch.Tensor, deadline_s: float,
                drain_s: float) -> list[tuple[float, str]]:
    """Open-loop arrivals at the trace's times; returns (latency s, outcome) per request:
    ok (answered within the deadline), late, refused (expired: the ingress falls back), error,
    timeout (unanswered ``drain_s`` after the last arrival; latency up to that cut-off)."""
    out: list[tuple[float, str]] = []
    arrivals: dict[asyncio.Task, float] = {}

    async def one(idx: int, t0: float) -> None:
        try:
            await call(idx, x, t0 + deadline_s)
            lat = time.monotonic() - t0
            out.append((lat, "ok" if lat <= deadline_s else "late"))
        except RequestExpired:
            out.append((time.monotonic() - t0, "refused"))
        except Exception:  # noqa: BLE001 - counted, not raised: one failure never stops the run
            out.append((time.monotonic() - t0, "error"))

    start = time.monotonic()
    for at, idx in trace:
        await asyncio.sleep(max(0.0, start + at - time.monotonic()))
        t0 = time.monotonic()
        arrivals[asyncio.create_task(one(idx, t0))] = t0
    _, pending = await asyncio.wait(list(arrivals), timeout=drain_s) if arrivals else (set(), set())
    cut = time.monotonic()
    for task in pending:
        task.cancel()
        out.append((cut - arrivals[task], "timeout"))
    await asyncio.gather(*pending, return_exceptions=True)
    return out


def summarize(results: list[tuple[float, str]], seconds: float) -> dict:
    lat = [s for s, _ in results]
    answered = [s for s, o in results if o in ("ok", "late")]
    counts = {o: sum(1 for _, x in results if x == o)
              for o in ("ok", "late", "refused", "error", "timeout")}
    return {"requests": len(results), **counts, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "p99_answered_ms": pct(answered, 99),
            "goodput_per_s": round(counts["ok"] / seconds, 2),
            "goodput_share": round(counts["ok"] / max(1, len(results)), 4)}


def make_trace(n_models: int, rate: float, seconds: float, weights: list[float],
               seed: int = 0) -> list[tuple[float, int]]:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate, int(rate * seconds * 1.5) + 10))
    times = times[times < seconds]
    models = rng.choice(n_models, size=len(times), p=np.array(weights))
    return [(float(t), int(m)) for t, m in zip(times, models, strict=True)]
