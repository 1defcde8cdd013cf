"""Export end to end of a module using the special functions gradcli gained: ``torch.lgamma``,
``torch.digamma``, ``torch.special.erfcx``, ``torch.exp2``, ``torch.fmax``, ``torch.special.i0e``:
each is a kernel of gradcli's (aten/special.py), the graph carries PyTorch's gradients and node
order, and ``gradcli validate`` passes it at float64 and float32."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
from export_check import exports_and_validates  # noqa: E402
from gradcli.bridges.torch import from_module  # noqa: E402


class Special(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(2, 4))

    def forward(self, x):
        h = torch.nn.functional.softplus(x * self.w) + 0.5        # > 0: away from the poles
        g = torch.lgamma(h) + torch.digamma(h)
        e = torch.special.erfcx(self.w) + torch.exp2(x * self.w)
        m = torch.fmax(g, e)
        return (m * torch.special.i0e(self.w - x)).sum()


OPS = ("aten.lgamma.default", "aten.digamma.default", "aten.special_erfcx.default", "aten.exp2.default",
       "aten.fmax.default", "aten.special_i0e.default")
NODES = ("LgammaBackward0", "DigammaBackward0", "SpecialErfcxBackward0", "Exp2Backward0", "FmaxBackward0",
         "SpecialI0EBackward0")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_with_special_functions_exports_and_validates(dtype, tmp_path):
    torch.manual_seed(1)
    graph = from_module(Special(), (torch.randn(2, 4),), dtype=dtype)
    exports_and_validates(graph, tmp_path, OPS, NODES)
