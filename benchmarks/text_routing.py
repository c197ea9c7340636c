"""Cost of a text route's decision: the MiniLM embedding, and the router itself without it.

``python -m benchmarks.text_routing --json out.json [--quick]``

Loads the shipped text route (``deploy/text_routes.yaml``, scorer
``deploy/assistant-text.text-router.safetensors``, trained by ``timeshare routes retrain``) and,
over the texts of ``deploy/data/text_outcomes.jsonl``, one request at a time:

- ``embedding``: ``MiniLMEmbedder.embed([text])`` (the one embedding a request pays; the
  semantic cache reuses it through ``SharedEmbedder``);
- ``router_excluding_embedding``: building the scorer's inputs from the embedding and
  ``strategy.plan(...)`` (standardise, dot product, sigmoid, threshold rule, plan object);
- baseline side by side: a ``static`` route's ``plan`` (the least any route costs) and the
  digits ``cascade``'s confidence rule on a 10-class logit row.

Target (#18): router cost excluding the embedding, p99 <= 1 ms.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from benchmarks._output import emit
from policies.routing import TEXT_FEATURE, RouteRequest, make_strategy
from router.routes import build_strategy, load_routes

ROOT = Path(__file__).resolve().parents[1]


def _pct(samples_s: list[float]) -> dict[str, float]:
    a = np.asarray(samples_s) * 1e3
    return {"p50_ms": round(float(np.percentile(a, 50)), 4),
            "p99_ms": round(float(np.percentile(a, 99)), 4), "n": int(a.size)}


def _time(fn: Callable[[int], object], n: int) -> list[float]:
    for i in range(min(50, n)):
        fn(i)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the JSON object to this file")
    ap.add_argument("--n", type=int, default=5000, help="router decisions timed")
    ap.add_argument("--embed-n", type=int, default=300, help="embeddings timed")
    ap.add_argument("--quick", action="store_true", help="smoke test: few samples")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.embed_n = 500, 30
    torch.set_num_threads(1)
    from router.cache import MiniLMEmbedder
    from router.text_routing import read_text_outcomes

    routes_file = ROOT / "deploy" / "text_routes.yaml"
    cfg = load_routes(routes_file)["assistant-text"]
    strategy = build_strategy(cfg, base_dir=routes_file.parent)
    data = read_text_outcomes(ROOT / "deploy" / "data" / "text_outcomes.jsonl",
                              route="assistant-text")
    texts = list(data.texts)
    minilm = MiniLMEmbedder.load()
    embed = _pct(_time(lambda i: minilm.embed([texts[i % len(texts)]]), args.embed_n))
    vecs = minilm.embed(texts[:256])
    decisions: dict[str, int] = {}

    def route(i: int) -> None:
        vec = vecs[i % len(vecs)]
        plan = strategy.plan(RouteRequest(inputs={TEXT_FEATURE: vec[None, :].astype(np.float64)}))
        decisions[plan.decision] = decisions.get(plan.decision, 0) + 1

    router = _pct(_time(route, args.n))
    static = make_strategy("static", expensive="assistant-large")
    base_static = _pct(_time(lambda i: static.plan(RouteRequest(inputs={})), args.n))
    cascade = make_strategy("cascade", cheap="digits-small", expensive="digits-large")
    logits = np.random.default_rng(0).normal(size=(256, 10))
    base_cascade = _pct(_time(lambda i: cascade.after_cheap(logits[i % 256][None, :]), args.n))
    targets = {"router_excluding_embedding_p99_under_1ms": router["p99_ms"] <= 1.0}
    result = {
        "benchmark": "text_routing",
        "route": cfg.name,
        "scorer": {"features": list(strategy.scorer.input_names),  # type: ignore[attr-defined]
                   "dimension": int(strategy.scorer.weight.size)},  # type: ignore[attr-defined]
        "embedding": embed,
        "router_excluding_embedding": router,
        "baseline_static_route_plan": base_static,
        "baseline_cascade_confidence_rule": base_cascade,
        "router_vs_static_p50": round(router["p50_ms"] / base_static["p50_ms"], 2),
        "embedding_vs_router_p50": round(embed["p50_ms"] / router["p50_ms"], 1),
        "decisions": decisions,
        "targets": targets,
        "env": {"python": platform.python_version(), "torch": torch.__version__,
                "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                "loadavg_1m": round(os.getloadavg()[0], 2)},
        "note": "in-process, one request at a time; the embedding is paid once per request "
                "and shared with the semantic cache (SharedEmbedder)",
    }
    result["meets_targets"] = all(targets.values())
    return emit(result, args.json)


if __name__ == "__main__":
    main()
