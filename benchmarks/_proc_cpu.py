"""The CPU a server process spends per answer, for the HTTP benchmarks (Linux ``/proc``).

Throughput ratios between arms move with a shared host's load from run to run; the CPU time the
serving process itself spends on each answer moves much less, and it is what "the request path
costs" means. :func:`listening_pid` finds the process that listens on a local TCP port (the
arm's server: a Serve replica under direct ingress, Timeshare's listener, a side process), and
:class:`CpuMeter` reads that process's CPU time (all its threads: event loop, device thread,
Ray's own) around a load run. Where ``/proc`` is missing (not Linux) both give None and the
benchmark reports no CPU figures.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["CpuMeter", "cpu_model", "host_cpu_s", "listening_pid", "metered", "pids_matching",
           "process_cpu_s", "thread_cpu_s", "thread_shares"]

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def cpu_model() -> str | None:
    """The host's CPU model from ``/proc/cpuinfo`` (None where it is not there): ratios between
    arms differ by CPU (the same code measured a hit at 2.6-3.0x stock on one 2-core host and
    2.1-2.4x on another, docs/PERFORMANCE.md), so each run names its host."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def listening_pid(port: int) -> int | None:
    """The one process listening on ``port`` (None: none, several, or no ``/proc``)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    found.add(int(proc.name))
                    break
            except OSError:
                continue
    return found.pop() if len(found) == 1 else None


def pids_matching(pattern: str) -> list[int]:
    """The processes whose command line matches ``pattern`` (``pgrep -f``), e.g. a Serve
    replica by its actor name."""
    out = subprocess.run(["pgrep", "-f", pattern], check=False, capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def _stat_cpu_s(stat: str) -> float:
    """User plus system CPU seconds from a ``/proc/.../stat`` line."""
    fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces; fields start at state
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of every thread of ``pid`` so far (None: gone)."""
    try:
        return _stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """Per thread of ``pid``: its name (``comm``) and user plus system CPU seconds so far."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        out[int(task.name)] = (stat[stat.index("(") + 1: stat.rindex(")")], _stat_cpu_s(stat))
    return out


def thread_shares(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                  wall_s: float, top: int = 8) -> list[dict[str, Any]]:
    """The busiest threads between two :func:`thread_cpu_s` readings, as shares of one core."""
    used = [(tid, name, cpu - before.get(tid, (name, 0.0))[1])
            for tid, (name, cpu) in after.items()]
    used.sort(key=lambda t: -t[2])
    return [{"tid": tid, "name": name, "core_share": round(cpu / wall_s, 3)}
            for tid, name, cpu in used[:top] if cpu > 0]


def host_cpu_s() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole host so far, from ``/proc/stat`` (None: no
    ``/proc``). Busy is everything but idle and I/O wait."""
    try:
        line = Path("/proc/stat").read_text().split("\n", 1)[0]
    except OSError:
        return None
    ticks = [int(v) for v in line.split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / tick, sum(ticks) / tick


class CpuMeter:
    """Cores a process used between :meth:`start` and :meth:`stop`."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._cpu0: float | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._cpu0 = process_cpu_s(self.pid) if self.pid is not None else None
        self._t0 = time.monotonic()

    def stop(self) -> float | None:
        if self.pid is None or self._cpu0 is None:
            return None
        cpu1 = process_cpu_s(self.pid)
        wall = time.monotonic() - self._t0
        if cpu1 is None or wall <= 0:
            return None
        return (cpu1 - self._cpu0) / wall


def metered(run: Callable[[], dict[str, Any]], procs: Mapping[str, str]) -> dict[str, Any]:
    """``run()``'s result with where the host's CPU went meanwhile (``cpu``): the cores used by
    each process named in ``procs`` (name: a ``pgrep -f`` pattern that must match exactly one
    process; others are left out), its busiest threads, and the host's busy share of all its
    cores."""
    found = {name: pids_matching(pattern) for name, pattern in procs.items()}
    pids = {name: p[0] for name, p in found.items() if len(p) == 1}
    before = {name: (process_cpu_s(pid), thread_cpu_s(pid)) for name, pid in pids.items()}
    host0, t0 = host_cpu_s(), time.monotonic()
    out = run()
    wall = time.monotonic() - t0
    host1 = host_cpu_s()
    cpu: dict[str, Any] = {}
    for name, pid in pids.items():
        total0, threads0 = before[name]
        total1 = process_cpu_s(pid)
        cpu[name] = {"cores": (round((total1 - total0) / wall, 3)
                               if total0 is not None and total1 is not None else None),
                     "threads": thread_shares(threads0, thread_cpu_s(pid), wall, top=3)}
    if host0 is not None and host1 is not None and host1[1] > host0[1]:
        cpu["host_busy_share"] = round((host1[0] - host0[0]) / (host1[1] - host0[1]), 3)
    return {**out, "cpu": cpu}
