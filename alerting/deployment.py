"""Thin Ray Serve adapter: one ``AlerterDeployment`` per application owns an :class:`Alerter`.

Pipeline stages send events fire-and-forget through a handle::

    handle = serve.get_deployment_handle("AlerterDeployment", app_name="timeshare")
    handle.submit.remote(alert.to_dict())   # do not await: never blocks serving

This is the only module of ``alerting`` that imports Ray.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import prometheus_client
from ray import serve

from alerting.alerter import Alerter
from alerting.config import AlertingConfig, load_config
from alerting.telemetry import Telemetry

__all__ = ["AlerterDeployment"]


@serve.deployment(num_replicas=1, max_ongoing_requests=1000)
class AlerterDeployment:
    """Owns the alerter; starts it (state load + loop) on the first call."""

    def __init__(self, config: AlertingConfig | dict[str, Any] | str) -> None:
        cfg = config if isinstance(config, AlertingConfig) else load_config(config)
        telemetry = None
        if cfg.prometheus_port is not None:


            telemetry = Telemetry(prometheus=True)
            prometheus_client.start_http_server(cfg.prometheus_port, addr="127.0.0.1")
        self._alerter = Alerter(cfg, telemetry=telemetry)
        self._started = False
        self._lock = asyncio.Lock()

    async def _ensure_started(self) -> Alerter:
        if not self._started:
            async with self._lock:
                if not self._started:
                    await self._alerter.start()
                    self._started = True
        return self._alerter

    async def submit(self, alert_dict: dict[str, Any]) -> bool:
        """Accept one alert (``Alert.to_dict()`` form); False when the alert store is full."""
        return (await self._ensure_started()).submit(alert_dict)

    async def status(self) -> dict[str, Any]:
        return (await self._ensure_started()).status()

    async def acknowledge(self, fingerprint: str) -> bool:
        return (await self._ensure_started()).acknowledge(fingerprint)

    async def silence(
        self, matchers: list[str], duration_s: float, comment: str = "", created_by: str = ""
    ) -> str:
        return (await self._ensure_started()).silence(
            matchers, duration_s=duration_s, comment=comment, created_by=created_by
        )

    async def expire_silence(self, silence_id: str) -> None:
        (await self._ensure_started()).expire_silence(silence_id)

    async def send_test(self, severity: str) -> list[dict[str, Any]]:
        """Send a test notification now; each channel's answer as a dict."""
        return [asdict(r) for r in await (await self._ensure_started()).send_test(severity)]

    async def failing_channels(self) -> list[str]:
        return sorted((await self._ensure_started()).failing_channels())

    async def check_health(self) -> None:
        await self._ensure_started()

    async def stop(self) -> None:
        """Stop the loop and give channels two seconds to deliver what is queued."""
        if self._started:
            self._started = False
            await self._alerter.stop(drain_timeout=2.0)

    async def __del__(self) -> None:  # Ray Serve awaits an async __del__ on replica shutdown
        await self.stop()
