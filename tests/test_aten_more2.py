"""ATen ops beyond the core opset, second table: ``kthvalue``, ``mode`` (a value and its index along
a dim, PyTorch's index among equal values), ``addbmm``, ``angle`` and ``adaptive_max_pool3d``, one
table row per case, run by the checks of ``tests/test_aten_ops.py`` (finite differences, PyTorch's
values, gradients and node names in float64, values and dtypes in float32, the load-time shape
rule) and ``tests/test_aten_gradgrad.py`` (second derivatives, create_graph node names), plus
gradients in float32 against PyTorch's.

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


# -- kthvalue, mode: PyTorch's index among equal values (Note [kthvalue's index], Note [mode's index]) ------
KTH, MODE = "aten.kthvalue.default", "aten.mode.default"
_ties = np.array([[3.0, 1.0, 3.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 2.0, 1.0, 5.0, 0.0]])
_nan = np.array([[1.0, np.nan, 2.0, np.nan, 3.0], [4.0, 2.0, 0.5, 1.0, 3.0], [np.nan, 1.0, 1.0, 2.0, 1.0]])
_long_ties = np.random.default_rng(3).integers(0, 4, size=(3, 40)).astype(np.float64)     # past insertion sort
row(KTH, [R(3, 5)], {"k": 2, "dim": 1})
row(KTH, [R(3, 5)], {"k": 1}, id=KTH + "-default-dim")
row(KTH, [R(4, 3)], {"k": 4, "dim": 0, "keepdim": True}, id=KTH + "-keepdim-last")
row(KTH, [R(2, 3, 4)], {"k": 2, "dim": -2}, id=KTH + "-3d")
row(KTH, [_ties], {"k": 3, "dim": 1}, fd=False, id=KTH + "-ties")
row(KTH, [_ties.T.copy()], {"k": 2, "dim": 0}, fd=False, id=KTH + "-ties-dim0")
row(KTH, [_long_ties], {"k": 17, "dim": 1}, fd=False, id=KTH + "-long-ties")
row(KTH, [_nan], {"k": 4, "dim": 1}, fd=False, id=KTH + "-nan")
row(KTH, [R(0, 3)], {"k": 1, "dim": 1}, id=KTH + "-empty")
row(KTH, [R()], {"k": 1, "dim": 0}, id=KTH + "-0d")
row(KTH, [nc(R(4, 5))], {"k": 3, "dim": 1}, id=KTH + "-nc")
forward(KTH, [np.array([[5, 3, 4, 3], [1, 1, 2, 2]])], {"k": 2, "dim": 1}, id=KTH + "-int")
GRADGRAD[KTH] = ([R(3, 4)], {"k": 2, "dim": 1}, None)
refuse(KTH, [R(2, 0)], {"k": 1, "dim": 1}, "non-zero size", id=KTH + "-empty-dim")
refuse(KTH, [R(2, 3)], {"k": 4, "dim": 1}, "out of range", id=KTH + "-k-too-big")
refuse(KTH, [R(2, 3)], {"k": 0, "dim": 1}, "out of range", id=KTH + "-k-zero")
refuse(KTH, [np.ones((2, 2), bool)], {"k": 1, "dim": 1}, "not implemented for bool", id=KTH + "-bool")
refuse(KTH, [R(2, 2)], {"k": 1, "dim": 2}, "out of range", id=KTH + "-dim")

row(MODE, [R(3, 5)], {"dim": 1})
row(MODE, [R(3, 5)], {}, id=MODE + "-default-dim")
row(MODE, [R(4, 3)], {"dim": 0, "keepdim": True}, id=MODE + "-keepdim")
row(MODE, [_ties], {"dim": 1}, fd=False, id=MODE + "-ties")
row(MODE, [_ties.T.copy()], {"dim": 0}, fd=False, id=MODE + "-ties-dim0")
row(MODE, [_long_ties], {"dim": 1}, fd=False, id=MODE + "-long-ties")
row(MODE, [R(0, 3)], {"dim": 1}, id=MODE + "-empty")
row(MODE, [R()], {"dim": 0}, id=MODE + "-0d")
row(MODE, [nc(np.round(R(4, 6)))], {"dim": 1}, fd=False, id=MODE + "-nc")
forward(MODE, [np.array([[5, 3, 4, 3], [1, 1, 2, 2]])], {"dim": 1}, id=MODE + "-int")
forward(MODE, [np.array([[True, False, True], [False, False, True]])], {"dim": 1}, id=MODE + "-bool")
GRADGRAD[MODE] = ([R(3, 4)], {"dim": 1}, None)
refuse(MODE, [R(2, 0)], {"dim": 1}, "non-zero size", id=MODE + "-empty-dim")
refuse(MODE, [R(2, 2)], {"dim": 2}, "out of range", id=MODE + "-dim")


# -- addbmm: self broadcast to the product, beta and alpha, no batch ---------------------------------------
ABMM = "aten.addbmm.default"
row(ABMM, [R(3, 5), R(2, 3, 4, seed=1), R(2, 4, 5, seed=2)])
row(ABMM, [R(3, 5), R(2, 3, 4, seed=1), R(2, 4, 5, seed=2)], {"beta": 0.5, "alpha": -2.0}, id=ABMM + "-scaled")
row(ABMM, [R(5), R(2, 3, 4, seed=1), R(2, 4, 5, seed=2)], id=ABMM + "-broadcast-row")
row(ABMM, [R(3, 1), R(2, 3, 4, seed=1), R(2, 4, 5, seed=2)], {"alpha": 3}, id=ABMM + "-broadcast-col")
row(ABMM, [R(), R(1, 3, 4, seed=1), R(1, 4, 5, seed=2)], id=ABMM + "-0d-self")
row(ABMM, [np.full((3, 5), np.nan), R(2, 3, 4, seed=1), R(2, 4, 5, seed=2)], {"beta": 0}, fd=False,
    id=ABMM + "-beta0-nan")
row(ABMM, [R(3, 5), R(0, 3, 4, seed=1), R(0, 4, 5, seed=2)], {"beta": 2.0}, id=ABMM + "-no-batch")
row(ABMM, [R(3, 5), R(2, 3, 0, seed=1), R(2, 0, 5, seed=2)], id=ABMM + "-empty-inner")
row(ABMM, [nc(R(5, 3)).T, nc(R(2, 3, 4, seed=1)), nc(R(2, 4, 5, seed=2))], id=ABMM + "-nc")
forward(ABMM, [np.ones((2, 2), np.int64), np.arange(8).reshape(2, 2, 2), np.arange(8).reshape(2, 2, 2)],
        {"beta": 2, "alpha": 3}, id=ABMM + "-int")
GRADGRAD[ABMM] = ([R(3, 2), R(2, 3, 4, seed=1), R(2, 4, 2, seed=2)], {"beta": 0.5, "alpha": 2.0}, None)
refuse(ABMM, [R(3, 5), R(3, 4), R(2, 4, 5, seed=2)], {}, "3D", id=ABMM + "-2d")
refuse(ABMM, [R(3, 5), R(2, 3, 4), R(3, 4, 5, seed=2)], {}, "same number of batches", id=ABMM + "-batches")
refuse(ABMM, [R(3, 5), R(2, 3, 4), R(2, 3, 5, seed=2)], {}, "incompatible matrix sizes", id=ABMM + "-inner")
refuse(ABMM, [R(2, 5), R(2, 3, 4), R(2, 4, 5, seed=2)], {}, "cannot be expanded", id=ABMM + "-self")
refuse(ABMM, [R(3, 5), R(2, 3, 4), R(2, 4, 5, seed=2).astype(np.float32)], {}, "same dtype", id=ABMM + "-dtype")


# -- adaptive_max_pool3d and its backward: PyTorch's scan (first maximum, a NaN wins) ---------------------------
AMP3, AMP3B = "aten.adaptive_max_pool3d.default", "aten.adaptive_max_pool3d_backward.default"


def distinct(*shape, seed=0):
    """Values far apart, no ties (a max pooling's gradient is defined)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed + 5).permutation(n) * 0.37 - n * 0.15).reshape(shape).astype(np.float64)


_plateaus = np.random.default_rng(4).integers(0, 3, size=(1, 2, 4, 5, 6)).astype(np.float64)
_plateaus[0, 0, 0, 0, :3] = np.nan
row(AMP3, [distinct(2, 3, 5, 6, 7)], {"output_size": [3, 4, 2]})                 # overlapping windows
row(AMP3, [distinct(3, 4, 4, 4)], {"output_size": [2, 2, 2]}, id=AMP3 + "-unbatched")
row(AMP3, [distinct(1, 2, 2, 3, 3)], {"output_size": [4, 1, 5]}, id=AMP3 + "-more-outputs")
row(AMP3, [R(0, 2, 3, 3, 3)], {"output_size": [2, 2, 2]}, id=AMP3 + "-empty-batch")
row(AMP3, [_plateaus], {"output_size": [2, 3, 4]}, fd=False, id=AMP3 + "-ties-nan")
row(AMP3, [np.swapaxes(distinct(2, 3, 5, 4, 6), 2, 4)], {"output_size": [2, 3, 2]}, id=AMP3 + "-nc")
GRADGRAD[AMP3] = ([distinct(1, 2, 4, 3, 5)], {"output_size": [2, 2, 3]}, None)
_amp3_idx = np.array([[[[[0, 5], [14, 23]]]] * 2])                                 # (1, 2, 1, 2, 2) in a 2x3x4 volume
row(AMP3B, [R(1, 2, 1, 2, 2), R(1, 2, 2, 3, 4, seed=1), _amp3_idx], {}, wrt=[0, 1], id=AMP3B)
GRADGRAD[AMP3B] = ([R(1, 2, 1, 2, 2), R(1, 2, 2, 3, 4, seed=1), _amp3_idx], {}, [0])
refuse(AMP3, [R(2, 0, 3, 3, 3)], {"output_size": [2, 2, 2]}, "non-zero size", id=AMP3 + "-empty-channels")
refuse(AMP3, [R(3, 3, 3)], {"output_size": [2, 2, 2]}, "4D or 5D", id=AMP3 + "-3d")
refuse(AMP3, [R(2, 3, 3, 3)], {"output_size": [2, 2]}, "3 elements", id=AMP3 + "-output-size")
refuse(AMP3, [np.ones((2, 3, 3, 3), np.int64)], {"output_size": [2, 2, 2]}, "not implemented", id=AMP3 + "-int")
refuse(AMP3B, [R(1, 2, 1, 2, 3), R(1, 2, 2, 3, 4, seed=1), _amp3_idx], {}, "one shape", id=AMP3B + "-shapes")


# -- grid_sampler_3d and its backward (the taps of grid_sampler_2d on three axes) --------------------------------
GS3, GS3B = "aten.grid_sampler_3d.default", "aten.grid_sampler_3d_backward.default"
_g3 = R(2, 2, 3, 4, 3, seed=1, low=-1.2, high=1.2)                 # some points outside [-1, 1]
for _interp, _pad, _ac in ((0, 0, False), (0, 1, True), (0, 2, False), (0, 2, True), (1, 0, False), (1, 1, True)):
    row(GS3, [R(2, 3, 4, 5, 3), _g3], {"interpolation_mode": _interp, "padding_mode": _pad, "align_corners": _ac},
        wrt=[0] if _interp == 1 else None, id=f"{GS3}-{_interp}-{_pad}-{_ac}")
row(GS3, [R(1, 2, 1, 1, 1), R(1, 2, 2, 2, 3, seed=1, low=-0.9, high=0.9)],
    {"interpolation_mode": 0, "padding_mode": 1, "align_corners": False}, id=GS3 + "-one-voxel")
row(GS3, [R(0, 2, 3, 3, 3), R(0, 2, 2, 2, 3, seed=1)],
    {"interpolation_mode": 0, "padding_mode": 0, "align_corners": False}, id=GS3 + "-empty-batch")
row(GS3, [nc(R(3, 2, 4, 5, 2)), nc(R(3, 2, 3, 2, 3, seed=1, low=-1, high=1))],
    {"interpolation_mode": 0, "padding_mode": 0, "align_corners": True}, id=GS3 + "-nc")
GRADGRAD[GS3] = ([R(1, 2, 3, 3, 4), R(1, 2, 2, 1, 3, seed=1, low=-0.9, high=0.9)],
                 {"interpolation_mode": 0, "padding_mode": 2, "align_corners": False}, None)
_gs3b_args = {"interpolation_mode": 0, "padding_mode": 0, "align_corners": False, "output_mask": [True, True]}
# the backward op: its values below; its own derivative (grid_sampler_3d_double_backward) through GRADGRAD[GS3]
_gs3 = {"interpolation_mode": 0, "padding_mode": 0, "align_corners": False}
refuse(GS3, [R(2, 3, 4, 5), R(2, 2, 3, 2, seed=1)], _gs3, "5D input", id=GS3 + "-4d")
refuse(GS3, [R(2, 3, 4, 5, 3), R(2, 2, 3, 4, 2, seed=1)], _gs3, "size 3 in last dimension", id=GS3 + "-grid")
refuse(GS3, [R(2, 3, 4, 5, 3), R(1, 2, 3, 4, 3, seed=1)], _gs3, "same batch size", id=GS3 + "-batch")
refuse(GS3, [R(2, 3, 4, 0, 3), R(2, 2, 3, 4, 3, seed=1)], _gs3, "non-empty spatial", id=GS3 + "-empty")
refuse(GS3, [R(2, 3, 4, 5, 3), R(2, 2, 3, 4, 3, seed=1)], dict(_gs3, interpolation_mode=2), "bicubic",
       id=GS3 + "-bicubic")


# -- angle of a real input: 0 or pi (NaN kept), a zero gradient ----------------------------------------------
ANG = "aten.angle.default"
row(ANG, [R(3, 4, away=[0])])
row(ANG, [np.array([1.0, -0.0, 0.0, np.nan, -1.0, -np.inf, np.inf])], fd=False, id=ANG + "-edges")
row(ANG, [R(0, 3)], id=ANG + "-empty")
row(ANG, [R()], id=ANG + "-0d")
row(ANG, [nc(R(3, 4))], id=ANG + "-nc")
forward(ANG, [np.array([[3, -1, 0], [-7, 2, 0]])], id=ANG + "-int")
forward(ANG, [np.array([True, False])], id=ANG + "-bool")
GRADGRAD[ANG] = ([R(2, 3)], {}, None)


# -- index_reduce: prod, mean, amax, amin, with and without self (Note [index_reduce as scatter_reduce]) ----------
IR = "aten.index_reduce.default"
_ir_idx = np.array([0, 2, 0, 3])
_ir_ties = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [2.0, 2.0, -1.0], [4.0, 1.0, 1.0]])
_ir_src_ties = np.array([[1.0, 5.0, 3.0], [0.5, 0.5, 0.7], [1.0, 2.0, 3.0], [4.0, 1.0, 0.0]])
_ir_zeros = np.array([[0.0, 2.0, 3.0], [1.5, 0.0, 0.5], [2.0, 0.0, -1.0], [0.0, 1.0, 1.0]])
for _red in ("prod", "mean", "amax", "amin"):
    for _inc in (True, False):
        _a = {"dim": 0, "reduce": _red, "include_self": _inc}
        row(IR, [R(5, 3), _ir_idx, R(4, 3, seed=1)], _a, wrt=[0, 2], id=f"{IR}-{_red}-{_inc}")
    row(IR, [R(3, 5), np.array([4, 1, 4], np.int32), R(3, 3, seed=1)], {"dim": -1, "reduce": _red},
        wrt=[0, 2], id=f"{IR}-{_red}-dim-1-int32")
    row(IR, [_ir_ties, _ir_idx, _ir_src_ties], {"dim": 0, "reduce": _red}, wrt=[0, 2], fd=_red != "amax" and
        _red != "amin", id=f"{IR}-{_red}-ties")
    row(IR, [R(4, 0), _ir_idx[:2], R(2, 0, seed=1)], {"dim": 0, "reduce": _red}, wrt=[0, 2], id=f"{IR}-{_red}-empty")
    row(IR, [nc(R(4, 3)), np.array([2, 0, 2]), nc(R(4, 3, seed=1))], {"dim": 1, "reduce": _red, "include_self": False},
        wrt=[0, 2], id=f"{IR}-{_red}-nc")
