"""``timeshare alerts test --severity P1 --env prod [--config PATH]``.

Sends one test notification through the configured route and prints what each channel
answered. Exit status: 0 all channels accepted it, 1 some failed (or no channel was reached),
2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TextIO

from alerting.alerter import Alerter
from alerting.config import load_config
from alerting.events import ENVIRONMENTS, Severity

__all__ = ["alerts_test"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="timeshare alerts test",
        description="Send a test notification through the configured alert route.",
    )
    p.add_argument("--severity", required=True, type=str.upper, choices=[s.value for s in Severity])
    p.add_argument(
        "--env", required=True, choices=ENVIRONMENTS, help="environment whose overlay to use"
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML with the alerting config (a top-level 'alerting:' key is unwrapped); "
        "default deploy/env/<env>.yaml",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the channels")
    p.add_argument("--json", action="store_true", help="print the answers as one JSON object")
    return p


def alerts_test(argv: list[str], *, out: TextIO | None = None) -> int:
    """Entry point for ``timeshare alerts test``; returns the exit status."""
    out = out or sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage error
        return int(e.code or 0) and 2
    path = args.config or Path("deploy/env") / f"{args.env}.yaml"
    try:
        cfg = load_config(path.read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot load alerting config from {path}: {e}", file=sys.stderr)
        return 2
    if cfg.environment != args.env:
        print(
            f"error: {path} configures environment {cfg.environment!r}, not {args.env!r}",
            file=sys.stderr,
        )
        return 2
    try:
        results = asyncio.run(_send(cfg, args.severity, args.timeout))
    except ValueError as e:  # e.g. a secret's environment variable is unset
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {
                    "severity": args.severity,
                    "env": args.env,
                    "channels": [
                        {
                            "channel": r.channel,
                            "ok": r.ok,
                            "status": r.status_code,
                            "attempts": r.attempts,
                            "error": r.error,
                            "answer": r.body,
                        }
                        for r in results
                    ],
                }
            ),
            file=out,
        )
    else:
        if not results:
            print(f"no channel is routed {args.severity} in {args.env}", file=out)
        for r in results:
            verdict = "ok" if r.ok else "FAILED"
            status = r.status_code if r.status_code is not None else "-"
            detail = r.error or r.body[:200]
            print(
                f"{r.channel:32} {verdict:6} status={status} attempts={r.attempts} {detail}",
                file=out,
            )
    return 0 if results and all(r.ok for r in results) else 1


async def _send(cfg, severity: str, timeout: float):
    alerter = Alerter(cfg, persist=False)  # a test must not touch the notified state
    try:
        return await alerter.send_test(severity, timeout=timeout)
    finally:
        await alerter.stop(drain_timeout=0.0)
