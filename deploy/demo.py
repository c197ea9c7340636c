"""Build the demo model repository from scikit-learn's bundled datasets.

``timeshare demo build [--repo PATH] [--only NAME ...]`` (or ``build_demo_repository``) trains:

- ``digits-small``: logistic regression on the 8x8 digits (cheap),
- ``digits-large``: a small CNN on the same data (expensive, more accurate),
- a zoo of 32 MLPs (4 datasets x widths 16..1024 x depth 1..2) so co-location is real; the depth-2
  ones are stored as safetensors + architecture import path, the rest as TorchScript;
- ``digits-large-export`` and ``digits-large-onnx``: digits-large's weights (read back from its
  safetensors-free TorchScript archive) re-saved with ``torch.export.save`` and exported to ONNX
  by ``torch.onnx.export``, so the same model exists in every format (``deploy.demo_formats``).

Everything is seeded; each model's held-out accuracy goes into its config (``metadata``) and into
``manifest.json`` at the repository root.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from common.trust import DEMO_MODULES, ModuleAllowlist, resolve_callable
from deploy.demo_data import Split, load_splits

__all__ = ["DemoSpec", "demo_specs", "build_demo_repository", "DEFAULT_REPO"]

log = logging.getLogger(__name__)

DEFAULT_REPO = Path("var/model_repository")


@dataclass(frozen=True)
class DemoSpec:
    name: str
    dataset: str
    factory: str  # "module:function" in deploy.demo_models
    kwargs: dict[str, Any] = field(default_factory=dict)
    epochs: int = 200
    lr: float = 1e-2
    batch_size: int | None = None  # None = full batch
    fmt: str = "torchscript"
    priority: str = "interactive"
    source: str | None = None  # another demo model whose trained weights this one re-saves

    @property
    def input_name(self) -> str:
        return "pixels" if self.dataset == "digits" else "features"


def demo_specs() -> list[DemoSpec]:
    """All demo models, cheapest first."""
    specs = [
        DemoSpec("digits-small", "digits", "deploy.demo_models:digits_linear", epochs=300, lr=2e-2),
        DemoSpec(
            "digits-large", "digits", "deploy.demo_models:digits_cnn", {"channels": 32},
            epochs=40, lr=2e-3, batch_size=64,
        ),
    ]
    for ds in ("iris", "wine", "breast_cancer", "digits"):
        for depth in (1, 2):
            for width in (16, 64, 256, 512):
                specs.append(
                    DemoSpec(
                        f"{ds.replace('_', '-')}-mlp{depth}x{width}", ds,
                        "deploy.demo_models:tabular_mlp", {"hidden": [width] * depth},
                        epochs=150 if width <= 64 else 60, lr=5e-3,
                        fmt="safetensors" if depth == 2 else "torchscript",
                        priority="batch" if width >= 512 else "interactive",
                    )
                )
    # Last, so the zoo's seeds (their index) stay as they were.
    specs += [DemoSpec(f"digits-large-{suffix}", "digits", "deploy.demo_models:digits_cnn",
                       {"channels": 32}, fmt=fmt, source="digits-large")
              for suffix, fmt in (("export", "torch_export"), ("onnx", "onnx"))]
    return specs


def _build_module(spec: DemoSpec, split: Split) -> nn.Module:
    kwargs = dict(spec.kwargs)
    if spec.factory.endswith(":tabular_mlp"):
        kwargs.update(in_features=split.n_features, out_features=split.n_classes)
    return resolve_callable(spec.factory, allow=ModuleAllowlist(DEMO_MODULES),
                            what="factory")(**kwargs)


def _train(spec: DemoSpec, split: Split, seed: int) -> tuple[nn.Module, float]:
    torch.manual_seed(seed)
    model = _build_module(spec, split)
    if hasattr(model, "mean"):
        model.get_buffer("mean").copy_(torch.from_numpy(split.train_x.mean(0)))
        model.get_buffer("scale").copy_(torch.from_numpy(split.train_x.std(0) + 1e-3))
    x = torch.from_numpy(split.train_x)
    y = torch.from_numpy(split.train_y)
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(spec.epochs):
        order = torch.randperm(len(x), generator=gen)
        step = spec.batch_size or len(x)
        for i in range(0, len(x), step):
            idx = order[i : i + step]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(split.test_x)).argmax(1).numpy()
    return model, float((pred == split.test_y).mean())


def _model_config(spec: DemoSpec, split: Split, accuracy: float, n_params: int) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "name": spec.name,
        "inputs": [{"name": spec.input_name, "dtype": "FP32", "shape": [split.n_features]}],
        "outputs": [{"name": "logits", "dtype": "FP32", "shape": [split.n_classes]}],
        "max_batch_size": 64,
        # No waiting for rows: requests that queue while the device is busy still share one
        # forward, and a wait only adds latency for closed-loop callers (benchmarks.batching:
        # c=1 p50 +2.3 ms and c=16 1.6x throughput with 2 ms; +0.0 ms and 2.6x with 0).
        "batch_wait_ms": 0.0,
        "priority": spec.priority,
        "device": "any",
        "deadline_ms": 1000,
        "cache": {"mode": "exact", "ttl_s": 300},
        "format": spec.fmt,
        "metadata": {
            "dataset": spec.dataset,
            "test_accuracy": round(accuracy, 4),
            "parameters": n_params,
            "split": "sklearn bundled, stratified 60/20/20, seed 0 (test = last 20%)",
        },
    }
    if spec.fmt == "safetensors":
        cfg["architecture"] = spec.factory
        cfg["architecture_kwargs"] = {
            **spec.kwargs, "in_features": split.n_features, "out_features": split.n_classes,
        }
    if spec.name == "digits-large":
        cfg["fallback"] = [
            {"kind": "model", "model": "digits-small"},
            {"kind": "default", "outputs": {"logits": [[0.0] * 10]}},
        ]
    elif spec.name == "digits-small":
        cfg["fallback"] = [{"kind": "default", "outputs": {"logits": [[0.0] * 10]}}]
    return cfg


def _save(model: nn.Module, spec: DemoSpec, version_dir: Path, n_features: int) -> None:
    version_dir.mkdir(parents=True, exist_ok=True)
    if spec.fmt in ("torch_export", "onnx"):
        from deploy.demo_formats import save_exported, save_onnx

        example = torch.zeros(2, n_features)
        save = save_exported if spec.fmt == "torch_export" else save_onnx
        save(model, example, version_dir, input_name=spec.input_name)
    elif spec.fmt == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  str(version_dir / "model.safetensors"))
    else:
        torch.jit.script(model).save(str(version_dir / "model.pt"))


def build_demo_repository(
    repo: Path | str = DEFAULT_REPO,
    *,
    only: list[str] | None = None,
    force: bool = False,
    seed: int = 0,
) -> dict[str, Any]:
    """Train and write the demo models; models already present are kept unless ``force``.

    Returns the manifest (model -> dataset, accuracy, parameters, bytes).
    """
    repo = Path(repo)
    repo.mkdir(parents=True, exist_ok=True)
    specs = demo_specs()
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise ValueError(f"unknown demo models {unknown}; valid: {[s.name for s in specs]}")
        specs = [s for s in specs if s.name in only]
    manifest_path = repo / "manifest.json"
    manifest: dict[str, Any] = (
        json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    )
    splits: dict[str, Split] = {}
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for i, spec in enumerate(specs):
        model_dir = repo / spec.name
        if (model_dir / "config.yaml").exists() and spec.name in manifest and not force:
            continue
        t0 = time.perf_counter()
        split = splits.setdefault(spec.dataset, load_splits(spec.dataset, seed))
        if spec.source is not None:
            from deploy.demo_formats import trained_source

            model, acc = trained_source(repo, spec.source, _build_module(spec, split), manifest)
        else:
            model, acc = _train(spec, split, seed + i)
        n_params = sum(p.numel() for p in model.parameters())
        _save(model, spec, model_dir / "1", split.n_features)
        (model_dir / "config.yaml").write_text(
            yaml.safe_dump(_model_config(spec, split, acc, n_params), sort_keys=False)
        )
        nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        manifest[spec.name] = {
            "dataset": spec.dataset, "test_accuracy": round(acc, 4), "parameters": n_params,
            "weight_bytes": nbytes, "format": spec.fmt,
            **({"source": spec.source} if spec.source else {}),
        }
        log.info("built %s acc=%.4f in %.1fs", spec.name, acc, time.perf_counter() - t0)
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return manifest
