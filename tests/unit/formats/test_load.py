"""Each format loaded from a file its real exporter wrote; outputs against the torch source."""

from __future__ import annotations

import io
import json
import shutil
import zipfile

import onnx
import pytest
import torch

from common.trust import TrustSettings
from deploy.demo_data import load_splits
from pool._private.weights import bind, pack
from pool.errors import ModelLoadError
from pool.loader import load_module
from pool.repository import read_config
from tests.support.formats import ALL_FORMATS, first_output, small_cnn, write_config


@pytest.fixture(scope="module")
def digits_x() -> torch.Tensor:
    return torch.from_numpy(load_splits("digits").test_x)


@pytest.mark.parametrize("fmt", ALL_FORMATS)
def test_round_trip_matches_the_source_module_and_survives_a_swap(exported, fmt, digits_x):
    source = small_cnn(1)
    with torch.inference_mode():
        want = source(digits_x)
        module = load_module(exported / fmt / "1", read_config(exported / fmt))
        got = first_output(module(digits_x))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        # Packed into the flat host buffer, then re-bound on a "device" copy: still the same
        # outputs, and they really come from that copy (zeroing it changes them).
        packed = pack(module)
        assert packed.nbytes >= sum(p.numel() * 4 for p in source.parameters())
        region = torch.empty(packed.nbytes, dtype=torch.uint8)
        region.copy_(packed.host)
        bind(packed, region)
        torch.testing.assert_close(first_output(module(digits_x)), want, atol=1e-4, rtol=1e-4)
        region.zero_()
        assert not torch.allclose(first_output(module(digits_x)), want)


def test_demo_builder_writes_export_and_onnx_models_equal_to_digits_large(demo_repo,
                                                                           digits_x):
    from deploy.demo import build_demo_repository

    manifest = build_demo_repository(demo_repo, only=["digits-large-export", "digits-large-onnx"])
    assert manifest["digits-large-onnx"]["format"] == "onnx"
    with torch.inference_mode():
        ref = load_module(demo_repo / "digits-large" / "1", read_config(demo_repo / "digits-large"))
        want = ref(digits_x)
        for name in ("digits-large-export", "digits-large-onnx"):
            got = first_output(load_module(demo_repo / name / "1", read_config(demo_repo / name))(
                digits_x))
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            assert (got.argmax(1) == want.argmax(1)).all()


def _rewrite_zip(path, edit) -> None:
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
        for info in src.infolist():
            data = edit(info.filename, src.read(info))
            if data is not None:
                dst.writestr(info, data)
    tmp.replace(path)


class _Canary:
    """Unpickling it creates ``path``: proof that something unpickled it."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_export_refuses_pickled_records_before_loading(exported, tmp_path):
    cfg = read_config(exported / "torch_export")
    v1 = exported / "torch_export" / "1"

    def mark_pickled(name, data):
        if name.endswith("model_weights_config.json"):
            doc = json.loads(data)
            next(iter(doc["config"].values()))["use_pickle"] = True
            return json.dumps(doc).encode()
        return data

    _rewrite_zip(v1 / "model.pt2", mark_pickled)
    with pytest.raises(ModelLoadError, match=r"torch_export/1/model.pt2 \[format\].*is pickled"):
        load_module(v1, cfg)

    # Sample inputs that torch.export.load would retry with weights_only=False: refused, and
    # the object was never built.
    canary = tmp_path / "canary"
    v2 = exported / "torch_export" / "2"
    planted = io.BytesIO()
    torch.save(_Canary(canary), planted)  # torch.load(weights_only=False) would create it
    _rewrite_zip(v2 / "model.pt2", lambda n, d: planted.getvalue() if n.endswith(
        "sample_inputs/model.pt") else d)
    with pytest.raises(ModelLoadError, match="sample_inputs/model.pt: not loadable with "
                       "weights_only=True"):
        load_module(v2, cfg)
    assert not canary.exists()
    # The torch <= 2.7 layout torch.export.load falls back to (it retries unpickling unsafely).
    with zipfile.ZipFile(v2 / "model.pt2", "a") as z:
        z.writestr("version", b"8.0")
    with pytest.raises(ModelLoadError, match="legacy torch.export archive"):
        load_module(v2, cfg)


def test_export_refuses_aoti_packages_unless_allowed(exported):
    cfg = read_config(exported / "torch_export")
    v1 = exported / "torch_export" / "1"
    with zipfile.ZipFile(v1 / "model.pt2", "a") as z:
        z.writestr("model/data/aotinductor/model/model.so", b"\x7fELF")
    with pytest.raises(ModelLoadError, match="AOTInductor.*trust.allow_aoti"):
        load_module(v1, cfg)
    with pytest.raises(ModelLoadError, match=r"\[device\].*set device: cpu"):
        load_module(v1, cfg, trust=TrustSettings(allow_aoti=True))


def test_onnx_version_and_io_errors_name_file_and_field(exported):
    model_dir = exported / "onnx"
    v1 = model_dir / "1"
    proto = onnx.load(str(v1 / "model.onnx"))
    proto.opset_import[0].version = 99
    shutil.copytree(v1, model_dir / "3")
    onnx.save(proto, str(model_dir / "3" / "model.onnx"))
    with pytest.raises(ModelLoadError, match=r"onnx/3/model.onnx \[opset_import\]: opset 99"):
        load_module(model_dir / "3", read_config(model_dir))
    write_config(model_dir, "onnx", inputs=[{"name": "a", "dtype": "FP32", "shape": [64]},
                                            {"name": "b", "dtype": "FP32", "shape": [64]}])
    with pytest.raises(ModelLoadError, match=r"onnx/1/model.onnx \[inputs\]: graph inputs"):
        load_module(v1, read_config(model_dir))
    (v1 / "model.onnx").write_bytes(b"not a protobuf at all")
    write_config(model_dir, "onnx")
    with pytest.raises(ModelLoadError, match=r"onnx/1/model.onnx \[format\]"):
        load_module(v1, read_config(model_dir))


def test_compile_config_wraps_once_and_warms_configured_sizes(exported):
    write_config(exported / "torch_export", "torch_export", compile={"mode": "default"})
    cfg = read_config(exported / "torch_export")
    assert cfg.warmup_sizes == (1, 64)
    module = load_module(exported / "torch_export" / "1", cfg)
    assert isinstance(module, torch._dynamo.eval_frame.OptimizedModule)
    write_config(exported / "onnx", "onnx", compile={"mode": "default"})
    with pytest.raises(ModelLoadError, match="compile: applies to format safetensors or "
                       "torch_export, not onnx"):
        read_config(exported / "onnx")
