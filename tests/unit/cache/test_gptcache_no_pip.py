"""GPTCache imports-or-pip-installs optional backends at run time (``gptcache.utils``).

Everything the semantic tier makes it check must already be installed (pinned in pyproject), and
a real store/lookup cycle must never start a subprocess (pip). The second test runs the tier in a
fresh interpreter with an audit hook recording every process launch, instead of patching pip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# (module checked by gptcache.utils, pip name it would install) for our sqlite + faiss store.
NEEDED = [
    ("sqlalchemy", "sqlalchemy"),
    ("faiss", "faiss-cpu"),
    ("cachetools", "cachetools"),
    ("requests", "requests"),
    ("numpy", "numpy"),
]

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("module,package", NEEDED)
def test_backends_are_installed_and_pinned(module, package):
    from gptcache.utils import _check_library

    assert _check_library(module, prompt=False), f"{module} missing: gptcache would pip install"
    pyproject = (ROOT / "pyproject.toml").read_text()
    direct = {"sqlalchemy", "faiss-cpu", "numpy"}
    if package in direct:
        assert f'"{package}' in pyproject.lower(), f"{package} not pinned in pyproject.toml"


_HOOK = r"""
import json, sys
launches = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                 "os.fork", "os.forkpty"):
        launches.append([event, repr(args)[:200]])
sys.addaudithook(hook)
"""

_HELPERS = _HOOK + r"""
import gptcache.utils as gu

# The helpers our store construction reaches (sql_storage, faiss, sqlite client): each would
# call prompt_install -> pip if a module were missing.
for helper in (gu.import_sqlalchemy, gu.import_faiss, lambda: gu.import_sql_client("sqlite")):
    helper()
import gptcache.manager.eviction.memory_cache
import gptcache.manager.scalar_data.sql_storage
import gptcache.manager.vector_data.faiss
loaded = [m for m in ("sqlalchemy", "faiss", "gptcache.manager.vector_data.faiss",
                      "gptcache.manager.scalar_data.sql_storage") if m in sys.modules]
print(json.dumps({"loaded": loaded, "launches": launches}))
"""


def _run(script: str, *args: str) -> dict:
    """Run ``script`` in a fresh interpreter (its audit hook sees every process launch) and
    return the JSON of its last line."""
    proc = subprocess.run([sys.executable, "-c", script, *args], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_gptcache_helpers_for_our_backends_do_not_prompt():
    result = _run(_HELPERS)
    assert result["launches"] == []  # no pip, no process of any kind
    assert result["loaded"] == ["sqlalchemy", "faiss", "gptcache.manager.vector_data.faiss",
                                "gptcache.manager.scalar_data.sql_storage"]


_SCRIPT = _HOOK + r"""
import asyncio
import numpy as np
from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.schemas import CacheControl
from tests.support.cache import BagOfWordsEmbedder

async def main(path):
    cache = ResultCache(CacheSettings(semantic_dir=path), embedder=BagOfWordsEmbedder())
    tiers = []
    for i, text in enumerate(["reset my account password now", "reset my account password"]):
        async def compute():
            return CachedAnswer(outputs={"y": np.array([i])}, served_by="m"), True
        _, outcome = await cache.get_or_compute(
            model="m", version="1", inputs={"x": np.array([i])}, text=text,
            policy=CacheConfig(mode="semantic", similarity_threshold=0.8),
            control=CacheControl(), compute=compute)
        await cache.drain()
        tiers.append(outcome.tier)
    await cache.close()
    return tiers

tiers = asyncio.run(main(sys.argv[1]))
print(json.dumps({"tiers": tiers, "launches": launches}))
"""


def test_semantic_tier_never_launches_a_process(tmp_path):
    result = _run(_SCRIPT, str(tmp_path / "sem"))
    assert result["tiers"] == ["miss", "semantic"]  # the store really was used
    assert result["launches"] == []