row(IR, [_ir_zeros, _ir_idx, _ir_zeros[::-1].copy()], {"dim": 0, "reduce": "prod"}, wrt=[0, 2], id=IR + "-prod-zeros")
row(IR, [R(), np.array([0]), R(seed=1)], {"dim": 0, "reduce": "mean"}, wrt=[0, 2], id=IR + "-0d")
forward(IR, [np.ones((4, 3), np.int64), _ir_idx[:3], np.arange(9).reshape(3, 3)], {"dim": 0, "reduce": "mean"},
        id=IR + "-int-mean")
GRADGRAD[IR] = ([R(4, 3), _ir_idx[:3], R(3, 3, seed=1)], {"dim": 0, "reduce": "prod"}, [0, 2])
NODE_NAME_DIFFERENCES[IR] = ("scatter_reduce_backward's ops on the expanded index (MulBackward0, AddBackward0 for "
                             "prod's source; PyTorch: DivBackward0, WhereBackward0 through index_select)")
refuse(IR, [R(4, 3), _ir_idx, R(4, 3, seed=1)], {"dim": 0, "reduce": "sum"}, "one of prod, mean", id=IR + "-sum")
refuse(IR, [R(4, 3), _ir_idx, R(3, 3, seed=1)], {"dim": 0, "reduce": "mean"}, "number of indices",
       id=IR + "-count")
