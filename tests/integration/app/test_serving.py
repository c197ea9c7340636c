"""The serving core against a real local Ray Serve app: HTTP v2, handle, hot reload, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from deploy.demo_data import load_splits
from tests.support.app import API_KEY
from tests.support.v2 import v2_body


def _http_logits(http, model: str, x: np.ndarray) -> np.ndarray:
    # A generous deadline: these tests compare the models themselves, so no answer may come
    # from a fallback because a loaded machine was slow.
    r = http.post(f"/v2/models/{model}/infer", json=v2_body("pixels", x, deadline_ms=60000))
    assert r.status_code == 200, r.text
    assert r.json()["parameters"]["degraded"] is False, r.json()["parameters"]
    out = r.json()["outputs"][0]
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def test_large_beats_small_on_held_out_split_over_http(http):
    split = load_splits("digits")
    acc = {}
    for model in ("digits-small", "digits-large"):
        preds = [_http_logits(http, model, split.test_x[i:i + 64]).argmax(1)
                 for i in range(0, len(split.test_x), 64)]
        acc[model] = float((np.concatenate(preds) == split.test_y).mean())
    assert acc["digits-large"] > acc["digits-small"] + 0.01, acc
    assert acc["digits-small"] > 0.9


DRIVER = r"""
import json, sys, numpy as np, ray
from router.client import TimeshareClient
ray.init(address=sys.argv[1], namespace="serve", log_to_driver=False)
x = np.asarray(json.loads(sys.argv[2]), dtype=np.float32)
out = {}
client = TimeshareClient()
for m in ("digits-small", "digits-large"):
    r = client.infer(m, {"pixels": x}, caller="driver-test", deadline_ms=60000)
    out[m] = {"logits": r.outputs["logits"].tolist(), "served_by": r.served_by,
              "version": r.version}
print("RESULT" + json.dumps(out))
"""


def test_separate_ray_driver_gets_identical_outputs_to_http(app, http):
    import ray

    x = load_splits("digits").test_x[:5]
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.run([sys.executable, "-c", DRIVER, address, json.dumps(x.tolist())],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    via_handle = json.loads(line[len("RESULT"):])
    for model in ("digits-small", "digits-large"):
        handle_logits = np.asarray(via_handle[model]["logits"], dtype=np.float32)
        np.testing.assert_array_equal(handle_logits, _http_logits(http, model, x))
        assert via_handle[model]["served_by"] == f"cpu:{model}@1"


TRITON = r"""
import json, sys
import numpy as np
import tritonclient.http as th
client = th.InferenceServerClient(sys.argv[1])
out = {"live": client.is_server_live(), "ready": client.is_server_ready(),
       "model_ready": client.is_model_ready("digits-small"),
       "input": client.get_model_metadata("digits-small")["inputs"][0], "infer": []}
