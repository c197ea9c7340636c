"""A real multi-node Ray cluster on this machine, started with the ``ray`` command line.

Each node is ``ray start`` (``--block``, so it is our child) with its own temp dir, ports and
custom resources; the head also runs the dashboard, which ``serve deploy`` talks to. Every
process a node starts carries its temp dir in its command line, which is how :meth:`kill_node`
and :meth:`shutdown` find them (by process id: nothing else on the machine is touched, in
particular not the test session's own Ray instance, nor other clusters).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.ports import free_port

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
SERVE = [sys.executable, "-c", "from ray.serve.scripts import cli; cli()"]

# Node death is noticed within ~1.5 s instead of Ray's default ~30 s, and nothing phones home.
ENV = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "1000",
       "RAY_health_check_failure_threshold": "3", "RAY_USAGE_STATS_ENABLED": "0",
       "RAY_DEDUP_LOGS": "0", "RAY_AUTH_MODE": "disabled"}


@dataclass
class Node:
    name: str
    temp_dir: str
    args: list[str]
    proc: subprocess.Popen | None = None


class LocalRayCluster:
    """Head + workers on loopback. Use as a context manager: every process is gone after it."""

    def __init__(self, *, workdir: Path) -> None:
        # Unix socket paths are limited to ~107 bytes: the temp dirs stay short.
        self.root = Path(tempfile.mkdtemp(prefix="tsc", dir="/tmp"))
        self.workdir = workdir
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.nodes: dict[str, Node] = {}
        self.log = self.root / "ray-start.log"

    # -- nodes ------------------------------------------------------------------------------
    def start_head(self, *, num_cpus: float, resources: dict[str, float]) -> None:
        self._start(Node("head", str(self.root / "head"), [
            "--head", "--port", str(self.gcs_port), "--node-ip-address", "127.0.0.1",
            "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
            "--dashboard-port", str(self.dashboard_port), "--ray-client-server-port",
            str(free_port()), *self._node_args("head", num_cpus, resources)]))
        self._wait(lambda: _get(f"{self.dashboard}/api/version") is not None, 90, "dashboard")

    def start_worker(self, name: str, *, num_cpus: float, resources: dict[str, float]) -> None:
        self._join(Node(name, str(self.root / name), [
            "--address", self.address, "--node-ip-address", "127.0.0.1",
            *self._node_args(name, num_cpus, resources)]), f"node {name} to join")

    def _node_args(self, name: str, num_cpus: float, resources: dict[str, float]) -> list[str]:
        resources = {**resources, f"ts_node_{name}": 1}  # how alive_nodes() names the node
        return ["--num-cpus", str(num_cpus), "--num-gpus", "0",
                "--resources", json.dumps(resources), "--disable-usage-stats", "--block",
                "--node-manager-port", str(free_port()),
                "--object-manager-port", str(free_port()),
                "--metrics-export-port", str(free_port()),
                "--dashboard-agent-listen-port", str(free_port()),
                "--dashboard-agent-grpc-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port())]

    def _start(self, node: Node) -> None:
        args = [*node.args, "--temp-dir", node.temp_dir]
        with self.log.open("a") as log:
            node.proc = subprocess.Popen(
                [*RAY, "start", *args], cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **ENV}, start_new_session=True)
        self.nodes[node.name] = node

    def restart(self, name: str) -> None:
        """Start a killed node again with the same resources (a new Ray node, same machine)."""
        node = self.nodes[name]
        self._join(Node(name, node.temp_dir, node.args), f"node {name} to rejoin")

    # A worker's ``ray start`` gives up when its raylet has not registered with the GCS within
    # 30 s (hard-coded in ray/_private/node.py: "The current node timed out during startup"),
    # which a 2-core machine under load can exceed while the head is healthy. Such a start,
    # whose process has exited, is tried again; each try must still join within ``timeout_s``.
    START_ATTEMPTS = 2

    def _join(self, node: Node, what: str, timeout_s: float = 60) -> None:
        for attempt in range(1, self.START_ATTEMPTS + 1):
            self._start(node)
            proc = node.proc
            assert proc is not None
            self._wait(lambda p=proc: self.alive_nodes().get(node.name, 0) >= 1
                       or p.poll() is not None, timeout_s, what)
            if proc.poll() is None:  # joined, and its `ray start` still runs
                return
            if attempt == self.START_ATTEMPTS:
                raise AssertionError(f"{what}: `ray start` exited ({proc.returncode}) "
                                     f"{attempt} times; ray start log:\n{self._log_tail()}")
            _kill_matching(node.temp_dir)  # what the failed start left behind

    def kill_node(self, name: str) -> int:
        """SIGKILL every process of a node (raylet, its workers, agents): a machine lost.
        Returns how many processes were killed."""
        return _kill_matching(self.nodes[name].temp_dir)

    def alive_nodes(self) -> dict[str, int]:
        """Alive nodes per our node name (matched by the custom resource ``node:<name>``)."""
        doc = _get(f"{self.dashboard}/api/v0/nodes?detail=1&limit=100")
        out: dict[str, int] = {}
        if not doc:
            return out
        for n in doc.get("data", {}).get("result", {}).get("result", []):
            if n.get("state") != "ALIVE":
                continue
            for res in n.get("resources_total", {}):
                if res.startswith("ts_node_"):
                    name = res.removeprefix("ts_node_")
                    out[name] = out.get(name, 0) + 1
        return out

    # -- serve --------------------------------------------------------------------------------
    def serve(self, *args: str, timeout_s: float = 120) -> str:
        """Run the ``serve`` command line against this cluster's dashboard."""
        out = subprocess.run([*SERVE, *args, "--address", self.dashboard], cwd=self.workdir,
                             capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, **ENV})
        if out.returncode != 0:
            raise RuntimeError(f"serve {' '.join(args)} failed: {out.stdout}\n{out.stderr}")
        return out.stdout

    # -- teardown -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                try:
                    os.killpg(node.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        _kill_matching(str(self.root))
        for node in self.nodes.values():
            if node.proc is not None:
                node.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _wait(self, predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}; ray start log:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


def _get(url: str) -> dict | None:
    try:
        r = httpx.get(url, timeout=2)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _pids_matching(needle: str) -> list[int]:
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmd:
            pids.append(int(entry.name))
    return pids


def _kill_matching(needle: str) -> int:
    """SIGKILL the processes whose command line names ``needle`` (one of our temp dirs)."""
    killed = 0
    for _ in range(3):  # a dying raylet's workers may still be forking: sweep again
        pids = _pids_matching(needle)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        if not pids:
            break
        time.sleep(0.2)
    return killed
