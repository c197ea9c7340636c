"""Is an ONNX graph's work bounded by its input shapes? (``pool._private.bounded`` for ONNX.)

Read from the graph, never by running it. An ONNX graph is bounded when:

- every op is in the standard domain (``""`` / ``ai.onnx``): a custom or contrib op's work is
  unknown, and so are the ML domain's;
- it has no ``Loop``, ``Scan`` or ``SequenceMap`` (an ``If``'s branches are read like the graph:
  whichever runs, it is bounded);
- no op sizes its output by a tensor's *values* unless those values are fixed by the graph:
  ``Expand``'s shape, ``Tile``'s repeats, ``Pad``'s pads, ``Range``'s limits, ``Resize``'s
  sizes and the like must come from the graph's constants, its weights, or the inputs' shapes
  (``Shape``, ``Size`` and what is computed from them), never from a request's values.

Ops whose output is at most their input's size (``Reshape``, ``Slice``, ``NonZero``, ``TopK``,
``Gather``...) are bounded by the shapes the pool validates, as in the TorchScript rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["onnx_reason"]

_STANDARD_DOMAINS = ("", "ai.onnx")
_LOOPS = ("Loop", "Scan", "SequenceMap")
# op -> the inputs (by position) whose values size its output
_SIZED_BY_VALUES: dict[str, tuple[int, ...]] = {
    "Expand": (1,), "Tile": (1,), "Pad": (1, 3), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Resize": (1, 2, 3), "Upsample": (1,), "OneHot": (1,), "Col2Im": (1, 2),
    "CenterCropPad": (1,), "MaxUnpool": (2,), "DFT": (1,), "STFT": (1, 3),
    "MelWeightMatrix": (0, 1, 2, 3, 4), "HannWindow": (0,), "HammingWindow": (0,),
    "BlackmanWindow": (0,), "AffineGrid": (1,), "ImageDecoder": (0,),
}
_SHAPE_OF = ("Shape", "Size")  # their values are the input's shape, not its values


def onnx_reason(model: Any, request_inputs: Iterable[str]) -> str | None:
    """None when the ``onnx.ModelProto``'s work is bounded by its input shapes, else why not.
    ``request_inputs``: the graph inputs that carry a request's values (the rest are weights)."""
    request = set(request_inputs)
    fixed = {i.name for i in model.graph.input if i.name not in request}
    fixed.update(i.name for i in model.graph.initializer)
    return _graph_reason(model.graph, fixed)


def _graph_reason(graph: Any, fixed: set[str]) -> str | None:
    """Walks ``graph``'s nodes in order (ONNX keeps them topologically sorted), growing
    ``fixed``: the names whose values no request can choose."""
    fixed = fixed | {i.name for i in graph.initializer}
    for node in graph.node:
        reason = _node_reason(node, fixed)
        if reason is not None:
            return reason
        if node.op_type in _SHAPE_OF or node.op_type == "Constant" or (
                not _subgraphs(node) and all(not name or name in fixed for name in node.input)):
            # (a subgraph may read any outer name: its node's outputs are never taken as fixed)
            fixed.update(node.output)
    return None


def _node_reason(node: Any, fixed: set[str]) -> str | None:
    op = node.op_type
    if node.domain not in _STANDARD_DOMAINS:
        return f"an op outside the ONNX standard domain ({node.domain}.{op})"
    if op in _LOOPS:
        return f"a loop ({op})"
    for pos in _SIZED_BY_VALUES.get(op, ()):
        if pos < len(node.input) and node.input[pos] and node.input[pos] not in fixed:
            return f"an output sized by a tensor's values ({op})"
    for sub in _subgraphs(node):  # If's branches: either may run
        reason = _graph_reason(sub, fixed)
        if reason is not None:
            return reason
    return None


def _subgraphs(node: Any) -> list[Any]:
    return [g for attr in node.attribute
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)]
