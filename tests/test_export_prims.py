"""Note [Prims as ATen] (gradcli/bridges/torch/prims.py): a decomposition that PyTorch
writes through ``torch._refs`` reaches torch's prims (``std_mean`` traces as
``prims.var``, ``prims.sum``, ``prims.div``); in a composite's body each prim is its
ATen implementation, so such ops export without a kernel of their own. A prim whose
ATen implementation decomposes back into it is named among the missing ops."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import ExportError, from_module  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402


class Stats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(5, 6)

    def forward(self, x):
        h = self.fc(x)
        s, m = torch.std_mean(h, dim=1, keepdim=True)
        v, m2 = torch.var_mean(h, dim=0, correction=0)
        return (h - m) / (s + 1.0) + torch.round(h, decimals=2) * 0.0 + (v * m2).sum()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ops_decomposed_through_prims_export_as_composites(dtype, tmp_path):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    graph = from_module(Stats(), (x,), dtype=dtype)
    composites = {op["op"]: op["composite"] for op in graph.document["ops"] if "composite" in op}
    assert {"aten.std_mean.correction", "aten.var_mean.correction"} <= set(composites)
    body_ops = {b["op"] for c in composites.values() for b in c["body"]}
    assert not any(o.startswith("prims.") for o in body_ops), body_ops
    assert "aten.var.correction" in body_ops
    assert composites["aten.std_mean.correction"]["node"] == "StdMeanBackward0"
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output


def test_a_prim_that_comes_back_to_itself_is_named_missing():
    """torch.frexp decomposes into prims.frexp, whose ATen implementation is torch.frexp
    again: no kernel either way, and the message says which prim."""

    class Frexp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.linspace(0.5, 2.0, 4, dtype=torch.float64))

        def forward(self):
            return torch.frexp(self.w)[0]

    with pytest.raises(ExportError, match=r"prims\.frexp\.[A-Za-z_]+ \(in the decomposition "
                                          r"of aten\.frexp\."):
        from_module(Frexp(), (), dtype="float64")
