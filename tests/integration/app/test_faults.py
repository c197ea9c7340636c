"""Fault drills on the shared real app (local Ray Serve): nothing is lost, degradation is labelled.

Every test runs concurrent HTTP load (a pool of client threads) while a fault is injected, counts
the requests sent and the answers received, and asserts they are equal: each request gets exactly
one answer, a model result or a labelled degraded one. No test asserts wall-clock timings; the
fault's effect is read from the labels each answer carries (``served_by``, ``degraded``,
``reason``, ``cache``). Faults are sequenced by answers seen (not by sleeps), and each test leaves
the app healthy for the next one.
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import httpx
import numpy as np
import pytest

from deploy.demo_data import load_splits
from tests.integration.app.appkit import FAIL, HANG
from tests.support.app import API_KEY
from tests.support.v2 import iris_rows, v2_body

Request = tuple[str, dict[str, Any]]  # (path, JSON body)


@dataclass(frozen=True)
class Answer:
    seq: int  # the order the request was sent in
    status: int
    labels: dict[str, Any]  # v2 response parameters, or the error body

    @property
    def served_by(self) -> str | None:
        return self.labels.get("served_by")

    @property
    def degraded(self) -> bool | None:
        return self.labels.get("degraded")

    @property
    def reason(self) -> str | None:
        return self.labels.get("reason")


def _labels(r: httpx.Response) -> dict[str, Any]:
    try:
        body = r.json()
    except ValueError:
        return {"raw": r.text[:300]}
    return body.get("parameters", {}) if r.status_code == 200 else body


class Load:
    """Closed-loop HTTP load: ``workers`` threads send ``make(seq)`` and wait for its answer.

    Sends ``limit`` requests (then :meth:`join`), or runs until the ``with`` block ends. A request
    without an HTTP answer (transport error, client timeout) is recorded in ``lost``.
    """

    def __init__(self, url: str, make: Callable[[int], Request], *, workers: int = 8,
                 limit: int | None = None) -> None:
        self._url, self._make, self._limit = url, make, limit
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._worker, daemon=True)
                         for _ in range(workers)]
        self.sent = 0
        self.answers: list[Answer] = []
        self.lost: list[str] = []

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.join()

    def join(self) -> None:
        for t in self._threads:
            t.join(180)
        assert not any(t.is_alive() for t in self._threads), "load threads did not finish"

    def _next(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or (self._limit is not None and self.sent >= self._limit):
                return None
            self.sent += 1
            return self.sent - 1

    def _worker(self) -> None:
        with httpx.Client(base_url=self._url, timeout=60) as client:
            while (seq := self._next()) is not None:
                path, body = self._make(seq)
                try:
                    r = client.post(path, json=body)
                except httpx.HTTPError as e:
                    with self._lock:
                        self.lost.append(f"#{seq}: {type(e).__name__}: {e}")
                    continue
                answer = Answer(seq, r.status_code, _labels(r))
                with self._lock:
                    self.answers.append(answer)

    def snapshot(self) -> list[Answer]:
        with self._lock:
            return list(self.answers)

    def mark(self) -> int:
        """The sequence number the next request will get."""
        with self._lock:
            return self.sent

    def assert_none_lost(self) -> list[Answer]:
        """Every request sent got exactly one HTTP answer; returns them in send order."""
        answers = sorted(self.snapshot(), key=lambda a: a.seq)
        assert not self.lost, f"{len(self.lost)} requests lost: {self.lost[:3]}"
        assert self.sent > 0 and len(answers) == self.sent, (self.sent, len(answers))
        assert [a.seq for a in answers] == list(range(self.sent))
        return answers


def _errors(answers: list[Answer]) -> Counter:
    """Non-200 answers by status and message (for assertion messages)."""
    return Counter((a.status, str(a.labels.get("error", a.labels))[:160])
                   for a in answers if a.status != 200)


def _status(http: httpx.Client) -> dict[str, Any]:
    r = http.get("/v2/status", headers={"X-API-Key": API_KEY})  # operators only
    assert r.status_code == 200, r.text
    return r.json()


def _infer(http: httpx.Client, model: str, name: str, x: np.ndarray, **params: Any) -> Answer:
    r = http.post(f"/v2/models/{model}/infer", json=v2_body(name, x, **params))
    return Answer(-1, r.status_code, _labels(r))


def _served_normally(answer: Answer, model: str, version: str = "1") -> bool:
    return (answer.status == 200 and answer.served_by == f"cpu:{model}@{version}"
            and answer.degraded is False)


# -- a model that hangs ---------------------------------------------------------------------

def test_hung_model_is_answered_by_its_rule_fallback(app, http):
    n = 48
    body = v2_body("features", iris_rows(1, HANG))
    with Load(app.url, lambda i: ("/v2/models/chaos-hang/infer", body), workers=16,
              limit=n) as load:
        load.join()
    answers = load.assert_none_lost()
    assert len(answers) == n
    assert all(a.status == 200 for a in answers), _errors(answers)
    # chaos-hang: deadline 300 ms, the hang 3 s; chain: rules (always matches) then default
    assert {a.served_by for a in answers} == {"rules:iris-rule"}
    assert all(a.degraded is True for a in answers)
    reasons = Counter(a.reason for a in answers)
    assert reasons["timeout"] >= 1, reasons  # the first one ran into the hang and was abandoned
    # the rest timed out too, or were not started: the breaker opened on the timeouts (slow
    # calls count as failures), or admission (the edge's, or the pipeline's) saw the queue
    # delay would miss the deadline
    assert all(r in ("timeout", "breaker_open")
               or r.startswith(("shed: ", "shed at the edge: ", "error: "))
               for r in reasons), reasons
    # the rule's static answer, not the model's
    r = http.post("/v2/models/chaos-hang/infer", json=body).json()
    assert r["outputs"][0]["data"] == [9.0, 0.0, 0.0]
    # the device is free again: a normal row is served by the model itself
    app.wait_for(lambda: _served_normally(_infer(http, "chaos-hang", "features", iris_rows(1)),
                                          "chaos-hang"), 60, "chaos-hang serving normally")


# -- a model that raises --------------------------------------------------------------------

def test_failing_model_falls_back_then_breaker_opens_and_recovers(app, http):
    fallback = "model:iris-mlp1x16@1"
    # Two remote hops (the failing model, then its fallback model) within the deadline: 2 s
    # rather than the model's 400 ms, so a loaded 2-core machine doesn't time both out (504).
    deadline = {"deadline_ms": 2000}
    failing = v2_body("features", iris_rows(1, FAIL), **deadline)
    healthy_probes: list[Answer] = []

    def healthy() -> Answer:
        return _infer(http, "chaos-fail", "features", iris_rows(1), **deadline)

    def breaker_open_for_healthy_input() -> bool:
        # While the breaker is open even a healthy row goes to the fallback: the model itself
        # is not called (a call would have succeeded and been served by cpu:chaos-fail@1).
        a = healthy()
        healthy_probes.append(a)
        return a.reason == "breaker_open" and a.served_by == fallback

    with Load(app.url, lambda i: ("/v2/models/chaos-fail/infer", failing), workers=8) as load:
        app.wait_for(lambda: _status(http)["breakers"].get("chaos-fail@cpu") == "open", 60,
                     "chaos-fail breaker open")
        app.wait_for(lambda: sum(a.reason == "breaker_open" for a in load.snapshot()) >= 5, 60,
                     "answers while the breaker is open")
        app.wait_for(breaker_open_for_healthy_input, 60, "healthy row answered by fallback")
    answers = load.assert_none_lost()
    assert all(a.status == 200 for a in answers), _errors(answers)
    assert {a.served_by for a in answers} == {fallback}  # the fallback model's own label
    assert all(a.degraded is True for a in answers)
    reasons = Counter(a.reason for a in answers)
    errors = sum(n for r, n in reasons.items() if r.startswith("error: "))
    assert errors >= 1 and reasons["breaker_open"] >= 5, reasons
    # (a call slower than its share of the deadline on a loaded machine is labelled timeout)
    assert errors + reasons["breaker_open"] + reasons["timeout"] == len(answers), reasons
    assert "RuntimeError" in next(r for r in reasons if r.startswith("error: "))
    # the first answers saw the failure itself; the breaker needed its minimum number of calls
    assert answers[0].reason.startswith("error: ")
    assert all(a.status == 200 and a.served_by == fallback for a in healthy_probes)

    # no failures any more: after the open wait, half-open trials succeed and it closes
    app.wait_for(lambda: _served_normally(healthy(), "chaos-fail"), 60,
                 "chaos-fail served by itself")

    def closed() -> bool:  # the half-open state decides once its trial calls are recorded
        assert _served_normally(healthy(), "chaos-fail")
        return _status(http)["breakers"]["chaos-fail@cpu"] == "closed"

    app.wait_for(closed, 60, "chaos-fail breaker closed")


# -- a pool replica killed mid-load ---------------------------------------------------------

def _cpu_pool_replicas() -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("SERVE_REPLICA::timeshare#CPUPool#")}


def test_killed_pool_replica_is_restarted_and_no_request_is_lost(app, http):
    import ray

    digits = load_splits("digits").test_x[:64]

    def make(i: int) -> Request:  # skip the cache read so every request reaches the pool
        return ("/v2/models/digits-small/infer",
                v2_body("pixels", digits[i % 64:i % 64 + 1], cache_skip_read=True))

    (victim,) = _cpu_pool_replicas()
    with Load(app.url, make, workers=8) as load:
        app.wait_for(lambda: sum(_served_normally(a, "digits-small")
                                 for a in load.snapshot()) >= 10, 60, "load warmed up")
        killed_at = load.mark()
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)

        def recovered() -> bool:
            after = [a for a in load.snapshot() if a.seq >= killed_at]
            outage = [a.seq for a in after if a.degraded]
            return bool(outage) and sum(_served_normally(a, "digits-small")
                                        for a in after if a.seq > max(outage)) >= 10

        app.wait_for(recovered, 180, "outage answered by the fallback, then normal service")
    answers = load.assert_none_lost()
    assert all(a.status == 200 for a in answers), _errors(answers)
    degraded = [a for a in answers if a.degraded]
    in_flight = 8  # workers: requests sent before the kill but answered after it
    assert degraded and all(a.seq >= killed_at - in_flight for a in degraded)
    # digits-small's chain is a static default: every outage answer is labelled, none an error
    assert {a.served_by for a in degraded} == {"default"}
    assert all(a.reason in ("timeout", "breaker_open")
               or a.reason.startswith(("error: ", "shed: ", "shed at the edge: "))
               for a in degraded), Counter(a.reason for a in degraded)
    assert all(_served_normally(a, "digits-small") for a in answers if not a.degraded)
    # Ray Serve started a new replica in the victim's place, and the app serves as before
    app.wait_for(lambda: _cpu_pool_replicas() - {victim}, 60, "replacement replica")
    assert victim not in _cpu_pool_replicas()
    assert _served_normally(_infer(http, "digits-large", "pixels", digits[:4]), "digits-large")
    assert "digits-small" in _status(http)["pools"]["cpu"]["models"]


# -- Redis stopped mid-load -----------------------------------------------------------------

def test_redis_stopped_mid_load_bypasses_the_tier_and_comes_back(app, http):
    if app.redis is None:
        pytest.skip("redis-server binary not installed: the app runs without a Redis tier")
    import redis

    digits = load_splits("digits").test_x[:64]
    salt = float(np.random.default_rng().integers(1, 1_000_000)) * 1e-6  # unseen inputs

    def make(i: int) -> Request:
        # inputs are new (misses) except every 4th, which repeats one sent 16 requests earlier
        # (by then answered and in the in-process LRU: a memory hit)
        j = i - 16 if i % 4 == 3 and i >= 16 else i
        x = digits[j % 64:j % 64 + 1].copy()
        x[0, 0] += salt + j * 1e-3
        return "/v2/models/digits-small/infer", v2_body("pixels", x)

    def count_since(load: Load, seq: int, tier: str) -> int:
        return sum(a.labels.get("cache") == tier for a in load.snapshot() if a.seq >= seq)

    client = redis.Redis.from_url(app.redis.url)
    with Load(app.url, make, workers=8) as load:
        app.wait_for(lambda: count_since(load, 0, "miss") >= 5, 60, "misses with Redis up")
        assert client.dbsize() > 0  # answers were written to Redis
        stopped_at = load.mark()
        app.redis.stop()
        app.wait_for(lambda: count_since(load, stopped_at, "bypass") >= 5, 60,
                     "answers labelled bypass while Redis is down")
        app.wait_for(lambda: _status(http)["cache"]["redis_available"] is False, 30,
                     "status shows Redis down")
        restarted_at = load.mark()
        app.redis.start()  # an empty Redis on the same port
        client = redis.Redis.from_url(app.redis.url)
        app.wait_for(lambda: count_since(load, restarted_at, "miss") >= 5, 90,
                     "Redis consulted again after restart")
        app.wait_for(lambda: client.dbsize() > 0, 30, "answers written to Redis again")
    answers = load.assert_none_lost()
    # Redis trouble never fails or degrades a request: every answer is the model's own
    assert all(_served_normally(a, "digits-small") for a in answers), Counter(
        (a.status, a.served_by, a.reason) for a in answers
        if not _served_normally(a, "digits-small"))
    tiers = Counter(a.labels["cache"] for a in answers)
    assert tiers["bypass"] >= 5 and tiers["miss"] >= 10 and tiers["memory"] >= 1, tiers
    assert set(tiers) <= {"miss", "bypass", "memory", "redis"}, tiers
    in_flight = 8  # workers: requests sent before the stop but looked up after it
    assert all(a.labels["cache"] != "bypass" for a in answers if a.seq < stopped_at - in_flight)
    assert _status(http)["cache"]["redis_available"] is True


# -- a corrupt new model version ------------------------------------------------------------

def test_corrupt_new_version_under_load_leaves_old_version_serving(app, http):
    repo, name = app.repo, "faults-corrupt"
    shutil.copytree(repo / "iris-mlp1x16", repo / name, ignore=shutil.ignore_patterns("2*"))
    cfg = (repo / name / "config.yaml").read_text().replace("name: iris-mlp1x16", f"name: {name}")
    (repo / name / "config.yaml").write_text(cfg)
    app.wait_for(lambda: _served_normally(_infer(http, name, "features", iris_rows(1)), name),
                 60, "new model picked up")

    def make(i: int) -> Request:
        x = iris_rows(1)
        x[0, 1] += (i % 10) * 0.1
        return f"/v2/models/{name}/infer", v2_body("features", x, cache_skip_read=True)

    def v2_failed() -> bool:
        rows = http.post("/v2/repository/index", headers={"X-API-Key": API_KEY}).json()
        return any(r["name"] == name and r["version"] == "2" and r["state"] == "FAILED"
                   for r in rows)

    with Load(app.url, make, workers=8) as load:
        app.wait_for(lambda: len(load.snapshot()) >= 10, 60, "load started")
        incoming = repo / name / ".incoming"
        incoming.mkdir()
        (incoming / "model.pt").write_bytes(b"\x00 not a torchscript archive " * 64)
        incoming.rename(repo / name / "2")
        app.wait_for(v2_failed, 60, "corrupt version 2 reported FAILED")
        reported_at = load.mark()
        app.wait_for(lambda: len([a for a in load.snapshot() if a.seq >= reported_at]) >= 20,
                     60, "load after the failure")
    answers = load.assert_none_lost()
    assert all(_served_normally(a, name, "1") for a in answers), Counter(
        (a.status, a.served_by, a.reason) for a in answers if not _served_normally(a, name, "1"))
    r = http.post(f"/v2/models/{name}/versions/2/infer", json=v2_body("features", iris_rows(1)))
    assert r.status_code == 404 and r.json()["field"] == "version"


# -- caller quotas over HTTP ----------------------------------------------------------------

def test_caller_over_its_rate_gets_429_while_others_are_served(app):
    """conftest gives caller ``faults-quota`` a 0.5/s rate with a burst of 2; others unlimited."""
    x = iris_rows(1)

    def make(caller: str) -> Callable[[int], Request]:
        return lambda i: ("/v2/models/iris-mlp1x16/infer",
                          v2_body("features", x, caller=caller, cache_skip_read=True))

    with Load(app.url, make("faults-quota"), workers=8, limit=24) as greedy, \
            Load(app.url, make("faults-other"), workers=4, limit=24) as other:
        greedy.join()
        other.join()
    limited = greedy.assert_none_lost()
    statuses = Counter(a.status for a in limited)
    assert set(statuses) == {200, 429} and statuses[200] >= 1 and statuses[429] >= 12, statuses
    rejected = [a for a in limited if a.status == 429]
    assert all(a.labels["field"] == "caller" and "rate limit" in a.labels["error"]
               for a in rejected)
    assert all(_served_normally(a, "iris-mlp1x16") for a in other.assert_none_lost())
