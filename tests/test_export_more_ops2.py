"""Export end to end of a module using ops beyond the core opset that gradcli gained: ``torch.kthvalue``,
``torch.mode``, ``torch.addbmm``, ``F.adaptive_max_pool3d`` and ``F.grid_sample`` on a 5-D input
(``grid_sampler_3d``): each is a kernel of gradcli's, the graph carries PyTorch's gradients and node
order, and ``gradcli validate`` passes it at float64 and float32."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
from export_check import exports_and_validates  # noqa: E402
from gradcli.bridges.torch import from_module  # noqa: E402

F = torch.nn.functional


class Selections(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(3, 4, 5))
        self.bias = torch.nn.Parameter(torch.randn(4, 6))
        self.grid = torch.nn.Parameter(torch.rand(1, 2, 3, 2, 3) * 1.8 - 0.9)
        self.scale = torch.nn.Parameter(torch.rand(2, 1, 1, 1) + 0.5)

    def forward(self, x, b2, vol):
        h = x * self.w                                               # (3, 4, 5)
        kth = torch.kthvalue(h, 2, dim=2).values                     # (3, 4)
        mode = torch.mode(torch.round(h * 2) / 2 + h * 1e-3, dim=1).values
        mm = torch.addbmm(self.bias, h, b2, beta=0.5, alpha=2.0)     # (4, 6)
        pooled = F.adaptive_max_pool3d(vol * self.scale, (2, 3, 2))
        sampled = F.grid_sample(vol, self.grid, mode="bilinear", padding_mode="border", align_corners=False)
        return (kth * kth).sum() + mode.sum() + (mm * mm).sum() + (pooled * pooled).sum() + (sampled * sampled).sum()


OPS = ("aten.kthvalue.default", "aten.mode.default", "aten.addbmm.default", "aten.adaptive_max_pool3d.default",
       "aten.grid_sampler_3d.default")
NODES = ("KthvalueBackward0", "ModeBackward0", "AddbmmBackward0", "AdaptiveMaxPool3DBackward0",
         "GridSampler3DBackward0")


def _inputs():
    torch.manual_seed(1)
    return torch.randn(3, 4, 5), torch.randn(3, 5, 6), torch.randn(1, 2, 4, 5, 6)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_with_these_ops_exports_and_validates(dtype, tmp_path):
    graph = from_module(Selections(), _inputs(), dtype=dtype)
    exports_and_validates(graph, tmp_path, OPS, NODES, {"w", "bias", "grid", "scale"})
