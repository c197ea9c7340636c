"""A separate Ray driver calling Timeshare through its handle.

Start the app (``make serve`` or ``serve run deploy/config.yaml``), then:

    .venv/bin/python -m deploy.examples.call_from_ray

It classifies a few held-out digits with digits-small and digits-large and prints accuracy and
where each answer came from.
"""

from __future__ import annotations

import argparse

import ray

from deploy.demo_data import load_splits
from router.client import TimeshareClient
from router.errors import InvalidRequest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    ap.add_argument("-n", type=int, default=32, help="held-out digits to classify")
    args = ap.parse_args(argv)
    ray.init(address=args.address, namespace="serve", log_to_driver=False)
    client = TimeshareClient()
    split = load_splits("digits")
    x, y = split.test_x[: args.n], split.test_y[: args.n]
    for model in ("digits-small", "digits-large"):
        resp = client.infer(model, {"pixels": x}, caller="example", priority="interactive")
        acc = float((resp.outputs["logits"].argmax(1) == y).mean())
        print(f"{model:13s} accuracy={acc:.3f} served_by={resp.served_by} "
              f"queue={resp.timings.queue_ms:.1f}ms compute={resp.timings.compute_ms:.1f}ms")
    try:
        client.infer("digits-small", {"pixels": x[:, :10]})
    except InvalidRequest as e:
        print(f"bad input is a typed error: {type(e).__name__}: {e.message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
