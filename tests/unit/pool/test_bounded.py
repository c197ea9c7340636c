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
