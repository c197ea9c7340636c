"""The operator's views against the real app (``serve run``) under demo traffic.

- Prometheus: a real server scrapes the app; every pool series exists and moves, and every
  panel query of ``deploy/grafana/timeshare.json`` returns data.
- The status page (``/ui``): headless Chromium loads it, it shows the demo models and the
  priority classes, and its numbers change while traffic runs.

Each test skips, saying what to install, when its binary is missing (``make test`` installs
both where it can).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from deploy.demo_traffic import run_traffic
from tests.integration.ops.cdp import Browser
from tests.integration.ops.operator_app import (
    API_KEY,
    ROOT,
    OperatorApp,
    start_app,
    start_prometheus,
    stop_app,
)
from tests.support.demo import SMALL_DEMO
from tests.support.ports import free_port

DASHBOARD = ROOT / "deploy" / "grafana" / "timeshare.json"


@pytest.fixture(scope="module")
def operator_app(demo_repo_master, tmp_path_factory) -> Iterator[OperatorApp]:
    root = tmp_path_factory.mktemp("operator")
    shutil.copytree(demo_repo_master, root / "repo")
    app = start_app(root / "repo", root, (free_port(), free_port(), free_port()))
    try:
        yield app
    finally:
        stop_app(app)


class Traffic:
    """Demo traffic in a background thread for ``seconds`` (the tool users run)."""

    def __init__(self, app: OperatorApp, seconds: float) -> None:
        self.result = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(app, seconds), daemon=True)
        self._thread.start()

    def _run(self, app: OperatorApp, seconds: float) -> None:
        try:
            self.result = asyncio.run(run_traffic(
                app.url, duration_s=seconds, rate=20, batch_callers=2, batch_rows=64,
                zipf_s=0.8, seed=1, models=SMALL_DEMO, api_key=API_KEY))
        except BaseException as e:  # noqa: BLE001 - shown by the test that waits on it
            self.error = e

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join(120)
        assert self.error is None, f"demo traffic failed: {self.error!r}"
        assert self.result is not None, "demo traffic did not finish"


def _total(prom, expr: str) -> float:
    res = prom.query(f"sum({expr})")
    return float(res[0]["value"][1]) if res else 0.0


POOL_SERIES = ["timeshare_swaps_total", "timeshare_swap_bytes_total",
               "timeshare_swap_duration_seconds_total", "timeshare_preemptions_total",
               "timeshare_evictions_total", "timeshare_queue_depth",
               "timeshare_device_memory_usage_bytes", "timeshare_device_memory_limit_bytes",
               "timeshare_host_memory_usage_bytes", "timeshare_models_resident",
               "timeshare_batches_total", "timeshare_compute_duration_seconds_total",
               "timeshare_pool_replica_restarts_total"]


def test_prometheus_scrapes_every_pool_series_and_every_panel_has_data(operator_app, tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("needs Prometheus: no `prometheus` binary (apt-get install prometheus; "
                    "`make test` installs it where apt-get and root are available)")
    targets = [f"127.0.0.1:{p}" for p in operator_app.metrics_ports]
    prom = start_prometheus(binary, tmp_path, free_port(), targets)
    try:
        deadline = time.monotonic() + 30
        while _total(prom, 'up{job="timeshare"}') < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _total(prom, 'up{job="timeshare"}') == 2, prom.query("up")
        before = {m: _total(prom, m) for m in ("timeshare_swaps_total",
                                              "timeshare_swap_bytes_total",
                                              "timeshare_preemptions_total",
                                              "timeshare_evictions_total",
                                              "timeshare_batches_total",
                                              "timeshare_compute_duration_seconds_total")}
        traffic = Traffic(operator_app, 15)
        peak_queue = 0.0
        while traffic.running:
            peak_queue = max(peak_queue, _total(prom, "timeshare_queue_depth"))
            time.sleep(0.5)
        traffic.join()

        def scraped() -> bool:  # the scrapes after the traffic: every series, every counter
            return (all(prom.query(name) for name in POOL_SERIES)
                    and all(_total(prom, m) > v for m, v in before.items()))

        deadline = time.monotonic() + 30
        while not scraped() and time.monotonic() < deadline:
            time.sleep(0.5)
        for name in POOL_SERIES:
            series = prom.query(name)
            assert series, f"{name}: no series"
            assert all(s["metric"].get("pool") for s in series), series
        moved = {m: _total(prom, m) - v for m, v in before.items()}
        assert all(d > 0 for d in moved.values()), (moved, traffic.result.outcomes)
        assert peak_queue > 0, "no request was ever seen queued"
        assert _total(prom, 'timeshare_device_memory_usage_bytes{state="used"}') > 0
        assert _total(prom, 'timeshare_models_resident{tier="host"}') >= len(SMALL_DEMO)
        # The swap-thrashing rule got real input: its alert was sent (to the log channel).
        assert _total(prom, "timeshare_alerts_sent_total") > 0, operator_app.tail()
        empty = _panels_without_data(prom)
        assert not empty, f"panels with no data: {empty}"
    finally:
        prom.stop()


def _panels_without_data(prom) -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    empty = []
    for panel in dash["panels"]:
        exprs = [t["expr"].replace("$__rate_interval", "1m").replace("$model", ".*")
                 for t in panel["targets"]]
        if not any(prom.query(e) for e in exprs):
            empty.append(panel["title"])
    return empty


def _app_swaps(app: OperatorApp) -> int:
    """Swaps-in over the app's pools, as ``/v2/status`` reports them."""
    return sum(int(((p.get("device") or {}).get("swaps") or {}).get("count", 0))
               for p in app.status().get("pools", {}).values() if "error" not in p)