refuse(IR, [R(4, 3), _ir_idx, R(4, 2, seed=1)], {"dim": 0, "reduce": "mean"}, "source tensor shape",
       id=IR + "-shape")
refuse(IR, [R(4, 3), _ir_idx.astype(np.float64), R(4, 3, seed=1)], {"dim": 0, "reduce": "mean"}, "int32/int64",
       id=IR + "-index-dtype")
refuse(IR, [R(4, 3), _ir_idx[None], R(4, 3, seed=1)], {"dim": 0, "reduce": "mean"}, "vector", id=IR + "-index-2d")
refuse(IR, [R(4, 3), _ir_idx, R(4, 3, seed=1)], {"dim": 2, "reduce": "mean"}, "out of range", id=IR + "-dim")
refuse(IR, [R(4, 3), np.array([0, 9, 0, 1]), R(4, 3, seed=1)], {"dim": 0, "reduce": "mean"}, "out of range",
       static=False, id=IR + "-index-value")


# -- put: flat positions (negative from the end), a repeated one takes its last value or adds up -----------------
PUT = "aten.put.default"
for _acc in (False, True):
    row(PUT, [R(3, 4), np.array([0, -1, 5, 7]), R(4, seed=1)], {"accumulate": _acc}, wrt=[0, 2], id=f"{PUT}-{_acc}")
    # a repeated position without accumulate: PyTorch's formula gives every source element there the
    # gradient (take), where only the last one moves the result: no finite differences
    row(PUT, [R(3, 4), np.array([[2, 2], [9, 2]]), R(2, 2, seed=1)], {"accumulate": _acc}, wrt=[0, 2], fd=_acc,
        id=f"{PUT}-{_acc}-repeated")
    row(PUT, [nc(R(3, 4)), np.array([1, 4, 11]), R(3, 1, seed=1)[:, 0]], {"accumulate": _acc}, wrt=[0, 2],
        id=f"{PUT}-{_acc}-nc")
