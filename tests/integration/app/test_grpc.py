"""The Open Inference Protocol over gRPC (#39, router.grpc_v2) with the unmodified
``tritonclient.grpc`` (and Triton's own generated stubs, for typed contents) against the real
app on a local Ray Serve: metadata, readiness, raw and typed tensors, requested outputs,
parameters and labels as over HTTP, errors as status codes, deadlines and cancellation."""

from __future__ import annotations

import json
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from deploy.demo_data import load_splits
from tests.integration.app.appkit import HANG, make_chaos_model
from tests.support.app import API_KEY
from tests.support.v2 import iris_rows, v2_body


@pytest.fixture(scope="module")
def client(app):
    c = tg.InferenceServerClient(app.grpc)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(app):
    with grpc.insecure_channel(app.grpc) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _infer(client, model: str, x: np.ndarray, *, name: str = "pixels", **kw):
    return client.infer(model, [_input(name, x)], **kw)


def _status(excinfo) -> str:
    return excinfo.value.status()


def _params(result) -> dict:
    return {k: getattr(v, v.WhichOneof("parameter_choice"))
            for k, v in result.get_response().parameters.items()}


def test_metadata_and_readiness(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("digits-small")
    assert client.is_model_ready("digits")  # a route is a virtual model
    assert not client.is_model_ready("no-such-model")
    assert client.get_server_metadata().name == "timeshare"
    meta = client.get_model_metadata("digits-small", as_json=True)
    assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": ["-1", "64"]}]
    assert meta["outputs"][0]["name"] == "logits" and "1" in meta["versions"]
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no-such-model")
    assert _status(e) == "StatusCode.NOT_FOUND"


def test_raw_infer_with_parameters_and_labels_as_over_http(client, http):
    x = load_splits("digits").test_x[:3]
    res = _infer(client, "digits-small", x, outputs=[tg.InferRequestedOutput("logits")],
                 priority=2, parameters={"caller": "triton-grpc", "deadline_ms": 60000},
                 request_id="r-1")
    logits = res.as_numpy("logits")
    assert logits.shape == (3, 10) and res.get_response().id == "r-1"
    p = _params(res)
    assert p["served_by"] == "cpu:digits-small@1" and p["degraded"] is False
    assert p["caller"] == "triton-grpc" and p["caller_verified"] is False
    assert {"cache", "queue_ms", "compute_ms", "total_ms"} <= set(p)
    r = http.post("/v2/models/digits-small/infer", json=v2_body("pixels", x, deadline_ms=60000))
    np.testing.assert_array_equal(
        logits, np.asarray(r.json()["outputs"][0]["data"], np.float32).reshape(3, 10))


def test_typed_contents_with_tritons_own_stubs(stub, client):
    x = load_splits("digits").test_x[:2].astype(np.float32)
    req = service_pb2.ModelInferRequest(model_name="digits-small")
    t = req.inputs.add(name="pixels", datatype="FP32", shape=[2, 64])
    t.contents.fp32_contents.extend(x.reshape(-1).tolist())
    req.outputs.add(name="logits")
    resp = stub.ModelInfer(req, timeout=30)
    assert not resp.raw_output_contents  # typed in, typed out
    out = resp.outputs[0]
    typed = np.asarray(out.contents.fp32_contents, np.float32).reshape(list(out.shape))
    np.testing.assert_array_equal(typed, _infer(client, "digits-small", x).as_numpy("logits"))


def test_digits_accuracy_equals_https_on_the_full_set(client, http):
    split = load_splits("digits")
    xs = np.concatenate([split.train_x, split.calib_x, split.test_x]).astype(np.float32)
    ys = np.concatenate([split.train_y, split.calib_y, split.test_y])
    for model in ("digits-small", "digits-large"):
        over_grpc, over_http = [], []
        for i in range(0, len(xs), 64):
            x = xs[i:i + 64]
            res = _infer(client, model, x, parameters={"deadline_ms": 60000})
            assert _params(res)["degraded"] is False
            over_grpc.append(res.as_numpy("logits").argmax(1))
            r = http.post(f"/v2/models/{model}/infer",
                          json=v2_body("pixels", x, deadline_ms=60000))
            over_http.append(np.asarray(r.json()["outputs"][0]["data"]).reshape(len(x), 10)
                             .argmax(1))
        acc_grpc = float((np.concatenate(over_grpc) == ys).mean())
        acc_http = float((np.concatenate(over_http) == ys).mean())
        assert acc_grpc == acc_http > 0.9, (model, acc_grpc, acc_http)


@pytest.mark.parametrize("model, x, name, code, field", [
    ("digits-small", np.zeros((1, 63)), "pixels", "INVALID_ARGUMENT", "inputs.pixels"),
    ("digits-small", np.zeros((1, 64)), "pixelz", "INVALID_ARGUMENT", "inputs.pixelz"),
    ("no-such-model", np.zeros((1, 64)), "pixels", "NOT_FOUND", "model"),
])
def test_errors_are_status_codes_naming_the_field(client, model, x, name, code, field):
    with pytest.raises(InferenceServerException) as e:
        _infer(client, model, x, name=name)
    assert _status(e) == f"StatusCode.{code}" and field in e.value.message(), e.value


def test_unknown_version_and_output_and_bad_parameter(client):
    x = np.zeros((1, 64))
    with pytest.raises(InferenceServerException) as e:
        _infer(client, "digits-small", x, model_version="9")
    assert _status(e) == "StatusCode.NOT_FOUND" and "version" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        _infer(client, "digits-small", x, outputs=[tg.InferRequestedOutput("nope")])
    assert _status(e) == "StatusCode.INVALID_ARGUMENT" and "outputs.nope" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        _infer(client, "digits-small", x, parameters={"cache_skip_read": "yes"})
    assert (_status(e) == "StatusCode.INVALID_ARGUMENT"
            and "parameters.cache_skip_read" in e.value.message())


@pytest.fixture(scope="module")
def hang_models(app, client):
    """Two fresh chaos models with no fallback, one per test below. Fresh on purpose: a model's
    first runs are on the pool's device thread (policies.inline), so a hang leaves the pool's
    event loop free, and no earlier hang has taught the pool a 4 s service time."""
    names = ("grpc-deadline", "grpc-cancel")
    for name in names:
        make_chaos_model(app.repo, name, hang_s=4.0, deadline_ms=30000)
    for name in names:
        app.wait_for(lambda n=name: client.is_model_ready(n), 60, f"{name} loaded")
    return dict(zip(("deadline", "cancel"), names, strict=True))


def _queued(http, label: str) -> int:
    """Requests of priority class ``label`` queued on every pool device now (``/v2/status``)."""
    def walk(node) -> int:
        if isinstance(node, dict):
            return node["queue_depth"][label] if "queue_depth" in node else sum(
                walk(v) for v in node.values())
        return sum(walk(v) for v in node) if isinstance(node, list) else 0

    r = http.get("/v2/status", headers={"X-API-Key": API_KEY})
    assert r.status_code == 200, r.text
    return walk(r.json()["pools"])


def _wait_idle(client, timeout_s: float = 20.0) -> None:
    """Until the pool's device is free: an earlier test's hang may still hold it."""
    deadline = time.monotonic() + timeout_s
    while True:
        t0 = time.monotonic()
        _infer(client, "digits-small", np.zeros((1, 64)), client_timeout=30,
               parameters={"cache_skip_read": True, "cache_skip_write": True})
        if time.monotonic() - t0 < 0.3:
            return
        assert time.monotonic() < deadline, "the pool's device stayed busy"


def test_client_cancel_leaves_no_work_behind(client, http, hang_models):
    # A holds the model's device for 4 s; B (background class, so its queue depth is its own)
    # queues behind it; B's caller cancels: B's queued work goes at once, while A still runs,
    # and the service goes on answering.
    model = hang_models["cancel"]
    _wait_idle(client)
    answers: list = []
    started = time.monotonic()
    client.async_infer(model, [_input("features", iris_rows(1, HANG))],
                       callback=lambda result, error: answers.append(("a", error)),
                       client_timeout=30)
    time.sleep(0.5)
    b = client.async_infer(model, [_input("features", iris_rows(1))], priority=3,
                           callback=lambda result, error: answers.append(("b", error)),
                           client_timeout=30)
    _wait(lambda: _queued(http, "background") >= 1, f"B queued behind A ({answers})")
    b.cancel()
    _wait(lambda: _queued(http, "background") == 0, "B's queued work dropped while A runs",
          timeout_s=2.0)
    assert time.monotonic() - started < 4.0, "A finished first: the test proved nothing"
    _wait(lambda: len(answers) == 2, "both callbacks")
    got = dict(answers)
    assert got["a"] is None and "CANCELLED" in str(got["b"]), got
    assert _infer(client, "digits-small", np.zeros((1, 64))).as_numpy("logits").shape == (1, 10)


def test_short_grpc_deadline_gets_the_chains_labelled_answer(client):
    # chaos-hang hangs 3 s on the control row; its chain ends in rules: answered within the
    # gRPC deadline, labelled
    started = time.monotonic()
    res = _infer(client, "chaos-hang", iris_rows(1, HANG), name="features", client_timeout=1.5)
    assert time.monotonic() - started < 1.5
    p = _params(res)
    assert p["degraded"] is True and p["served_by"] == "rules:iris-rule", p
    assert p.get("reason"), p


def test_short_grpc_deadline_without_fallback_is_deadline_exceeded(client, hang_models):
    _wait_idle(client)  # the hang above may still hold the device: this one must start
    with pytest.raises(InferenceServerException) as e:
        _infer(client, hang_models["deadline"], iris_rows(1, HANG), name="features",
               client_timeout=0.5)
    assert _status(e) == "StatusCode.DEADLINE_EXCEEDED"
    # and the service goes on answering
    assert _infer(client, "digits-small", np.zeros((1, 64))).as_numpy("logits").shape == (1, 10)


def _input(name: str, x: np.ndarray) -> tg.InferInput:
    inp = tg.InferInput(name, list(x.shape), "FP32")
    inp.set_data_from_numpy(x.astype(np.float32))
    return inp


def _wait(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def test_oversized_message_refused_before_decoding(app, client):
    # over the app's max_body_bytes (32 MiB): gRPC refuses it before it is parsed
    with grpc.insecure_channel(app.grpc, options=[("grpc.max_send_message_length", -1)]) as ch:
        call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                              request_serializer=lambda b: b, response_deserializer=lambda b: b)
        req = service_pb2.ModelInferRequest(model_name="digits-small")
        req.inputs.add(name="pixels", datatype="FP32", shape=[1, 64])
        req.raw_input_contents.append(b"\0" * (33 << 20))
        with pytest.raises(grpc.RpcError) as e:
            call(req.SerializeToString(), timeout=30)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _infer(client, "digits-small", np.zeros((1, 64))).as_numpy("logits").shape == (1, 10)


def test_fast_then_refine_streams_over_model_stream_infer(app):
    # tritonclient.grpc's own streaming (start_stream / async_stream_infer, Triton's
    # ModelStreamInfer): the route's fast answer, then the refined one, as over HTTP SSE; a
    # bad request's error arrives in-band, naming the field, and the stream goes on.
    x = load_splits("digits").test_x[:2]
    got: list = []
    done = threading.Event()

    def on_answer(result, error):
        got.append((result, error))
        if len(got) == 4:
            done.set()

    c = tg.InferenceServerClient(app.grpc)
    try:
        c.start_stream(callback=on_answer)
        c.async_stream_infer("digits-refine", [_input("pixels", x)], request_id="s-1")
        c.async_stream_infer("digits-small", [_input("pixels", x[:, :5])], request_id="s-bad")
        c.async_stream_infer("digits-small", [_input("pixels", x)], request_id="s-2")
        assert done.wait(60), got
        c.stop_stream()
    finally:
        c.close()
    errors = [str(e) for r, e in got if e is not None]
    assert len(errors) == 1 and "inputs.pixels" in errors[0], errors
    answers = {}
    for r, e in got:
        if e is None:
            answers.setdefault(r.get_response().id, []).append(r)
    refine = answers["s-1"]
    assert [r.get_response().model_name for r in refine] == ["digits-small", "digits-large"]
    assert [_params(r)["triton_final_response"] for r in refine] == [False, True]
    assert [json.loads(_params(r)["route"])["decision"] for r in refine] == ["refine", "refined"]
    assert refine[1].as_numpy("logits").shape == (2, 10)
    (plain,) = answers["s-2"]
    assert _params(plain)["served_by"] == "cpu:digits-small@1"
