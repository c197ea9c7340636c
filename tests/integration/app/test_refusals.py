"""A model the trust boundary refuses, in the running app: the operator sees why, everywhere.

A model folder whose config names a factory module outside the app's ``trust.allowed_modules``
is dropped into the live repository. Nothing of that module runs (it would write a marker
file); the reason, with the file and the field, shows in ``/v2/status``, in ``timeshare
status``, in exactly one WARNING line of each pool replica's log (however many polls pass), and
in a P3 alert delivered to the app's real webhook receiver, which resolves when the folder is
removed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from tests.integration.app import refusal_canary
from tests.support.app import API_KEY

MODEL = "refused-37"
RULE = "TimeshareModelLoadFailed"
HOOK = "/alerts"
FACTORY = "tests.integration.app.refusal_canary:make"
ROOT = Path(__file__).resolve().parents[3]


def _notes(app) -> list[dict]:
    return [r.body for r in app.receiver.at(HOOK) if isinstance(r.body, dict)
            and r.body.get("groupLabels") == {"alertname": RULE, "model": MODEL}]


def _pool_logs() -> list[Path]:
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
    return [Path(p) for p in glob.glob(str(logs / "replica_*CPUPool*.log"))]


def _warnings(path: Path) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines()
            if f"model {MODEL} config refused" in line]


def _status(app) -> dict:
    r = httpx.get(f"{app.url}/v2/status", headers={"X-API-Key": API_KEY}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _models(app) -> dict:
    return _status(app)["pools"]["cpu"].get("models", {})  # none while a replica restarts


def test_a_refused_model_says_why_everywhere_and_runs_nothing(app):
    # The canary works: imported, it writes its marker. Then it is gone again.
    assert refusal_canary.MARKER.exists()
    refusal_canary.MARKER.unlink()
    assert _notes(app) == [], "someone else alerted about this model"
    src = yaml.safe_load((app.repo / "iris-mlp2x16" / "config.yaml").read_text())
    src.update(name=MODEL, architecture=FACTORY)
    staged = app.repo / f".{MODEL}"
    (staged / "1").mkdir(parents=True)
    shutil.copy(app.repo / "iris-mlp2x16" / "1" / "model.safetensors", staged / "1")
    (staged / "config.yaml").write_text(yaml.safe_dump(src, sort_keys=False))
    staged.rename(app.repo / MODEL)  # published as an operator would: whole, by a rename
    try:
        def entry() -> dict | None:
            return _models(app).get(MODEL)

        app.wait_for(lambda: entry() is not None, 30, "the refused model in /v2/status")
        m = entry()
        assert m is not None and m["state"] == "refused" and m["default_version"] is None
        problem = m["problem"]
        assert problem["state"] == "refused"
        assert problem["file"] == f"{MODEL}/config.yaml" and problem["field"] == "architecture"
        reason = problem["reason"]
        assert reason.startswith(f"{MODEL}/config.yaml [architecture]: ")
        assert "not in the operator's allowlist" in reason and "nothing was imported" in reason

        # timeshare status, as an operator runs it
        out = subprocess.run(
            [sys.executable, "-m", "deploy.cli", "status", "--url", app.url, "--api-key",
             API_KEY], cwd=ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, out.stderr
        assert f"{MODEL} config refused: {reason}" in out.stdout, out.stdout
        assert any(line.split()[:2] == [MODEL, "refused"] for line in out.stdout.splitlines())

        # a P3 alert, delivered to the real receiver, with the reason
        app.wait_for(lambda: any(n["status"] == "firing" for n in _notes(app)), 30,
                     "a firing notification")
        fired = next(n for n in _notes(app) if n["status"] == "firing")["alerts"][0]
        assert fired["labels"]["severity"] == "P3" and fired["labels"]["model"] == MODEL
        assert reason in fired["annotations"]["summary"]

        # exactly one WARNING line from the app's one CPU pool replica, however many polls
        # (0.3 s) pass (the logs of replicas an earlier fault test killed hold none)
        time.sleep(3.0)
        lines = [line for log in _pool_logs() for line in _warnings(log)]
        assert len(lines) == 1, (_pool_logs(), lines)
        assert "WARNING" in lines[0] and reason in lines[0]
        assert not refusal_canary.MARKER.exists(), "the refused module was imported"
    finally:
        shutil.rmtree(app.repo / MODEL, ignore_errors=True)

    # the folder removed: the model leaves the status and the alert resolves
    app.wait_for(lambda: MODEL not in _models(app), 30,
                 "the model gone from /v2/status")
    app.wait_for(lambda: any(n["status"] == "resolved" for n in _notes(app)), 30,
                 "a resolved notification")
    assert [n["status"] for n in _notes(app)] == ["firing", "resolved"]
    assert not refusal_canary.MARKER.exists()
