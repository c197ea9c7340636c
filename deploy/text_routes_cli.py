"""Text routes on the command line: ``timeshare routes retrain|evaluate|calibrate --outcomes``.

- ``retrain --route R --outcomes F.jsonl``: trains the text scorer (``router.text_routing``:
  logistic regression on MiniLM embeddings, C=1, seed-0 split, 30 % held out) on the training
  part and writes it next to the routes file (the route's ``predictive_model``, else
  ``<route>.text-router.safetensors``).
- ``evaluate --route R --outcomes F.jsonl --json out.json [--plot curve.png]``: trains the same
  way (deterministic: the same scorer retrain writes) and reports RouteLLM's metrics on the
  held-out part for the trained and a random router.
- ``calibrate --route R --outcomes F.jsonl --target-expensive-share S |
  --target-quality-fraction Q``: picks the threshold on the held-out part and writes it into
  the routes file.

Every command prints one JSON object; errors (unknown route, malformed line naming
``file:line``, one class only) go to stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from router.routes import RouteConfig, load_routes, write_threshold
from router.text_routing import (
    Embed,
    TextOutcomes,
    calibrate_text_route,
    evaluate,
    read_text_outcomes,
    split_rows,
    text_scores,
    train_text_scorer,
)

__all__ = ["evaluate_main", "text_calibrate", "text_retrain"]


def _embedder() -> Embed:
    import torch

    from router.cache import MiniLMEmbedder

    torch.manual_seed(0)
    return MiniLMEmbedder.load().embed


def _route(routes_file: str, name: str) -> RouteConfig:
    routes = load_routes(Path(routes_file))
    if name not in routes:
        raise ValueError(f"--route {name!r} not in {routes_file}; have {sorted(routes)}")
    return routes[name]


def scorer_path(routes_file: str, cfg: RouteConfig) -> Path:
    """Where a route's text scorer lives: its ``predictive_model``, or next to the file."""
    return Path(routes_file).parent / (cfg.predictive_model
                                       or f"{cfg.name}.text-router.safetensors")


def _train(args: argparse.Namespace, embed: Embed) -> tuple[Any, TextOutcomes, TextOutcomes]:
    data = read_text_outcomes(args.outcomes, route=args.route)
    train, held = split_rows(len(data), held_out=args.held_out, seed=args.seed)
    tr, ho = data.take(train), data.take(held)
    for part, name in ((tr, "training"), (ho, "held-out")):
        y = part.cheap_suffices
        if y.all() or not y.any():
            raise ValueError(f"{args.outcomes}: the {name} split has one class only; "
                             "more lines are needed")
    scorer = train_text_scorer(tr, embed, use_inputs=args.use_inputs,
                               uses_cheap=args.uses_cheap, c=args.c)
    return scorer, tr, ho


def add_text_args(ap: argparse.ArgumentParser, *, own: bool = True) -> None:
    """Arguments every text command shares (``own=False``: the parser already has ``--c`` and
    ``--uses-cheap``, as ``retrain`` does)."""
    ap.add_argument("--held-out", type=float, default=0.3, help="held-out share (default 0.3)")
    ap.add_argument("--seed", type=int, default=0, help="split and random-router seed")
    ap.add_argument("--use-inputs", action="store_true",
                    help="text route: also score the lines' tensor 'inputs'")
    if own:
        ap.add_argument("--c", type=float, default=1.0, help="inverse L2 strength")
        ap.add_argument("--uses-cheap", action="store_true",
                        help="also score the cheap model's confidence ('cheap_logits')")


def text_retrain(args: argparse.Namespace, *, embed: Embed | None = None) -> int:
    """``retrain --outcomes``: see module doc."""
    from router.route_training import save_scorer

    try:
        cfg = _route(args.routes, args.route)
        scorer, tr, ho = _train(args, embed or _embedder())
        out = Path(args.out) if args.out else scorer_path(args.routes, cfg)
        save_scorer(scorer, out)
    except (ValueError, OSError) as e:
        print(f"timeshare routes retrain: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"route": cfg.name, "train_rows": len(tr), "held_out_rows": len(ho),
                      "features": int(scorer.weight.size), "inputs": list(scorer.input_names),
                      "out": str(out)}))
    return 0


def evaluate_main(argv: Sequence[str] | None = None, *, embed: Embed | None = None) -> int:
    """``timeshare routes evaluate --route R --outcomes F.jsonl [--json OUT] [--plot PNG]
    [--routes FILE]``."""
    ap = argparse.ArgumentParser(prog="timeshare routes evaluate")
    ap.add_argument("--route", required=True)
    ap.add_argument("--outcomes", required=True, help="outcome log (JSON lines)")
    ap.add_argument("--routes", default="deploy/routes.yaml", help="routes YAML file")
    ap.add_argument("--json", default=None, help="also write the report here")
    ap.add_argument("--plot", default=None, help="quality-vs-share curve as a PNG")
    add_text_args(ap)
    args = ap.parse_args(argv)
    try:
        cfg = _route(args.routes, args.route)
        emb = embed or _embedder()
        scorer, tr, ho = _train(args, emb)
        report = {"route": cfg.name, "outcomes": str(args.outcomes), "train_rows": len(tr),
                  "seed": args.seed, "held_out_share": args.held_out,
                  "model": f"logistic regression on MiniLM text embeddings (C={args.c:g}, "
                           "balanced)", **evaluate(scorer, ho, emb, seed=args.seed)}
    except (ValueError, OSError) as e:
        print(f"timeshare routes evaluate: {e}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    if args.plot:
        plot_curves(report, args.plot)
    print(text)
    return 0


def plot_curves(report: dict[str, Any], path: str) -> None:
    """The trained and random routers' quality vs expensive share, with both models' quality."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, style in (("trained", "-"), ("random", "--")):
        pts = report[name]["curve"]
        ax.plot([p["expensive_share"] for p in pts], [p["quality"] for p in pts], style,
                label=f"{name} (APGR {report[name]['apgr']:.2f}, "
                      f"CPT50 {report[name]['cpt50']:.2f})")
    for key, label in (("cheap_quality", "cheap only"), ("expensive_quality", "expensive only")):
        ax.axhline(report[key], color="grey", lw=0.8, ls=":")
        ax.text(0.6, report[key], label, va="bottom", fontsize=8, color="grey")
    ax.set_xlabel("share of queries sent to the expensive model")
    ax.set_ylabel("quality (share of acceptable answers)")
    ax.set_title(f"route {report['route']}: held-out {report['rows']} queries")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def text_calibrate(args: argparse.Namespace, *, embed: Embed | None = None) -> int:
    """``calibrate --outcomes``: see module doc."""
    try:
        cfg = _route(args.routes, args.route)
        emb = embed or _embedder()
        scorer, _, ho = _train(args, emb)
        scores = text_scores(scorer, ho, emb)
        cal = calibrate_text_route(scores, ho, target_share=args.target_expensive_share,
                                   target_quality_fraction=args.target_quality_fraction)
        if not args.dry_run and cal.met:
            write_threshold(args.routes, cfg.name, cal.threshold)
    except (ValueError, OSError) as e:
        print(f"timeshare routes calibrate: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"route": cfg.name, "threshold": cal.threshold, "held_out_share": cal.share,
                      "held_out_quality": cal.accuracy, "met": cal.met, "n": cal.n,
                      "written": bool(not args.dry_run and cal.met),
                      "routes_file": args.routes}))
    return 0 if cal.met else 1
