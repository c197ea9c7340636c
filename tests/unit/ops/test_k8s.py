"""The Kubernetes path: ``timeshare k8s render`` (deploy/k8s.py), the committed RayService, the
other manifests it refers to, and the Dockerfile.

The RayService is validated against KubeRay v1.7.0's CRD schema (tests/data/kuberay, with
jsonschema: the ``x-kubernetes-*`` extensions, CEL rules, ``nullable`` and ``format`` are not
checked, see its README) and its embedded Serve config against Ray's own
``ServeDeploySchema``. No Ray cluster, no Kubernetes: pure rendering and validation.
"""

from __future__ import annotations

import copy
import functools
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from deploy import k8s
from deploy.cli import main as cli_main
from router.settings import ENV_DIR

ROOT = Path(__file__).resolve().parents[3]
KUBE = ROOT / "deploy" / "kubernetes"
EXAMPLE = KUBE / "rayservice.prod.yaml"
CRD = ROOT / "tests" / "data" / "kuberay" / "ray.io_rayservices.yaml"
ENVS = sorted(p.stem for p in ENV_DIR.glob("*.yaml"))


@functools.cache
def _crd() -> dict[str, Any]:  # 1 MB of YAML: libyaml's parser when there is one
    return yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _schema(strict: bool) -> dict[str, Any]:
    (v1,) = [v for v in _crd()["spec"]["versions"] if v["name"] == "v1"]
    schema = copy.deepcopy(v1["schema"]["openAPIV3Schema"])
    if strict:  # the API server's strict field validation: no field the schema does not name
        _close(schema)
    return schema


