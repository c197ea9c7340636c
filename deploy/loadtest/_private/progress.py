"""A one-line progress bar on stderr, redrawn twice a second; silent when not a TTY."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TextIO

from deploy.loadtest._private.runner import RunProgress

__all__ = ["progress_bar", "render"]

_WIDTH = 24
_PERIOD_S = 0.5


def render(p: RunProgress, *, label: str, now: float) -> str:
    """The bar's text for the current counters."""
    frac = p.sent / p.total if p.total else 1.0
    filled = int(frac * _WIDTH)
    elapsed = max(now - p.started_at, 1e-9)
    lag_ms = max(p.last_lag_s, 0.0) * 1000.0
    return (f"\r{label} [{'#' * filled}{'.' * (_WIDTH - filled)}] {frac:4.0%} "
            f"sent {p.sent}/{p.total} ({p.sent / elapsed:.1f}/s) in-flight {p.in_flight} "
            f"errors {p.errors} lag {lag_ms:.1f}ms ")


@contextlib.asynccontextmanager
async def progress_bar(p: RunProgress, *, label: str, stream: TextIO,
                       enabled: bool | None = None) -> AsyncIterator[None]:
    """Redraw ``p`` on ``stream`` while the body runs; ``enabled=None`` means "if a TTY"."""
    on = stream.isatty() if enabled is None else enabled
    if not on:
        yield
        return

    async def loop() -> None:
        while True:
            stream.write(render(p, label=label, now=time.perf_counter()))
            stream.flush()
            await asyncio.sleep(_PERIOD_S)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        stream.write(render(p, label=label, now=time.perf_counter()) + "\n")
        stream.flush()
