"""Routing quality on the held-out digits split: cheap-only, expensive-only, cascade, predictive.

``python -m benchmarks.routing --json out.json [--repo PATH] [--target-share 0.3]``

Builds ``digits-small`` / ``digits-large`` into a temporary repository when ``--repo`` lacks them,
loads them with ``torch.jit.load`` in-process and, on the fixed splits of ``deploy.demo_data``:

- thresholds are calibrated on the *calibration* split only,
- the predictive scorer is trained from an outcome log (both models ran) over train+calib,
  written and read back through ``router.route_training`` exactly as ``timeshare routes retrain``
  does,
- everything is reported on the *test* split, with the decisions taken through the strategies'
  own ``plan`` / ``after_cheap`` calls, one request at a time.

Per router: accuracy, share of requests reaching digits-large, APGR (area under the
performance-gap-recovered curve over the escalation share), PGR per expensive share at the
operating point, the share of expensive calls needed to reach 95% / 100% of digits-large's
accuracy, and RouteLLM's CPT(50/80/95%) (share needed to recover that fraction of the gap).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._output import emit
from deploy.demo import build_demo_repository
from deploy.demo_data import load_splits
from policies.calibration import (
    apgr,
    gap_share_to_reach,
    share_to_reach,
    threshold_for_accuracy,
    tradeoff_curve,
)
from policies.routing import PlanKind, RouteRequest, RouteStrategy, make_strategy
from router.route_training import (
    calibrate_route,
    outcome_line,
    read_outcomes,
    route_scores,
    train_scorer,
)

CHEAP, EXPENSIVE = "digits-small", "digits-large"


def _ensure_models(repo: Path) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    missing = [m for m in (CHEAP, EXPENSIVE) if not (repo / m / "1" / "model.pt").exists()]
    if missing:
        build_demo_repository(repo, only=missing)
    fns = {}
    for name in (CHEAP, EXPENSIVE):
        module = torch.jit.load(str(repo / name / "1" / "model.pt"), map_location="cpu").eval()

        fns[name] = _runner(module)
    return fns


def _runner(m: torch.jit.ScriptModule) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return m(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()

    return run


def _ms_per_request(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> float:
    for row in x[:20]:
        fn(row[None])
    t0 = time.perf_counter()
    for row in x[:200]:
        fn(row[None])
    return (time.perf_counter() - t0) / min(len(x), 200) * 1e3


def _execute(strategy: RouteStrategy, x: np.ndarray, cheap: np.ndarray, exp: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Run each test request through plan()/after_cheap() as the router would.

    Returns (final predictions, reached-expensive mask). Logits are precomputed per row; the
    strategy only ever sees what the router would hand it at that point.
    """
    preds, reached = np.empty(len(x), np.int64), np.zeros(len(x), bool)
    for i in range(len(x)):
        req = RouteRequest({"pixels": x[i:i + 1]})
        plan = strategy.plan(req)
        if plan.kind is PlanKind.SINGLE:
            out = exp[i] if plan.first == EXPENSIVE else cheap[i]
            reached[i] = plan.first == EXPENSIVE
        elif plan.kind is PlanKind.CASCADE:
            verdict = strategy.after_cheap(cheap[i:i + 1], req)
            reached[i] = verdict.escalate
            out = exp[i] if verdict.escalate else cheap[i]
        else:  # REFINE: the final answer is the expensive one
            out, reached[i] = exp[i], True
        preds[i] = int(np.argmax(out))
    return preds, reached


def _report(name: str, strategy: RouteStrategy, x: np.ndarray, y: np.ndarray, cheap: np.ndarray,
            exp: np.ndarray, cheap_acc: float, exp_acc: float) -> dict[str, Any]:
    preds, reached = _execute(strategy, x, cheap, exp)
    acc = float((preds == y).mean())
    share = float(reached.mean())
    row: dict[str, Any] = {"accuracy": round(acc, 4), "expensive_share": round(share, 4),
                           "threshold": strategy.threshold}
    if strategy.name in ("cascade", "predictive"):
        scores = route_scores(strategy, {"pixels": x}, cheap)
        curve = tradeoff_curve(scores, cheap.argmax(1) == y, exp.argmax(1) == y)
        gap = exp_acc - cheap_acc
        row.update({
            "apgr": round(apgr(curve, cheap_acc, exp_acc), 4),
            "pgr_at_operating_point": round((acc - cheap_acc) / gap, 4),
            "pgr_per_expensive_share": round((acc - cheap_acc) / gap / share, 4) if share else None,
            "share_to_95pct_of_expensive_accuracy": share_to_reach(curve, 0.95 * exp_acc),
            "share_to_100pct_of_expensive_accuracy": share_to_reach(curve, exp_acc),
            **{f"cpt{int(f * 100)}": gap_share_to_reach(curve, cheap_acc, exp_acc, f)
               for f in (0.5, 0.8, 0.95)},
        })
    return {name: row}


