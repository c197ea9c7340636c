"""deploy.ray_env: the Ray Serve and thread settings `make serve` starts Ray with."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from ray.serve._private import constants

from deploy.ray_env import ENV, SERVE_ENV, THREAD_ENV, serve_environment


def test_every_setting_is_one_ray_serve_reads() -> None:
    # a misspelt name would be silently ignored by Ray: check it against the installed Ray
    source = inspect.getsource(constants)
    for name, value in SERVE_ENV.items():
        assert f'"{name}"' in source, f"{name}: not a Ray Serve setting in this Ray version"
        assert isinstance(value, str) and value


def test_every_thread_setting_is_one_torchs_openmp_reads() -> None:
    # torch's CPU build ships its OpenMP runtime; the names it reads are strings in that library
    # (torch/lib in the CPU build; torch.libs beside it in wheels repaired by auditwheel)
    lib = Path(torch.__file__).parent / "lib"
    found = [*lib.glob("libgomp*.so*"), *lib.parent.parent.glob("torch.libs/libgomp*.so*")]
    runtimes = [p.read_bytes() for p in found]
    assert runtimes, f"no OpenMP runtime in {lib}"
    for name, value in THREAD_ENV.items():
        assert any(name.encode() in r for r in runtimes), f"{name}: not read by {lib}/libgomp"
        assert value in ("PASSIVE", "ACTIVE")


def test_the_callers_environment_wins() -> None:
    env = serve_environment({"PATH": "/bin", **{k: "x" for k in ENV}})
    assert env["PATH"] == "/bin"
    assert all(env[k] == "x" for k in ENV)
    assert serve_environment({}) == ENV == {**SERVE_ENV, **THREAD_ENV}


def test_make_serve_turns_serves_access_log_off_in_a_valid_config() -> None:
    import yaml
    from ray.serve.schema import ServeDeploySchema

    from deploy.ray_env import CONFIG, served_logging_config

    schema = ServeDeploySchema.model_validate(yaml.safe_load(CONFIG.read_text()))
    app = next(a for a in schema.applications if a.name == "timeshare")
    assert app.logging_config is not None and app.logging_config.enable_access_log is False
    assert served_logging_config() == {"enable_access_log": False}
