"""ATen ops beyond the core opset that user modules record: ``_trilinear`` (``nn.Bilinear``),
``masked_select``, ``median``/``nanmedian``, ``cumprod``, ``hypot``, ``erfinv``, ``cummax``/``cummin``,
``logcumsumexp``,
one table row per case, run by the checks of ``tests/test_aten_ops.py`` (finite differences,
PyTorch's values, gradients and node names in float64, values and dtypes in float32, the
load-time shape rule) and ``tests/test_aten_gradgrad.py`` (second derivatives, create_graph
node names), plus the ones below: gradients in float32 against PyTorch's.

Rows cover broadcasting, empty inputs, non-contiguous inputs (``nc``) and 0-d inputs where
PyTorch takes them.
"""
from __future__ import annotations

import numpy as np
import pytest

from aten_table import Table, checks, nc
from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import R, needs_torch, torch

ATEN_TABLE = True   # tests/test_aten_ops.py counts these rows as the ops' rows (tests/aten_table.py)
T = Table()
row, forward, refuse = T.row, T.forward, T.refuse
CASES, FORWARD_ONLY, REFUSED, GRADGRAD, NODE_NAME_DIFFERENCES = T.tables()


# -- _trilinear ------------------------------------------------------------------------------------------
TRI = "aten._trilinear.default"
_BIL = {"expand1": [1, 3], "expand2": [0], "expand3": [1, 2], "sumdim": [2, 3]}     # what nn.Bilinear records
row(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)], _BIL, id=TRI + "-bilinear")
row(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)], dict(_BIL, unroll_dim=0), id=TRI + "-unroll0")
row(TRI, [R(2, 3), R(1, 3, 5, seed=1), R(2, 5, seed=2)], _BIL, id=TRI + "-one-out")
row(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)], dict(_BIL, expand1=[-3, -1], sumdim=[3, 2]),
    id=TRI + "-negative-dims")
row(TRI, [R(3, 4), R(3, 4, seed=1), R(3, 4, seed=2)], {"expand1": [], "expand2": [], "expand3": [], "sumdim": [1]},
    id=TRI + "-no-expand")
row(TRI, [R(3, 4), R(3, 4, seed=1), R(3, 4, seed=2)], {"expand1": [], "expand2": [], "expand3": [], "sumdim": []},
    id=TRI + "-no-sum")
for _sd in ([0], [1], []):
    row(TRI, [R(1, 4), R(3, 4, seed=1), R(3, 4, seed=2)], {"expand1": [], "expand2": [], "expand3": [], "sumdim": _sd},
        id=f"{TRI}-broadcast-{_sd}")
row(TRI, [R(0, 3), R(4, 3, 5, seed=1), R(0, 5, seed=2)], _BIL, id=TRI + "-empty-batch")
row(TRI, [R(2, 0), R(4, 0, 5, seed=1), R(2, 5, seed=2)], _BIL, id=TRI + "-empty-sum")
row(TRI, [nc(R(3, 2)).T, nc(R(4, 3, 5, seed=1)), nc(R(5, 2, seed=2)).T], _BIL, id=TRI + "-nc")
GRADGRAD[TRI] = ([R(2, 3), R(2, 3, 2, seed=1), R(2, 2, seed=2)], _BIL, None)
refuse(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)], dict(_BIL, unroll_dim=4), "unroll_dim must be in")
refuse(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(3, 5, seed=2)], _BIL, "size")
refuse(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)], dict(_BIL, expand1=[1]), "dim")
refuse(TRI, [R(3, 1), R(3, 4, seed=1), R(3, 4, seed=2)], {"expand1": [], "expand2": [], "expand3": [], "sumdim": [0]},
       "size", id=TRI + "-broadcast-at-unroll-dim")
refuse(TRI, [R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)], dict(_BIL, sumdim=[2, 2]), "multiple times")


