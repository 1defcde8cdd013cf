"""The core ATen opset's elementwise, comparison, bitwise, logical, reduction and creation
ops, one table row per case, run by the checks of ``tests/test_aten_ops.py`` (finite
differences, PyTorch's values, gradients and node names in float64 and float32, the
load-time shape rule) plus the ones below: non-contiguous inputs, rows with no gradient
(comparisons, integer inputs), and the random ops' distributions.

``GRADGRAD`` holds these ops' second-derivative lines, run by ``tests/test_aten_gradgrad.py``.
"""
from __future__ import annotations

import numpy as np
import pytest

from aten_table import Table, checks
from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import PARAMS, R, _flat, _ours, _rebuild, _theirs, _torch_call, _wrt, case, needs_torch, torch

ATEN_TABLE = True   # tests/test_aten_ops.py counts these rows as the ops' rows (tests/aten_table.py)
T = Table()
row, forward, refuse = T.row, T.forward, T.refuse
# (FORWARD_ONLY: also bool results; NODE_NAME_DIFFERENCES is written out below)
CASES, FORWARD_ONLY, REFUSED, GRADGRAD, _ = T.tables()


_i23, _b23 = np.arange(-3, 3).reshape(2, 3), np.array([[True, False, True], [False, False, True]])

# -- unary float ops ----------------------------------------------------------------------------------
_DOMAINS = {"acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9), "acosh": (1.2, 3.0),
            "log10": (0.2, 3.0), "log2": (0.2, 3.0), "log1p": (-0.7, 3.0), "reciprocal": (0.3, 2.0),
            "tan": (-1.2, 1.2)}
for _u in ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "erf",
           "expm1", "log10", "log1p", "log2", "reciprocal"):
    _lo, _hi = _DOMAINS.get(_u, (-2.0, 2.0))
    _op = f"aten.{_u}.default"
    row(_op, [R(3, 4, low=_lo, high=_hi)])
    row(_op, [R(0, 3, low=_lo, high=_hi)], id=f"{_op}-empty")
    row(_op, [R(low=_lo, high=_hi)], id=f"{_op}-0d")
    forward(_op, [np.clip(_i23, 1 if _lo > 0.5 else (0 if _lo >= 0 else -1), 1)], id=f"{_op}-int")
    forward(_op, [_b23], id=f"{_op}-bool")
    GRADGRAD[_op] = ([R(2, 3, low=_lo, high=_hi)], {}, None)

for _u in ("ceil", "floor", "round", "trunc", "sign"):
    _op = f"aten.{_u}.default"
    row(_op, [R(3, 4, low=-3, high=3) + 0.25])
    row(_op, [R(0, 2)], id=f"{_op}-empty")
    forward(_op, [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, np.inf, np.nan])], id=f"{_op}-halves")
    forward(_op, [_i23], id=f"{_op}-int")
    GRADGRAD[_op] = ([R(2, 3, low=-3, high=3) + 0.25], {}, None)
    if _u != "sign":
        refuse(_op, [_b23], {}, "not implemented for bool", id=f"{_op}-bool")
forward("aten.sign.default", [_b23], id="aten.sign.default-bool")

_ELU = {"alpha": 1.3, "scale": 0.7, "input_scale": 1.1}
row("aten.elu.default", [R(3, 4, away=[0])])
row("aten.elu.default", [R(3, 4, away=[0])], _ELU)
row("aten.elu.default", [R(0, 4)], id="aten.elu.default-empty")
row("aten.elu_backward.default", [R(3, 4), R(3, 4, seed=1, away=[0])], dict(_ELU, is_result=False))
row("aten.elu_backward.default", [R(3, 4), R(3, 4, seed=1, away=[0])], dict(_ELU, is_result=True))
row("aten.leaky_relu.default", [R(3, 4, away=[0])])
row("aten.leaky_relu.default", [R(3, 4, away=[0])], {"negative_slope": 0.2})
row("aten.leaky_relu_backward.default", [R(3, 4), R(3, 4, seed=1, away=[0])],
    {"negative_slope": 0.2, "self_is_result": False})
for _u in ("elu", "leaky_relu"):
    refuse(f"aten.{_u}.default", [_i23], {}, "not implemented for int64", id=f"aten.{_u}.default-int")
GRADGRAD["aten.elu.default"] = ([R(2, 3, away=[0])], _ELU, None)
GRADGRAD["aten.elu_backward.default"] = ([R(2, 3), R(2, 3, seed=1, away=[0])], dict(_ELU, is_result=False), None)
GRADGRAD["aten.leaky_relu.default"] = ([R(2, 3, away=[0])], {"negative_slope": 0.2}, None)
GRADGRAD["aten.leaky_relu_backward.default"] = ([R(2, 3), R(2, 3, seed=1, away=[0])],
                                                {"negative_slope": 0.2, "self_is_result": False}, None)

# -- binary ops ---------------------------------------------------------------------------------------
for _b in ("atan2.default", "maximum.default", "minimum.default"):
    _op = f"aten.{_b}"
    row(_op, [R(3, 4), R(3, 4, seed=1)])
    row(_op, [R(3, 1), R(1, 4, seed=1)], id=f"{_op}-broadcast")
    row(_op, [R(0, 4), R(4, seed=1)], id=f"{_op}-empty")
    row(_op, [R(3, 4), R(seed=1)], id=f"{_op}-0d")
    forward(_op, [_i23, np.array([2, -1, 0])], id=f"{_op}-int")
    GRADGRAD[_op] = ([R(2, 3), R(3, seed=1)], {}, None)
_tie = R(3, 4)
row("aten.maximum.default", [_tie, np.where(R(3, 4, seed=2) > 0, _tie, R(3, 4, seed=1))], fd=False, id="ties")
row("aten.minimum.default", [_tie, np.where(R(3, 4, seed=2) > 0, _tie, R(3, 4, seed=1))], fd=False, id="min-ties")
forward("aten.maximum.default", [_b23, _b23[::-1].copy()], id="aten.maximum.default-bool")
forward("aten.atan2.out", [R(3, 4), R(4, seed=1), np.empty(0)], id="aten.atan2.out")
forward("aten.atan2.out", [R(3, 4), R(4, seed=1), np.empty((3, 4), np.float32)], id="aten.atan2.out-float32")
refuse("aten.atan2.out", [_i23, np.array([1, 2, 3]), np.empty(0, np.int64)], {}, "can't be cast")

row("aten.pow.Tensor_Tensor", [R(3, 4, low=0.5, high=2), R(3, 4, seed=1)])
row("aten.pow.Tensor_Tensor", [R(3, 1, low=0.5, high=2), R(1, 4, seed=1)], id="broadcast")
row("aten.pow.Tensor_Tensor", [R(0, 4, low=0.5, high=2), R(4, seed=1)], id="empty")
row("aten.pow.Tensor_Tensor", [np.array([0.0, 0.0, 2.0]), np.array([2.0, 0.0, 0.0])], fd=False, id="zeros")
forward("aten.pow.Tensor_Tensor", [_i23, np.array([2, 1, 3])], id="int")
forward("aten.pow.Tensor_Tensor", [np.array([2, 1, -1, 0, -1, 3]), np.array([-1, -2, -3, -1, -2, 2])],
        id="int-negative-powers")
