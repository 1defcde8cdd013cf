"""The exporter writes an op gradcli has no kernel for as a composite (spec: "Composite
ops"): PyTorch's decomposition as the body, PyTorch's node name for its backward; and it
names every op it lacks in one message."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
import torch.nn.functional as F  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import ExportError, from_module  # noqa: E402
from gradcli.bridges.torch import exporter  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402
from gradcli.ops import OPS  # noqa: E402


class NonCore(torch.nn.Module):
    """A linear layer, then one non-core op gradcli has no kernel for."""

    def __init__(self, which):
        super().__init__()
        torch.manual_seed(0)
        self.which = which
        self.lin = torch.nn.Linear(8, 8)
        self.w = torch.nn.Parameter(torch.randn(2, 8, 8))

    def forward(self, x):
        h = self.lin(x)
        if self.which == "addcmul":
            return torch.addcmul(h, h, h.flip(0), value=0.5)
        if self.which == "baddbmm":
            return torch.baddbmm(h.view(2, 2, 8), h.view(2, 2, 8), self.w, beta=0.5, alpha=2.0)
        if self.which == "softplus":
            return F.softplus(h, beta=2.0)
        if self.which == "roll":
            return torch.roll(h, shifts=(1, 2), dims=(0, 1))
        return F.interpolate(h.view(1, 2, 2, 8), scale_factor=2, mode="bilinear")


NODES = {"addcmul": "AddcmulBackward0", "baddbmm": "BaddbmmBackward0",
         "softplus": "SoftplusBackward0", "roll": "RollBackward0",
         "upsample_bilinear2d": "UpsampleBilinear2DBackward0"}


def _export_and_validate(which, tmp_path):
    graph = from_module(NonCore(which), (torch.randn(4, 8),), dtype="float64")
    (entry,) = [op for op in graph.document["ops"] if "composite" in op]
    assert entry["op"].startswith(f"aten.{which}.")
    assert entry["composite"]["node"] == NODES[which]
    assert all(OPS.get(b["op"]) is not None for b in entry["composite"]["body"])
    assert NODES[which] in graph.document["expect"]["order"]
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output


@pytest.mark.parametrize("which", ["addcmul", "baddbmm"])
def test_non_core_op_exports_and_validates_without_a_kernel_of_its_own(which, tmp_path):
    assert OPS.get(f"aten.{which}.default") is None     # no kernel: the body runs
    _export_and_validate(which, tmp_path)


@pytest.mark.parametrize("which", ["softplus", "roll", "upsample_bilinear2d"])
def test_non_core_op_needs_nothing_but_core_kernels(which, tmp_path):
    """Either it exports and validates, or all that stops it is core ops (kernels)."""
    try:
        _export_and_validate(which, tmp_path)
    except ExportError as exc:
        text = str(exc)
        assert "core ATen op" in text and "nor a PyTorch decomposition" not in text, text
        assert f"in the decomposition of aten.{which}." in text


def test_every_missing_op_is_named_in_one_message(monkeypatch):
    lacking = {"aten.tanh.default", "aten.sigmoid.default"}
    real = exporter._has_kernel
    monkeypatch.setattr(exporter, "_has_kernel", lambda name: name not in lacking and real(name))

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return torch.tanh(self.lin(x)) + torch.sigmoid(x)

    with pytest.raises(ExportError) as info:
        from_module(Two(), (torch.randn(2, 3),))
    text = str(info.value)
    assert "2 core ATen ops without a kernel" in text
    assert "aten.tanh.default (at " in text and "aten.sigmoid.default (at " in text
    assert "\n" not in text


class NormalizeWithZeroRow(torch.nn.Module):
    """``F.normalize`` of a zero vector (swin_v2's cosine attention over padded tokens)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x) * torch.tensor([[1.0], [0.0], [1.0]], dtype=x.dtype)
        return F.normalize(h, dim=-1)


def test_a_norm_of_a_zero_vector_has_pytorchs_gradient_not_its_decompositions(tmp_path):
    """Note [A norm's gradient at zero]: PyTorch's formula masks the norm's gradient where
    the norm is 0; the decomposition (sqrt of a sum of squares) gives NaN there. The op is
    written with its kernel, not as a composite, and the gradients are PyTorch's."""
    graph = from_module(NormalizeWithZeroRow(), (torch.randn(3, 4, dtype=torch.float64),),
                        dtype="float64", train=False)
    (entry,) = [op for op in graph.document["ops"] if op["op"] == "aten.linalg_vector_norm.default"]
    assert "composite" not in entry
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output


def test_a_body_that_defines_its_inputs_name_keeps_the_input(tmp_path):
    """log_sigmoid_forward of a tensor named ``sub`` (the result of Tanhshrink's x - tanh x):
    its decomposition defines a ``sub`` of its own, which must not rename the input."""
    module = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanhshrink(), torch.nn.LogSigmoid())
    graph = from_module(module, (torch.randn(3, 6),), dtype="float64")
    entry = next(op for op in graph.document["ops"] if "composite" in op)
    assert entry["inputs"] == ["sub"]
    body = entry["composite"]["body"]
    assert body[0]["inputs"][-1] == "sub"                        # the input, read first
    defined = [op.get("output") for op in body]
    assert "sub" not in defined and entry["outputs"][0] in defined
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