# -- masked_select: a length the mask's values decide (the shape rule answers unknown) ----------------------
MS = "aten.masked_select.default"
_m34 = R(3, 4, seed=5) > 0
row(MS, [R(3, 4), _m34])
row(MS, [R(3, 4), _m34[0]], id=MS + "-broadcast-mask")
row(MS, [R(4), _m34], id=MS + "-broadcast-self")
row(MS, [R(3, 1), _m34[:1]], id=MS + "-broadcast-both")
row(MS, [R(3, 4), np.zeros((3, 4), bool)], id=MS + "-none")
row(MS, [R(0, 4), np.ones(4, bool)], id=MS + "-empty")
row(MS, [R(), np.array(True)], id=MS + "-0d")
row(MS, [nc(R(3, 4)), nc(_m34)], id=MS + "-nc")
forward(MS, [np.arange(12).reshape(3, 4), _m34], id=MS + "-int")
GRADGRAD[MS] = ([R(3, 4), _m34[0]], {}, None)
refuse(MS, [R(3, 4), np.ones((3, 4), np.uint8)], {}, "expected BoolTensor")
refuse(MS, [R(3, 4), np.ones(3, bool)], {}, "does not broadcast")


# -- median, nanmedian: PyTorch's index among ties, NaN as PyTorch ---------------------------------------
_ties = np.array([[3.0, 1.0, 3.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 2.0, 1.0, 5.0, 0.0]])
_nan = np.array([[1.0, np.nan, 2.0, np.nan, 3.0], [4.0, 2.0, 0.5, 1.0, 3.0], [np.nan, 1.0, 1.0, 2.0, 1.0]])
for _name in ("median", "nanmedian"):
    _op = f"aten.{_name}.dim"
    row(_op, [R(3, 5)], {"dim": 1})
    row(_op, [R(4, 3)], {"dim": 0, "keepdim": True}, id=f"{_op}-keepdim")
    row(_op, [R(2, 3, 4)], {"dim": -2}, id=f"{_op}-3d")
    row(_op, [_ties], {"dim": 1}, fd=False, id=f"{_op}-ties")
    row(_op, [_ties.T.copy()], {"dim": 0}, fd=False, id=f"{_op}-ties-dim0")
    row(_op, [_nan], {"dim": 1}, fd=False, id=f"{_op}-nan")
    row(_op, [R(0, 3)], {"dim": 1}, id=f"{_op}-empty")
    row(_op, [R()], {"dim": 0}, id=f"{_op}-0d")
    row(_op, [R()], {"dim": -1, "keepdim": True}, id=f"{_op}-0d-keepdim")
    row(_op, [nc(R(4, 5))], {"dim": 1}, id=f"{_op}-nc")
    forward(_op, [np.array([[5, 3, 4, 3], [1, 1, 2, 2]])], {"dim": 1}, id=f"{_op}-int")
    GRADGRAD[_op] = ([R(3, 4)], {"dim": 1}, None)
    refuse(_op, [R(2, 0)], {"dim": 1}, "non-zero size", id=f"{_op}-empty-dim")
    refuse(_op, [np.ones((2, 2), bool)], {"dim": 1}, "not implemented for bool", id=f"{_op}-bool")
    refuse(_op, [R(2, 2)], {"dim": 2}, "out of range", id=f"{_op}-dim")
    _op = f"aten.{_name}.default"
    row(_op, [R(3, 5)])
    row(_op, [R(4)], id=f"{_op}-even")
    row(_op, [_ties], fd=False, id=f"{_op}-ties")
    row(_op, [_nan], fd=False, id=f"{_op}-nan")
    row(_op, [np.full((2, 2), np.nan)], fd=False, id=f"{_op}-all-nan")
    row(_op, [R(0, 3)], id=f"{_op}-empty")
    row(_op, [R()], id=f"{_op}-0d")
    row(_op, [nc(R(3, 4))], id=f"{_op}-nc")
    forward(_op, [np.array([[5, 3, 4, 3], [1, 1, 2, 2]])], id=f"{_op}-int")
    GRADGRAD[_op] = ([R(3, 4)], {}, None)
    NODE_NAME_DIFFERENCES[_op] = "MulBackward0 (PyTorch: MaskedFillBackward1, a masked_fill with a tensor value)"
    refuse(_op, [np.ones((2, 2), bool)], {}, "not implemented for bool", id=f"{_op}-bool")