row("aten.pow.Scalar", [R(3, 4)], {"self": 2.5})
row("aten.pow.Scalar", [R(0, 4)], {"self": 2.5}, id="empty")
row("aten.pow.Scalar", [np.array([0.0, 1.0, -1.0])], {"self": 0.0}, fd=False, id="zero-base")
forward("aten.pow.Scalar", [_i23 + 3], {"self": 2}, id="int")
forward("aten.pow.Scalar", [_i23], {"self": 2.0}, id="int-float-base")
GRADGRAD["aten.pow.Tensor_Tensor"] = ([R(2, 3, low=0.5, high=2), R(3, seed=1)], {}, None)
GRADGRAD["aten.pow.Scalar"] = ([R(2, 3)], {"self": 1.5}, None)

# away from the steps of fmod/remainder (the quotient's integer jumps)
_num, _den = np.array([[5.3, -5.3, 2.2, -2.2], [7.1, -7.1, 0.4, -0.9]]), np.array([2.0, 2.0, -1.5, -1.5])
for _m in ("fmod", "remainder"):
    _op = f"aten.{_m}.Tensor"
    row(_op, [_num, _den])
    row(_op, [_num[:, :1], _den[None, :2]], id=f"{_op}-broadcast")
    row(_op, [R(0, 4), _den], id=f"{_op}-empty")
    forward(_op, [np.array([-7, 7, -7, 7]), np.array([2, 2, -2, -2])], id=f"{_op}-int")
    refuse(_op, [np.array([1, 2]), np.array([1, 0])], {}, "division by zero", static=False, id=f"{_op}-zero")
    refuse(_op, [_b23, _b23], {}, "not implemented for bool", id=f"{_op}-bool")
    row(f"aten.{_m}.Scalar", [_num], {"other": -1.5})
    row(f"aten.{_m}.Scalar", [R(0, 3)], {"other": 2.0}, id=f"aten.{_m}.Scalar-empty")
    forward(f"aten.{_m}.Scalar", [np.array([-7, 7, -3])], {"other": 2}, id=f"aten.{_m}.Scalar-int")
    forward(f"aten.{_m}.Scalar", [np.array([-7, 7, -3])], {"other": 2.5}, id=f"aten.{_m}.Scalar-int-float")
    GRADGRAD[_op] = ([_num, _den], {}, None)
    GRADGRAD[f"aten.{_m}.Scalar"] = ([_num], {"other": 1.5}, None)

for _mode in (None, "trunc", "floor"):
    row("aten.div.Tensor_mode", [_num, _den], {"rounding_mode": _mode}, id=f"div.Tensor_mode-{_mode}")
    row("aten.div.Tensor_mode", [R(3, 1), R(1, 4, seed=1, low=0.5, high=2)], {"rounding_mode": _mode},
        id=f"div.Tensor_mode-{_mode}-broadcast")
    row("aten.div.Scalar_mode", [_num], {"other": -1.5, "rounding_mode": _mode}, id=f"div.Scalar_mode-{_mode}")
    forward("aten.div.Tensor_mode", [np.array([-7, 7, -7, 7, 6]), np.array([2, 2, -2, -2, 3])],
            {"rounding_mode": _mode}, id=f"div.Tensor_mode-{_mode}-int")
    forward("aten.div.Scalar_mode", [np.array([-7, 7, -3])], {"other": 2, "rounding_mode": _mode},
            id=f"div.Scalar_mode-{_mode}-int")
row("aten.div.Tensor_mode", [R(0, 4), R(4, seed=1, low=0.5, high=2)], {"rounding_mode": "floor"}, id="empty")
refuse("aten.div.Tensor_mode", [_num, _den], {"rounding_mode": "round"}, "rounding_mode to be one of")
refuse("aten.div.Tensor_mode", [np.array([1, 2]), np.array([1, 0])], {"rounding_mode": "trunc"},
       "division by zero", static=False)
GRADGRAD["aten.div.Tensor_mode"] = ([R(2, 3), R(3, seed=1, low=0.5, high=2)], {"rounding_mode": None}, None)
GRADGRAD["aten.div.Scalar_mode"] = ([R(2, 3)], {"other": 2.0, "rounding_mode": None}, None)

_cx = R(3, 4, low=-2, high=2, away=[-0.5, 0.5, 1.0])
row("aten.clamp.default", [_cx], {"min": -0.5, "max": 0.5})
row("aten.clamp.default", [_cx], {"min": -0.5})
row("aten.clamp.default", [_cx], {"max": 0.5})
row("aten.clamp.default", [_cx], {"min": 1.0, "max": -1.0}, id="min-over-max")
row("aten.clamp.default", [R(0, 4)], {"min": 0.0}, id="empty")
forward("aten.clamp.default", [_i23], {"min": -1, "max": 1}, id="int")
forward("aten.clamp.default", [_i23], {"min": -0.5}, id="int-float-bound")
refuse("aten.clamp.default", [_cx], {}, "At least one of 'min' or 'max'")
forward("aten.clamp.default", [_b23], {"min": 0}, id="bool")
_lo_t, _hi_t = R(4, low=-1.5, high=-0.2, seed=3), R(3, 1, low=0.2, high=1.5, seed=4)
row("aten.clamp.Tensor", [_cx, _lo_t, _hi_t])
row("aten.clamp.Tensor", [_cx, _lo_t, None])
row("aten.clamp.Tensor", [_cx, None, _hi_t])
row("aten.clamp.Tensor", [_cx, _hi_t.T[:, :1] * 0 + 1.0, _lo_t], id="min-over-max")
row("aten.clamp.Tensor", [R(0, 4), _lo_t, None], id="empty")
forward("aten.clamp.Tensor", [_i23, np.array([-1, 0, -2]), np.array([[1], [0]])], id="int")
refuse("aten.clamp.Tensor", [_cx, None, None], {}, "At least one of 'min' or 'max'")
GRADGRAD["aten.clamp.default"] = ([_cx], {"min": -0.5, "max": 0.5}, None)
GRADGRAD["aten.clamp.Tensor"] = ([_cx, _lo_t, _hi_t], {}, None)