def _logits(models: dict[str, Callable[[np.ndarray], np.ndarray]], s: Any
            ) -> dict[str, dict[str, np.ndarray]]:
    """Both models' logits on every split, computed once."""
    return {split: {m: models[m](getattr(s, f"{split}_x")) for m in models}
            for split in ("train", "calib", "test")}


def _cascade_routers(lg: dict[str, dict[str, np.ndarray]], cx: np.ndarray, cy: np.ndarray,
                     target_share: float, args: tuple) -> dict[str, Any]:
    """The cascades, calibrated on the calibration split: to ``target_share`` on max-softmax and
    on margin, and to the expensive model's calibration accuracy with the share capped."""
    routers: dict[str, Any] = {}
    for measure in ("max_softmax", "margin"):
        probe = make_strategy("cascade", cheap=CHEAP, expensive=EXPENSIVE, confidence=measure)
        cal = calibrate_route(route_scores(probe, {"pixels": cx}, lg["calib"][CHEAP]),
                              target_share=target_share)
        name = "cascade" if measure == "max_softmax" else "cascade-margin"
        routers |= _report(name, make_strategy("cascade", cheap=CHEAP, expensive=EXPENSIVE,
                                                threshold=cal.threshold, confidence=measure),
                           *args)
        routers[name]["calibration_share"] = cal.share
    # cascade calibrated to the expensive model's calibration accuracy, share capped
    calib_c, calib_e = lg["calib"][CHEAP].argmax(1) == cy, lg["calib"][EXPENSIVE].argmax(1) == cy
    probe = make_strategy("cascade", cheap=CHEAP, expensive=EXPENSIVE)
    cal = threshold_for_accuracy(route_scores(probe, {"pixels": cx}, lg["calib"][CHEAP]),
                                 calib_c, calib_e, float(calib_e.mean()), max_share=target_share)
    routers |= _report("cascade-accuracy-target", make_strategy(
        "cascade", cheap=CHEAP, expensive=EXPENSIVE, threshold=cal.threshold), *args)
    routers["cascade-accuracy-target"]["calibration_share"] = cal.share
    return routers


def _outcomes(s: Any, lg: dict[str, dict[str, np.ndarray]]) -> Any:
    """The outcome log over train+calib (both models ran), written and read back through the
    real log format, as ``timeshare routes retrain`` reads it."""
    with tempfile.TemporaryDirectory(prefix="timeshare-outcomes-") as d:
        log = Path(d) / "outcomes.jsonl"
        with log.open("w") as f:
            for split, y in (("train", s.train_y), ("calib", s.calib_y)):
                x = getattr(s, f"{split}_x")
                for i in range(0, len(x), 16):
                    f.write(outcome_line("digits", {"pixels": x[i:i + 16]},
                                         lg[split][CHEAP][i:i + 16],
                                         lg[split][EXPENSIVE][i:i + 16],
                                         labels=y[i:i + 16].tolist()) + "\n")
        return read_outcomes(log, route="digits")


def _predictive_routers(outcomes: Any, calib_cheap: np.ndarray, cx: np.ndarray,
                        target_share: float, args: tuple) -> dict[str, Any]:
    """The predictive scorers (without and with the cheap model's features), trained on the
    outcome log and calibrated to ``target_share``."""
    routers: dict[str, Any] = {}
    for uses_cheap, name in ((False, "predictive"), (True, "predictive-with-cheap-features")):
        scorer = train_scorer(outcomes, uses_cheap=uses_cheap, c=0.1)
        probe = make_strategy("predictive", cheap=CHEAP, expensive=EXPENSIVE, scorer=scorer)
        cal = calibrate_route(route_scores(probe, {"pixels": cx}, calib_cheap),
                              target_share=target_share)
        routers |= _report(name, make_strategy("predictive", cheap=CHEAP, expensive=EXPENSIVE,
                                                scorer=scorer, threshold=cal.threshold), *args)
        routers[name]["calibration_share"] = cal.share
    return routers


