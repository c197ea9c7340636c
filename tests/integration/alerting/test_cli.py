"""``timeshare alerts test``: a test notification through the configured route, per-channel
answers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import yaml

from alerting.cli import alerts_test
from tests.support.receiver import Receiver


def write_config(tmp_path: Path, receiver: Receiver, env: str = "prod") -> Path:
    cfg = {
        "alerting": {
            "environment": env,
            "route": {
                "receiver": "team",
                "routes": [
                    {"matchers": ['severity=~"P1|P2"'], "receiver": "pager", "continue": True},
                    {"receiver": "team"},
                ],
            },
            "receivers": [
                {
                    "name": "pager",
                    "channels": [
                        {
                            "type": "pagerduty",
                            "url": receiver.url("/pd"),
                            "routing_key_env": "CLI_TEST_PD_KEY",
                        }
                    ],
                },
                {
                    "name": "team",
                    "channels": [
                        {"type": "slack", "url": receiver.url("/slack")},
                        {
                            "type": "webhook",
                            "url": receiver.url("/broken"),
                            "delivery": {"max_attempts": 1},
                        },
                    ],
                },
            ],
        }
    }
    path = tmp_path / f"{env}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_alerts_test_reports_each_channel(tmp_path: Path, receiver: Receiver, monkeypatch) -> None:
    monkeypatch.setenv("CLI_TEST_PD_KEY", "pd-key")
    receiver.on("/broken", (400, '{"error": "nope"}'))
    out = io.StringIO()
    rc = alerts_test(
        [
            "--severity",
            "p1",
            "--env",
            "prod",
            "--config",
            str(write_config(tmp_path, receiver)),
            "--json",
        ],
        out=out,
    )
    report = json.loads(out.getvalue())
    assert rc == 1  # one channel failed
    by = {c["channel"]: (c["ok"], c["status"]) for c in report["channels"]}
    assert by == {
        "pager/pagerduty/0": (True, 200),
        "team/slack/0": (True, 200),
        "team/webhook/1": (False, 400),
    }
    assert receiver.at("/pd")[0].body["routing_key"] == "pd-key"
    assert (
        receiver.at("/slack")[0]
        .body["text"]
        .startswith("[TEST] [FIRING:1] TimeshareTestAlert (P1 prod)")
    )


def test_alerts_test_all_ok_and_p3_does_not_page(
    tmp_path: Path, receiver: Receiver, monkeypatch
) -> None:
    monkeypatch.setenv("CLI_TEST_PD_KEY", "pd-key")
    path = write_config(tmp_path, receiver)
    data = yaml.safe_load(path.read_text())
    data["alerting"]["receivers"][1]["channels"].pop()  # drop the broken webhook
    path.write_text(yaml.safe_dump(data))
    out = io.StringIO()
    assert alerts_test(["--severity", "P3", "--env", "prod", "--config", str(path)], out=out) == 0
    assert "team/slack/0" in out.getvalue() and "ok" in out.getvalue()
    assert receiver.at("/pd") == []


def test_alerts_test_config_errors(tmp_path: Path, receiver: Receiver, capsys) -> None:
    path = write_config(tmp_path, receiver)
    assert (
        alerts_test(["--severity", "P1", "--env", "prod", "--config", str(path)]) == 2
    )  # key env unset
    assert "CLI_TEST_PD_KEY" in capsys.readouterr().err
    assert alerts_test(["--severity", "P1", "--env", "staging", "--config", str(path)]) == 2
    assert "not 'staging'" in capsys.readouterr().err
    assert alerts_test(["--severity", "P9", "--env", "prod"]) == 2
    assert (
        alerts_test(
            ["--severity", "P1", "--env", "prod", "--config", str(tmp_path / "missing.yaml")]
        )
        == 2
    )
