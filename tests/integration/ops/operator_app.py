"""The app as an operator runs it (``serve run`` in its own process and Ray), plus Prometheus.

One app serves both the Prometheus and the browser tests of this folder: the small demo
repository under a device budget that holds ``digits-large`` but not it and the rest together,
so alternating traffic swaps; small chunks, so batch work is preempted; an operator key; the
ingress's and the alerter's Prometheus endpoints; a swap-thrashing rule that fires under the
demo traffic (so an alert notification is counted).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[3]
API_KEY = "ops-key"


@dataclass
class OperatorApp:
    url: str
    metrics_ports: tuple[int, int]  # ingress, alerter
    proc: subprocess.Popen
    log: Path
    repo: Path | None = None  # the live model repository (tests may publish into it)

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": API_KEY}

    def status(self) -> dict:
        r = httpx.get(f"{self.url}/v2/status", headers=self.headers(), timeout=10)
        r.raise_for_status()
        return r.json()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def app_config(repo: Path, http_port: int, metrics: int, alerter_metrics: int) -> dict:
    args = {
        "repository": str(repo), "environment": "test", "api_key": API_KEY,
        "poll_interval_s": 0.5, "alert_eval_interval_s": 0.5, "prometheus_port": metrics,
        # digits-large is 0.577 MiB: it fits, but not beside the other four models
        "cpu_pool": {"memory_budget_mb": 0.58, "chunk_size": 16},
        "call_log": {"path": str(repo.parent / "calllog.jsonl")},
        "alerting": {
            "environment": "test", "prometheus_port": alerter_metrics,
            "route": {"receiver": "log", "group_wait": "0s", "group_interval": "1s"},
            "rules": {"swap_thrashing": {"threshold": 0.2, "window": "5s", "for": "0s"}},
        },
    }
    return {"proxy_location": "EveryNode",
            "http_options": {"host": "127.0.0.1", "port": http_port},
            "applications": [{"name": "timeshare", "route_prefix": "/",
                              "import_path": "router.app:build_app", "args": args}]}


def start_app(repo: Path, workdir: Path, ports: tuple[int, int, int]) -> OperatorApp:
    http_port, metrics, alerter_metrics = ports
    cfg = workdir / "config.yaml"
    cfg.write_text(yaml.safe_dump(app_config(repo, http_port, metrics, alerter_metrics)))
    log = workdir / "serve.log"
    # `serve run` as the user runs it, through this interpreter (RAY_ADDRESS=local: its own Ray
    # even when another test's Ray runs in this process).
    env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from ray.serve.scripts import cli; cli()", "run", str(cfg)],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    app = OperatorApp(f"http://127.0.0.1:{http_port}", (metrics, alerter_metrics), proc, log,
                      repo)
    if wait_ready(proc, f"{app.url}/v2/health/ready", 240, log):
        return app
    stop_app(app)
    raise RuntimeError(f"app not ready in 240 s:\n{app.tail()}")


def wait_ready(proc: subprocess.Popen, url: str, timeout_s: float, log: Path) -> bool:
    """Poll ``url`` until it answers 200 (True) or ``timeout_s`` passes (False); a process that
    exits first is an error showing its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def stop_app(app: OperatorApp) -> None:
    if app.proc.poll() is None:
        os.killpg(app.proc.pid, signal.SIGINT)  # serve run shuts the app and its Ray down
        try:
            app.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(app.proc.pid, signal.SIGKILL)
            app.proc.wait(10)


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen

    def query(self, expr: str) -> list[dict]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def start_prometheus(binary: str, workdir: Path, port: int, targets: list[str]) -> Prometheus:
    """A real Prometheus scraping ``targets`` every second, with its own config and storage."""
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "timeshare", "static_configs": [{"targets": targets}]}],
    }))
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log.open("w"), stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc)
    if wait_ready(proc, f"{prom.url}/-/ready", 60, log):
        return prom
    prom.stop()
    raise RuntimeError("prometheus not ready in 60 s")
