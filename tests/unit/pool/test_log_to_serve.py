"""The pool's log lines reach Ray Serve's replica logger, at their level, at once.

Serve's throughput-optimized mode holds replica log records in a 1000-record buffer that only an
ERROR flushes; a refusal's WARNING must not wait there. Serve's handler is stood in for by the
same kind of buffer (``logging.handlers.MemoryHandler``) in front of a recording handler.
"""

from __future__ import annotations

import logging
import logging.handlers

import pytest

from pool.deployments import SERVE_LOGGER, log_pool_to_serve


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def serve_file():
    serve_log, pool_log = logging.getLogger(SERVE_LOGGER), logging.getLogger("pool")
    saved = (serve_log.handlers[:], serve_log.propagate, pool_log.handlers[:], pool_log.level)
    target = _Recorder()
    serve_log.handlers = [logging.handlers.MemoryHandler(1000, logging.ERROR, target)]
    serve_log.propagate = False
    yield target
    serve_log.handlers, serve_log.propagate, pool_log.handlers, _ = saved
    pool_log.setLevel(saved[3])


def test_a_pool_warning_is_in_serves_log_at_once_with_its_level(serve_file):
    log_pool_to_serve()
    log_pool_to_serve()  # idempotent: one handler, one line
    log = logging.getLogger("pool.host")
    log.info("model m version 1 version_ready: here")
    assert serve_file.records == []  # INFO waits in Serve's buffer, as Serve's own lines do
    log.warning("model evil config refused: evil/config.yaml [architecture]: no")
    got = [(r.levelname, r.name, r.getMessage()) for r in serve_file.records]
    assert got == [("INFO", "pool.host", "model m version 1 version_ready: here"),
                   ("WARNING", "pool.host",
                    "model evil config refused: evil/config.yaml [architecture]: no")]
    assert logging.getLogger("pool").propagate  # the root's handlers (pytest's) still see it


def test_outside_a_replica_a_pool_line_reaches_the_root_once(caplog):
    # Serve's logger unconfigured (no handlers, propagating: a test or a driver): the root's
    # handlers see the pool's line once, from the pool logger's own propagation.
    serve_log, pool_log = logging.getLogger(SERVE_LOGGER), logging.getLogger("pool")
    saved = (serve_log.handlers[:], serve_log.propagate, pool_log.handlers[:], pool_log.level)
    serve_log.handlers, serve_log.propagate = [], True
    try:
        log_pool_to_serve()
        caplog.set_level(logging.INFO, logger="pool.host")
        serve_log.handlers = [caplog.handler]  # a handler the root holds too (as a driver may)
        logging.getLogger("pool.host").warning("model evil config refused: no")
        assert [r.getMessage() for r in caplog.records] == ["model evil config refused: no"]
    finally:
        serve_log.handlers, serve_log.propagate, pool_log.handlers, _ = saved
        pool_log.setLevel(saved[3])