# -- comparisons, bitwise and logical ops, isinf/isnan: no gradient -------------------------------------
_nan = np.array([[0.5, np.nan, -np.inf], [np.inf, -0.0, 2.0]])
_f = np.round(R(3, 4) * 2) / 2                    # repeated values: some comparisons hold with equality
for _c in ("eq", "ne", "lt", "le", "gt", "ge"):
    _op = f"aten.{_c}.Tensor"
    forward(_op, [_f, _f[::-1].copy()], id=f"{_op}")
    forward(_op, [_f, _f[0]], id=f"{_op}-broadcast")
    forward(_op, [_f, np.array(0.5)], id=f"{_op}-0d")
    forward(_op, [R(0, 4), R(4, seed=1)], id=f"{_op}-empty")
    forward(_op, [_nan, _nan[:, ::-1].copy()], id=f"{_op}-nan")
    forward(_op, [_i23, np.array([0, 1, -2])], id=f"{_op}-int")
    forward(_op, [_i23, np.array([0.5, 1.0, -2.5])], id=f"{_op}-int-float")
    forward(_op, [_b23, _b23[::-1].copy()], id=f"{_op}-bool")
    forward(_op, [_f.astype(np.float32), _f[0]], id=f"{_op}-float32-float64")
    _op = f"aten.{_c}.Scalar"
    forward(_op, [_f], {"other": 0.5}, id=f"{_op}")
    forward(_op, [_nan], {"other": np.inf}, id=f"{_op}-inf")
    forward(_op, [R(0, 4)], {"other": 0}, id=f"{_op}-empty")
    forward(_op, [_i23], {"other": 1}, id=f"{_op}-int")
    forward(_op, [_i23], {"other": 0.5}, id=f"{_op}-int-float")
    forward(_op, [_b23], {"other": True}, id=f"{_op}-bool")

_u8 = np.array([[3, 250, 7], [0, 128, 255]], np.uint8)
for _bw in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _op = f"aten.{_bw}.Tensor"
    forward(_op, [_i23 * 37, np.array([5, -6, 255])], id=f"{_op}")
    forward(_op, [_b23, _b23[::-1].copy()], id=f"{_op}-bool")
    forward(_op, [_u8, np.array(6, np.int64)], id=f"{_op}-uint8-0d")
    forward(_op, [_i23, _b23], id=f"{_op}-int-bool")
    forward(_op, [np.zeros((0, 3), np.int64), np.array([1, 2, 3])], id=f"{_op}-empty")
    refuse(_op, [_f, _f], {}, "not implemented for float64", id=f"{_op}-float")
    _op = f"aten.{_bw}.Scalar"
    forward(_op, [_i23 * 37], {"other": 12}, id=f"{_op}")
    forward(_op, [_b23], {"other": True}, id=f"{_op}-bool")
    forward(_op, [_b23], {"other": 3}, id=f"{_op}-bool-int")
    forward(_op, [_u8], {"other": 6}, id=f"{_op}-uint8")
    refuse(_op, [_i23], {"other": 0.5}, "not implemented for float32", id=f"{_op}-float")
forward("aten.bitwise_not.default", [_i23 * 37])
forward("aten.bitwise_not.default", [_b23], id="bitwise_not-bool")
forward("aten.bitwise_not.default", [_u8], id="bitwise_not-uint8")
refuse("aten.bitwise_not.default", [_f], {}, "not implemented for float64")

for _lg in ("logical_and", "logical_or", "logical_xor"):
    _op = f"aten.{_lg}.default"
    forward(_op, [_nan, np.array([0.0, 1.0, 0.0])], id=f"{_op}")
    forward(_op, [_i23, _b23], id=f"{_op}-int-bool")
    forward(_op, [R(0, 3), R(3)], id=f"{_op}-empty")
forward("aten.logical_not.default", [_nan])
forward("aten.logical_not.default", [_i23], id="logical_not-int")
forward("aten.logical_not.default", [_b23], id="logical_not-bool")
for _u in ("isinf", "isnan"):
    forward(f"aten.{_u}.default", [_nan])
    forward(f"aten.{_u}.default", [_nan.astype(np.float32)], id=f"{_u}-float32")
    forward(f"aten.{_u}.default", [_i23], id=f"{_u}-int")
    forward(f"aten.{_u}.default", [R(0, 2)], id=f"{_u}-empty")


