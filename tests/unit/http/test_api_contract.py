"""The API exactly as its OpenAPI document says (#37), against the real HTTP app in-process:
405 with ``Allow``, 404 for an unknown model on every per-model route, and a document that
declares what the server does. The whole-document check is schemathesis's, against the running
app on both ports (tests/integration/app/test_openapi_contract.py)."""

from __future__ import annotations

import pytest

from tests.support.errors import assert_error, assert_error_body
from tests.support.v2 import digits_body as body

pytestmark = pytest.mark.asyncio(loop_scope="package")


@pytest.mark.parametrize("method, path, allow", [
    ("GET", "/v2/models/digits-small/infer", "POST"),
    ("TRACE", "/v2/models/digits-small/versions/1/infer_stream", "POST"),
    ("DELETE", "/v2/models/digits-small/ready", "GET, HEAD"),
    ("PUT", "/v2/status", "GET, HEAD"),
    ("PATCH", "/v2/repository/models/x/versions/1", "DELETE, POST"),  # two routes, one path
    ("POST", "/openapi.json", "GET, HEAD"),  # not one of the app's routers' routes
    ("POST", "/ui", "GET, HEAD"),
])
async def test_undeclared_method_is_405_with_allow(client, method, path, allow):
    r = await client.request(method, path)
    assert_error(r, 405)
    assert r.headers["allow"] == allow
    assert allow in r.json()["error"]


@pytest.mark.parametrize("path, field", [
    ("/v2/models/nope/ready", "model"),
    ("/v2/models/nope/versions/1/ready", "model"),
    ("/v2/models/digits-small/versions/999/ready", "version"),
])
async def test_ready_of_an_unknown_model_is_404(client, path, field):
    r = await client.get(path)
    assert r.status_code == 404
    doc = r.json()
    assert doc.pop("ready") is False
    assert_error_body(404, doc, field)


async def test_ready_keeps_400_for_what_is_not_a_lookup(client):
    r = await client.get("/v2/models/" + "m" * 300 + "/ready")
    assert r.status_code == 400 and r.json()["ready"] is False and r.json()["field"] == "model"
    r = await client.get("/v2/models/digits/versions/1/ready")  # a route has no versions
    assert r.status_code == 400 and r.json()["field"] == "version"


@pytest.mark.parametrize("route", ["infer", "versions/1/infer", "infer_stream"])
@pytest.mark.parametrize("doc", [
    {}, {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32"}]},
    {"inputs": [{"name": "pixels", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]},
])
async def test_an_unknown_model_is_404_whatever_the_body(client, route, doc):
    assert_error(await client.post(f"/v2/models/nope/{route}", json=doc), 404, "model")


async def test_a_known_model_still_names_the_bad_field(client):
    doc = body()
    del doc["inputs"][0]["data"]
    assert_error(await client.post("/v2/models/digits-small/infer", json=doc), 400,
                 "inputs.pixels.data")
    assert_error(await client.post("/v2/models/digits-small/versions/999/infer", json={}),
                 404, "version")
    assert_error(await client.post("/v2/models/" + "m" * 300 + "/infer", json={}), 400, "model")
    assert_error(await client.post("/v2/models/digits/versions/1/infer", json=body()), 400,
                 "version")


async def test_openapi_document_is_exact(client):
    spec = (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    infer = paths["/v2/models/{name}/infer"]["post"]
    tensor = infer["requestBody"]["content"]["application/json"]["schema"]["properties"][
        "inputs"]["items"]
    assert set(tensor["required"]) == {"name", "shape", "datatype", "data"}
    # the binary extension is documented beside the JSON body, not as bytes any body fits
    assert list(infer["requestBody"]["content"]) == ["application/json"]
    ext = infer["x-timeshare-binary-tensor-data"]
    assert ext["header"] == "Inference-Header-Content-Length"
    assert "binary_data_size" in ext["json_header_schema"]["properties"]["inputs"]["items"][
        "properties"]["parameters"]["required"]
    assert set(infer["responses"]["200"]["content"]) == {"application/json",
                                                         "application/octet-stream"}
    stream = paths["/v2/models/{name}/infer_stream"]["post"]
    assert set(stream["responses"]["200"]["content"]) == {"text/event-stream"}
    for path, item in paths.items():
        for method, op in item.items():
            codes = set(op["responses"])
            assert "500" in codes and "422" not in codes or path.startswith(
                "/v2/repository/models/{name}/versions/"), (method, path, codes)
            for p in op.get("parameters", ()):
                if p["in"] == "path":
                    assert "maxLength" in p["schema"] or "pattern" in p["schema"], (path, p)
    ready = paths["/v2/models/{name}/ready"]["get"]["responses"]
    assert ready["404"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/NotReadyBody")
    assert set(paths["/v2/health/ready"]["get"]["responses"]) == {"200", "503", "500"}
    admin = [("post", "/v2/repository/index"), ("post", "/v2/repository/models/{name}/load"),
             ("post", "/v2/repository/models/{name}/unload"),
             ("post", "/v2/repository/models/{name}/versions/{version}"),
             ("delete", "/v2/repository/models/{name}/versions/{version}"),
             ("get", "/v2/status")]  # this app has an operator key
    for method, path in admin:
        op = paths[path][method]
        assert op["security"] and "401" in op["responses"], (method, path)
    assert "security" not in infer
    assert {"bearerKey", "apiKeyHeader"} == set(spec["components"]["securitySchemes"])
    assert "HTTPValidationError" not in spec["components"]["schemas"]
