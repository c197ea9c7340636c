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


_SPIN = "import time\nt = time.monotonic() + {s}\nwhile time.monotonic() < t: pass"


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def _cores_of(proc: subprocess.Popen, seconds: float) -> float | None:
    time.sleep(0.3)  # past the interpreter's start-up
    meter = CpuMeter(proc.pid)
    meter.start()
    time.sleep(seconds)
    cores = meter.stop()
    proc.wait()
    return cores


def test_the_listening_process_is_found_by_its_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert listening_pid(port) is None  # bound, not listening yet
        s.listen()
        assert listening_pid(port) == os.getpid()
    assert listening_pid(port) is None  # closed


def test_a_busy_process_measures_about_one_core_and_an_idle_one_about_none():
    busy = _cores_of(_python(_SPIN.format(s=1.5)), 0.8)
    assert busy is not None and 0.5 < busy <= 1.1  # one spinning thread (a shared host)
    idle = _cores_of(_python("import time; time.sleep(1.5)"), 0.8)
    assert idle is not None and idle < 0.2


def test_a_process_that_is_gone_or_unknown_gives_no_figure():
    p = _python("pass")
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