# -- reductions and orderings ---------------------------------------------------------------------------------
def distinct(*shape, seed=0):
    """Values far apart, no ties (selection gradients are defined)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed + 5).permutation(n) * 0.37 - n * 0.15).reshape(shape).astype(np.float64)


_d = distinct(3, 4)
forward("aten.any.default", [_nan])
forward("aten.any.default", [np.zeros((2, 3))], id="any-zeros")
forward("aten.any.default", [np.zeros((0, 3))], id="any-empty")
forward("aten.any.default", [_u8], id="any-uint8")
forward("aten.any.dim", [_b23], {"dim": 1})
forward("aten.any.dim", [_i23], {"dim": 0, "keepdim": True})
forward("aten.any.dim", [np.zeros((0, 3))], {"dim": 0}, id="any.dim-empty")
forward("aten.any.dims", [_b23], {"dim": [0, 1]})
forward("aten.any.dims", [_b23], {"dim": None, "keepdim": True})
forward("aten.any.dims", [_b23], {"dim": []}, id="any.dims-no-dims")
# linalg_vector_norm has a kernel for PyTorch's formula where the norm is 0 (a composite of
# its decomposition gives NaN there: Note [A norm's gradient at zero]); the zero rows say so
_vn = "aten.linalg_vector_norm.default"
_zero_row = np.concatenate([R(2, 4), np.zeros((1, 4))])
row(_vn, [R(3, 4)], {"dim": [1]})
row(_vn, [_zero_row], {"dim": [1]}, fd=False, id="vector_norm-zero-row")
row(_vn, [R(3, 4)], {}, id="vector_norm-all")
row(_vn, [R(2, 3, 4)], {"dim": [0, 2], "keepdim": True}, id="vector_norm-keepdim")
row(_vn, [R(3, 4, away=[0])], {"ord": 1, "dim": [1]}, id="vector_norm-1")
row(_vn, [R(3, 4)], {"ord": 3, "dim": [1]}, id="vector_norm-3")
row(_vn, [_zero_row], {"ord": 3, "dim": [1]}, fd=False, id="vector_norm-3-zero-row")
row(_vn, [R(3, 4, low=0.5, high=2)], {"ord": 0.5, "dim": [1]}, id="vector_norm-half")
row(_vn, [R(3, 4)], {"ord": float("inf"), "dim": [1]}, id="vector_norm-inf")
row(_vn, [R(3, 4)], {"ord": float("-inf")}, id="vector_norm-neg-inf")
forward(_vn, [R(3, 4)], {"ord": 0, "dim": [1]}, id="vector_norm-0")
row(_vn, [R(0, 4)], {"dim": [1]}, id="vector_norm-empty")
refuse(_vn, [R(0, 3)], {"ord": float("inf"), "dim": [0]}, "does not have an identity",
       id="vector_norm-inf-empty")
refuse(_vn, [_i23], {}, "Expected a floating point", id="vector_norm-int")
GRADGRAD[_vn] = ([R(3, 4)], {"dim": [1]}, None)
for _e in ("amax", "amin"):
    _op = f"aten.{_e}.default"
    row(_op, [_d], {"dim": [1]})
    row(_op, [_d], {"dim": [0, 1], "keepdim": True})
    row(_op, [_d], {}, id=f"{_op}-all")
    row(_op, [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]) * (1 if _e == "amax" else -1)], {"dim": [1]},
        fd=False, id=f"{_op}-ties")
    row(_op, [R(0, 3)], {"dim": [1]}, id=f"{_op}-empty")
    row(_op, [R()], {}, id=f"{_op}-0d")
    forward(_op, [_i23], {"dim": [0]}, id=f"{_op}-int")
    forward(_op, [_b23], {"dim": [1]}, id=f"{_op}-bool")
    refuse(_op, [R(0, 3)], {"dim": [0]}, "reduction dim 0 to have non-zero size", id=f"{_op}-empty-dim")
    refuse(_op, [R(0, 3)], {}, "Expected reduction dim to be specified", id=f"{_op}-empty-all")
    GRADGRAD[_op] = ([distinct(2, 3)], {"dim": [1]}, None)
    _op = f"aten.arg{_e[1:]}.default"
    forward(_op, [_d])
    forward(_op, [_d], {"dim": 1})
    forward(_op, [_d], {"dim": -2, "keepdim": True})
    forward(_op, [_d], {"keepdim": True}, id=f"{_op}-all-keepdim")
    forward(_op, [_nan], {"dim": 1}, id=f"{_op}-nan")
    forward(_op, [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])], {"dim": 1}, id=f"{_op}-ties")
    forward(_op, [_i23], id=f"{_op}-int")
    forward(_op, [R(0, 3)], {"dim": 1}, id=f"{_op}-empty")
    refuse(_op, [R(0, 3)], {}, "Expected reduction dim to be specified", id=f"{_op}-empty-all")
    refuse(_op, [_b23], {}, "does not support bool", id=f"{_op}-bool")
    _op = f"aten.{_e[1:]}.dim"
    row(_op, [_d], {"dim": 1})
    row(_op, [_d], {"dim": 0, "keepdim": True})
    row(_op, [distinct(2, 3, 4)], {"dim": -2})
    row(_op, [R()], {"dim": 0}, id=f"{_op}-0d")
    row(_op, [R(2, 0)], {"dim": 0}, id=f"{_op}-empty")
    forward(_op, [_i23], {"dim": 1}, id=f"{_op}-int")
    forward(_op, [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])], {"dim": 1}, id=f"{_op}-ties")
    refuse(_op, [R(0, 3)], {"dim": 0}, "reduction dim 0 to have non-zero size", id=f"{_op}-empty-dim")
    GRADGRAD[_op] = ([distinct(2, 3)], {"dim": 1}, None)

row("aten.sort.default", [_d])
row("aten.sort.default", [_d], {"dim": 0, "descending": True})
row("aten.sort.default", [distinct(2, 3, 4)], {"dim": 1})
row("aten.sort.default", [R(0, 3)], id="sort-empty")
row("aten.sort.default", [R()], id="sort-0d")
forward("aten.sort.default", [np.array([[3, 1, 3, 2, 1]])], id="sort-int-ties")
forward("aten.sort.default", [np.array([[3, 1, 3, 2, 1]])], {"descending": True}, id="sort-int-ties-descending")
forward("aten.sort.default", [_nan], {"descending": True}, id="sort-nan")
forward("aten.sort.default", [_nan], id="sort-nan-ascending")
row("aten.topk.default", [_d], {"k": 2})
row("aten.topk.default", [_d], {"k": 2, "dim": 0, "largest": False})
row("aten.topk.default", [distinct(2, 5)], {"k": 0}, id="topk-k0")
forward("aten.topk.default", [np.array([[3, 1, 3, 2, 1]])], {"k": 3}, id="topk-int")
refuse("aten.topk.default", [_d], {"k": 5}, "k out of range")
GRADGRAD["aten.sort.default"] = ([distinct(2, 3)], {"dim": 1}, None)
GRADGRAD["aten.topk.default"] = ([distinct(2, 4)], {"k": 2}, None)

_p = R(3, 4, low=0.5, high=1.5) * np.where(R(3, 4, seed=7) > 0, 1, -1)
row("aten.prod.default", [_p])
row("aten.prod.default", [R(0, 3)], id="prod-empty")
row("aten.prod.default", [np.array([[0.5, 0.0, 2.0], [1.5, -1.0, 3.0]])], id="prod-one-zero")
row("aten.prod.default", [np.array([[0.5, 0.0, 2.0], [1.5, 0.0, 3.0]])], id="prod-two-zeros")
forward("aten.prod.default", [_i23 + 4], id="prod-int")
forward("aten.prod.default", [_b23], id="prod-bool")
forward("aten.prod.default", [_i23 + 4], {"dtype": "float64"}, id="prod-int-dtype")
row("aten.prod.dim_int", [_p], {"dim": 1})
row("aten.prod.dim_int", [_p], {"dim": 0, "keepdim": True})
row("aten.prod.dim_int", [np.array([[0.5, 0.0, 2.0], [1.5, -1.0, 0.0], [0.0, 0.0, 1.0]])], {"dim": 1},
    id="prod.dim-zeros")
row("aten.prod.dim_int", [R(0, 3)], {"dim": 1}, id="prod.dim-empty")
forward("aten.prod.dim_int", [_i23 + 4], {"dim": 0}, id="prod.dim-int")
# a 0-dim tensor takes dims 0 and -1 and has no axis to reduce (torch.logsumexp(t0, 0))
row("aten.sum.dim_IntList", [R()], {"dim": [0]}, id="sum.dim-0d")
row("aten.sum.dim_IntList", [R()], {"dim": [-1], "keepdim": True}, id="sum.dim-0d-keepdim")
row("aten.mean.dim", [R()], {"dim": [0]}, id="mean.dim-0d")
GRADGRAD["aten.sum.dim_IntList"] = ([R()], {"dim": [0]}, None)
GRADGRAD["aten.mean.dim"] = ([R()], {"dim": [-1], "keepdim": True}, None)
GRADGRAD["aten.prod.default"] = ([R(2, 3, low=0.5, high=1.5)], {}, None)
GRADGRAD["aten.prod.dim_int"] = ([R(2, 3, low=0.5, high=1.5)], {"dim": 1}, None)

row("aten.var.correction", [R(3, 4)])
row("aten.var.correction", [R(3, 4)], {"dim": [1], "correction": 0, "keepdim": True})
row("aten.var.correction", [R(2, 3, 4)], {"dim": [0, 2], "correction": 2})
row("aten.var.correction", [R(3, 4)], {"dim": [1], "correction": 1.5}, id="var-float-correction")
row("aten.var.correction", [R(1, 4)], {"dim": [0]}, fd=False, id="var-no-dof")
row("aten.var.correction", [R(0, 4)], {"dim": [1]}, id="var-empty")
row("aten.var.dim", [R(3, 4)], {"dim": [1]})
row("aten.var.dim", [R(3, 4)], {"dim": [0], "unbiased": False, "keepdim": True})
row("aten.var.dim", [R(3, 4)], {"dim": None})
refuse("aten.var.correction", [_i23], {}, "only support floating point")
GRADGRAD["aten.var.correction"] = ([R(2, 3)], {"dim": [1]}, None)
GRADGRAD["aten.var.dim"] = ([R(2, 3)], {"dim": [0], "unbiased": False}, None)

row("aten.cumsum.default", [R(3, 4)], {"dim": 1})
row("aten.cumsum.default", [R(2, 3, 4)], {"dim": -3})
row("aten.cumsum.default", [R(0, 4)], {"dim": 1}, id="cumsum-empty")
row("aten.cumsum.default", [R()], {"dim": 0}, id="cumsum-0d")
forward("aten.cumsum.default", [_i23], {"dim": 1, "dtype": "float64"}, id="cumsum-dtype")
forward("aten.cumsum.default", [_i23], {"dim": 1}, id="cumsum-int")
forward("aten.cumsum.default", [_b23], {"dim": 0}, id="cumsum-bool")
refuse("aten.cumsum.default", [R(3, 4)], {"dim": 2}, "Dimension out of range")
GRADGRAD["aten.cumsum.default"] = ([R(2, 3)], {"dim": 1}, None)

# Note [selection by one-hot] and Note [reversed cumsum] in reduce_core.py: the create_graph
# gradient's root node differs from PyTorch's (same values)
NODE_NAME_DIFFERENCES = {
    "aten.max.dim": "a one-hot sum (Sum/PermuteBackward0) where PyTorch has ScatterBackward0",
    "aten.min.dim": "a one-hot sum (Sum/PermuteBackward0) where PyTorch has ScatterBackward0",
    "aten.sort.default": "a one-hot sum (Sum/PermuteBackward0) where PyTorch has ScatterBackward0",
    "aten.topk.default": "a one-hot sum (Sum/PermuteBackward0) where PyTorch has ScatterBackward0",
    "aten.cumsum.default": "AddBackward0 where PyTorch has FlipBackward0",
}


# -- factories and metadata -------------------------------------------------------------------------------------
forward("aten.arange.start_step", [], {"start": 0, "end": 5})
forward("aten.arange.start_step", [], {"start": -1.5, "end": 2.25, "step": 0.75}, id="arange-float")
forward("aten.arange.start_step", [], {"start": 0, "end": 1, "step": 0.1}, id="arange-tenths")
forward("aten.arange.start_step", [], {"start": 10, "end": 0, "step": -3}, id="arange-down")
forward("aten.arange.start_step", [], {"start": 0, "end": 10, "step": 3, "dtype": "float64"}, id="arange-dtype")
forward("aten.arange.start_step", [], {"start": 2, "end": 2}, id="arange-empty")
refuse("aten.arange.start_step", [], {"start": 0, "end": 5, "step": 0}, "step must be nonzero")
refuse("aten.arange.start_step", [], {"start": 5, "end": 0}, "inconsistent with step sign")
forward("aten.empty.memory_format", [], {"size": [2, 3]})
forward("aten.empty.memory_format", [], {"size": [0, 3], "dtype": "int64"}, id="empty-int-empty")
refuse("aten.empty.memory_format", [], {"size": [-1, 3]}, "negative dimension")
forward("aten.empty_strided.default", [], {"size": [2, 3], "stride": [1, 2]})
forward("aten.empty_strided.default", [], {"size": [2, 3], "stride": [3, 1], "dtype": "float64"}, id="empty_strided-c")
refuse("aten.empty_strided.default", [], {"size": [2, 3], "stride": [1]}, "mismatch in length")
forward("aten.full.default", [], {"size": [2, 3], "fill_value": 2})
forward("aten.full.default", [], {"size": [2, 3], "fill_value": 2.5}, id="full-float")
forward("aten.full.default", [], {"size": [2], "fill_value": True}, id="full-bool")
forward("aten.full.default", [], {"size": [0, 2], "fill_value": 1.5, "dtype": "float64"}, id="full-empty")
forward("aten.zeros.default", [], {"size": [2, 3]})
forward("aten.zeros.default", [], {"size": [0, 2], "dtype": "int64"}, id="zeros-int-empty")
forward("aten.ones.default", [], {"size": [3], "dtype": "float64"})
refuse("aten.ones.default", [], {"size": [-2]}, "negative dimension")
forward("aten.scalar_tensor.default", [], {"s": 3})
forward("aten.scalar_tensor.default", [], {"s": 3.5, "dtype": "float64"}, id="scalar_tensor-dtype")
forward("aten.full_like.default", [R(3, 4)], {"fill_value": 2.5})
forward("aten.full_like.default", [_i23], {"fill_value": 2.7}, id="full_like-int")
forward("aten.full_like.default", [R(0, 2)], {"fill_value": 1, "dtype": "int64"}, id="full_like-dtype-empty")
forward("aten.new_empty.default", [R(3, 4)], {"size": [2, 5]})
forward("aten.new_empty.default", [_i23], {"size": [0, 2], "dtype": "float64"}, id="new_empty-dtype-empty")
forward("aten.new_zeros.default", [R(3, 4).astype(np.float32)], {"size": [2]})
forward("aten.new_ones.default", [_i23], {"size": [2, 2]})
forward("aten.new_full.default", [R(3, 4)], {"size": [3], "fill_value": 2.5})
forward("aten.new_full.default", [_i23], {"size": [2], "fill_value": 2.7}, id="new_full-int")
refuse("aten.new_zeros.default", [R(3, 4)], {"size": [-1]}, "negative dimension")
forward("aten.empty_like.default", [R(3, 4)])
forward("aten.zeros_like.default", [R(3, 4)[:, ::2]], id="zeros_like-strided")
forward("aten.zeros_like.default", [R(0, 2)], {"dtype": "int64"}, id="zeros_like-dtype-empty")
forward("aten.ones_like.default", [_i23])
forward("aten.ones_like.default", [R(2, 3)], {"dtype": "float32"}, id="ones_like-dtype")
row("aten.fill.Scalar", [R(3, 4)], {"value": 2.5})
row("aten.fill.Scalar", [R(0, 4)], {"value": 1}, id="fill-empty")
forward("aten.fill.Scalar", [_i23], {"value": 2.7}, id="fill-int")
GRADGRAD["aten.fill.Scalar"] = ([R(2, 3)], {"value": 2.5}, None)
row("aten.zero.default", [R(3, 4)], {})
row("aten.zero.default", [R(0, 4)], {}, id="zero-empty")
forward("aten.zero.default", [_i23], {}, id="zero-int")
GRADGRAD["aten.zero.default"] = ([R(2, 3)], {}, None)
forward("aten.copy.default", [R(3, 4), R(4, seed=1)])
forward("aten.copy.default", [np.zeros((2, 3), np.int64), np.array([1.7, 2.2, -3.9])], id="copy-to-int")
forward("aten.copy.default", [R(2, 3).astype(np.float32), R(2, 3, seed=1)], id="copy-to-float32")
refuse("aten.copy.default", [R(3, 4), R(3, seed=1)], {}, "does not broadcast")
forward("aten._local_scalar_dense.default", [np.array(2.5)])
forward("aten._local_scalar_dense.default", [np.array([[7]])], id="local_scalar-int")
forward("aten.sym_numel.default", [R(3, 4)])
forward("aten.sym_size.int", [R(3, 4)], {"dim": -1})
forward("aten.sym_stride.int", [R(3, 4)], {"dim": 0})
forward("aten.sym_storage_offset.default", [R(3, 4)])
refuse("aten.sym_size.int", [R(3, 4)], {"dim": 2}, "Dimension out of range")

# Note [factories in a graph] in factory.py: PyTorch leaves empty's memory uninitialised (never
# compared); copy records PyTorch's NotImplemented node (checked below)
UNINITIALISED = {"aten.empty.memory_format", "aten.empty_strided.default", "aten.new_empty.default",
                 "aten.empty_like.default"}


# -- random ops: deterministic rows (eval mode, p = 0 or 1) in the table, the rest below --------------------
row("aten.native_dropout.default", [R(3, 4)], {"p": 0.3, "train": False}, id="dropout-eval")
# rrelu in eval: leaky_relu with the mean slope (noise, not differentiable, is left alone);
# in training with lower == upper the slope draws the same number every time
_rrelu = {"lower": 0.1, "upper": 0.3}
row("aten.rrelu_with_noise.default", [R(3, 4, away=[0]), np.zeros((3, 4))], _rrelu, wrt=[0], id="rrelu-eval")
row("aten.rrelu_with_noise.default", [R(3, 4, away=[0]), np.zeros((3, 4))], {}, wrt=[0],
    id="rrelu-eval-defaults")
row("aten.rrelu_with_noise.default", [R(0, 4), np.zeros((0, 4))], _rrelu, wrt=[0], id="rrelu-empty")
row("aten.rrelu_with_noise.default", [R(3, 4, away=[0]), np.zeros((3, 4))],
    {"lower": 0.2, "upper": 0.2, "training": True}, wrt=[0], id="rrelu-train-fixed-slope")
row("aten.rrelu_with_noise_backward.default", [R(3, 4), R(3, 4, seed=1, away=[0]), np.zeros((3, 4))],
    dict(_rrelu, training=False, self_is_result=False), wrt=[0, 1], id="rrelu-backward-eval")
row("aten.rrelu_with_noise_backward.default", [R(3, 4), R(3, 4, seed=1, away=[0]), R(3, 4, seed=2)],
    dict(_rrelu, training=True, self_is_result=False), wrt=[0, 1], id="rrelu-backward-train")
refuse("aten.rrelu_with_noise.default", [_i23, np.zeros((2, 3))], {}, "not implemented for")
refuse("aten.rrelu_with_noise.default", [R(3, 4), np.zeros(3)], {"training": True}, "does not match")
GRADGRAD["aten.rrelu_with_noise.default"] = ([R(2, 3, away=[0]), np.zeros((2, 3))], _rrelu, [0])
GRADGRAD["aten.rrelu_with_noise_backward.default"] = (
    [R(2, 3), R(2, 3, seed=1, away=[0]), R(2, 3, seed=2)], dict(_rrelu, training=True, self_is_result=False),
    [0, 1])
row("aten.native_dropout.default", [R(3, 4)], {"p": 0.0, "train": True}, id="dropout-p0")
row("aten.native_dropout.default", [R(3, 4)], {"p": 1.0, "train": True}, id="dropout-p1")
row("aten.native_dropout.default", [R(0, 4)], {"p": 0.5, "train": True}, id="dropout-empty")
refuse("aten.native_dropout.default", [R(3, 4)], {"p": 1.5, "train": True}, "between 0 and 1")
refuse("aten.native_dropout.default", [_i23], {"p": 0.5, "train": True}, "not implemented for int64")
refuse("aten.rand.default", [], {"size": [2], "dtype": "int64"}, "not implemented for int64")
GRADGRAD["aten.native_dropout.default"] = ([R(2, 3)], {"p": 0.0, "train": True}, None)
RANDOM = []         # rows whose values come from the graph's generator: shapes, dtypes, shape rules
case("aten.rand.default", [], {"size": [3, 4]}, [], False, table=RANDOM)
case("aten.rand.default", [], {"size": [0, 2], "dtype": "float64"}, [], False, table=RANDOM)
case("aten.randn.default", [], {"size": [5]}, [], False, table=RANDOM)
case("aten.randn.default", [], {"size": [2, 3], "dtype": "float64"}, [], False, table=RANDOM)
case("aten.randperm.default", [], {"n": 6}, [], False, table=RANDOM)
case("aten.randperm.default", [], {"n": 0, "dtype": "float32"}, [], False, table=RANDOM)
case("aten.native_dropout.default", [R(3, 4)], {"p": 0.4, "train": True}, None, False, table=RANDOM)
case("aten.native_dropout.default", [R(3, 4)], {"p": 0.4, "train": None}, None, False, table=RANDOM)


# -- checks of this table's own (the shared ones at the end: tests/aten_table.py) -------------------------
def _dtype_name(t):
    return str(t.dtype).removeprefix("torch.")


@needs_torch
@pytest.mark.parametrize(PARAMS, FORWARD_ONLY)
def test_rows_without_a_gradient_match_torch_and_record_no_node(op_name, inputs, args, wrt, fd):
    # float inputs require grad on both sides: a bool or integer result records no node in
    # PyTorch (a comparison is not differentiable), and none in gradcli
    for cast in (lambda x: x, lambda x: x.astype(np.float32) if x.dtype == np.float64 else x):
        arrays = _rebuild(inputs, lambda i, x: cast(x) if isinstance(x, np.ndarray) else x)
        differentiable = op_name != "aten.atan2.out"         # out= refuses inputs that require grad (below)
        need = [i for i, x in enumerate(_flat(arrays)) if differentiable and isinstance(x, np.ndarray)
                and x.dtype.kind == "f"]
        ours = OPS[op_name](*_rebuild(arrays, lambda i, x: Tensor(x.copy(), requires_grad=i in need)
                                      if isinstance(x, np.ndarray) else x), **args)
        _, theirs = _theirs(op_name, arrays, args, need)
        ours = list(ours) if OPS[op_name].multi_output else [ours]
        for o, t in zip(ours, theirs):
            if not isinstance(t, torch.Tensor):    # a Python number (-> Scalar, -> SymInt): a 0-dim tensor here
                assert o.shape == () and o.grad_fn is None and o.data.item() == t and type(o.data.item()) is type(t)
                continue
            assert o.dtype == np.dtype(_dtype_name(t)) and o.shape == tuple(t.shape)
            if op_name in UNINITIALISED:         # the layout only (an empty tensor has none to compare)
                assert o.data.size == 0 or o.data.strides == tuple(st * o.data.itemsize for st in t.stride())
            else:
                np.testing.assert_allclose(o.data, t.detach().numpy(), rtol=2e-6 if o.dtype == np.float32 else 1e-12)
            assert (o.grad_fn is None) == (t.grad_fn is None)
            if t.grad_fn is not None:
                assert o.grad_fn.name == t.grad_fn.name()


def _non_contiguous(x):
    """The same values as ``x`` in a non-contiguous layout (its last two dims' strides swapped)."""
    if not isinstance(x, np.ndarray) or x.ndim < 2:
        return x
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)


