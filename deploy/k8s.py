"""``timeshare k8s render --env ENV``: the KubeRay ``RayService`` of an environment.

Rendered, never copied by hand, from three files:

- ``deploy/config.yaml``: the Serve config that ``make serve`` runs. Its ``timeshare`` app gets
  ``environment: ENV`` (the app applies ``deploy/env/ENV.yaml`` itself, from the image, exactly
  as ``timeshare serve --env ENV`` does) and the cluster's paths and services: the model
  repository's mount, the shared Redis for the cache, call log and quotas, the secrets'
  environment variables, one GPU-pool replica per GPU worker;
- ``deploy/env/ENV.yaml``: read to validate the merged settings here (an unknown or bad key
  fails the render, naming it, not the deploy) and for the alert channels' secret variables;
- ``deploy/kubernetes/cluster.yaml``: the cluster's shape (image, head and GPU worker groups,
  Redis URL, volume claim, Secret name).

Secrets never enter the output: the pods read them from a Secret whose keys are the variable
names (``TIMESHARE_API_KEY``, ``TIMESHARE_CALLER_KEYS`` and the overlay's ``*_env`` names).
``deploy/kubernetes/rayservice.prod.yaml`` is this module's output for prod, kept equal to a
fresh render by ``tests/unit/ops/test_k8s.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deploy.ray_env import ENV as RAY_ENV
from router.settings import ENV_DIR, load_settings

__all__ = ["CLUSTER", "CONFIG", "ClusterSettings", "load_cluster", "render", "render_main",
           "render_text", "secret_variables", "serve_config"]

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "config.yaml"
CLUSTER = HERE / "kubernetes" / "cluster.yaml"
APP = "timeshare"
SERVE_PORT = 8000  # Serve's proxy on every pod (proxy_location: EveryNode): probes and traffic
# The variables the app reads its keys from (router.settings: api_key_env, caller_keys_env).
OPERATOR_KEY_ENV = "TIMESHARE_API_KEY"
CALLER_KEYS_ENV = "TIMESHARE_CALLER_KEYS"


class HeadGroup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu: str = Field("4", description="CPU request and limit of the head pod.")
    memory: str = Field("16Gi", description="Memory request and limit of the head pod.")


class GpuWorkers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(1, ge=1, le=64, description="GPU worker pods, one GPU each (limit "
                          "nvidia.com/gpu: 1); the GPU pool runs one replica per pod.")
    cpu: str = Field("8", description="CPU request and limit of a GPU worker pod (it also "
                     "hosts the ingress and CPU-pool replicas: the head takes none).")
    memory: str = Field("32Gi", description="Memory request and limit of a GPU worker pod "
                        "(the host tier of model weights lives here).")
    node_selector: dict[str, str] = Field(default_factory=dict,
                                          description="nodeSelector of the GPU worker pods.")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Tolerations of the GPU worker pods (GPU nodes are "
        "usually tainted nvidia.com/gpu).")


class ModelRepository(BaseModel):
    model_config = ConfigDict(extra="forbid")

    claim: str = Field(..., description="PersistentVolumeClaim (ReadWriteMany) holding the "
                       "model repository, mounted in every pod.")
    mount_path: str = Field("/models", description="Where it is mounted; the app's "
                            "'repository'.")


class ClusterSettings(BaseModel):
    """``deploy/kubernetes/cluster.yaml`` for one environment (defaults + its overrides)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(APP, description="RayService name (KubeRay names its Services after it: "
                      "NAME-serve-svc, NAME-head-svc).")
    namespace: str | None = Field(None, description="metadata.namespace; null = kubectl's.")
    image: str = Field(..., description="The image built from the Dockerfile.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy of the Ray containers.")
    ray_version: str = Field(..., description="rayClusterConfig.rayVersion: the ray the image "
                             "installs (KubeRay picks its health checks by it).")
    app_dir: str = Field("/app", description="The checkout's path in the image; relative "
                         "paths of the Serve config are made absolute under it.")
    uid: int = Field(1000, ge=1, description="The image's non-root user (runAsUser, fsGroup).")
    head: HeadGroup = Field(default_factory=HeadGroup, description="The head pod.")
    gpu_workers: GpuWorkers = Field(default_factory=GpuWorkers, description="The GPU workers.")
    redis_url: str = Field(..., description="Shared Redis: exact cache, call log stream, "
                           "cluster-wide quotas (deploy/kubernetes/redis.yaml or external).")
    model_repository: ModelRepository = Field(..., description="The model repository volume.")
    secret: str = Field(..., description="Secret whose keys are the secret variables' names "
                        "(operator key, caller keys, alert channels).")


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_cluster(env: str, path: Path = CLUSTER) -> ClusterSettings:
    """The cluster shape of ``env``; errors name the file and the key."""
    doc = yaml.safe_load(path.read_text()) or {}
    unknown = set(doc) - {"defaults", "environments"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level key {sorted(unknown)[0]!r}")
    merged = _merge(doc.get("defaults") or {}, (doc.get("environments") or {}).get(env) or {})
    try:
        return ClusterSettings.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"{path} ({env}): {key}: {err['msg']}") from None


