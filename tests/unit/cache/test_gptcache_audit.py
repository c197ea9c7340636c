"""GPTCache, used safely (#18): the parts the semantic tier uses never unpickle or evaluate data
from disk or the network.

1. Statically: every GPTCache module a real store -> close -> reopen -> lookup cycle loads is
   scanned for unpickling, eval/exec of strings, unsafe YAML and process launches. The one hit,
   ``manager/data_manager.py``, holds the pickle-backed ``MapDataManager`` next to the
   ``SSDataManager`` we use: the test proves our stores are ``SSDataManager`` and that its code
   has no pickle. The pip-installing import helpers are covered by ``test_gptcache_no_pip``.
2. Dynamically: the same cycle runs in a fresh interpreter with ``pickle``'s loaders wrapped and
   an audit hook recording unpickling, ``marshal`` loads, ``eval``/``exec`` of non-module code
   and process launches; all must stay empty while the store is written, reopened from disk and
   searched.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RISKY = re.compile(r"\bpickle\b|\bdill\b|\bmarshal\b|(?<![.\w])eval\(|(?<![.\w])exec\(|"
                   r"yaml\.load\(|torch\.load\(|\bsubprocess\b|os\.system\(")
# module -> why a RISKY match in it is not reachable from the semantic tier
KNOWN = {
    "gptcache.manager.data_manager": "MapDataManager pickles; we use SSDataManager (checked)",
    "gptcache.utils.dependency_control": "pip helper; test_gptcache_no_pip proves it never runs",
}

_SCRIPT = r"""
import asyncio, json, pickle, sys
events = []
def hook(event, args):
    if event in ("pickle.find_class", "marshal.loads", "subprocess.Popen", "os.system",
                 "os.exec", "os.posix_spawn"):
        events.append([event, repr(args)[:120]])
    elif event == "exec" and getattr(args[0], "co_name", "") != "<module>":
        events.append([event, getattr(args[0], "co_name", repr(args[0]))[:120]])
    elif event == "compile" and args[1] in ("<string>", None):
        events.append([event, repr(args[0])[:120]])
for name in ("load", "loads", "Unpickler"):
    real = getattr(pickle, name)
    def spy(*a, _real=real, _name=name, **k):
        events.append(["pickle." + _name, ""])
        return _real(*a, **k)
    setattr(pickle, name, spy)

import numpy as np
from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.schemas import CacheControl
from tests.support.cache import BagOfWordsEmbedder

async def ask(cache, text, i):
    async def compute():
        return CachedAnswer(outputs={"y": np.array([i])}, served_by="m"), True
    _, outcome = await cache.get_or_compute(
        model="m", version="1", inputs={"x": np.array([i])}, text=text,
        policy=CacheConfig(mode="semantic", similarity_threshold=0.8),
        control=CacheControl(), compute=compute)
    await cache.drain()
    return outcome.tier

async def main(path):
    cache = ResultCache(CacheSettings(semantic_dir=path), embedder=BagOfWordsEmbedder())
    await ask(cache, "reset my account password now", 1)
    stores = [type(s).__name__ for s in cache._semantic._stores.values()]
    await cache.close()
    sys.addaudithook(hook)  # from here on: the reopen from disk and the lookup
    cache = ResultCache(CacheSettings(semantic_dir=path), embedder=BagOfWordsEmbedder())
    tier = await ask(cache, "reset my account password now please", 2)
    await cache.close()
    return stores, tier

stores, tier = asyncio.run(main(sys.argv[1]))
mods = sorted(m for m in sys.modules if m.startswith("gptcache"))
print(json.dumps({"stores": stores, "tier": tier, "events": events, "modules": mods}))
"""


def _cycle(tmp_path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "sem")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_no_unpickling_or_eval_while_storing_reopening_and_searching(tmp_path):
    result = _cycle(tmp_path)
    assert result["tier"] == "semantic"  # the entry really came back from disk
    assert result["stores"] == ["SSDataManager"]
    assert result["events"] == []
    _scan(result["modules"])


def _scan(modules: list[str]) -> None:
    import importlib

    assert "gptcache.adapter.api" not in modules  # yaml.load(init config) is never imported
    flagged = {}
    for name in modules:
        mod = importlib.import_module(name)
        path = getattr(mod, "__file__", None)
        if not path or not path.endswith(".py"):
            continue
        code = "\n".join(line.split("#")[0] for line in Path(path).read_text().splitlines())
        if RISKY.search(code):
            flagged[name] = sorted(set(RISKY.findall(code)))
    assert set(flagged) <= set(KNOWN), flagged
    from gptcache.manager.data_manager import SSDataManager

    assert "pickle" not in inspect.getsource(SSDataManager)
