"""Publishing a model over the real app (Ray Serve, CPU pool deployment): the CLI pushes an
ONNX and a torch.export version, the pool replica loads them, they answer; then retired."""

from __future__ import annotations

import numpy as np
import torch
import yaml

from deploy.models_cli import push_main, retire_main
from tests.support.app import API_KEY
from tests.support.formats import config_dict, small_cnn, write_version
from tests.support.v2 import v2_body

X = (np.random.default_rng(2).random((2, 64)) * 16).astype(np.float32)


def test_cli_pushed_versions_go_live_in_each_new_format_and_retire(app, http, tmp_path):
    with torch.inference_mode():
        want = small_cnn(1)(torch.from_numpy(X)).numpy()
    cli = ["--url", app.url, "--api-key", API_KEY]
    for fmt in ("onnx", "torch_export"):
        name = f"pushed-{fmt.replace('_', '-')}"
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.yaml").write_text(yaml.safe_dump(config_dict(name, fmt)))
        write_version(folder / "1", fmt, small_cnn(1))
        assert push_main([str(folder), *cli]) == 0

        def served(name=name):
            r = http.post(f"/v2/models/{name}/infer",
                          json=v2_body("pixels", X, deadline_ms=30000))
            return r.json() if r.status_code == 200 else None

        app.wait_for(lambda: served() is not None, 60, f"{name} served")
        reply = served()
        assert reply["parameters"]["served_by"] == f"cpu:{name}@1", reply["parameters"]
        out = reply["outputs"][0]
        np.testing.assert_allclose(np.asarray(out["data"], np.float32).reshape(out["shape"]),
                                   want, atol=1e-4)
        assert retire_main([name, "1", *cli]) == 0
        app.wait_for(lambda: served() is None, 60, f"{name} retired")