def _env_names(node: Any) -> Iterator[str]:
    """The values of every ``*_env`` key under ``node``: variables an alert channel reads."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str) and k.endswith("_env") and isinstance(v, str):
                yield v
            else:
                yield from _env_names(v)
    elif isinstance(node, list):
        for v in node:
            yield from _env_names(v)


def secret_variables(env: str, env_dir: Path = ENV_DIR) -> list[str]:
    """The Secret's keys, which the pods get as variables of the same name: the operator key
    (required), the caller keys and the overlay's alert channel secrets (optional)."""
    overlay = yaml.safe_load((env_dir / f"{env}.yaml").read_text()) or {}
    channels = sorted(set(_env_names(overlay.get("alerting"))))
    return [OPERATOR_KEY_ENV, CALLER_KEYS_ENV, *channels]


def _app(doc: dict[str, Any], config: Path) -> dict[str, Any]:
    apps = [a for a in doc.get("applications", []) if a.get("name") == APP]
    if not apps:
        raise ValueError(f"{config}: no application named {APP!r}")
    return apps[0]


def serve_config(env: str, cluster: ClusterSettings, *, config: Path = CONFIG,
                 env_dir: Path = ENV_DIR) -> dict[str, Any]:
    """``config`` as the cluster serves it in ``env`` (the RayService's ``serveConfigV2``)."""
    doc = yaml.safe_load(config.read_text())
    # Probes and the serve Service reach the proxy on the pod's address, not its loopback.
    doc["http_options"] = {**(doc.get("http_options") or {}), "host": "0.0.0.0",
                           "port": SERVE_PORT}
    app = _app(doc, config)
    args = dict(app.get("args") or {})
    redis = cluster.redis_url
    args.update({
        "environment": env,
        "repository": cluster.model_repository.mount_path,
        "api_key_env": OPERATOR_KEY_ENV,
        "caller_keys_env": CALLER_KEYS_ENV,
        # One GPU-pool replica per GPU worker pod (each has one GPU). "on", not "auto": the
        # controller may build the app before the GPU workers have joined the cluster.
        "gpu_pool": {**(args.get("gpu_pool") or {}), "enabled": "on",
                     "replicas": cluster.gpu_workers.replicas},
        # The state folder (<repository>/.timeshare: unload commands that the ingress and
        # the pools share) is on the shared volume, so two things that are per machine move
        # off it: the CPU-pool core slots (locks there would count replicas cluster-wide;
        # pinning on Kubernetes is the kubelet's CPU manager's job) and the compile cache.
        "cpu_pool": {**(args.get("cpu_pool") or {}), "pin_cores": "off"},
        "compile_cache_dir": "/tmp/timeshare-inductor",
        "cache": {**(args.get("cache") or {}), "redis_url": redis},
        "call_log": {**(args.get("call_log") or {}), "redis_url": redis, "path": None},
        "quotas": {**(args.get("quotas") or {}), "redis_url": redis},
    })
    if isinstance(args.get("routes"), str) and not Path(args["routes"]).is_absolute():
        args["routes"] = f"{cluster.app_dir.rstrip('/')}/{args['routes']}"
    for secret in ("api_key", "caller_keys"):  # keys come from the Secret, never the manifest
        if args.get(secret):
            raise ValueError(f"{config}: args.{secret} is set; on Kubernetes keys come from the "
                             f"Secret {cluster.secret!r} (docs/SCALING.md)")
        args.pop(secret, None)
    # The merged settings must load as the app will load them: fail here, naming the key.
    # (Paths are the pods', so only the settings are checked here, not the files.)
    load_settings(args, env_dir=env_dir)
    app["args"] = args
    return doc


def _container_env(secret: str, variables: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(RAY_ENV.items())]
    for name in variables:
        ref: dict[str, Any] = {"name": secret, "key": name}
        if name != OPERATOR_KEY_ENV:  # the operator key is required: no key, no pod
            ref["optional"] = True
        out.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return out


def _http_probe(path: str, *, period_s: int, timeout_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": SERVE_PORT}, "periodSeconds": period_s,
            "timeoutSeconds": timeout_s, "failureThreshold": failures}


