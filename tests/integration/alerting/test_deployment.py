"""The Ray Serve adapter, in Serve's local testing mode (no Ray cluster is started)."""

from __future__ import annotations

import time

from ray import serve

from alerting.events import Alert
from tests.support.receiver import Receiver


def test_submit_through_a_handle_reaches_the_receiver(receiver: Receiver) -> None:
    from alerting.deployment import AlerterDeployment

    cfg = {
        "environment": "prod",
        "route": {"receiver": "pd", "group_wait": 0},
        "receivers": [
            {
                "name": "pd",
                "channels": [{"type": "pagerduty", "url": receiver.url("/pd"), "routing_key": "k"}],
            }
        ],
    }
    handle = serve.run(
        AlerterDeployment.bind(cfg),
        name="alerting-test",
        route_prefix=None,
        _local_testing_mode=True,
    )
    try:
        alert = Alert.create(
            "TimeshareModelLoadFailed", "P1", "prod", labels={"model": "m"}, starts_at=time.time()
        )
        assert handle.submit.remote(alert.to_dict()).result() is True
        for _ in range(200):  # wait for the deployment's own loop to deliver
            if receiver.at("/pd"):
                break
            time.sleep(0.02)
        assert receiver.at("/pd")[0].body["event_action"] == "trigger"
        status = handle.status.remote().result()
        assert status["persistence"] == "memory" and status["firing"] == 1
    finally:
        handle.stop.remote().result()