row(PUT, [R(3, 4), np.zeros(0, np.int64), R(0, seed=1)], {}, wrt=[0, 2], id=PUT + "-no-index")
row(PUT, [R(), np.array([0, -1]), R(2, seed=1)], {"accumulate": True}, wrt=[0, 2], id=PUT + "-0d-self")
forward(PUT, [np.zeros((2, 3), np.int64), np.array([5, 0]), np.array([7, 8])], {}, id=PUT + "-int")
GRADGRAD[PUT] = ([R(3, 4), np.array([0, -1, 5]), R(3, seed=1)], {}, [0, 2])
refuse(PUT, [R(3, 4), np.array([0, 12]), R(2, seed=1)], {}, "out of range", static=False, id=PUT + "-range")
refuse(PUT, [R(3, 4), np.array([0, 1]), R(3, seed=1)], {}, "same number of elements", id=PUT + "-count")
refuse(PUT, [R(3, 4), np.array([0, 1], np.int32), R(2, seed=1)], {}, "long tensor", id=PUT + "-int32")
refuse(PUT, [R(3, 4), np.array([0, 1]), R(2, seed=1).astype(np.float32)], {}, "same dtype", id=PUT + "-dtype")


# -- fractional_max_pool3d and its backward: PyTorch's intervals from each plane's samples (u_t, u_h, u_w) ----------
FMP3, FMP3B = "aten.fractional_max_pool3d.default", "aten.fractional_max_pool3d_backward.default"
_u3 = np.random.default_rng(6).random((2, 3, 3))
_fmp3 = {"kernel_size": [2, 3, 2], "output_size": [3, 4, 5]}
row(FMP3, [distinct(2, 3, 6, 7, 8), _u3], _fmp3, wrt=[0])
row(FMP3, [distinct(3, 5, 5, 5), _u3[:1]], {"kernel_size": [2, 2, 2], "output_size": [3, 3, 3]}, wrt=[0],
    id=FMP3 + "-unbatched")
