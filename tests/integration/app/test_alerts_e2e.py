"""End to end: a model made to fail in the running app pages once, then says it recovered.

The app fixture (conftest.py) routes every alert to a real webhook receiver on loopback with
group_wait 1s, group_interval 2s, repeat 1h and send_resolved, and fires the error-rate rule (P1)
when more than half of a model's requests in a 4 s window (at least 5) fail for 1 s. Only this
file sends failing requests to ``chaos-alert`` (it has no fallback chain, so its failures are
503 errors), so every notification about it comes from this test.
"""

from __future__ import annotations

import time
from datetime import datetime

import httpx

from tests.integration.app.appkit import FAIL
from tests.support.app import API_KEY
from tests.support.v2 import iris_rows, v2_body

MODEL = "chaos-alert"
RULE = "TimeshareErrorRate"
HOOK = "/alerts"


def _notes(app) -> list[dict]:
    """Webhook bodies about this model's error-rate group, in arrival order."""
    return [r.body for r in app.receiver.at(HOOK)
            if isinstance(r.body, dict)
            and r.body.get("groupLabels") == {"alertname": RULE, "model": MODEL}]


def _drive_until(http, x, expect_status: int, done, max_requests: int, what: str,
                 trace: list) -> int:
    """Send ``x`` to the model (~5 requests/s) until ``done()``, at most ``max_requests`` times;
    every answer must have ``expect_status``. Returns how many were sent."""
    body = v2_body("features", x)
    for sent in range(max_requests + 1):
        if done():
            return sent
        if sent == max_requests:
            break
        r = http.post(f"/v2/models/{MODEL}/infer", json=body)
        trace.append((round(time.time(), 2), r.status_code, r.text[:100]))
        assert r.status_code == expect_status, trace[-10:]
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {max_requests} requests: {trace[-30:]}")


def _settled(app) -> bool:
    from ray import serve

    alerter = serve.get_deployment_handle("AlerterDeployment", app_name="timeshare")
    status = alerter.status.remote().result()
    ours = [k for k in status["groups"] if f"model={MODEL!r}" in k]
    return not ours and all(c["pending"] == 0 for c in status["channels"].values())


def _until(condition, what: str, trace: list, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}: {trace[-30:]}")
        time.sleep(0.1)


def _when(rfc3339: str) -> datetime:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


def _check_payload(note: dict, status: str) -> dict:
    """Alertmanager webhook v4 with one alert for the model; returns that alert."""
    assert note["version"] == "4" and note["status"] == status, note
    assert note["receiver"] == "hook"
    assert note["commonLabels"]["severity"] == "P1"
    assert note["commonLabels"]["alertname"] == RULE
    assert note["commonLabels"]["model"] == MODEL
    assert note["commonLabels"]["env"] == "prod"
    assert len(note["alerts"]) == 1, note
    alert = note["alerts"][0]
    assert alert["status"] == status
    assert alert["labels"] == {"alertname": RULE, "severity": "P1", "env": "prod",
                               "model": MODEL}
    assert "errors share" in alert["annotations"]["summary"]
    assert alert["startsAt"] and len(alert["fingerprint"]) > 0
    return alert


def test_failing_model_pages_once_then_resolves_once(app, http):
    assert _notes(app) == [], "someone else alerted about chaos-alert"
    ok_rows, bad_rows = iris_rows(1), iris_rows(1, control=FAIL)
    trace: list = []
    # The circuit breaker of chaos-alert@cpu (the app's default: failure rate >= 50 % over the
    # last 50 calls, at least 20 calls) must stay closed: once open it refuses the healthy
    # recovery traffic with 503 too, which is a second, genuine incident (seen: firing,
    # resolved, firing). So the breaker's window first gets 30 successes and the failing
    # phase sends at most 24 calls (24 of the last 50 < 50 %). The successes then leave the
    # alert rule's 4 s window before the failures start.
    warmup, max_failing = 30, 24
    for _ in range(warmup):
        r = http.post(f"/v2/models/{MODEL}/infer", json=v2_body("features", ok_rows))
        assert r.status_code == 200, r.text
    time.sleep(4.5)

    def firing() -> bool:
        return any(n["status"] == "firing" for n in _notes(app))

    failed = _drive_until(http, bad_rows, 503, firing, max_failing, "firing notification",
                         trace)
    assert failed >= 5  # the rule needs min_requests in its window

    def resolved() -> bool:
        return any(n["status"] == "resolved" for n in _notes(app))

    # Recovery: healthy traffic dilutes the error share below the threshold.
    _drive_until(http, ok_rows, 200, resolved, 200, "resolved notification", trace)
    # Nothing more can come: the alerter holds no group for the model (a resolved group is
    # dropped once its resolution is flushed) and no channel has a notification queued.
    _until(lambda: _settled(app), "the alerter settled after the resolution", trace)
    notes = _notes(app)
    story = "\n".join([*(f"{a['status']} {a['startsAt']} {a['endsAt']} {a['annotations']}"
                          for n in notes for a in n["alerts"]), *map(str, trace)])
    assert [n["status"] for n in notes] == ["firing", "resolved"], story
    fired = _check_payload(notes[0], "firing")
    done = _check_payload(notes[1], "resolved")
    assert fired["fingerprint"] == done["fingerprint"]
    assert fired["startsAt"] == done["startsAt"]
    assert fired["endsAt"] == "0001-01-01T00:00:00Z"  # Alertmanager's unset time
    assert _when(done["endsAt"]) > _when(done["startsAt"])
    assert notes[0]["groupKey"] == notes[1]["groupKey"]

    # the alerter reports through GET /v2/status
    st = httpx.get(f"{app.url}/v2/status", headers={"X-API-Key": API_KEY},
                   timeout=30).json()["alerts"]
    assert st["environment"] == "prod"
    assert st["rejected"] == 0
    hook = [c for name, c in st["channels"].items() if name.startswith("hook/")]
    assert len(hook) == 1, st["channels"]
    assert hook[0]["delivered"] >= 2 and hook[0]["failed"] == 0
    # once resolved and notified, the alert has left its group
    assert all(fired["fingerprint"] not in fps for fps in st["groups"].values()), st["groups"]
