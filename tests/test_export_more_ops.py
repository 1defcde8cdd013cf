"""Export end to end of a module using ops beyond the core opset that gradcli gained: ``torch.hypot``,
``torch.special.erfinv``, ``torch.median(x, dim)``, ``torch.masked_select`` (a length the mask
decides), ``torch.cummax``, ``torch.logcumsumexp``, ``torch.cumprod`` and ``nn.Bilinear``
(``_trilinear``): each is a kernel of gradcli's, the graph carries PyTorch's gradients and node
order, and ``gradcli validate`` passes it at float64 and float32."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
from export_check import exports_and_validates  # noqa: E402
from gradcli.bridges.torch import from_module  # noqa: E402


class Scans(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.bil = torch.nn.Bilinear(4, 3, 5)
        self.w = torch.nn.Parameter(torch.randn(2, 4))

    def forward(self, x, y, mask):
        h = torch.hypot(x, self.w)
        e = torch.special.erfinv(torch.tanh(h) * 0.9)
        med = torch.median(e, 1).values
        picked = torch.masked_select(h, mask)
        top = torch.cummax(h, 1).values
        lse = torch.logcumsumexp(h, 0)
        prods = torch.cumprod(h, 1)
        b = self.bil(h, y)
        return med.sum() + (picked * picked).sum() + top.sum() + lse.sum() + prods.sum() + (b * b).sum()


OPS = ("aten.hypot.default", "aten.erfinv.default", "aten.median.dim", "aten.masked_select.default",
       "aten.cummax.default", "aten.logcumsumexp.default", "aten.cumprod.default", "aten._trilinear.default")
NODES = ("HypotBackward0", "ErfinvBackward0", "MedianBackward1", "MaskedSelectBackward0", "CummaxBackward0",
         "LogcumsumexpBackward0", "CumprodBackward0", "TrilinearBackward0")


def _inputs():
    torch.manual_seed(1)
    return torch.randn(2, 4), torch.randn(2, 3), torch.tensor([[True, False, True, True], [False, True, False, True]])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_with_these_ops_exports_and_validates(dtype, tmp_path):
    graph = from_module(Scans(), _inputs(), dtype=dtype)
    exports_and_validates(graph, tmp_path, OPS, NODES, {"w", "bil.weight", "bil.bias"})