x = np.asarray(json.loads(sys.argv[2]), dtype=np.float32)
for binary in (True, False):
    inp = th.InferInput("pixels", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    outs = [th.InferRequestedOutput("logits", binary_data=binary)]
    # Triton's own `priority` argument is an int: Timeshare reads it as its class number
    # (0 realtime .. 3 background; 0 is not sent by tritonclient = the model's default).
    res = client.infer("digits-small", [inp], outputs=outs, priority=2,
                       parameters={"caller": "triton"})
    out["infer"].append({"shape": list(res.as_numpy("logits").shape),
                         "served_by": res.get_response()["parameters"]["served_by"]})
try:
    client.infer("no-such-model", [inp])
    out["unknown"] = None
except Exception as e:
    out["unknown"] = str(e)
print("RESULT" + json.dumps(out))
"""


def test_unmodified_tritonclient_binary_and_json(app):
    # The client runs in its own process, as a user's would: tritonclient.http brings gevent,
    # whose hub and thread pool do not belong in a process that also hosts a Ray driver.
    x = load_splits("digits").test_x[:3]
    proc = subprocess.run(
        [sys.executable, "-c", TRITON, app.url.removeprefix("http://"), json.dumps(x.tolist())],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines()
                          if ln.startswith("RESULT"))[len("RESULT"):])
    assert out["live"] and out["ready"] and out["model_ready"], out
    assert out["input"] == {"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}
    assert out["infer"] == [{"shape": [3, 10], "served_by": "cpu:digits-small@1"}] * 2, out
    assert out["unknown"] is not None and "unknown model" in out["unknown"], out


@pytest.mark.parametrize("path, body, status, field", [
    ("/v2/models/nope/infer", v2_body("pixels", np.zeros((1, 64))), 404, "model"),
    ("/v2/models/digits-small/versions/9/infer", v2_body("pixels", np.zeros((1, 64))), 404,
     "version"),
    ("/v2/models/digits-small/infer", v2_body("pixelz", np.zeros((1, 64))), 400, "inputs.pixelz"),
    ("/v2/models/digits-small/infer", {"inputs": [{"name": "pixels", "shape": [1, 64],
                                                   "datatype": "INT64", "data": [1.5] * 64}]},
     400, "inputs.pixels.data"),
    ("/v2/models/digits-small/infer", {"inputs": [{"name": "pixels", "shape": [1, 64],
                                                   "datatype": "FP64x", "data": [1] * 64}]},
     400, "inputs.pixels.datatype"),
    ("/v2/models/digits-small/infer", v2_body("pixels", np.zeros((1, 63))), 400, "inputs.pixels"),
    ("/v2/models/digits-small/infer", v2_body("pixels", np.zeros((1, 8, 8))), 400,
     "inputs.pixels"),
    ("/v2/models/digits-small/infer", v2_body("pixels", np.zeros((65, 64))), 400,
     "inputs.pixels"),
    ("/v2/models/digits-small/infer", {"inputs": [{"name": "pixels", "shape": [1, 2],
                                                   "datatype": "FP32", "data": ["a", "b"]}]},
     400, "inputs.pixels.data"),
    ("/v2/models/digits-small/infer", {"inputs": []}, 400, "inputs"),
    ("/v2/models/digits-small/infer", v2_body("pixels", np.zeros((1, 64)), priority="urgent"),
     400, "parameters.priority"),
])
def test_bad_input_gets_4xx_naming_the_field(http, path, body, status, field):
    r = http.post(path, json=body)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field


def test_malformed_and_oversized_bodies(app, http):
    r = http.post("/v2/models/digits-small/infer", content=b'{"inputs": [', headers={
        "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body"
    huge = b"[" + b"0," * (20 << 20) + b"0]"
    r = http.post("/v2/models/digits-small/infer", content=huge)
    assert r.status_code == 413 and r.json()["field"] == "body"
    # the replica survived every one of them
    assert http.post("/v2/models/digits-small/infer",
                     json=v2_body("pixels", np.zeros((1, 64)))).status_code == 200


def test_handle_raises_typed_errors(app):
    from router.errors import InvalidRequest, ModelNotFound
    from router.schemas import InferenceRequest

    with pytest.raises(InvalidRequest) as e:
        app.handle.infer.remote(InferenceRequest(model="digits-small",
                                                 inputs={"pixels": np.zeros((1, 3))})).result()
    assert e.value.field == "inputs.pixels" and "[batch, 64]" in e.value.message
    with pytest.raises(ModelNotFound):
        app.handle.infer.remote(InferenceRequest(model="nope",
                                                 inputs={"pixels": np.zeros((1, 64))})).result()


def test_new_version_served_without_restart_and_corrupt_one_refused(app, http):
    repo = app.repo
    name = "hot-reload"
    shutil.copytree(repo / "iris-mlp1x16", repo / name, ignore=shutil.ignore_patterns("2*"))
    cfg = (repo / name / "config.yaml").read_text().replace("name: iris-mlp1x16", f"name: {name}")
    (repo / name / "config.yaml").write_text(cfg)
    body = v2_body("features", np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32))

    def served_by():
        r = http.post(f"/v2/models/{name}/infer", json=body)
        return r.json()["parameters"]["served_by"] if r.status_code == 200 else None

    app.wait_for(lambda: served_by() == f"cpu:{name}@1", 30, "new model picked up")
    v1 = http.post(f"/v2/models/{name}/infer", json=body).json()["outputs"][0]["data"]
    # version 2: other weights (a TorchScript archive carries its own architecture)
    shutil.copytree(repo / "iris-mlp1x64" / "1", repo / name / ".incoming")
    (repo / name / ".incoming").rename(repo / name / "2")
    app.wait_for(lambda: served_by() == f"cpu:{name}@2", 30, "version 2 made default")
    v2 = http.post(f"/v2/models/{name}/infer", json=body).json()["outputs"][0]["data"]
    assert v1 != v2
    pinned = http.post(f"/v2/models/{name}/versions/1/infer", json=body)
    assert pinned.json()["parameters"]["served_by"] == f"cpu:{name}@1"  # both versions live
    # version 3 is corrupt: refused, reported, version 2 keeps serving
    (repo / name / "3").mkdir()
    (repo / name / "3" / "model.pt").write_bytes(b"this is not a torchscript archive")

    def v3_failed():
        rows = http.post("/v2/repository/index", headers={"X-API-Key": API_KEY}).json()
        return any(r["name"] == name and r["version"] == "3" and r["state"] == "FAILED"
                   for r in rows)

    app.wait_for(v3_failed, 30, "corrupt version reported")
    assert served_by() == f"cpu:{name}@2"
    r = http.post(f"/v2/models/{name}/versions/3/infer", json=body)
    assert r.status_code == 404 and "failed" in r.json()["error"]


def test_repository_api_requires_key_and_unloads_and_loads(http):
    assert http.post("/v2/repository/index").status_code == 401
    assert http.post("/v2/repository/index", headers={"X-API-Key": "wrong"}).status_code == 401
    auth = {"Authorization": f"Bearer {API_KEY}"}
    rows = http.post("/v2/repository/index", headers=auth).json()
    assert {"name": "digits-small", "version": "1", "state": "READY"} in rows
    assert http.post("/v2/repository/models/iris-mlp1x256/unload").status_code == 401
    body = v2_body("features", np.ones((1, 4), dtype=np.float32))
    r = http.post("/v2/repository/models/iris-mlp1x64/unload", headers=auth)
    assert r.status_code == 200, r.text
    assert http.post("/v2/models/iris-mlp1x64/infer", json=body).status_code == 404
    r = http.post("/v2/repository/models/iris-mlp1x64/load", headers=auth)
    assert r.status_code == 200 and r.json()["state"] == "READY", r.text
    assert http.post("/v2/models/iris-mlp1x64/infer", json=body).status_code == 200
    assert http.post("/v2/repository/models/nope/load", headers=auth).status_code == 404


def test_status_lists_devices_models_and_queues(http):
    st = http.get("/v2/status", headers={"X-API-Key": API_KEY}).json()
    cpu = st["pools"]["cpu"]
    assert cpu["models"]["digits-small"]["default_version"] == "1"
    assert "queue_depth" in cpu["device"] and "resident" in cpu["device"]


def test_status_shows_each_priority_class_end_to_end_and_on_the_device(http):
    auth = {"X-API-Key": API_KEY}

    x = np.random.default_rng(7).normal(size=(3, 64)).astype(np.float32)
    for priority, rows in (("realtime", 1), ("batch", 3)):
        for i in range(4):  # fresh rows, cache bypassed: every request reaches the device
            r = http.post("/v2/models/digits-small/infer", json=v2_body(
                "pixels", x[:rows] + i, priority=priority, deadline_ms=60000,
                cache_skip_read=True, cache_skip_write=True))
            assert r.status_code == 200 and not r.json()["parameters"]["degraded"], r.text
    st = http.get("/v2/status", headers=auth).json()
    edge = st["classes"]["by_class"]
    dev = st["pools"]["cpu"]["device"]["classes"]["by_class"]
    assert st["classes"]["window_s"] > 0
    for label in ("realtime", "batch"):
        # end to end at the ingress: the 4 requests (the window is 30 s or more: still in it)
        assert edge[label]["requests"] >= 4, edge[label]
        assert edge[label]["rate_per_s"] > 0 and edge[label]["latency_ms"]["p99"] > 0
        assert {"shed", "refused", "errors"} <= set(edge[label])
        # on the device: queue wait against compute, per class
        assert dev[label]["requests"] >= 4, dev[label]
        assert dev[label]["compute_ms"]["p50"] > 0 and dev[label]["queue_ms"]["p99"] is not None
        assert "refused" in dev[label]
    assert set(edge) == set(dev) == {"realtime", "interactive", "batch", "background"}


def test_fast_then_refine_streams_over_sse_and_the_handle(app, http):
    from router.schemas import InferenceRequest

    x = load_splits("digits").test_x[:2]
    with http.stream("POST", "/v2/models/digits-refine/infer_stream",
                     json=v2_body("pixels", x)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in r.iter_lines()
                  if line.startswith("data: ")]
    assert [e["model_name"] for e in events] == ["digits-small", "digits-large"]
    assert [json.loads(e["parameters"]["route"])["decision"] for e in events] == [
        "refine", "refined"]
    stream = app.handle.options(stream=True).infer_stream.remote(
        InferenceRequest(model="digits-refine", inputs={"pixels": x}))
    answers = list(stream)
    assert [(a.model, a.final) for a in answers] == [("digits-small", False),
                                                     ("digits-large", True)]
    bad = http.post("/v2/models/digits-refine/infer_stream", json=v2_body("pixels", x[:, :5]))
    assert bad.status_code == 400 and bad.json()["field"] == "inputs.pixels"


def test_cascade_route_reports_its_decision(http):
    split = load_splits("digits")
    decisions = set()
    for i in range(30):
        r = http.post("/v2/models/digits/infer", json=v2_body("pixels", split.test_x[i:i + 1]))
        assert r.status_code == 200
        route = json.loads(r.json()["parameters"]["route"])
        assert route["route"] == "digits" and route["confidence"] is not None
        decisions.add(route["decision"])
    assert decisions == {"cheap", "escalated"}


def test_concurrent_client_calls_share_handle_calls_and_keep_their_own_answers(app):
    """``TimeshareClient.infer_async`` callers on one loop share calls (``Ingress.infer_many``):
    fewer Ray calls than requests, each answer the one a lone call gets, and a bad request's
    typed error raised to its own caller only."""
    import asyncio

    from ray import serve

    from router.client import TimeshareClient
    from router.errors import InvalidRequest

    x = load_splits("digits").test_x[:24]

    async def run() -> tuple[list, dict, list]:
        client = TimeshareClient(serve.get_app_handle("timeshare"), max_in_flight=1)
        alone = [await client.infer_async("digits-small", {"pixels": x[i:i + 1]},
                                          deadline_ms=60000) for i in range(3)]
        calls = [client.infer_async("digits-small", {"pixels": x[i:i + 1]}, deadline_ms=60000,
                                    cache={"skip_read": True})
                 for i in range(len(x))]
        calls.insert(7, client.infer_async("digits-small", {"pixels": np.zeros((1, 3))}))
        out = await asyncio.gather(*calls, return_exceptions=True)
        return out, client.coalescing(), alone

    out, counts, alone = asyncio.run(run())
    bad = out.pop(7)
    assert isinstance(bad, InvalidRequest) and bad.field == "inputs.pixels", bad
    assert all(not isinstance(r, BaseException) for r in out), out
    assert counts["requests"] == 3 + len(x) + 1 and counts["calls"] < counts["requests"] - 10
    for i, r in enumerate(out):
        assert r.degraded is False and ":digits-small@" in r.served_by, r
        assert r.outputs["logits"].shape == (1, 10)
        if i < 3:
            np.testing.assert_allclose(r.outputs["logits"], alone[i].outputs["logits"],
                                       atol=1e-5)


def test_client_calls_cross_serves_grpc_transport_with_plain_pickle(app):
    """``TimeshareClient`` pickles its calls with plain pickle (``router.client``). Over Serve's
    gRPC transport (``_by_reference=False``: every handle's under ``make serve``'s settings),
    single and shared calls get the answers the cloudpickle client gets, and errors arrive as
    the typed exceptions, with their fields."""
    import asyncio

    from ray import serve

    from router.client import TimeshareClient
    from router.errors import InvalidRequest, ModelNotFound

    x = load_splits("digits").test_x[:6]
    grpc_handle = serve.get_app_handle("timeshare").options(_by_reference=False)
    assert TimeshareClient(grpc_handle).handle.handle_options.response_serialization == "pickle"
    with pytest.raises(ValueError, match="serialization"):
        TimeshareClient(grpc_handle, serialization="json")  # type: ignore[arg-type]

    async def run(client: TimeshareClient) -> list:
        alone = await client.infer_async("digits-small", {"pixels": x[:1]}, deadline_ms=60000)
        shared = [client.infer_async("digits-small", {"pixels": x[i:i + 1]}, deadline_ms=60000)
                  for i in range(len(x))]
        shared += [client.infer_async("nope", {"pixels": x[:1]}),
                   client.infer_async("digits-small", {"pixels": np.zeros((1, 3))})]
        return [alone, *await asyncio.gather(*shared, return_exceptions=True)]

    plain = asyncio.run(run(TimeshareClient(grpc_handle, max_in_flight=1)))
    cloud = asyncio.run(run(TimeshareClient(grpc_handle, max_in_flight=1,
                                            serialization="cloudpickle")))
    for got, want in zip(plain[:-2], cloud[:-2], strict=True):
        assert not isinstance(got, BaseException), got
        assert got.served_by == want.served_by == "cpu:digits-small@1"
        np.testing.assert_array_equal(got.outputs["logits"], want.outputs["logits"])
    missing, bad = plain[-2:]
    assert isinstance(missing, ModelNotFound) and missing.field == "model", missing
    assert isinstance(bad, InvalidRequest) and bad.field == "inputs.pixels", bad


def test_infer_many_refuses_what_is_not_a_bounded_list(app):
    from router.errors import InvalidRequest
    from router.schemas import MAX_REQUESTS_PER_CALL, InferenceRequest

    for bad in ([], "x", [InferenceRequest(model="digits-small",
                                           inputs={"pixels": np.zeros((1, 64))})]
                * (MAX_REQUESTS_PER_CALL + 1)):
        with pytest.raises(InvalidRequest) as e:
            app.handle.infer_many.remote(bad).result()
        assert e.value.field == "requests"
    one = app.handle.infer_many.remote([{"model": "digits-small"}]).result()
    assert isinstance(one[0], InvalidRequest) and one[0].field == "requests[0]"