def _close(node: Any) -> None:
    if isinstance(node, dict):
        if (node.get("type") == "object" and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for v in node.values():
            _close(v)
    elif isinstance(node, list):
        for v in node:
            _close(v)


STRICT = jsonschema.Draft7Validator(_schema(strict=True))


def _errors(doc: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in STRICT.iter_errors(doc)]


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _serve(doc: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(doc["spec"]["serveConfigV2"])


def _pod(doc: dict[str, Any], group: str) -> dict[str, Any]:
    cluster = doc["spec"]["rayClusterConfig"]
    if group == "head":
        return cluster["headGroupSpec"]["template"]["spec"]
    (worker,) = [w for w in cluster["workerGroupSpecs"] if w["groupName"] == group]
    return worker["template"]["spec"]


# --- the committed example -------------------------------------------------------------------

def test_committed_example_equals_a_fresh_render():
    assert EXAMPLE.read_text() == k8s.render_text("prod"), (
        "deploy/kubernetes/rayservice.prod.yaml is stale: run "
        "`timeshare k8s render --env prod -o deploy/kubernetes/rayservice.prod.yaml`")


def test_the_command_writes_what_render_returns(tmp_path, capsys):
    out = tmp_path / "rs.yaml"
    assert cli_main(["k8s", "render", "--env", "prod", "--output", str(out)]) == 0
    assert out.read_text() == EXAMPLE.read_text()
    assert cli_main(["k8s", "render", "--env", "staging"]) == 0
    assert capsys.readouterr().out == k8s.render_text("staging")
    with pytest.raises(SystemExit):  # argparse: not an overlay
        cli_main(["k8s", "render", "--env", "nowhere"])


# --- the CRD schema ---------------------------------------------------------------------------

@pytest.mark.parametrize("env", ENVS)
def test_rendered_rayservice_validates_against_kuberay_crd(env):
    assert _errors(k8s.render(env)) == []


def test_committed_example_validates_against_kuberay_crd():
    (doc,) = _yaml_docs(EXAMPLE)
    assert _errors(doc) == []


@pytest.mark.parametrize("path, expected", [
    # A required field removed, at three depths of the schema.
    (("spec", "rayClusterConfig"), "'rayClusterConfig' is a required property"),
    (("spec", "rayClusterConfig", "workerGroupSpecs", 0, "groupName"),
     "'groupName' is a required property"),
    (("spec", "rayClusterConfig", "headGroupSpec", "template", "spec", "containers", 0, "name"),
     "'name' is a required property"),
])
def test_schema_rejects_a_missing_required_field(path, expected):
    doc = k8s.render("prod")
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    assert any(expected in e for e in _errors(doc)), _errors(doc)


def test_schema_rejects_wrong_types_and_unknown_fields():
    doc = k8s.render("prod")
    doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = "four"
    assert any("'four' is not of type 'integer'" in e for e in _errors(doc)), _errors(doc)
    doc = k8s.render("prod")
    doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replica"] = 4  # a typo
    assert any("'replica' was unexpected" in e for e in _errors(doc)), _errors(doc)
    # Without the strict mode a typo passes: Kubernetes would drop the field silently.
    assert list(jsonschema.Draft7Validator(_schema(strict=False)).iter_errors(doc)) == []


# --- the Serve config -------------------------------------------------------------------------

@pytest.mark.parametrize("env", ENVS)
def test_serve_config_validates_with_rays_schema(env):
    serve = _serve(k8s.render(env))
    ServeDeploySchema.parse_obj(serve)  # Ray's own check of what KubeRay submits
    (app,) = serve["applications"]
    assert app["args"]["environment"] == env
    assert serve["http_options"]["host"] == "0.0.0.0"  # probes and the Service reach it


def test_rays_schema_rejects_a_broken_serve_config():
    serve = _serve(k8s.render("prod"))
    serve["proxy_location"] = "Nowhere"
    with pytest.raises(Exception, match="proxy_location"):
        ServeDeploySchema.parse_obj(serve)


def test_serve_config_is_the_base_config_plus_cluster_settings():
    base = yaml.safe_load(k8s.CONFIG.read_text())
    serve = _serve(k8s.render("prod"))
    (base_app,) = base["applications"]
    (app,) = serve["applications"]
    for key in ("name", "route_prefix", "import_path", "logging_config"):
        assert app[key] == base_app[key]
    for key, value in base_app["args"].items():  # nothing of the base config is lost
        if key not in ("repository", "environment", "routes"):
            assert app["args"][key] == value, key
    assert app["args"]["routes"] == "/app/" + base_app["args"]["routes"]
    # Per-machine state stays off the shared volume.
    assert app["args"]["cpu_pool"]["pin_cores"] == "off"
    assert not app["args"]["compile_cache_dir"].startswith(app["args"]["repository"])
    assert serve["proxy_location"] == base["proxy_location"]


# --- the cluster it describes -----------------------------------------------------------------

def test_head_and_one_gpu_per_worker_with_one_pool_replica_each():
    doc = k8s.render("prod")
    cluster = k8s.load_cluster("prod")
    (worker,) = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert worker["replicas"] == worker["minReplicas"] == worker["maxReplicas"] \
        == cluster.gpu_workers.replicas
    (container,) = worker["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    args = _serve(doc)["applications"][0]["args"]
    assert args["gpu_pool"] == {"enabled": "on", "replicas": worker["replicas"]}
    head = doc["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no Serve replica on the head
    assert "nvidia.com/gpu" not in head["template"]["spec"]["containers"][0]["resources"]["limits"]


def test_probes_on_the_app_health_routes_for_serving_pods_only():
    doc = k8s.render("prod")
    (worker,) = _pod(doc, "gpu")["containers"]
    port = worker["ports"][0]["containerPort"]
    assert worker["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": port}
    assert worker["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": port}
    assert worker["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": port}
    assert _serve(doc)["http_options"]["port"] == port
    # The head keeps KubeRay's probes: KubeRay deploys the app only once the head is ready.
    (head,) = _pod(doc, "head")["containers"]
    assert not {"readinessProbe", "livenessProbe", "startupProbe"} & set(head)


def test_pods_run_as_the_images_non_root_user():
    doc = k8s.render("prod")
    uid = int(_dockerfile_arg("UID"))
    for group in ("head", "gpu"):
        ctx = _pod(doc, group)["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == uid


def test_redis_is_the_service_in_redis_yaml():
    docs = {d["kind"]: d for d in _yaml_docs(KUBE / "redis.yaml")}
    service, deployment = docs["Service"], docs["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    port = service["spec"]["ports"][0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    url = f"redis://{service['metadata']['name']}:{port['port']}/0"
    args = _serve(k8s.render("prod"))["applications"][0]["args"]
    assert args["cache"]["redis_url"] == args["call_log"]["redis_url"] \
        == args["quotas"]["redis_url"] == url
    assert args["call_log"]["path"] is None


def test_model_repository_is_the_claim_in_model_repository_yaml():
    docs = {d["kind"]: d for d in _yaml_docs(KUBE / "model-repository.yaml")}
    claim = docs["PersistentVolumeClaim"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]  # every pod mounts it
    doc = k8s.render("prod")
    repo = _serve(doc)["applications"][0]["args"]["repository"]
    for group in ("head", "gpu"):
        pod = _pod(doc, group)
        (vol,) = pod["volumes"]
        assert vol["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        assert pod["containers"][0]["volumeMounts"] == [
            {"name": vol["name"], "mountPath": repo}]
    job = docs["Job"]["spec"]["template"]["spec"]
    assert job["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert job["containers"][0]["image"] == k8s.load_cluster("prod").image


def test_keys_come_from_the_secret_and_never_appear_in_the_manifest():
    (secret,) = _yaml_docs(KUBE / "secret.example.yaml")
    keys = set(secret["stringData"])
    doc = k8s.render("prod")
    text = k8s.render_text("prod")
    for value in secret["stringData"].values():
        assert value not in text
    for group in ("head", "gpu"):
        env = {e["name"]: e for e in _pod(doc, group)["containers"][0]["env"]}
        refs = {n: e["valueFrom"]["secretKeyRef"] for n, e in env.items() if "valueFrom" in e}
        assert set(refs) == keys  # every key the Secret has, and only those
        for name, ref in refs.items():
            assert (ref["name"], ref["key"]) == (secret["metadata"]["name"], name)
        assert not refs["TIMESHARE_API_KEY"].get("optional")  # no operator key, no pod
        assert refs["TIMESHARE_CALLER_KEYS"]["optional"] is True
        assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"]["value"] == "1"  # deploy/ray_env.py
    args = _serve(doc)["applications"][0]["args"]
    assert (args["api_key_env"], args["caller_keys_env"]) == (
        "TIMESHARE_API_KEY", "TIMESHARE_CALLER_KEYS")
    assert "api_key" not in args and "caller_keys" not in args
    # Every secret variable the prod overlay's alert channels name is in the Secret.
    assert set(k8s.secret_variables("prod")) == keys


# --- errors name what is wrong ----------------------------------------------------------------

def test_render_refuses_a_key_in_the_config(tmp_path):
    doc = yaml.safe_load(k8s.CONFIG.read_text())
    doc["applications"][0]["args"]["api_key"] = "committed-secret"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"args\.api_key is set") as e:
        k8s.render("prod", config=config)
    assert "committed-secret" not in str(e.value)


def test_render_fails_on_a_bad_overlay_naming_the_key(tmp_path):
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "prod.yaml").write_text("cpu_pool: {replicas: 0}\n")
    with pytest.raises(ValueError, match=r"cpu_pool\.replicas"):
        k8s.render("prod", env_dir=env_dir)


def test_render_fails_on_a_bad_cluster_file_naming_the_key(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    doc = yaml.safe_load(k8s.CLUSTER.read_text())
    doc["environments"]["prod"]["gpu_workers"]["gpus"] = 2  # not a field
    cluster.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"gpu_workers\.gpus"):
        k8s.render("prod", cluster_file=cluster)
    assert cli_main(["k8s", "render", "--env", "prod", "--cluster", str(cluster)]) == 2


# --- the Dockerfile ---------------------------------------------------------------------------

DOCKERFILE = (ROOT / "Dockerfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    lines = [ln for ln in DOCKERFILE.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m.group(1).upper(), m.group(2).strip())
            for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


def _dockerfile_arg(name: str) -> str:
    (value,) = [a.split("=", 1)[1] for i, a in _instructions()
                if i == "ARG" and a.split("=", 1)[0] == name]
    return value


def test_dockerfile_runs_as_a_non_root_user():
    users = [a for i, a in _instructions() if i == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0].replace("${UID}", _dockerfile_arg("UID"))
    assert user.isdigit() and int(user) != 0  # numeric, so runAsNonRoot can verify it


def test_dockerfile_torch_build_argument_defaults_to_the_makefiles():
    (default,) = re.findall(r"^TORCH_SPEC \?= (.+)$", MAKEFILE, re.M)
    assert _dockerfile_arg("TORCH_SPEC") == default
    assert "cpu" in _dockerfile_arg("TORCH_INDEX_URL")  # the default variant is the CPU build


def test_dockerfile_installs_as_the_makefile_does():
    recipe = re.search(r"^\$\(VENV\)/\.installed:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert recipe is not None
    steps = [ln.strip() for ln in recipe.group(1).splitlines() if ln.strip() != "touch $@"]
    runs = [a for i, a in _instructions() if i == "RUN"]
    for step in steps:  # each recipe line, as one RUN, in the Makefile's order
        as_docker = re.sub(r"\$\((\w+)\)", r"${\1}", step)
        matches = [n for n, run in enumerate(runs) if run.endswith(as_docker)]
        assert matches, f"the Dockerfile does not run the Makefile's `{step}`"
    order = [next(n for n, run in enumerate(runs) if run.endswith(
        re.sub(r"\$\((\w+)\)", r"${\1}", s))) for s in steps]
    assert order == sorted(order)
    assert shlex.split(runs[order[-1]])[-1] == ".[test]"


def test_dockerignore_keeps_local_state_out_of_the_image():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".venv", "var", ".git"):
        assert path in ignored