NON_CONTIGUOUS = [c for c in CASES if any(isinstance(x, np.ndarray) and x.ndim >= 2 and min(x.shape[-2:]) > 1
                                          for x in _flat(c.values[1]))]


@needs_torch
@pytest.mark.parametrize(PARAMS, NON_CONTIGUOUS)
def test_non_contiguous_inputs_match_torch(op_name, inputs, args, wrt, fd):
    wrt = _wrt(inputs, wrt)
    strided = _rebuild(inputs, lambda i, x: _non_contiguous(x))
    assert any(isinstance(x, np.ndarray) and not x.flags.c_contiguous for x in _flat(strided))
    tensors = _rebuild(strided, lambda i, x: Tensor(x, requires_grad=i in wrt) if isinstance(x, np.ndarray) else x)
    out = OPS[op_name](*tensors, **args)
    outs = list(out) if OPS[op_name].multi_output else [out]

    def torch_view(i, x):
        if not isinstance(x, np.ndarray):
            return x
        t = torch.tensor(np.ascontiguousarray(np.swapaxes(x, -1, -2))).transpose(-1, -2) if x.ndim >= 2 \
            else torch.tensor(x)
        return t.requires_grad_(i in wrt)

    tflat = _flat(_rebuild(strided, torch_view))
    touts = _torch_call(op_name, *_rebuild(inputs, lambda i, x: tflat[i]), **args)
    touts = list(touts) if isinstance(touts, (tuple, list)) else [touts]
    for o, t in zip(outs, touts):
        np.testing.assert_allclose(o.data, t.detach().numpy(), rtol=1e-12, atol=1e-14)
    used = [k for k, t in enumerate(touts) if t.grad_fn is not None]
    vs = [np.random.default_rng(k).standard_normal(touts[k].shape) for k in used]
    flat = _flat(tensors)
    ours = grad([outs[k] for k in used], [flat[i] for i in wrt], grad_outputs=vs)
    theirs = torch.autograd.grad([touts[k] for k in used], [tflat[i] for i in wrt], [torch.tensor(v) for v in vs])
    if op_name == "aten.rrelu_with_noise.default" and args.get("training"):
        # a deliberate difference (docs/deviations.md): PyTorch's CPU kernel writes the noise
        # of a non-contiguous input in memory order, so its gradient scales the wrong
        # elements; gradcli's noise and gradient follow the elements, as for a contiguous input
        slope = args["lower"]
        x = np.asarray(strided[0])
        np.testing.assert_allclose(ours[0], vs[0] * np.where(x <= 0, slope, 1.0), rtol=1e-12)
        assert not np.allclose(ours[0], theirs[0].numpy()), "PyTorch's noise now follows the elements"
        return
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)


