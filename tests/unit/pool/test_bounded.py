"""Which graphs ``pool._private.bounded`` proves bounded by their input shapes (the models the
ingress's pool may run on its loop), and the reason it gives for the others."""

import pytest
import torch
from torch import nn

from deploy.demo_models import digits_cnn, digits_linear, tabular_mlp
from pool._private.bounded import why_unbounded
from pool._private.export_format import _ExportedModule


class WhileOnAValue(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while bool(x.sum() > 0):  # a request's values choose how long this runs
            x = x - 1
        return x


class ForOverRows(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(x.size(0)):
            x = x + 1
        return x


class SizedByAValue(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(int(x.max()), 1)


class ItemSized(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.max().item()
        return x * n


class Branch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):  # either branch is bounded
            return x * 2
        return x - 1


class CondOnAValue(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


def _script(m: nn.Module) -> torch.jit.ScriptModule:
    return torch.jit.script(m.eval())


@pytest.mark.parametrize("factory", [digits_linear, digits_cnn,
                                     lambda: tabular_mlp(4, [16, 16], 3), Branch])
def test_the_demo_graphs_and_a_branch_are_bounded(factory):
    assert why_unbounded(_script(factory())) is None


@pytest.mark.parametrize(("module", "reason"), [
    (WhileOnAValue, "a loop (prim::Loop)"),
    (ForOverRows, "a loop (prim::Loop)"),
    (SizedByAValue, "a tensor's value read as a number (aten::Int)"),
    (ItemSized, "a tensor's value read as a number (aten::item)"),
])
def test_scripted_graphs_that_a_value_can_stretch_are_not(module, reason):
    assert why_unbounded(_script(module())) == reason


def test_exported_programs_are_read_from_their_graph():
    plain = torch.export.export(digits_cnn().eval(), (torch.zeros(2, 64),))
    assert why_unbounded(_ExportedModule(plain.module())) is None
    cond = torch.export.export(CondOnAValue(), (torch.zeros(2, 4),))
    assert why_unbounded(_ExportedModule(cond.module())) == "control flow (cond)"


def test_python_code_and_compiled_modules_are_not_proven():
    assert "runs Python code" in why_unbounded(digits_linear())
    assert why_unbounded(torch.compile(digits_linear())) == (
        "torch.compile may recompile for a new shape")


# -- ONNX ---------------------------------------------------------------------------------------

def _onnx(nodes, *, inputs=("x",), initializers=(), opset=17, shape=(None, 4)):
    """An OnnxModule over a graph of ``nodes`` (request inputs ``inputs``, float, [N, 4])."""
    from onnx import TensorProto, helper

    from pool._private.onnx_format import OnnxModule

    graph = helper.make_graph(
        list(nodes), "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return OnnxModule(model)


def _ints(name, values):
    import numpy as np
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def test_the_demo_onnx_export_is_bounded(tmp_path):
    from deploy.demo_formats import save_onnx
    from pool._private.onnx_format import load_onnx
    from pool.config import ModelConfig, TensorSpec

    path = save_onnx(digits_cnn(), torch.zeros(2, 64), tmp_path, input_name="pixels")
    config = ModelConfig(name="d", format="onnx",
                         inputs=[TensorSpec(name="pixels", dtype="FP32", shape=[64])],
                         outputs=[TensorSpec(name="logits", dtype="FP32", shape=[10])])
    assert why_unbounded(load_onnx(path, "d", config)) is None


def test_onnx_shapes_taken_from_constants_or_from_input_shapes_are_bounded():
    from onnx import helper

    shape_const = _onnx([helper.make_node("Expand", ["x", "s"], ["y"])],
                        initializers=[_ints("s", [3, 4])])
    from_shape = _onnx([helper.make_node("Shape", ["x"], ["s"]),
                        helper.make_node("Mul", ["s", "two"], ["s2"]),
                        helper.make_node("ConstantOfShape", ["s2"], ["y"])],
                       initializers=[_ints("two", [2, 2])])
    branches = _onnx([
        helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0),
        helper.make_node("Cast", ["t"], ["c"], to=9),  # bool
        helper.make_node("If", ["c"], ["y"],
                         then_branch=_branch("Relu"), else_branch=_branch("Sigmoid"))])
    for module in (shape_const, from_shape, branches):
        assert why_unbounded(module) is None


def _branch(op, extra=()):
    from onnx import TensorProto, helper

    return helper.make_graph([*extra, helper.make_node(op, ["x"], ["out"])], op,
                             [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])


def test_onnx_graphs_that_a_value_can_stretch_are_not():
    from onnx import TensorProto, helper

    # Tile's repeats computed from the request's values (through a Concat with a constant)
    tiled = _onnx([helper.make_node("Cast", ["x"], ["i"], to=7),
                   helper.make_node("ReduceMax", ["i"], ["m"], keepdims=1),
                   helper.make_node("Concat", ["m", "one"], ["reps"], axis=0),
                   helper.make_node("Tile", ["x", "reps"], ["y"])],
                  initializers=[_ints("one", [1])])
    loop = _onnx([helper.make_node("Loop", ["n", ""], ["y"], body=_branch("Relu"))],
                 initializers=[_ints("n", 3)])
    custom = _onnx([helper.make_node("FusedGemm", ["x", "x"], ["y"], domain="com.microsoft")])
    hidden = _onnx([helper.make_node("If", ["c"], ["y"], then_branch=_branch("Relu"),
                                     else_branch=_branch("Relu", [helper.make_node(
                                         "Loop", ["", ""], ["z"], body=_branch("Relu"))]))],
                   inputs=("x", "c"))
    assert why_unbounded(tiled) == "an output sized by a tensor's values (Tile)"
    assert why_unbounded(loop) == "a loop (Loop)"
    assert why_unbounded(custom) == (
        "an op outside the ONNX standard domain (com.microsoft.FusedGemm)")
    assert why_unbounded(hidden) == "a loop (Loop)"
    # an If on a constant whose branch reads the request: its output is not a fixed size
    reads_x = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["out"], to=7)], "reads_x", [],
        [helper.make_tensor_value_info("out", TensorProto.INT64, None)])
    smuggled = _onnx([helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
                          "c", TensorProto.BOOL, [], [True])),
                      helper.make_node("If", ["c"], ["reps"], then_branch=reads_x,
                                       else_branch=reads_x),
                      helper.make_node("Tile", ["x", "reps"], ["y"])])
    assert why_unbounded(smuggled) == "an output sized by a tensor's values (Tile)"
