"""The open-loop runner with in-process targets (no network)."""

from __future__ import annotations

import asyncio
import io
import time

from deploy.loadtest import CallableTarget, LoadRequest, LoadTestConfig, Outcome, run_loadtest
from deploy.loadtest._private.plan import build_plan
from deploy.loadtest._private.progress import progress_bar, render
from deploy.loadtest._private.runner import RunProgress, run_open_loop


def cfg(**over: object) -> LoadTestConfig:
    raw = {
        "target": {"url": "http://unused"},
        "models": [{"name": "m"}],
        "inputs": [{"name": "x", "shape": [1, 2]}],
        "arrival": {"process": "constant", "rate": 200},
        "duration_s": 0.5,
        "warmup_s": 0.1,
        "stability": {"window_s": 0.1, "windows": 3, "tolerance": 0.9},
    }
    raw.update(over)
    return LoadTestConfig.model_validate(raw)


async def test_every_planned_request_is_sent_once_without_waiting_for_answers() -> None:
    c = cfg()
    plan = build_plan(c, 200)
    seen: list[str] = []
    in_flight = 0
    peak = 0

    took: dict[str, float] = {}

    async def slow(req: LoadRequest) -> Outcome:
        nonlocal in_flight, peak
        seen.append(req.request_id)
        in_flight += 1
        peak = max(peak, in_flight)
        t0 = time.perf_counter()  # the runner's clock
        await asyncio.sleep(0.2)  # 40 planned sends fall inside one answer
        took[req.request_id] = time.perf_counter() - t0
        in_flight -= 1
        return Outcome(status=200)

    samples = await run_open_loop(CallableTarget(slow), plan)
    assert sorted(seen) == sorted(p.request.request_id for p in plan)
    assert [s.request_id for s in samples] == [p.request.request_id for p in plan]
    assert peak > 10  # open loop: later sends did not wait for earlier answers
    # a sample's latency encloses its answer's own time (a relation, not a wall-clock bound)
    assert all(s.latency_s >= took[s.request_id] for s in samples)


async def test_exceptions_become_error_classes() -> None:
    async def boom(req: LoadRequest) -> Outcome:
        raise TimeoutError("slow")

    result = await run_loadtest(cfg(), CallableTarget(boom), progress=False)
    run = result.runs[0]
    assert run["errors"]["by_class"] == {"TimeoutError": run["planned"]}
    assert result.ok is False


async def test_generator_that_falls_behind_says_so() -> None:
    async def hog(req: LoadRequest) -> Outcome:
        time.sleep(0.02)  # noqa: ASYNC251 - blocks the loop on purpose: 200 rps x 20 ms
        return Outcome(status=200)

    err = io.StringIO()
    result = await run_loadtest(cfg(), CallableTarget(hog), progress=False, stream=err)
    assert result.runs[0]["generator"]["behind"] is True
    assert "load generator fell behind at 200 rps" in err.getvalue()


async def test_max_in_flight_bounds_outstanding_requests() -> None:
    gate = asyncio.Event()

    async def held(req: LoadRequest) -> Outcome:
        await gate.wait()
        return Outcome(status=200)

    plan = build_plan(cfg(), 200)
    task = asyncio.create_task(run_open_loop(CallableTarget(held), plan, max_in_flight=5))
    await asyncio.sleep(0.7)  # the whole plan (0.6 s) has been due by now
    gate.set()
    samples = await task
    errors = [s.outcome.error for s in samples]
    assert errors.count(None) == 5
    assert errors.count("generator_overload") == len(plan) - 5


async def test_progress_bar_draws_only_when_enabled() -> None:
    p = RunProgress(total=10, sent=5, in_flight=2, started_at=0.0)
    assert "50%" in render(p, label="20 rps", now=1.0) and "sent 5/10" in render(p, label="x",
                                                                                  now=1.0)
    quiet, loud = io.StringIO(), io.StringIO()
    async with progress_bar(p, label="q", stream=quiet):  # StringIO is not a TTY
        await asyncio.sleep(0)
    async with progress_bar(p, label="l", stream=loud, enabled=True):
        await asyncio.sleep(0)
    assert quiet.getvalue() == "" and "sent 5/10" in loud.getvalue()
