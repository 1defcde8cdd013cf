"""Export end to end of a module using the last core ATen ops gradcli gained: ``nn.EmbeddingBag``
(``_embedding_bag``), ``F.grid_sample`` (``grid_sampler_2d``), ``torch.pdist``
(``_pdist_forward``) and ``torch.fft.rfft``/``irfft`` (``_fft_r2c``/``_fft_c2r``, complex
values held as their real view): the graph carries PyTorch's gradients and node order and
``gradcli validate`` passes it."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
import torch.nn.functional as F  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import from_module  # noqa: E402
from gradcli.bridges.torch.errors import ExportError  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402


class Mixed(torch.nn.Module):
    """Bags of embeddings, a spectral filter, a learned warp of an image, pair distances."""

    def __init__(self, mode="mean"):
        super().__init__()
        torch.manual_seed(0)
        self.bag = torch.nn.EmbeddingBag(12, 6, mode=mode)
        self.fc = torch.nn.Linear(6, 8)
        self.filt = torch.nn.Parameter(torch.randn(5, 2))
        self.theta = torch.nn.Parameter(torch.tensor([[0.9, 0.1, 0.05], [-0.1, 0.8, -0.05]]))

    def forward(self, ids, offsets, image):
        h = self.fc(self.bag(ids, offsets))                                    # (2, 8)
        spectrum = torch.view_as_real(torch.fft.rfft(h, norm="ortho")) * self.filt
        h = torch.fft.irfft(torch.view_as_complex(spectrum), n=8, norm="ortho")
        grid = F.affine_grid(self.theta.expand(2, 2, 3), (2, 1, 3, 3), align_corners=False)
        warped = F.grid_sample(image, grid, mode="bicubic", padding_mode="reflection", align_corners=False)
        return torch.pdist(h).sum() + (warped.flatten(1) * h.sum(-1, keepdim=True)).sum()


def _inputs():
    torch.manual_seed(1)
    return torch.tensor([1, 4, 2, 7, 3, 11]), torch.tensor([0, 2]), torch.randn(2, 1, 4, 5)


def _validate(graph, tmp_path):
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    return graph.document


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_a_module_with_the_last_core_ops_exports_and_validates(mode, tmp_path):
    graph = from_module(Mixed(mode), _inputs(), dtype="float64")
    ops = [op["op"] for op in graph.document["ops"]]
    for name in ("aten._embedding_bag.default", "aten._fft_r2c.default", "aten.view_as_real.default",
                 "aten.view_as_complex.default", "aten._fft_c2r.default", "aten.grid_sampler_2d.default",
                 "aten._pdist_forward.default"):
        assert name in ops
    assert not any("composite" in op for op in graph.document["ops"] if op["op"] in (
        "aten._embedding_bag.default", "aten.grid_sampler_2d.default"))     # kernels of their own
    order = graph.document["expect"]["order"]
    # PyTorch's own backward, node by node (the export checks its replay against it)
    for node in ("EmbeddingBagBackward0", "FftR2CBackward0", "ViewAsRealBackward0", "ViewAsComplexBackward0",
                 "FftC2RBackward0", "GridSampler2DBackward0", "PdistBackward0"):
        assert node in order
    assert order.index("FftC2RBackward0") < order.index("ViewAsComplexBackward0") < \
        order.index("ViewAsRealBackward0") < order.index("FftR2CBackward0") < order.index("EmbeddingBagBackward0")
    doc = _validate(graph, tmp_path)
    assert set(doc["expect"]["grads"]) >= {"bag.weight", "fc.weight", "filt", "theta"}


def test_the_module_exports_at_float32_and_validates_by_the_float32_verdict(tmp_path):
    graph = from_module(Mixed(), _inputs(), dtype="float32")
    _validate(graph, tmp_path)


class ComplexArithmetic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.fft.irfft(torch.fft.rfft(self.fc(x)) * (1 + 2j), n=8).sum()


def test_arithmetic_on_a_complex_tensor_is_refused_at_export_in_one_line():
    # gradcli holds complex values as their real view: an op other than the inverse FFT and
    # view_as_real reading one would compute on the parts as real numbers, so export refuses it
    with pytest.raises(ExportError, match="computes on a complex tensor") as err:
        from_module(ComplexArithmetic(), (torch.randn(2, 8),), dtype="float64")
    assert "\n" not in str(err.value) and "aten.mul.Tensor" in str(err.value)


class ComplexWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.spectrum = torch.nn.Parameter(torch.randn(5, dtype=torch.complex128))

    def forward(self, x):
        return (torch.fft.irfft(self.spectrum, n=8) * x).sum()


def test_a_complex_parameter_is_refused_at_export_in_one_line():
    with pytest.raises(ExportError, match="reads a complex parameter") as err:
        from_module(ComplexWeight(), (torch.randn(2, 8, dtype=torch.float64),))
    assert "\n" not in str(err.value)