def test_atan2_out_refuses_inputs_that_require_grad_like_torch():
    x = Tensor(R(3), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"out=\.\.\. arguments don't support automatic differentiation"):
        OPS["aten.atan2.out"](x, Tensor(R(3, seed=1)), np.empty(0))
    out = OPS["aten.atan2.out"](Tensor(R(3)), Tensor(R(3, seed=1)), np.empty(0, np.float32))
    assert out.grad_fn is None and out.dtype == np.float32


@needs_torch
def test_copy_records_a_node_that_refuses_to_differentiate_like_torch():
    src = Tensor(R(4), requires_grad=True)
    out = OPS["aten.copy.default"](Tensor(R(3, 4)), src)
    tsrc = torch.tensor(R(4), requires_grad=True)
    tout = torch.ops.aten.copy.default(torch.tensor(R(3, 4)), tsrc)
    assert out.grad_fn.name == tout.grad_fn.name() == "torch::autograd::NotImplemented"
    with pytest.raises(RuntimeError, match="derivative for aten::copy is not implemented"):
        torch.autograd.grad(tout.sum(), tsrc)
    with pytest.raises(RuntimeError, match="derivative for aten::copy is not implemented"):
        grad([out], [src], grad_outputs=[np.ones((3, 4))])


def test_storage_offset_and_strides_read_the_view():
    base = np.arange(24.0).reshape(4, 6)
    view = base[1:, 2::2]
    assert OPS["aten.sym_storage_offset.default"](view).item() == 8
    assert OPS["aten.sym_stride.int"](view, dim=1).item() == 2
    assert OPS["aten.sym_stride.int"](view, dim=0).item() == 6
    assert OPS["aten.sym_size.int"](view, dim=1).item() == 2


