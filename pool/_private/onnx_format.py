"""``format: onnx``: ``model.onnx`` run by ONNX Runtime, weights swapped like the torch formats.

How the weights are swapped: at load the graph's weight initializers are lifted out of the
graph into graph *inputs*, and their values become buffers of an :class:`OnnxModule`. So
``pool._private.weights.pack`` moves them into the model's flat host buffer and ``bind``
re-points them at the device region exactly like a torch model's, and the host-tier and device
bytes the residency manager accounts are the weights' bytes. Each forward pass binds the
buffers where they are now through ORT's ``IOBinding`` (``bind_input(..., buffer_ptr)``: ORT
reads that memory in place, CPU or CUDA), so a swap needs neither a copy inside ORT nor a new
session, and ORT holds no second copy of the weights. Small integer initializers (under 1 KiB:
shape constants that ORT's shape inference must see) stay in the graph. The cost: ORT cannot
constant-fold or pre-pack weights it sees as inputs.

One session per device, built once: the CPU execution provider on the CPU, the CUDA one when
the weights are bound to a CUDA region (GPU machines install ``onnxruntime-gpu`` in place of
``onnxruntime``). The CUDA path has not run in CI (no GPU here).

Errors name the file and the field: an opset or IR version newer than the installed ``onnx``
understands, inputs or outputs that do not match the model config, a file ORT cannot load.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pool.config import ModelConfig
from pool.errors import ModelLoadError

__all__ = ["OnnxModule", "load_onnx"]

log = logging.getLogger(__name__)


def _check_versions(model: Any, shown: str) -> None:
    # lazy: only ONNX models need it, and the GPU machine has no onnx (docs/GPU.md)
    import onnx

    if model.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(shown, f"IR version {model.ir_version} is newer than this server "
                             f"reads (onnx {onnx.__version__}: up to {onnx.IR_VERSION}); export "
                             "with an older opset/IR or upgrade onnx", field="ir_version")
    newest = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > newest:
            raise ModelLoadError(shown, f"opset {imp.version} of the default domain is newer "
                                 f"than supported (up to {newest}); re-export with "
                                 f"opset_version<={newest}", field="opset_import")


def _check_io(model: Any, config: ModelConfig, shown: str) -> None:
    inits = {i.name for i in model.graph.initializer}
    graph_in = [i.name for i in model.graph.input if i.name not in inits]
    declared = [t.name for t in config.inputs]
    if len(graph_in) != len(declared):
        raise ModelLoadError(shown, f"graph inputs {graph_in} do not match the config's inputs "
                             f"{declared}", field="inputs")
    graph_out = [o.name for o in model.graph.output]
    if len(graph_out) != len(config.outputs):
        raise ModelLoadError(shown, f"graph outputs {graph_out} do not match the config's "
                             f"outputs {[t.name for t in config.outputs]}", field="outputs")


def load_onnx(path: Path, shown: str, config: ModelConfig) -> nn.Module:
    """Read ``path``, check its versions and I/O against ``config``, return an OnnxModule."""
    # lazy: only ONNX models need it, and the GPU machine has no onnx (docs/GPU.md)
    import onnx
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise ModelLoadError(shown, f"not an ONNX model ({type(e).__name__}: {e})"[:300],
                             field="format") from None
    _check_versions(model, shown)
    _check_io(model, config, shown)
    if any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer):
        raise ModelLoadError(shown, "initializers in external data files are not supported; "
                             "export with external_data=False", field="format")
    module = OnnxModule(model)
    try:
        module.session(torch.device("cpu"))  # fail at load, naming the file
    except Exception as e:
        raise ModelLoadError(shown, f"ONNX Runtime cannot load it ({type(e).__name__}: "
                             f"{e})".replace("\n", " ")[:400], field="format") from None
    return module


_MIN_WEIGHT_BYTES = 1024  # smaller integer initializers (shape constants) stay in the graph


def _lift_weights(model: Any) -> dict[str, torch.Tensor]:
    """Move the graph's weight initializers to graph inputs; returns them as tensors.

    Shape inference needs small integer constants (a Reshape's target shape), so those stay;
    every floating-point initializer moves.
    """
    # lazy: only ONNX models need it, and the GPU machine has no onnx (docs/GPU.md)
    from onnx import helper, numpy_helper

    weights: dict[str, torch.Tensor] = {}
    keep = []
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind != "f" and (arr.nbytes < _MIN_WEIGHT_BYTES or arr.dtype.kind
                                      not in "iu"):
            keep.append(init)
            continue
        weights[init.name] = torch.from_numpy(arr.copy())
        model.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                               list(init.dims)))
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    return weights


class OnnxModule(nn.Module):
    """An ONNX graph as a module: its weights are buffers, bound to ORT as inputs per call."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        weights = _lift_weights(model)
        self._names = list(weights)
        for i, t in enumerate(weights.values()):
            self.register_buffer(f"w{i}", t)
        self._graph = model.SerializeToString()
        self._inputs = [i.name for i in model.graph.input if i.name not in weights]
        self._outputs = [o.name for o in model.graph.output]
        self._sessions: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def request_inputs(self) -> list[str]:
        """The graph inputs a request fills (the others are the lifted weights)."""
        return list(self._inputs)

    def model_proto(self) -> Any:
        """The graph as ORT runs it (an ``onnx.ModelProto``, weights lifted to inputs)."""
        # lazy: only ONNX models need it, and the GPU machine has no onnx (docs/GPU.md)
        import onnx

        return onnx.load_from_string(self._graph)

    def session(self, device: torch.device) -> Any:
        """The ORT session for ``device`` (CPU or CUDA execution provider), built once."""
        key = str(device)
        with self._lock:
            if key not in self._sessions:
                self._sessions[key] = self._build(device)
            return self._sessions[key]

    def _build(self, device: torch.device) -> Any:
        # lazy: only ONNX models need it; the GPU machine has no onnxruntime (docs/GPU.md)
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = torch.get_num_threads()
        if device.type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise RuntimeError("format onnx on a GPU needs the onnxruntime-gpu package (this "
                                   f"onnxruntime has {ort.get_available_providers()})")
            providers: list[Any] = [("CUDAExecutionProvider", {"device_id": device.index or 0})]
        else:
            providers = ["CPUExecutionProvider"]
        return ort.InferenceSession(self._graph, opts, providers=providers)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        bufs = [self.get_buffer(f"w{i}") for i in range(len(self._names))]
        device = bufs[0].device if bufs else torch.device("cpu")
        session = self.session(device)
        binding = session.io_binding()
        kind = "cuda" if device.type == "cuda" else "cpu"
        index = device.index or 0
        # Weights: bound in place where the residency tiers put them (no copy, no rebuild).
        tensors = [a.to(device).contiguous() for a in args]
        for name, t in [*zip(self._inputs, tensors, strict=True),
                        *zip(self._names, bufs, strict=True)]:
            binding.bind_input(name, kind, index, _NP_DTYPES[t.dtype], list(t.shape),
                               t.data_ptr())
        for name in self._outputs:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        return tuple(torch.from_numpy(o) for o in binding.copy_outputs_to_cpu())


_NP_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
              torch.int64: np.int64, torch.int32: np.int32, torch.int8: np.int8,
              torch.uint8: np.uint8, torch.int16: np.int16, torch.bool: np.bool_}
