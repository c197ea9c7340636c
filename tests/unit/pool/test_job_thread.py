"""``JobThread``: jobs run in order on one thread, woken through its pipe whether it sleeps or
is busy when a job arrives, and ``None`` (``stop``) ends it after the jobs before it."""

from __future__ import annotations

import threading
import time

from pool._private.executor import JobThread


def test_every_job_runs_once_in_order_whether_the_thread_sleeps_or_is_busy():
    t = JobThread("test-jobs", None)
    done: list[int] = []
    last = threading.Event()
    n = 3000
    for i in range(n):
        # Every few jobs, wait for the thread to drain and fall asleep, so puts land both on a
        # busy thread (no wake) and on a sleeping one (a byte through the pipe).
        if i % 7 == 0:
            deadline = time.monotonic() + 5.0
            while len(done) < i:
                assert time.monotonic() < deadline, f"stuck after {len(done)} of {i} jobs"
                time.sleep(0.0001)
        t.put(lambda i=i: done.append(i))
    t.put(last.set)
    assert last.wait(10.0), f"{len(done)} of {n} jobs ran"
    assert done == list(range(n))
    t.stop()
    t._thread.join(5.0)
    assert not t._thread.is_alive()


def test_stop_before_any_job_starts_no_thread():
    t = JobThread("test-idle", None)
    t.stop()
    assert not t._thread.is_alive()
