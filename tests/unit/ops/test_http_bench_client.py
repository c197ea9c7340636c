"""benchmarks.http_throughput's client and knee count model answers only: a labelled degraded
answer (a shed request's fallback) is never served throughput, and shedding more at a higher
rate cannot move the knee past a rate that failed. Its closed-loop rounds interleave the arms
and pool each arm's rounds."""

from __future__ import annotations

import argparse
import asyncio
import threading

from benchmarks._http_client import LoadSpec, run_load
from benchmarks.http_throughput import _closed_rounds, _knee, _pooled

_MODEL = b'{"model_name":"m","outputs":[],"parameters":{"degraded":false}}'
_FALLBACK = b'{"model_name": "m", "outputs": [], "parameters": {"degraded": true}}'


def _serve_alternating(started: threading.Event, port: list[int], stop: threading.Event) -> None:
    """Answers every other request with a degraded body, over real sockets."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            body = _FALLBACK if n % 2 else _MODEL
            n += 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()

    asyncio.run(main())


def test_degraded_answers_are_counted_apart_from_model_answers() -> None:
    started, stop, port = threading.Event(), threading.Event(), []
    t = threading.Thread(target=_serve_alternating, args=(started, port, stop), daemon=True)
    t.start()
    assert started.wait(5)
    try:
        out = run_load(LoadSpec("127.0.0.1", port[0], "/v2/models/m/infer", b"{}",
                                duration_s=0.5, concurrency=1, warmup_s=0.1))
    finally:
        stop.set()
        t.join(5)
    assert out["n_errors"] == 0
    n, degraded = len(out["latencies_s"]), out["n_degraded"]
    assert n > 10 and abs(n - degraded) <= 1, (n, degraded)  # one connection: strict alternation


def test_knee_stops_at_the_first_failing_rate() -> None:
    ok = {"n": 100, "scheduled": 100, "p99_ms": 10.0}
    sweep = {"1000": ok, "2000": ok, "3000": {**ok, "p99_ms": 160.0}, "4000": ok}
    assert _knee(sweep) == 2000.0
    few = {"1000": ok, "2000": {**ok, "n": 90}}  # 10 % answered degraded or not at all
    assert _knee(few) == 1000.0
    assert _knee({"1000": {"n": 0, "scheduled": 100}}) == 0.0


def test_the_closed_loop_interleaves_the_arms_and_rotates_their_order() -> None:
    calls: list[str] = []

    def load(arm: str, **kw) -> dict:
        calls.append(arm)
        assert kw["duration_s"] == 2.0 and kw["concurrency"] == 16
        return {"latencies_s": [0.01] * 4, "duration_s": kw["duration_s"], "n_errors": 0,
                "n_degraded": 0, "errors": [], "server_cores": 0.5}

    args = argparse.Namespace(rounds=3, closed_s=6.0)
    out = _closed_rounds(load, args, ("a", "b", "c"), 16)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert out["a"]["duration_s"] == 6.0 and len(out["a"]["latencies_s"]) == 12


def test_pooled_rounds_weigh_cores_by_time_and_inline_share_by_chunks() -> None:
    def run(seconds: float, n: int, cores: float | None, chunks: int, inline: float) -> dict:
        return {"latencies_s": [0.01] * n, "duration_s": seconds, "n_errors": 1,
                "n_degraded": 2, "errors": ["e"], "server_cores": cores,
                "device": {"chunks": chunks, "inline_share": inline, "inline_waits": 1}}

    out = _pooled([run(1.0, 10, 1.0, 10, 1.0), run(3.0, 30, 0.2, 30, 0.0)])
    assert out["duration_s"] == 4.0 and len(out["latencies_s"]) == 40
    assert out["n_errors"] == 1 + 1 and out["n_degraded"] == 2 + 2
    assert abs(out["server_cores"] - (1.0 * 1 + 0.2 * 3) / 4) < 1e-9
    assert out["device"] == {"chunks": 40, "inline_share": 0.25, "inline_waits": 2}
    # one round without a CPU figure: no pooled figure rather than a partial one
    partial = _pooled([run(1.0, 10, None, 10, 1.0), run(1.0, 10, 0.5, 10, 1.0)])
    assert partial["server_cores"] is None
