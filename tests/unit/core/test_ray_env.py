"""deploy.ray_env: the Ray Serve settings `make serve` starts Ray with."""

from __future__ import annotations

import inspect

from ray.serve._private import constants

from deploy.ray_env import SERVE_ENV, serve_environment


def test_every_setting_is_one_ray_serve_reads() -> None:
    # a misspelt name would be silently ignored by Ray: check it against the installed Ray
    source = inspect.getsource(constants)
    for name, value in SERVE_ENV.items():
        assert f'"{name}"' in source, f"{name}: not a Ray Serve setting in this Ray version"
        assert isinstance(value, str) and value


def test_the_callers_environment_wins() -> None:
    env = serve_environment({"PATH": "/bin", **{k: "x" for k in SERVE_ENV}})
    assert env["PATH"] == "/bin"
    assert all(env[k] == "x" for k in SERVE_ENV)
    assert serve_environment({}) == SERVE_ENV