# -- cumprod: the gradient at zeros (one, two, a slice of them) ----------------------------------------------
CP = "aten.cumprod.default"
_z = np.array([[1.5, 0.0, 2.0, -1.0, 0.0, 3.0], [0.0, 2.0, 0.5, 1.5, -2.0, 1.0], [0.5, 1.2, -0.8, 2.0, 1.1, 0.0]])
row(CP, [R(3, 4)], {"dim": 1})
row(CP, [R(3, 4)], {"dim": 0}, id=CP + "-dim0")
row(CP, [R(2, 3, 4)], {"dim": -2}, id=CP + "-3d")
row(CP, [_z], {"dim": 1}, id=CP + "-zeros")
row(CP, [_z.T.copy()], {"dim": 0}, id=CP + "-zeros-dim0")
row(CP, [R(3, 4)], {"dim": 1, "dtype": "float64"}, id=CP + "-dtype")
row(CP, [R(3, 1)], {"dim": 1}, id=CP + "-one")
row(CP, [R(0, 3)], {"dim": 1}, id=CP + "-empty")
row(CP, [R()], {"dim": 0}, id=CP + "-0d")
row(CP, [nc(R(4, 5))], {"dim": 1}, id=CP + "-nc")
forward(CP, [np.array([[1, 2, 3], [-1, 0, 4]])], {"dim": 1}, id=CP + "-int")
forward(CP, [np.array([True, True, False])], {"dim": 0}, id=CP + "-bool")
GRADGRAD[CP] = ([R(3, 4)], {"dim": 1}, None)
refuse(CP, [R(2, 2)], {"dim": 2}, "out of range")


# -- hypot, erfinv ---------------------------------------------------------------------------------------
HY, EI = "aten.hypot.default", "aten.erfinv.default"
row(HY, [R(3, 4), R(3, 4, seed=1)])
row(HY, [R(3, 1), R(1, 4, seed=1)], id=HY + "-broadcast")
row(HY, [R(0, 4), R(4, seed=1)], id=HY + "-empty")
row(HY, [R(3, 4), R(seed=1)], id=HY + "-0d")
row(HY, [np.array([0.0, 3.0, 0.0]), np.array([0.0, 0.0, -2.0])], fd=False, id=HY + "-zeros")
row(HY, [nc(R(3, 4)), nc(R(3, 4, seed=1))], id=HY + "-nc")
GRADGRAD[HY] = ([R(2, 3), R(3, seed=1)], {}, None)
refuse(HY, [np.arange(3), np.arange(3)], {}, "not implemented for int64")
row(EI, [R(3, 4, low=-0.9, high=0.9)])
row(EI, [np.array([-0.999999, -0.99, 0.6, 0.999, 0.9999999999])], fd=False, id=EI + "-near-one")  # (steps past 1)
row(EI, [np.array([-0.99, 0.6, 0.95])], id=EI + "-towards-one")
row(EI, [R(0, 3)], id=EI + "-empty")
row(EI, [R(low=-0.9, high=0.9)], id=EI + "-0d")
row(EI, [nc(R(3, 4, low=-0.9, high=0.9))], id=EI + "-nc")
row(EI, [np.array([-1.0, 1.0, 1.5, -2.0, np.nan, 0.0, -0.0])], fd=False, id=EI + "-edges")
forward(EI, [np.array([[-1, 0, 1], [0, 1, 2]])], id=EI + "-int")
forward(EI, [np.array([True, False])], id=EI + "-bool")
GRADGRAD[EI] = ([R(2, 3, low=-0.9, high=0.9)], {}, None)


