"""The request's walk (issue 38): the object types one cache-bypassed v2 infer request crosses,
from the body to the answer, are exactly the ones the README's "A request's walk" names, each
once. A new type on the path fails here until the README names it (and someone asks whether it
must exist), so the count cannot grow back silently.

What is counted: every object of the project's packages built through a Python constructor
while the request runs (``tests/support/type_walk.py``), on the real ingress's ASGI app over an
in-process CPU pool (the default layout on a machine without a GPU: no Ray hop), in three
requests; a type seen in only some of them is a background task's, not the request's. Each
request comes more than ``PoolLoads.live_every_s`` after the one before, so it finds the CPU
pool's last load reading stale and reads the queues itself, as a request does in production
whenever the last reading is older (at most every 5 ms; ``router/pool_load.py``).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from router.pool_load import PoolLoads
from tests.support.type_walk import constructed

pytestmark = pytest.mark.asyncio(loop_scope="package")

LIVE_EVERY_S = PoolLoads().live_every_s
README = Path(__file__).resolve().parents[3] / "README.md"
PACKAGES = frozenset({"router", "fallbacks", "pool", "policies", "common", "alerting",
                      "deploy", "formats"})
BODY = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                    "data": np.linspace(-1, 1, 64).round(3).tolist()}],
        "parameters": {"cache_skip_read": True, "cache_skip_write": True}}


def readme_walk() -> list[str]:
    """The type names in the README's walk: the backquoted ``module.Type`` of each list item."""
    text = README.read_text()
    section = text.split("<!-- request-walk -->", 2)
    assert len(section) == 3, "README.md: no <!-- request-walk --> section"
    return re.findall(r"^\s*\d+\.\s+`([\w.]+)`", section[1], flags=re.M)


async def _walk(client) -> list[str]:
    await asyncio.sleep(LIVE_EVERY_S * 1.5)  # the pool's last load reading is now stale
    with constructed(PACKAGES) as names:
        r = await asyncio.create_task(client.post("/v2/models/digits-small/infer", json=BODY))
    assert r.status_code == 200, r.text
    assert r.json()["parameters"]["cache"] in ("bypass", "off")  # computed, not a hit
    return names


async def test_a_request_crosses_exactly_the_types_the_readme_walk_names(client):
    await _walk(client)  # warm: first calls build lazily
    runs = [await _walk(client) for _ in range(3)]
    always = [n for n in runs[0] if all(n in r for r in runs[1:])]
    named = readme_walk()
    assert len(named) == len(set(named)), f"README names a type twice: {named}"
    assert always == named, (
        f"the request crosses {len(always)} types, the README's walk names {len(named)}:\n"
        f"  not in the README: {[n for n in always if n not in named]}\n"
        f"  no longer crossed: {[n for n in named if n not in always]}\n"
        f"  crossed, in order: {always}")