def _wait_while_running(browser: Browser, traffic: Traffic, expression: str,
                        timeout_s: float) -> None:
    """``browser.wait_for``, failing at once with the traffic's own error if it died."""
    deadline = time.monotonic() + timeout_s
    while True:
        if traffic.error is not None:
            raise AssertionError(f"demo traffic failed: {traffic.error!r}")
        try:
            browser.wait_for(expression, min(2.0, max(0.1, deadline - time.monotonic())))
            return
        except AssertionError:
            if time.monotonic() >= deadline:
                raise


def _text(selector: str) -> str:
    return f"[...document.querySelectorAll({selector!r})].map(e => e.textContent).join('|')"


def test_status_page_in_headless_chromium_shows_the_models_and_moves(operator_app, tmp_path):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("needs Chromium: no `chromium` binary (apt-get install chromium; "
                    "`make test` installs it where apt-get and root are available)")
    browser = Browser(binary, tmp_path / "profile", free_port())
    try:
        browser.navigate(f"{operator_app.url}/ui")
        # The app has an operator key: the page asks for it and shows no data without it.
        browser.wait_for("!document.querySelector('#key-form').hidden")
        assert browser.evaluate("document.querySelector('#main').hidden")
        browser.evaluate(f"document.querySelector('#key').value = {API_KEY!r}; "
                         "document.querySelector('#key-form').requestSubmit(); true")
        browser.wait_for("!document.querySelector('#main').hidden")
        shown = browser.evaluate(
            "[...document.querySelectorAll('#models tr[data-model]')].map(r => r.dataset.model)")
        assert set(SMALL_DEMO) <= set(shown), shown
        swaps_before = browser.evaluate(_text("[data-testid=swaps]"))
        app_swaps = _app_swaps(operator_app)
        traffic = Traffic(operator_app, 20)
        # While traffic runs: the swap counter moves and the models show a request rate.
        try:
            _wait_while_running(browser, traffic,
                                f"{_text('[data-testid=swaps]')} !== {swaps_before!r}", 25)
        except AssertionError as e:
            raise AssertionError(f"{e}; the app's own swap count went from {app_swaps} to "
                                 f"{_app_swaps(operator_app)}") from None
        browser.wait_for("[...document.querySelectorAll('#models tr[data-model] td:nth-child(2)')]"
                         ".some(td => parseFloat(td.textContent) > 0)", 20)
        # ... and the device shows how busy it was since the last poll, and its forward time
        busy = "document.querySelector('[data-testid=busy]').textContent"
        _wait_while_running(browser, traffic, f"parseFloat({busy}) > 0 && "
                            f"/batches\\/s · forward [0-9.]+ ms$/.test({busy})", 20)
        # ... and the priority classes (the demo's realtime and batch callers) show their p99
        assert browser.evaluate(
            "[...document.querySelectorAll('#classes tr[data-class]')].map(r => r.dataset.class)"
        ) == ["realtime", "interactive", "batch", "background"]
        for label in ("realtime", "batch"):
            browser.wait_for(f"parseFloat(document.querySelector('[data-testid=p99-{label}]')"
                             ".textContent) > 0", 20)
        # A few more polls, so the plots have a history in the screenshot.
        polled = browser.evaluate("history.swaps.length")
        browser.wait_for(f"history.swaps.length >= {polled + 4}", 30)
        shot = Path(os.environ.get("TIMESHARE_UI_SCREENSHOT", tmp_path / "status-page.png"))
        browser.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        traffic.join()
    finally:
        browser.close()


def test_status_page_lists_a_refused_model_with_its_file_field_and_reason(operator_app,
                                                                          tmp_path):
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("needs Chromium: no `chromium` binary (apt-get install chromium; "
                    "`make test` installs it where apt-get and root are available)")
    assert operator_app.repo is not None
    name = "ui-refused"
    cfg = yaml.safe_load((operator_app.repo / "iris-mlp2x16" / "config.yaml").read_text())
    cfg.update(name=name, architecture="os:system")  # outside the allowlist: refused
    folder = operator_app.repo / name
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    browser = Browser(binary, tmp_path / "profile", free_port())
    try:
        browser.navigate(f"{operator_app.url}/ui")
        browser.wait_for("!document.querySelector('#key-form').hidden")
        browser.evaluate(f"document.querySelector('#key').value = {API_KEY!r}; "
                         "document.querySelector('#key-form').requestSubmit(); true")
        row = f"#problems tr[data-model={name!r}] td"
        browser.wait_for(f"document.querySelectorAll({row!r}).length === 6", 30)
        cells = browser.evaluate(
            f"[...document.querySelectorAll({row!r})].map(td => td.textContent)")
        assert cells[:5] == [name, "config", "refused", f"{name}/config.yaml", "architecture"]
        assert cells[5].startswith(f"{name}/config.yaml [architecture]: ")
        assert "not in the operator's allowlist" in cells[5]
    finally:
        browser.close()
        shutil.rmtree(folder)