# -- cummax, cummin: ties to the later index, each later NaN takes over ---------------------------------------
_cties = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.5], [2.0, 2.0, 1.0, 2.0, 4.0, 4.0]])
_cnan = np.array([[1.0, 3.0, np.nan, 5.0, np.nan, 1.0], [2.0, 1.0, 0.5, 0.5, 3.0, np.nan]])
for _name in ("cummax", "cummin"):
    _op = f"aten.{_name}.default"
    row(_op, [R(3, 5)], {"dim": 1})
    row(_op, [R(4, 3)], {"dim": 0}, id=f"{_op}-dim0")
    row(_op, [R(2, 3, 4)], {"dim": -1}, id=f"{_op}-3d")
    row(_op, [_cties], {"dim": 1}, fd=False, id=f"{_op}-ties")
    row(_op, [-_cties], {"dim": 1}, fd=False, id=f"{_op}-ties-negated")
    row(_op, [_cnan], {"dim": 1}, fd=False, id=f"{_op}-nan")
    # (torch's gradient of an empty input is that input itself, which requires grad: values only)
    forward(_op, [R(0, 3)], {"dim": 1}, id=f"{_op}-empty")
    row(_op, [R()], {"dim": 0}, id=f"{_op}-0d")
    row(_op, [nc(R(4, 5))], {"dim": 1}, id=f"{_op}-nc")
    forward(_op, [np.array([[5, 3, 4, 3], [1, 1, 2, 2]])], {"dim": 1}, id=f"{_op}-int")
    forward(_op, [np.array([[True, False, True], [False, False, True]])], {"dim": 1}, id=f"{_op}-bool")
    GRADGRAD[_op] = ([R(3, 4)], {"dim": 1}, None)
    refuse(_op, [R(2, 2)], {"dim": 2}, "out of range", id=f"{_op}-dim")

# -- logcumsumexp ---------------------------------------------------------------------------------------------
LCSE = "aten.logcumsumexp.default"
row(LCSE, [R(3, 5)], {"dim": 1})
row(LCSE, [R(4, 3)], {"dim": 0}, id=LCSE + "-dim0")
row(LCSE, [R(2, 3, 4) * 30], {"dim": -1}, id=LCSE + "-wide")
row(LCSE, [np.array([[-np.inf, 1.0, -np.inf, 2.0], [np.inf, 1.0, np.inf, -np.inf]])], {"dim": 1}, fd=False,
    id=LCSE + "-inf")
row(LCSE, [np.array([[-np.inf, -np.inf, np.nan, 2.0]])], {"dim": 1}, fd=False, id=LCSE + "-nan")
row(LCSE, [R(0, 3)], {"dim": 1}, id=LCSE + "-empty")
row(LCSE, [R()], {"dim": 0}, id=LCSE + "-0d")
row(LCSE, [nc(R(4, 5))], {"dim": 1}, id=LCSE + "-nc")
GRADGRAD[LCSE] = ([R(3, 4)], {"dim": 1}, None)
refuse(LCSE, [np.arange(3)], {"dim": 0}, "not implemented for int64")
refuse(LCSE, [R(2, 2)], {"dim": 2}, "out of range", id=LCSE + "-dim")


