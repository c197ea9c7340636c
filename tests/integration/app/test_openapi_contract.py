"""The API exactly as documented (#37): schemathesis, every check (``--checks all``), against the
real app's own OpenAPI document on both front doors, Ray Serve's port and Timeshare's listener
(``router.listener``). Bounded: a fixed seed, a few examples per operation, one worker.

Nothing is excluded: no check is turned off and no operation filtered. The run has no operator
key, on purpose: this app is shared by the whole session, and with the key schemathesis's
stateful phase would feed real model names from ``/v2/repository/index`` to ``unload``. So the
key-guarded routes (declared with the key's security schemes) are held to refusing without it
(401, declared; ``ignored_auth``); schemathesis reports them as a warning, not a failure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

SEED = 37
MAX_EXAMPLES = 10  # per operation and phase
TIMEOUT_S = 420  # a hard stop: about 1.5 min per port on 2 busy cores


def _schemathesis() -> Path:
    exe = Path(sys.executable).with_name("schemathesis")
    if not exe.exists():
        pytest.skip("schemathesis is not installed (pip install -e '.[test]')")
    return exe


@pytest.fixture(params=["serve", "listener"])
def base_url(request, app) -> str:
    url = app.url if request.param == "serve" else app.listener
    assert url is not None, "the session's app has no listener"
    return url


def test_front_doors_answer_as_documented(base_url):
    """The findings of #37, spelled out (schemathesis below finds them too)."""
    with httpx.Client(base_url=base_url, timeout=30) as c:
        r = c.request("TRACE", "/v2/models/digits-small/infer")
        assert r.status_code == 405 and r.headers["allow"] == "POST", r.headers
        r = c.request("PUT", "/v2/repository/models/x/versions/1")
        assert r.status_code == 405 and r.headers["allow"] == "DELETE, POST", r.headers
        r = c.get("/v2/models/no-such-model/ready")
        assert r.status_code == 404 and r.json()["ready"] is False, r.text
        assert r.json()["type"] == "ModelNotFound" and r.json()["field"] == "model", r.text
        r = c.get("/v2/models/digits-small/versions/999/ready")
        assert r.status_code == 404 and r.json()["field"] == "version", r.text
        # an unknown model is 404 whatever the body, on the fast path too
        for body in ({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}, {}):
            r = c.post("/v2/models/no-such-model/infer", json=body)
            assert r.status_code == 404 and r.json()["type"] == "ModelNotFound", r.text
        spec = c.get("/openapi.json").json()
        tensor = spec["paths"]["/v2/models/{name}/infer"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]["properties"]["inputs"]["items"]
        assert "data" in tensor["required"], tensor


def test_schemathesis_finds_nothing(base_url, tmp_path):
    cmd = [str(_schemathesis()), "run", f"{base_url}/openapi.json", "--checks", "all",
           "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1",
           "--generation-database", "none", "--request-timeout", "30", "--no-color",
           "--report", "junit", "--report-dir", str(tmp_path)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                             cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"schemathesis ran past {TIMEOUT_S} s:\n{out[-4000:]}")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-12000:]
    assert "Tested: " in out and " passed" in out, out[-4000:]
