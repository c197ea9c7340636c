"""The front door under hostile clients, against the real ingress app on loopback (no Ray).

The server is ``benchmarks._overload_server`` (``router.ingress.Ingress``'s own ``__init__``, the
HTTP app with the edge mounted, uvicorn) in its own process; normal traffic comes from
``benchmarks._openloop`` in another process, open loop, latency from the planned send time.
Performance lives in the benchmarks: the only latency checks here compare the normal traffic's
p99 measured in this test, against this server, with and without the hostile clients, or bound
it by the edge's own timeouts.
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
import pytest

from benchmarks._overload_server import PATH, Server, infer_body, make_device_model

SLOW_CLIENTS = 600
BODY_TIMEOUT_S = 5.0
RATE, SECONDS = 30.0, 3.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from deploy.demo import build_demo_repository

    repo = tmp_path_factory.mktemp("edge") / "repo"
    build_demo_repository(repo, only=["iris-mlp2x16"])  # only the weights the model needs
    make_device_model(repo, device_ms=5.0)
    # a short grace so the slow clients are cut well inside the test
    srv = Server(repo, edge=True, deadline_ms=2000.0,
                 edge_json=json.dumps({"admission": {"body_grace_s": 0.5,
                                                     "body_timeout_s": BODY_TIMEOUT_S}}))
    yield srv
    srv.stop()
    assert srv.proc.returncode is not None


async def normal_traffic(port: int) -> tuple[float, list[int]]:
    """p99 latency (s) and statuses of RATE req/s of interactive traffic for SECONDS."""
    job = {"mode": "open", "port": port, "path": PATH, "rate": RATE, "seconds": SECONDS,
           "mix": {"interactive": 1.0}, "seed": 1,
           "body": {"interactive": infer_body("interactive", 2000)}}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks._openloop", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate(json.dumps(job).encode())
    answers = json.loads(out)["answers"]
    return float(np.percentile([a[1] for a in answers], 99)), [a[2] for a in answers]


async def slow_client(port: int, cut: list[bool], started: asyncio.Event, n_ready: list[int],
                      *, length: int = 4000, gap_s: float = 0.2) -> None:
    """Send headers, then one body byte every ``gap_s``: far below any sane minimum rate."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {length}\r\n\r\n{{").encode())
    n_ready[0] += 1
    if n_ready[0] == SLOW_CLIENTS:
        started.set()
    try:
        for _ in range(length - 1):
            read = asyncio.ensure_future(reader.readline())
            done, _ = await asyncio.wait({read}, timeout=gap_s)
            if done:  # the server answered (408/503) or closed before the body was complete
                cut.append(True)
                return
            read.cancel()
            writer.write(b" ")
            await writer.drain()
        cut.append(False)
    except (ConnectionError, OSError):
        cut.append(True)
    finally:
        writer.close()


async def test_slow_bodies_are_cut_and_normal_traffic_keeps_its_latency(server) -> None:
    unloaded_p99, statuses = await normal_traffic(server.port)
    assert set(statuses) == {200}
    cut: list[bool] = []
    started, n_ready = asyncio.Event(), [0]
    slow = [asyncio.create_task(slow_client(server.port, cut, started, n_ready))
            for _ in range(SLOW_CLIENTS)]
    await asyncio.wait_for(started.wait(), 30)
    loaded_p99, statuses = await normal_traffic(server.port)
    await asyncio.wait_for(asyncio.gather(*slow), 60)
    print(f"slow bodies: normal p99 {loaded_p99 * 1e3:.1f} ms vs unloaded "
          f"{unloaded_p99 * 1e3:.1f} ms; cut {cut.count(True)}/{SLOW_CLIENTS}")
    assert set(statuses) == {200}, statuses
    assert len(cut) == SLOW_CLIENTS and all(cut), f"{cut.count(False)} slow clients not cut"
    # Not held until the slow bodies were cut (body_timeout_s): a bound only that breaks.
    # How much they cost the normal traffic is a benchmark's question, not this test's.
    assert loaded_p99 < BODY_TIMEOUT_S, (loaded_p99, unloaded_p99)


async def _send_nested(port: int, *, size: int, chunked: bool) -> tuple[int, dict]:
    body = b'{"inputs": ' + b"[" * (size // 2) + b"]" * (size // 2) + b"}"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += ("Transfer-Encoding: chunked\r\n\r\n" if chunked
             else f"Content-Length: {len(body)}\r\n\r\n")
    writer.write(head.encode())
    try:
        step = 1 << 20
        for i in range(0, len(body), step):
            part = body[i:i + step]
            writer.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the server may answer and close before the whole body is sent
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    payload = json.loads(await reader.readexactly(int(headers["content-length"])))
    writer.close()
    return status, payload


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_29mb_nested_body_neither_stalls_others_nor_crashes(server, chunked) -> None:
    unloaded_p99, _ = await normal_traffic(server.port)
    traffic = asyncio.create_task(normal_traffic(server.port))
    await asyncio.sleep(0.5)
    status, payload = await _send_nested(server.port, size=29 << 20, chunked=chunked)
    loaded_p99, statuses = await traffic
    print(f"29 MB nested ({'chunked' if chunked else 'length'}): {status}; normal p99 "
          f"{loaded_p99 * 1e3:.1f} ms vs unloaded {unloaded_p99 * 1e3:.1f} ms")
    assert (status, payload["field"]) in ((413, "body"), (400, "body")), payload
    assert payload["type"] in ("PayloadTooLarge", "InvalidRequest")
    assert set(statuses) == {200}
    # the issue's bound: the body stalls other requests by no more than 50 ms (a 2x ratio of
    # an ~18 ms p99 is within the noise of two shared cores: 36 vs 18 ms failed a fresh clone)
    assert loaded_p99 <= unloaded_p99 + 0.050, (loaded_p99, unloaded_p99)
    assert server.proc.poll() is None  # still serving