def _pod_spec(cluster: ClusterSettings, container: dict[str, Any],
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    repo = cluster.model_repository
    return {
        "securityContext": {"runAsNonRoot": True, "runAsUser": cluster.uid,
                            "runAsGroup": cluster.uid, "fsGroup": cluster.uid},
        "containers": [{
            **container,
            "volumeMounts": [{"name": "model-repository", "mountPath": repo.mount_path}],
        }],
        "volumes": [{"name": "model-repository",
                     "persistentVolumeClaim": {"claimName": repo.claim}}],
        **(extra or {}),
    }


def render(env: str, *, config: Path = CONFIG, cluster_file: Path = CLUSTER,
           env_dir: Path = ENV_DIR) -> dict[str, Any]:
    """The ``RayService`` of ``env`` as a dict."""
    cluster = load_cluster(env, cluster_file)
    serve = serve_config(env, cluster, config=config, env_dir=env_dir)
    env_vars = _container_env(cluster.secret, secret_variables(env, env_dir))
    common = {"image": cluster.image, "imagePullPolicy": cluster.image_pull_policy,
              "env": env_vars}
    head = cluster.head
    head_container = {
        "name": "ray-head", **common,
        "ports": [{"containerPort": 6379, "name": "gcs-server"},
                  {"containerPort": 8265, "name": "dashboard"},
                  {"containerPort": 10001, "name": "client"},
                  {"containerPort": SERVE_PORT, "name": "serve"}],
        "resources": {"requests": {"cpu": head.cpu, "memory": head.memory},
                      "limits": {"cpu": head.cpu, "memory": head.memory}},
        # No probes of ours on the head: KubeRay submits the Serve config only once the head
        # pod is ready, so a readiness probe on the app would never pass. KubeRay's own
        # (raylet and GCS health) apply; it checks the head's proxy itself.
    }
    gpu = cluster.gpu_workers
    worker_container = {
        "name": "ray-worker", **common,
        "ports": [{"containerPort": SERVE_PORT, "name": "serve"}],
        "resources": {"requests": {"cpu": gpu.cpu, "memory": gpu.memory, "nvidia.com/gpu": 1},
                      "limits": {"cpu": gpu.cpu, "memory": gpu.memory, "nvidia.com/gpu": 1}},
        # Liveness waits for startup: the app deploys after the pods start and loads its
        # models (up to 15 min here). Ready = the app answers with a ready model; live = the
        # app answers at all, through this pod's proxy.
        "startupProbe": _http_probe("/v2/health/ready", period_s=10, timeout_s=5, failures=90),
        "readinessProbe": _http_probe("/v2/health/ready", period_s=5, timeout_s=3, failures=3),
        "livenessProbe": _http_probe("/v2/health/live", period_s=10, timeout_s=5, failures=6),
    }
    worker_extra: dict[str, Any] = {}
    if gpu.node_selector:
        worker_extra["nodeSelector"] = dict(gpu.node_selector)
    if gpu.tolerations:
        worker_extra["tolerations"] = [dict(t) for t in gpu.tolerations]
    metadata: dict[str, Any] = {
        "name": cluster.name,
        "labels": {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": cluster.name,
                   "timeshare.io/environment": env},
    }
    if cluster.namespace:
        metadata["namespace"] = cluster.namespace
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": metadata,
        "spec": {
            "serveConfigV2": yaml.safe_dump(serve, sort_keys=False),
            "rayClusterConfig": {
                "rayVersion": cluster.ray_version,
                "headGroupSpec": {
                    # No Serve replicas on the head: it runs the controller and a proxy.
                    "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
                    "template": {"spec": _pod_spec(cluster, head_container)},
                },
                "workerGroupSpecs": [{
                    "groupName": "gpu",
                    "replicas": gpu.replicas,
                    "minReplicas": gpu.replicas,
                    "maxReplicas": gpu.replicas,
                    "rayStartParams": {},  # num-gpus: KubeRay reads the nvidia.com/gpu limit
                    "template": {"spec": _pod_spec(cluster, worker_container, worker_extra)},
                }],
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (the embedded Serve config stays readable); no
    anchors and aliases (each pod's env written out in full)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_text(env: str, **paths: Path) -> str:
    """``render(env)`` as the YAML that ``timeshare k8s render`` prints."""
    header = (f"# Generated by `timeshare k8s render --env {env}` from deploy/config.yaml, "
              f"deploy/env/{env}.yaml\n# and deploy/kubernetes/cluster.yaml. Do not edit: "
              "change those and render again (docs/SCALING.md).\n")
    return header + yaml.dump(render(env, **paths), Dumper=_Dumper, sort_keys=False, width=100)


def render_main(argv: list[str]) -> int:
    """``timeshare k8s render --env ENV [--output FILE]``."""
    ap = argparse.ArgumentParser(prog="timeshare k8s render",
                                 description="Print the KubeRay RayService of an environment.")
    ap.add_argument("--env", required=True, choices=sorted(p.stem for p in ENV_DIR.glob("*.yaml")),
                    help="environment overlay (deploy/env/ENV.yaml)")
    ap.add_argument("--config", type=Path, default=CONFIG,
                    help="Serve config (default: %(default)s)")
    ap.add_argument("--cluster", type=Path, default=CLUSTER,
                    help="cluster shape (default: %(default)s)")
    ap.add_argument("--output", "-o", type=Path, default=None, help="write here, not stdout")
    args = ap.parse_args(argv)
    try:
        text = render_text(args.env, config=args.config, cluster_file=args.cluster)
    except (OSError, ValueError) as e:
        print(f"timeshare k8s render: {e}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0