def test_masked_select_has_no_shape_at_load_and_its_backward_fails_after_an_in_place_change_of_self():
    from gradcli.ops.aten.registry import Slot

    assert ATEN_OPS[MS].bind([Slot(0), Slot(1)]).infer_outputs([(3, 4), (4,)], [np.dtype("float64"),
                                                                              np.dtype(bool)], {}) is None
    # PyTorch's MaskedSelectBackward0 saves self: an in-place change of it fails the backward, as there
    x = Tensor(R(3, 4), requires_grad=True)
    y = OPS["aten.mul.Tensor"](x, 1.0)
    out = OPS[MS](y, _m34)
    OPS["aten.mul_.Tensor"](y, 2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        grad([out], [x], grad_outputs=[np.ones(out.shape)])


def test_bilinear_is_trilinear_plus_the_bias():
    # torch.bilinear(x1, x2, w, b) records _trilinear(x1, w, x2, [1, 3], [0], [1, 2], [2, 3]), then adds b
    x1, w, x2 = R(2, 3), R(4, 3, 5, seed=1), R(2, 5, seed=2)
    out = OPS[TRI](x1, w, x2, **_BIL)
    np.testing.assert_allclose(out, np.einsum("ni,oij,nj->no", x1, w, x2), rtol=1e-13)


@pytest.mark.parametrize("x", [_z, _z[:, ::-1].copy(), np.zeros((2, 4)), np.array([[0.0, 2.0, 0.0, 0.0]])],
                         ids=["zeros", "reversed", "all-zero", "zeros-after-zero"])
def test_cumprod_second_derivative_at_zeros_matches_finite_differences_and_torch(x):
    # the create_graph gradient at zeros is PyTorch's O(n^2) one, made of ops (cumprod, prod, cat)
    args = {"dim": 1}
    import test_aten_gradgrad as GG

    GG.test_second_derivative_matches_finite_differences(CP, [x], args, None)
    if torch is not None:
        GG.test_second_derivative_matches_torch_double_backward(CP, [x], args, None)


def _ulps(a, b):
    """The distance in ulps between two float arrays of one dtype (finite, or equal)."""
    it = np.int64 if a.dtype == np.float64 else np.int32
    a, b = (np.where(x == 0, 0, x).view(it).astype(np.int64) for x in (a, b))
    a, b = (np.where(x < 0, np.iinfo(it).min - x, x) for x in (a, b))       # monotone across 0
    return np.abs(a - b)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_erfinv_is_within_an_ulp_of_torchs_over_the_whole_interval(dtype):
    # Note [an accurate erfinv]: uniform draws, 1 - 2^-k and 2^-k towards both ends, the largest
    # float below 1, the branch points; +-1, beyond and NaN exactly as PyTorch
    bits = 53 if dtype == np.float64 else 24
    k = np.arange(1, bits + 1, dtype=np.float64)
    x = np.concatenate([np.random.default_rng(0).uniform(-1, 1, 20000), 1 - 2.0 ** -k, -(1 - 2.0 ** -k),
                        2.0 ** -k, -(2.0 ** -k), [0.5, -0.5, 0.7, -0.7, 0.0]]).astype(dtype)
    x = np.concatenate([x, np.nextafter(x[-5:-1], dtype(0)), [np.nextafter(dtype(1), dtype(0))]]).astype(dtype)
    ours, theirs = OPS[EI](x), torch.special.erfinv(torch.tensor(x)).numpy()
    assert ours.dtype == dtype
    assert _ulps(ours, theirs).max() <= 1
    edges = np.array([1.0, -1.0, 1.5, -1.5, np.nan], dtype)
    np.testing.assert_array_equal(OPS[EI](edges), torch.special.erfinv(torch.tensor(edges)).numpy())


# -- max, min of every element (MaxBackward1, MinBackward1: evenly_distribute_backward) -----------------
for _op in ("aten.max.default", "aten.min.default"):
    row(_op, [R(3, 4)])
    row(_op, [R(3, 4).T], id=_op + "-noncontiguous")
    row(_op, [R()], id=_op + "-0d")
    row(_op, [np.array([[1.0, 3.0, -3.0], [-3.0, 3.0, 2.0]])], fd=False, id=_op + "-ties")
    row(_op, [np.array([[1.0, np.nan, 2.0], [np.nan, 0.5, 2.0]])], fd=False, id=_op + "-nan")
    forward(_op, [np.array([[3, 1], [7, 2]])], id=_op + "-int")
    GRADGRAD[_op] = ([R(2, 3)], {}, None)
    NODE_NAME_DIFFERENCES[_op] = "MulBackward0 (PyTorch: MaskedFillBackward1, a masked_fill with a tensor value)"
    refuse(_op, [R(0, 3)], {}, "Expected reduction dim to be specified", id=_op + "-empty")


# -- the checks of every table (tests/aten_table.py), on all the rows above ---------------------------------
# ops whose result's shape the values decide: the loader's shape rule answers unknown, never a guess
VALUE_SHAPED = {MS}
globals().update(checks(T, value_shaped=VALUE_SHAPED))
