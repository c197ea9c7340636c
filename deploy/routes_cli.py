"""``timeshare routes retrain|calibrate``: train the predictive router, calibrate a threshold.

Commands over ``router.route_training`` (kept out of ``router/`` so the library never imports
its command line); each returns an exit code and prints one JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from deploy.text_routes_cli import add_text_args, text_calibrate, text_retrain
from router.route_training import (
    calibrate_route,
    needs_expensive,
    read_outcomes,
    route_scores,
    save_scorer,
    train_scorer,
)
from router.routes import build_strategy, load_routes, write_threshold

__all__ = ["calibrate_main", "retrain_main"]

Loader = Callable[[Path, str], Callable[[np.ndarray], np.ndarray]]


def _torch_loader(repo: Path, name: str) -> Callable[[np.ndarray], np.ndarray]:
    """Load ``<repo>/<name>/<latest version>/model.pt`` (TorchScript) as a numpy function."""
    import torch

    versions = sorted((p for p in (repo / name).iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name)) if (repo / name).is_dir() else []
    if not versions or not (versions[-1] / "model.pt").exists():
        raise ValueError(f"model {name!r}: no <version>/model.pt under {repo / name}")
    module = torch.jit.load(str(versions[-1] / "model.pt"), map_location="cpu").eval()

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()

    return run


def _calib_data(args: argparse.Namespace, input_name: str) -> tuple[np.ndarray, np.ndarray]:
    if args.data:
        with np.load(args.data) as z:
            return z[input_name], z["labels"]
    from deploy.demo_data import load_splits

    s = load_splits(args.dataset)
    return s.calib_x, s.calib_y


def _calibrate_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="timeshare routes calibrate")
    ap.add_argument("--route", required=True)
    ap.add_argument("--routes", default="deploy/routes.yaml", help="routes YAML file")
    ap.add_argument("--repo", default="var/model_repository", help="model repository")
    ap.add_argument("--target-expensive-share", type=float, default=None)
    ap.add_argument("--target-accuracy", type=float, default=None)
    ap.add_argument("--dataset", default="digits", help="bundled dataset (calibration split)")
    ap.add_argument("--data", default=None, help=".npz with the input array and 'labels'")
    ap.add_argument("--input", default="pixels", help="input tensor name")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write the file")
    ap.add_argument("--outcomes", default=None,
                    help="text route: calibrate on this outcome log's held-out part")
    ap.add_argument("--target-quality-fraction", type=float, default=None,
                    help="text route: reach this fraction of the expensive model's quality")
    add_text_args(ap)
    return ap


def calibrate_main(argv: Sequence[str] | None = None, *, loader: Loader = _torch_loader) -> int:
    """``timeshare routes calibrate --route NAME --target-expensive-share S
    [--target-accuracy A] [--routes FILE] [--repo DIR] [--dataset NAME | --data FILE.npz]``.

    Scores the calibration split, picks the threshold and writes it into the routes file.
    ``--data`` is an .npz holding the route's input array (by input name) and ``labels``.
    """
    ap = _calibrate_parser()
    args = ap.parse_args(argv)
    if args.outcomes:
        if (args.target_expensive_share is None) == (args.target_quality_fraction is None):
            ap.error("with --outcomes give one of --target-expensive-share, "
                     "--target-quality-fraction")
        return text_calibrate(args)
    if args.target_expensive_share is None and args.target_accuracy is None:
        ap.error("give --target-expensive-share and/or --target-accuracy")
    try:
        routes = load_routes(Path(args.routes))
        if args.route not in routes:
            raise ValueError(f"--route {args.route!r} not in {args.routes}; have {sorted(routes)}")
        cfg = routes[args.route]
        if cfg.strategy not in ("cascade", "predictive"):
            raise ValueError(f"route {cfg.name!r} uses {cfg.strategy!r}; only cascade and "
                             "predictive routes have a threshold")
        strategy = build_strategy(cfg, base_dir=Path(args.routes).parent)
        x, y = _calib_data(args, args.input)
        repo = Path(args.repo)
        cheap = loader(repo, cfg.cheap or "")(x)
        exp = loader(repo, cfg.expensive or "")(x)
        scores = route_scores(strategy, {args.input: x}, cheap)
        cal = calibrate_route(scores, cheap_correct=cheap.argmax(1) == y,
                              expensive_correct=exp.argmax(1) == y,
                              target_share=args.target_expensive_share,
                              target_accuracy=args.target_accuracy)
    except (ValueError, OSError) as e:
        print(f"timeshare routes calibrate: {e}", file=sys.stderr)
        return 2
    if not args.dry_run and cal.met:
        write_threshold(args.routes, cfg.name, cal.threshold)
    print(json.dumps({
        "route": cfg.name, "threshold": cal.threshold, "calibration_share": cal.share,
        "calibration_accuracy": cal.accuracy,
        "cheap_accuracy": float((cheap.argmax(1) == y).mean()),
        "expensive_accuracy": float((exp.argmax(1) == y).mean()), "met": cal.met, "n": cal.n,
        "written": bool(not args.dry_run and cal.met), "routes_file": args.routes,
    }))
    return 0 if cal.met else 1


def retrain_main(argv: Sequence[str] | None = None) -> int:
    """``timeshare routes retrain --route NAME --log OUTCOMES.jsonl [--routes FILE]
    [--out SCORER.safetensors] [--uses-cheap] [--c 1.0]``, or for a text route
    ``--outcomes TEXT_OUTCOMES.jsonl`` (``deploy.text_routes_cli``).

    Trains the predictive scorer from the outcome log and writes it to ``--out`` (default: the
    route's ``predictive_model``). Recalibrate the threshold afterwards with
    ``timeshare routes calibrate``.
    """
    ap = argparse.ArgumentParser(prog="timeshare routes retrain")
    ap.add_argument("--route", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--log", help="tensor outcome log (JSON lines, see router.route_training)")
    src.add_argument("--outcomes", help="text outcome log (JSON lines, see router.text_routing)")
    add_text_args(ap, own=False)
    ap.add_argument("--routes", default="deploy/routes.yaml")
    ap.add_argument("--out", default=None)
    ap.add_argument("--uses-cheap", action="store_true",
                    help="also use the cheap model's confidence (scores after cheap runs)")
    ap.add_argument("--c", type=float, default=1.0, help="inverse L2 strength")
    args = ap.parse_args(argv)
    if args.outcomes:
        return text_retrain(args)
    try:
        out = args.out
        if out is None:
            cfg = load_routes(Path(args.routes)).get(args.route)
            if cfg is None or not cfg.predictive_model:
                raise ValueError(f"give --out, or set predictive_model for route {args.route!r} "
                                 f"in {args.routes}")
            out = str(Path(args.routes).parent / cfg.predictive_model)
        data = read_outcomes(args.log, route=args.route)
        scorer = train_scorer(data, uses_cheap=args.uses_cheap, c=args.c)
        save_scorer(scorer, out)
    except (ValueError, OSError) as e:
        print(f"timeshare routes retrain: {e}", file=sys.stderr)
        return 2
    need = needs_expensive(data.cheap_logits, data.expensive_logits, data.labels)
    print(json.dumps({"route": args.route, "rows": len(data), "needs_expensive": int(need.sum()),
                      "labelled": data.labels is not None, "features": int(scorer.weight.size),
                      "uses_cheap": scorer.uses_cheap, "out": out}))
    return 0

