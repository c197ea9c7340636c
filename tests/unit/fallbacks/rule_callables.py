"""Functions that the rule tests name by import path."""

from __future__ import annotations

import asyncio
import threading

release = threading.Event()


def answer(request):
    return {"label": [7]} if request.text == "seven" else None


def hang(request):
    release.wait(5.0)  # held until the test releases it; bounded so no thread outlives the run
    return {"label": [1]}


async def slow_async(request):
    await asyncio.sleep(5.0)
    return {"label": [1]}


def boom(request):
    raise RuntimeError("rule bug")


def bad_output(request):
    return "not a mapping"


NOT_CALLABLE = 3
