"""Is a model's forward pass bounded by its input shapes? (Which models may run inline on a loop
that other requests share: see ``DeviceSpec.inline_bounded_only``.)

A forward pass may run on an event loop that also serves other requests only if nothing in a
request's *values* can make it run long: a hang there stalls every request of the loop. The
answer is read from the graph the model was loaded as, never from running it:

- TorchScript: the inlined graph of ``forward`` uses only ``aten``/``prim``/``quantized`` ops, has
  no loop (``prim::Loop``: a ``while`` on a tensor's value, or a ``for`` over one), calls no
  Python and turns no tensor into an ``int`` (which could size a later op by a value);
- ``torch.export`` programs (not AOTInductor packages): the same rules over the FX graph, where
  control flow would appear as higher-order operators;
- ONNX graphs: standard-domain ops only, no ``Loop``/``Scan``, no output sized by a request's
  values (``pool._private.bounded_onnx``);
- anything else (eager Python architectures, AOTInductor's compiled code, ``torch.compile``,
  which may recompile on a new shape) is not proven bounded.

Work that grows with the input's shape is bounded because the pool validates shapes and sizes
chunks by their measured cost; the measured cost is the second guard (``INLINE_STALL``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pool._private.bounded_onnx import onnx_reason
from pool._private.export_format import _ExportedModule
from pool._private.onnx_format import OnnxModule

__all__ = ["why_unbounded"]

_OP_NAMESPACES = ("aten", "prim", "quantized")
_TS_UNBOUNDED = {
    "prim::Loop": "a loop",
    "prim::PythonOp": "a call into Python",
    "prim::CallFunction": "a function call the graph does not inline",
    "prim::CallMethod": "a method call the graph does not inline",
    "aten::item": "a tensor's value read as a number",
    "aten::tolist": "a tensor's values read as a list",
    "aten::repeat_interleave": "an output sized by a tensor's values",
}
_TS_TENSOR_TO_INT = ("aten::Int", "aten::IntImplicit", "aten::ScalarImplicit")
_FX_UNBOUNDED = {"_local_scalar_dense": "a tensor's value read as a number",
                 "item": "a tensor's value read as a number",
                 "repeat_interleave": "an output sized by a tensor's values"}


def why_unbounded(module: nn.Module) -> str | None:
    """None when ``module``'s forward pass is bounded by its input shapes, else why not."""


    if isinstance(module, torch.jit.ScriptModule):
        return _script_reason(module)
    if isinstance(module, _ExportedModule) and isinstance(module.graph, torch.fx.GraphModule):
        return _fx_reason(module.graph)
    if isinstance(module, OnnxModule):
        return onnx_reason(module.model_proto(), module.request_inputs)
    if type(module).__name__ == "OptimizedModule":
        return "torch.compile may recompile for a new shape"
    return f"{type(module).__name__} runs Python code (not a TorchScript or exported graph)"


def _script_reason(module: Any) -> str | None:
    try:
        graph = module.inlined_graph
    except (AttributeError, RuntimeError) as e:  # a module without a scripted forward
        return f"no TorchScript graph to read ({type(e).__name__})"
    return _walk_script(graph)


def _walk_script(block: Any) -> str | None:
    for node in block.nodes():
        kind = node.kind()
        if kind in _TS_UNBOUNDED:
            return f"{_TS_UNBOUNDED[kind]} ({kind})"
        if kind in _TS_TENSOR_TO_INT and _reads_tensor(node):
            return f"a tensor's value read as a number ({kind})"
        if kind.split("::", 1)[0] not in _OP_NAMESPACES:
            return f"an op outside aten/prim ({kind})"
        for sub in node.blocks():
            reason = _walk_script(sub)
            if reason is not None:
                return reason
    return None


def _reads_tensor(node: Any) -> bool:
    return any(v.type().kind() == "TensorType" for v in node.inputs())


def _fx_reason(graph: Any) -> str | None:
    for node in graph.graph.nodes:
        if node.op == "call_module" and node.target != "_guards_fn":  # export's shape guards
            return f"a call to submodule {node.target}"
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.HigherOrderOperator):
            return f"control flow ({target.name()})"
        name = getattr(target, "__name__", str(target)).split(".")[0]
        if name in _FX_UNBOUNDED:
            return f"{_FX_UNBOUNDED[name]} ({name})"
        namespace = getattr(target, "namespace", None)
        if namespace is None and getattr(target, "__module__", None) != "_operator":
            return f"a call into Python ({name})"
        if namespace is not None and namespace not in _OP_NAMESPACES + ("prims",):
            return f"an op outside aten/prim ({namespace}.{name})"
    return None