row(FMP3, [distinct(2, 3, 5, 4, 5), _u3], {"kernel_size": [2, 2, 2], "output_size": [3, 1, 3]}, wrt=[0],
    id=FMP3 + "-overlaps")
row(FMP3, [np.swapaxes(distinct(2, 3, 8, 7, 6), 2, 4), _u3], _fmp3, wrt=[0], id=FMP3 + "-nc")
row(FMP3, [R(0, 3, 6, 7, 8), _u3[:0]], _fmp3, wrt=[0], id=FMP3 + "-empty-batch")
row(FMP3, [_plateaus, _u3[:1, :2]], {"kernel_size": [2, 2, 2], "output_size": [2, 3, 4]}, wrt=[0], fd=False,
    id=FMP3 + "-ties-nan")
GRADGRAD[FMP3] = ([distinct(1, 2, 4, 4, 5), _u3[:1, :2]], {"kernel_size": [2, 2, 2], "output_size": [2, 2, 3]}, [0])
_fmp3_idx = np.array([[[[[0, 5], [14, 23]]]] * 2])
row(FMP3B, [R(1, 2, 1, 2, 2), R(1, 2, 2, 3, 4, seed=1), _fmp3_idx], {"kernel_size": [2, 2, 2], "output_size": [1, 2, 2]},
    wrt=[0, 1], id=FMP3B)
