"""benchmarks._proc_cpu: the server CPU per answer that benchmarks.http_throughput reports beside
its throughput ratios. Real sockets and a real busy process; Linux /proc only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks._proc_cpu import CpuMeter, listening_pid, process_cpu_s
from benchmarks.http_throughput import _cpu_figures, _cpu_us

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(),
                                reason="needs Linux /proc (process CPU and listening sockets)")


# Burns ``s`` seconds of its own CPU time (however long a shared host takes to give them), says
# "done", then sleeps until killed.
_BURN = ("import sys, time\nt = time.process_time() + {s}\nwhile time.process_time() < t: pass\n"
         "print('done', flush=True)\ntime.sleep(60)")
_IDLE = "import time\nprint('done', flush=True)\ntime.sleep(60)"
HANG_S = 60.0  # only a hang waits this long


def _charged(code: str, *, after_s: float = 0.0) -> tuple[float | None, float | None]:
    """(CPU seconds of the process, the meter's reading): metered from its start until it says
    "done", or with ``after_s`` over that long once it has said it (its start-up, an import
    that keeps a core busy, left out)."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        meter = CpuMeter(proc.pid)
        if not after_s:
            meter.start()
        assert proc.stdout is not None and proc.stdout.readline() == "done\n"
        if after_s:
            meter.start()
            time.sleep(after_s)
        cores = meter.stop()
        return process_cpu_s(proc.pid), cores
    finally:
        proc.kill()
        proc.wait(HANG_S)


def test_the_listening_process_is_found_by_its_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert listening_pid(port) is None  # bound, not listening yet
        s.listen()
        assert listening_pid(port) == os.getpid()
    assert listening_pid(port) is None  # closed


def test_a_busy_process_is_charged_its_cpu_time_and_an_idle_one_much_less():
    busy_cpu, busy_cores = _charged(_BURN.format(s=1.5))
    # The idle one is metered while it sleeps: from its start it would read about one core too,
    # its interpreter's start-up being all CPU (a busy process on a shared host got 0.96 core,
    # its start-up 1.02, and the comparison failed on the noise).
    idle_cpu, idle_cores = _charged(_IDLE, after_s=0.5)
    # CPU seconds, not wall time: the 1.5 s it burned (plus its start-up), whatever the share
    # of a core it got; the idle one only its start-up.
    assert busy_cpu is not None and idle_cpu is not None
    assert 1.5 <= busy_cpu < 1.5 + idle_cpu + 2.0
    assert idle_cpu < busy_cpu - 1.0
    assert busy_cores is not None and idle_cores is not None and busy_cores > idle_cores >= 0
    assert idle_cores < 0.1


def test_a_process_that_is_gone_or_unknown_gives_no_figure():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert process_cpu_s(p.pid) is None
    meter = CpuMeter(None)
    meter.start()
    assert meter.stop() is None


def test_cpu_per_answer_counts_degraded_answers_and_compares_with_stock():
    run = {"latencies_s": [0.001] * 900, "n_degraded": 100, "duration_s": 1.0,
           "server_cores": 0.5}
    assert _cpu_us(run) == 500.0  # half a core over 1000 answers/s
    assert _cpu_us({**run, "server_cores": None}) is None
    http = {a: {"c16": {"server_cpu_us_per_answer": us}}
            for a, us in (("timeshare", 600.0), ("timeshare_hit", 150.0), ("stock", 300.0),
                          ("null", None))}
    figures = _cpu_figures(http)
    assert figures["timeshare_vs_stock"] == 2.0
    assert figures["timeshare_hit_vs_stock"] == 0.5
    assert figures["null"] is None
