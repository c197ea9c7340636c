from __future__ import annotations

import pytest

from tests.support.receiver import Receiver, start_receiver


@pytest.fixture
def receiver():
    r: Receiver = start_receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()