def _split_sizes(s: Any, outcomes: Any) -> dict[str, int]:
    return {"train": len(s.train_y), "calib": len(s.calib_y), "test": len(s.test_y),
            "outcome_rows": len(outcomes),
            "outcome_rows_needing_expensive": int(
                ((outcomes.cheap_logits.argmax(1) != outcomes.labels)
                 & (outcomes.expensive_logits.argmax(1) == outcomes.labels)).sum())}


def _target(casc: dict[str, Any], exp_acc: float, target_share: float) -> dict[str, Any]:
    """The cascade's target: within 0.3 points of the expensive model, share capped."""
    within = exp_acc - casc["accuracy"] <= 0.003 + 1e-9
    escalated_ok = casc["expensive_share"] <= target_share + 1e-9
    return {
        "rule": f"cascade within 0.3 points of {EXPENSIVE} "
                f"with <= {target_share:.0%} escalated",
        "accuracy_gap_points": round((exp_acc - casc["accuracy"]) * 100, 2) + 0.0,
        "within_0.3_points": within, "escalated_within_share": escalated_ok,
        "met": within and escalated_ok,
    }


def run(repo: Path | None, target_share: float, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    tmp = None
    if repo is None:
        tmp = tempfile.TemporaryDirectory(prefix="timeshare-routing-")
        repo = Path(tmp.name)
    models = _ensure_models(repo)
    torch.set_num_threads(1)  # per-request latency on a shared box: no intra-op oversubscription
    s = load_splits("digits", seed)
    lg = _logits(models, s)
    cx, tx, ty = s.calib_x, s.test_x, s.test_y
    test_cheap, test_exp = lg["test"][CHEAP], lg["test"][EXPENSIVE]
    cheap_acc = float((test_cheap.argmax(1) == ty).mean())
    exp_acc = float((test_exp.argmax(1) == ty).mean())

    routers: dict[str, Any] = {}
    args = (tx, ty, test_cheap, test_exp, cheap_acc, exp_acc)
    routers |= _report("cheap-only", make_strategy("static", cheap=CHEAP, use="cheap"), *args)
    routers |= _report("expensive-only", make_strategy("static", expensive=EXPENSIVE), *args)
    routers |= _cascade_routers(lg, cx, s.calib_y, target_share, args)
    outcomes = _outcomes(s, lg)
    routers |= _predictive_routers(outcomes, lg["calib"][CHEAP], cx, target_share, args)
    rng = np.random.default_rng(seed)
    random_curve = tradeoff_curve(rng.uniform(size=len(ty)), test_cheap.argmax(1) == ty,
                                  test_exp.argmax(1) == ty)

    casc = routers["cascade"]
    ms_cheap = _ms_per_request(models[CHEAP], tx)
    ms_exp = _ms_per_request(models[EXPENSIVE], tx)
    result = {
        "benchmark": "routing",
        "split": _split_sizes(s, outcomes),
        "models": {CHEAP: {"test_accuracy": round(cheap_acc, 4),
                           "ms_per_request": round(ms_cheap, 4)},
                   EXPENSIVE: {"test_accuracy": round(exp_acc, 4),
                               "ms_per_request": round(ms_exp, 4)}},
        "routers": routers,
        "random_router_apgr": round(apgr(random_curve, cheap_acc, exp_acc), 4),
        "cascade_compute_vs_expensive_only": round(
            (ms_cheap + casc["expensive_share"] * ms_exp) / ms_exp, 4),
        "target": _target(casc, exp_acc, target_share),
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    if tmp is not None:
        tmp.cleanup()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.routing", description=__doc__)
    ap.add_argument("--json", required=True, help="write the JSON result here too")
    ap.add_argument("--repo", type=Path, default=None,
                    help="model repository (digits-small/large built into it when missing)")
    ap.add_argument("--target-share", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    result = run(args.repo, args.target_share, args.seed)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