GRADGRAD[FMP3B] = ([R(1, 2, 1, 2, 2), R(1, 2, 2, 3, 4, seed=1), _fmp3_idx],
                   {"kernel_size": [2, 2, 2], "output_size": [1, 2, 2]}, [0])
refuse(FMP3, [R(2, 3, 4, 7, 8), _u3], _fmp3, "too large", id=FMP3 + "-pool")
refuse(FMP3, [R(2, 3, 6, 7, 8), _u3[..., :2]], _fmp3, "random_samples", id=FMP3 + "-samples")
refuse(FMP3, [R(2, 0, 6, 7, 8), _u3[:, :0]], _fmp3, "non-zero size", id=FMP3 + "-empty-channels")
refuse(FMP3, [R(2, 3, 6, 7, 8), _u3.astype(np.float32)], _fmp3, "dtype", id=FMP3 + "-samples-dtype")


# -- _upsample_bilinear2d_aa: antialiased bilinear, up and down, sizes or scales ---------------------------------
AA = "aten._upsample_bilinear2d_aa.default"
row(AA, [R(2, 3, 8, 9)], {"output_size": [3, 4], "align_corners": False})
row(AA, [R(2, 3, 8, 9)], {"output_size": [3, 4], "align_corners": True}, id=AA + "-align")
row(AA, [R(1, 2, 5, 6)], {"output_size": [10, 13], "align_corners": False}, id=AA + "-up")
row(AA, [R(1, 2, 5, 6)], {"output_size": [10, 3], "align_corners": True}, id=AA + "-up-down-align")
row(AA, [R(1, 2, 12, 10)], {"output_size": [5, 3], "align_corners": False, "scales_h": 0.45, "scales_w": 0.29},
    id=AA + "-scales")