def test_local_scalar_dense_refuses_a_tensor_of_several_elements_where_torch_reads_the_first():
    # a deliberate difference: PyTorch's kernel reads the first element (its callers, .item(),
    # check the size first); a graph entry that asks for it is refused, as .item() refuses
    with pytest.raises(ValueError, match="2 elements cannot be converted to Scalar"):
        OPS["aten._local_scalar_dense.default"](Tensor(R(2)))


def test_a_graph_file_uses_factories_comparisons_and_reductions():
    # a factory takes ``inputs: []``; a comparison's bool result feeds where; max.dim's
    # indices take a name of their own and get no gradient
    from gradcli import loader

    text = """version: 1
tensors:
  x: {value: [[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], requires_grad: true}
ops:
  - {op: aten.full.default, inputs: [], args: {size: [2, 3], fill_value: 0.5, dtype: float64}, output: h}
  - {op: aten.gt.Tensor, inputs: [x, h], output: m}
  - {op: aten.where.self, inputs: [m, x, h], output: y}
  - {op: aten.sin.default, inputs: [y], output: z}
  - {op: aten.max.dim, inputs: [z], args: {dim: 1}, outputs: [v, i]}
  - {op: aten.sum.default, inputs: [v], output: s}
backward: {roots: [s]}
"""
    result = loader.loads(text).run()
    x = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    y = np.where(x > 0.5, x, 0.5)
    picked = np.zeros_like(x)
    picked[np.arange(2), np.argmax(np.sin(y), axis=1)] = 1
    np.testing.assert_allclose(result.grads["x"], picked * np.cos(y) * (x > 0.5))
    assert [r.node for r in result.order] == ["SumBackward0", "MaxBackward0", "SinBackward0", "WhereBackward0",
                                              "AccumulateGrad"]


