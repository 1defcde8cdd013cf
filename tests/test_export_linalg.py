"""Export end to end of a module calling ``torch.linalg`` (det, slogdet, logdet, inv, solve,
cholesky, qr, svdvals, eigh): every op it records has a kernel of its own in gradcli
(gradcli/ops/aten/linalg.py), the graph carries PyTorch's gradients and node order and
``gradcli validate`` passes it, at float64 and float32."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
from export_check import exports_and_validates  # noqa: E402
from gradcli.bridges.torch import from_module  # noqa: E402


class Linalg(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(4, 2))

    def forward(self, x):
        a = x @ self.w + 3 * torch.eye(4)                       # (2, 4, 4), well conditioned
        spd = a @ a.mT + torch.eye(4)
        out = torch.linalg.det(a).sum() + torch.linalg.slogdet(a)[1].sum() + torch.logdet(spd).sum()
        out = out + (torch.linalg.inv(a) * x).sum() + (torch.linalg.solve(a, self.b) ** 2).sum()
        out = out + torch.linalg.cholesky(spd).sum()
        q, r = torch.linalg.qr(a)
        out = out + (q @ r * x).sum() + r.diagonal(dim1=-2, dim2=-1).abs().sum()
        out = out + torch.linalg.svdvals(a).sum()
        values, vectors = torch.linalg.eigh(spd)
        return out + values.sum() + ((vectors * values.unsqueeze(-2)) @ vectors.mT * x).sum()


def _inputs():
    torch.manual_seed(1)
    return (torch.randn(2, 4, 4),)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_calling_torch_linalg_exports_and_validates(dtype, tmp_path):
    graph = from_module(Linalg(), _inputs(), dtype=dtype)
    ops = ("aten._linalg_det.default", "aten._linalg_slogdet.default", "aten.linalg_inv_ex.default",
           "aten._linalg_solve_ex.default", "aten.linalg_cholesky_ex.default", "aten.linalg_qr.default",
           "aten._linalg_svd.default", "aten._linalg_eigh.default")
    nodes = ("LinalgDetBackward0", "LinalgSlogdetBackward0", "LinalgInvExBackward0", "LinalgSolveExBackward0",
             "LinalgCholeskyExBackward0", "LinalgQrBackward0", "LinalgSvdBackward0", "LinalgEighBackward0")
    doc = exports_and_validates(graph, tmp_path, ops, nodes, {"w", "b"})
    assert not any("composite" in op for op in doc["ops"] if op["op"].startswith("aten._linalg")
                   or op["op"].startswith("aten.linalg"))       # kernels of their own


class Solvers(torch.nn.Module):
    """solve_triangular, triangular_solve, cholesky_solve and cholesky_inverse (linalg_solvers.py)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(4, 2))

    def forward(self, x):
        a = x @ self.w + 3 * torch.eye(4)                       # (2, 4, 4): both triangles solve well
        spd = a @ a.mT + torch.eye(4)
        c = torch.linalg.cholesky(spd)
        out = torch.linalg.solve_triangular(a, self.b, upper=True).sum()
        out = out + (torch.linalg.solve_triangular(a, self.b.mT, upper=False, left=False) ** 2).sum()
        out = out + torch.triangular_solve(self.b, a, upper=False, transpose=True)[0].sum()
        out = out + (torch.cholesky_solve(self.b, c) * self.b).sum()
        return out + (torch.cholesky_inverse(c.mT, upper=True) * x).sum()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_calling_the_triangular_and_cholesky_solvers_exports_and_validates(dtype, tmp_path):
    graph = from_module(Solvers(), _inputs(), dtype=dtype)
    ops = ("aten.linalg_solve_triangular.default", "aten.triangular_solve.default",
           "aten.cholesky_solve.default", "aten.cholesky_inverse.default")
    nodes = ("LinalgSolveTriangularBackward0", "TriangularSolveBackward0", "CholeskySolveBackward0",
             "CholeskyInverseBackward0")
    exports_and_validates(graph, tmp_path, ops, nodes, {"w", "b"})


class LUs(torch.nn.Module):
    """lu_factor, lu_solve, lu and lu_unpack (linalg_lu.py)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.3)
        self.b = torch.nn.Parameter(torch.randn(4, 2))

    def forward(self, x):
        a = x @ self.w + 3 * torch.eye(4)
        lu, piv = torch.linalg.lu_factor(a)
        out = (torch.linalg.lu_solve(lu, piv, self.b) ** 2).sum()
        out = out + torch.linalg.lu_solve(lu, piv, self.b.mT, left=False, adjoint=True).sum()
        _, lo, up = torch.lu_unpack(lu, piv)
        out = out + (lo * x).sum() + up.sum()
        _, lo, up = torch.linalg.lu(a[..., :3])                 # (2, 4, 3): tall
        return out + (lo ** 2).sum() + up.sum()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_calling_the_lu_ops_exports_and_validates(dtype, tmp_path):
    graph = from_module(LUs(), _inputs(), dtype=dtype)
    ops = ("aten.linalg_lu_factor_ex.default", "aten.linalg_lu_solve.default", "aten.lu_unpack.default",
           "aten.linalg_lu.default")
    nodes = ("LinalgLuFactorExBackward0", "LinalgLuSolveBackward0", "LuUnpackBackward0", "LinalgLuBackward0")
    exports_and_validates(graph, tmp_path, ops, nodes, {"w", "b"})


class Functions(torch.nn.Module):
    """pinv (pinverse), matrix_exp and lstsq (linalg_functions.py)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 3) * 0.3)

    def forward(self, x):
        a = x @ self.w                                          # (2, 4, 3)
        out = (torch.linalg.pinv(a) ** 2).sum() + (torch.pinverse(a.mT) * x[..., :3]).sum()
        out = out + (torch.linalg.lstsq(a, x).solution ** 2).sum()
        out = out + torch.linalg.lstsq(a, x[..., :2], driver="gelsd").residuals.sum()
        return out + (torch.linalg.matrix_exp(0.5 * a.mT @ a) * x[..., :3, :3]).sum()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_module_calling_pinv_matrix_exp_and_lstsq_exports_and_validates(dtype, tmp_path):
    graph = from_module(Functions(), _inputs(), dtype=dtype)
    ops = ("aten.linalg_pinv.atol_rtol_tensor", "aten.linalg_matrix_exp.default", "aten.linalg_lstsq.default")
    nodes = ("LinalgPinvBackward0", "LinalgMatrixExpBackward0", "LinalgLstsqBackward0")
    exports_and_validates(graph, tmp_path, ops, nodes, {"w"})