# an unchanged height with a scale: PyTorch's forward copies the rows, its backward weighs them by the
# scale (docs/deviations.md), gradcli too: no finite differences
row(AA, [R(1, 2, 6, 6)], {"output_size": [6, 3], "align_corners": False, "scales_h": 1.1}, fd=False,
    id=AA + "-same-h")
row(AA, [R(1, 5, 3, 2)], {"output_size": [3, 7], "align_corners": False}, id=AA + "-one-row")
row(AA, [R(0, 2, 4, 4)], {"output_size": [2, 3], "align_corners": False}, id=AA + "-empty-batch")
row(AA, [nc(R(2, 3, 7, 6))], {"output_size": [3, 4], "align_corners": False}, id=AA + "-nc")
GRADGRAD[AA] = ([R(1, 2, 6, 5)], {"output_size": [3, 7], "align_corners": False}, None)
NODE_NAME_DIFFERENCES[AA] = "two matrix products (PyTorch: UpsampleBilinear2DAaBackwardBackward0)"
refuse(AA, [R(2, 3, 8)], {"output_size": [3, 4], "align_corners": False}, "4-D", id=AA + "-3d")
refuse(AA, [R(2, 3, 8, 9)], {"output_size": [0, 4], "align_corners": False}, "greater than 0", id=AA + "-zero")


@needs_torch
@pytest.mark.parametrize("n", [5, 16, 17, 40, 100])
def test_kthvalue_and_mode_pick_torchs_index_among_equal_values(n):
    rng = np.random.default_rng(n)
    for trial in range(20):
        x = rng.integers(0, 1 + trial % 6, size=(3, n)).astype(np.float64)
        if trial % 4 == 0:
            x[rng.random(x.shape) < 0.2] = np.nan
        k = int(rng.integers(1, n + 1))
        for ours, theirs in ((OPS[KTH](x, k=k, dim=1), torch.kthvalue(torch.tensor(x), k, 1)),
                             (OPS[MODE](x, dim=1), torch.mode(torch.tensor(x), 1))):
            np.testing.assert_array_equal(ours[0], theirs[0].numpy())
            np.testing.assert_array_equal(ours[1], theirs[1].numpy())


@needs_torch
@pytest.mark.parametrize("interp, pad, ac", [(0, 0, False), (0, 2, True), (1, 1, False)])
def test_grid_sampler_3d_backward_op_matches_torch(interp, pad, ac):
    go, x, g = R(1, 2, 2, 2, 2), R(1, 2, 3, 3, 4, seed=1), R(1, 2, 2, 2, 3, seed=2, low=-1.2, high=1.2)
    args = dict(_gs3b_args, interpolation_mode=interp, padding_mode=pad, align_corners=ac)
    ours = OPS[GS3B](go, x, g, **args)
    theirs = torch.ops.aten.grid_sampler_3d_backward(*(torch.tensor(a) for a in (go, x, g)), *args.values())
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-12, atol=1e-14)
    refuse_mask = dict(args, output_mask=[True, False])
    with pytest.raises(ValueError, match="output_mask"):
        OPS[GS3B](go, x, g, **refuse_mask)


def table_ops():
    """What the other tables' coverage checks count as covered here: the backward op whose values
    the test above checks (the rows of CASES count through ``ATEN_TABLE``)."""
    return {GS3B}


def gradgrad_ops():
    """The backward op whose derivative (PyTorch's grid_sampler_3d_double_backward) GRADGRAD[GS3] checks."""
    return {GS3B}


def test_angle_of_a_complex_input_is_refused_in_one_line():
    # PyTorch computes it (atan2 of the parts); gradcli's angle takes real inputs (docs/deviations.md)
    with pytest.raises(TypeError, match="real inputs only"):
        OPS[ANG](np.array([1 + 1j]))


# -- the checks of every table (tests/aten_table.py), on all the rows above ---------------------------------
globals().update(checks(T))