# -- random ops: PyTorch's shapes, dtypes, nodes and formulas; the distributions; the graph's seed ----
@needs_torch
@pytest.mark.parametrize(PARAMS, RANDOM)
def test_random_ops_have_torchs_shapes_dtypes_and_nodes(op_name, inputs, args, wrt, fd):
    # Note [the graph's generator] in gradcli/ops/rng.py: the values come from another generator
    # than PyTorch's and are not compared; everything else is
    wrt = _wrt(inputs, wrt)
    flat, outs = _ours(op_name, inputs, args, wrt)
    _, touts = _theirs(op_name, inputs, args, wrt)
    for o, t in zip(outs, touts):
        assert o.shape == tuple(t.shape) and o.dtype == np.dtype(_dtype_name(t))
        assert (o.grad_fn is None) == (t.grad_fn is None)
        if t.grad_fn is not None:
            assert o.grad_fn.name == t.grad_fn.name()


def test_rand_randn_and_randperm_draw_their_distributions():
    from gradcli.ops.rng import seeded

    with seeded(3):
        u = OPS["aten.rand.default"](size=[200, 100], dtype="float64").data
        n = OPS["aten.randn.default"](size=[200, 100], dtype="float64").data
        p = OPS["aten.randperm.default"](n=1000).data
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005      # 20000 draws: ~5 sigma
    assert abs(n.mean()) < 0.04 and abs(n.std() - 1) < 0.02
    assert sorted(p.tolist()) == list(range(1000)) and p.tolist() != list(range(1000))
    assert OPS["aten.rand.default"](size=[4], dtype="float32").dtype == np.float32


@needs_torch
@pytest.mark.parametrize("train", [True, None])
def test_native_dropout_keeps_one_minus_p_and_scales_and_differentiates_as_torch(train):
    from gradcli.ops.rng import seeded

    p = 0.3
    x = Tensor(R(100, 100) + 3.0, requires_grad=True)
    with seeded(11):
        out, mask = OPS["aten.native_dropout.default"](x, p=p, train=train)
    assert mask.dtype == np.bool_ and mask.grad_fn is None
    assert abs(mask.data.mean() - (1 - p)) < 0.02                      # 10000 draws: ~4 sigma
    np.testing.assert_allclose(out.data, x.data * mask.data / (1 - p), rtol=1e-15)
    v = R(100, 100, seed=1)
    (g,) = grad([out], [x], grad_outputs=[v])
    # PyTorch's formula on the same mask: native_dropout_backward(grad, mask, scale), where
    # scale is 1 / (1 - p) only when train is True (Note [dropout with train unset])
    scale = 1 / (1 - p) if train is True else 1.0
    theirs = torch.ops.aten.native_dropout_backward.default(torch.tensor(v), torch.tensor(mask.data), scale)
    np.testing.assert_allclose(g, theirs.numpy(), rtol=1e-15)
    # and PyTorch's own draw obeys the same rule for train (the quirk is PyTorch's)
    tx = torch.tensor(R(100, 100) + 3.0, requires_grad=True)
    tout, tmask = torch.ops.aten.native_dropout.default(tx, p, train)
    (tg,) = torch.autograd.grad(tout, tx, torch.tensor(v))
    np.testing.assert_allclose(tg.numpy(), v * tmask.numpy() * scale, rtol=1e-15)


_RANDOM_GRAPH = """version: 1
seed: {seed}
tensors:
  x: {{value: [[1.0, -2.0, 3.0, 0.5], [0.5, 4.0, -1.0, 2.0]], requires_grad: true}}
ops:
  - {{op: aten.randn.default, inputs: [], args: {{size: [2, 4], dtype: float64}}, output: noise}}
  - {{op: aten.add.Tensor, inputs: [x, noise], output: y}}
  - {{op: aten.native_dropout.default, inputs: [y], args: {{p: 0.5, train: true}}, outputs: [d, mask]}}
  - {{op: aten.mul.Tensor, inputs: [d, d], output: z}}
  - {{op: aten.sum.default, inputs: [z], output: s}}
backward: {{roots: [s]}}
"""


def test_a_graph_draws_from_its_seed_the_same_numbers_on_every_forward():
    from gradcli import loader
    from gradcli.gradcheck import gradcheck

    graph = loader.loads(_RANDOM_GRAPH.format(seed=5))
    first = {k: v.data.copy() for k, v in graph.forward().items()}
    second = graph.forward()
    for name in ("noise", "mask", "d"):
        np.testing.assert_array_equal(first[name], second[name].data)
    other = loader.loads(_RANDOM_GRAPH.format(seed=6)).forward()
    assert not np.array_equal(first["noise"], other["noise"].data)
    # gradcheck replays the forward: with the same draws, finite differences agree
    assert gradcheck(loader.loads(_RANDOM_GRAPH.format(seed=5))) == []


# -- on a simulated accelerator: results and gradients stay on the inputs' device ----------------------------
def _sim():
    from gradcli.devices import device, sim_device_count

    if sim_device_count() < 1:
        pytest.skip("needs GRADCLI_SIM_DEVICES >= 1")
    return device("sim:0")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(PARAMS, [c for c in CASES + FORWARD_ONLY if any(
    isinstance(x, np.ndarray) for x in _flat(c.values[1]))])
def test_rows_on_a_simulated_device_stay_there_and_match_cpu(op_name, inputs, args, wrt, fd):
    from gradcli.devices import device_of, to_device

    dev = _sim()
    if op_name == "aten.atan2.out":
        wrt = []
    wrt = _wrt(inputs, wrt)
    _, cpu_outs = _ours(op_name, inputs, args, wrt)
    tensors = _rebuild(inputs, lambda i, x: Tensor(to_device(x.copy(), dev), requires_grad=i in wrt)
                       if isinstance(x, np.ndarray) else x)
    out = OPS[op_name](*tensors, **args)
    outs = list(out) if OPS[op_name].multi_output else [out]
    for o, c in zip(outs, cpu_outs):
        assert device_of(o.data) is dev, f"{op_name}: result on {device_of(o.data)}"
        if op_name not in UNINITIALISED:
            np.testing.assert_array_equal(np.asarray(o.data), c.data)
    used = [k for k, o in enumerate(outs) if o.grad_fn is not None]
    if not used or not wrt:
        return
    flat = _flat(tensors)
    gs = grad([outs[k] for k in used], [flat[i] for i in wrt],
              grad_outputs=[to_device(np.ones(outs[k].shape, outs[k].dtype), dev) for k in used])
    for g in gs:
        assert device_of(g) is dev, f"{op_name}: gradient on {device_of(g)}"


# -- the checks of every table (tests/aten_table.py), on all the rows above ---------------------------------
# (no float32 gradients here; FORWARD_ONLY is checked above, with the float inputs requiring grad)
globals().update(checks(T, float32_gradients=None, shape_rule_rows=RANDOM, rows_without_a_gradient=False))
