"""ATen ops (``aten.NAME.OVERLOAD``): one table row per case, checked against
finite differences in float64 and, where torch is installed, against PyTorch
itself (schema, forward values and dtypes in float64 and float32, gradients,
the backward node's name).

Inputs are given as the graph format gives them: arrays for tensors, None for
an absent optional tensor, a list for a ``Tensor[]``, a Python number for a
wrapped number. Float arrays require grad (all of them, or those listed in
``wrt`` by flat position).
"""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.bridges.torch.versions import differs
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS

try:
    import torch
except ImportError:          # pragma: no cover - torch is an optional extra
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (the gradcli[torch] extra)")

EPS = 1e-6


def R(*shape, seed=0, low=None, high=None, away=None):
    """A seeded float64 array: uniform in [low, high) if given, else normal;
    ``away`` pushes entries at least that far from the points in it (kinks)."""
    rng = np.random.default_rng(zlib.crc32(repr((shape, seed, low, high)).encode()))
    x = rng.uniform(low, high, size=shape) if low is not None else rng.standard_normal(shape)
    for point in (away or ()):
        x = np.where(np.abs(x - point) < 0.05, x + 0.1, x)
    return np.asarray(x, dtype=np.float64)


def I(*values):  # noqa: E743 - an int64 index tensor
    return np.array(values, dtype=np.int64)


# -- the table ----------------------------------------------------------------------
CASES = []


def case(op, inputs, args=None, wrt=None, fd=True, id=None, table=None):  # noqa: A002
    """One row: ``op`` on ``inputs`` with ``args``; ``wrt``: flat input positions
    that require grad (default: every float array); ``fd``: check against
    finite differences; ``table``: the list it goes in (another test file's table
    run by these same checks; this file's ``CASES`` by default)."""
    table = CASES if table is None else table
    n = sum(1 for c in table if c.values[0] == op)
    table.append(pytest.param(op, inputs, args or {}, wrt, fd, id=id or f"{op}-{n}"))


x34, x234 = R(3, 4), R(2, 3, 4)
case("aten.addmm.default", [R(4), R(3, 5, seed=1), R(5, 4, seed=2)])
case("aten.addmm.default", [R(3, 4), R(3, 5, seed=1), R(5, 4, seed=2)], {"beta": 0.5, "alpha": 2.0})
case("aten.addmm.default", [R(1, 4), R(3, 5, seed=1), R(5, 4, seed=2)], {"beta": 0, "alpha": 1})
case("aten.mm.default", [R(3, 5), R(5, 2, seed=1)])
case("aten.bmm.default", [R(2, 3, 5), R(2, 5, 4, seed=1)])
case("aten.t.default", [R(3, 5)])
case("aten.t.default", [R(4)])
case("aten.relu.default", [R(3, 4, away=[0])])
case("aten.add.Tensor", [R(3, 4), R(4, seed=1)])
case("aten.add.Tensor", [R(3, 1), R(1, 4, seed=1)], {"alpha": 2.5})
case("aten.add.Tensor", [R(3, 4), 0.25])
case("aten.add.Tensor", [R(3, 4), R(seed=1)])
case("aten.sub.Tensor", [R(3, 4), R(3, 4, seed=1)])
case("aten.sub.Tensor", [R(2, 3), R(3, seed=1)], {"alpha": -2})
case("aten.sub.Tensor", [R(2, 3), 3])
case("aten.mul.Tensor", [R(3, 4), R(3, 1, seed=1)])
case("aten.mul.Tensor", [R(3, 4), 0.125])
case("aten.mul.Tensor", [R(2, 3), R(seed=1)])
case("aten.mul.Scalar", [R(3, 4)], {"other": 2.5})
case("aten.div.Tensor", [R(3, 4), R(4, seed=1, low=0.5, high=2)])
case("aten.div.Tensor", [R(3, 4), 8.0])
case("aten.div.Tensor", [R(3, 4), R(low=0.5, high=2)])
# in-place overloads: run on a clone of self (PyTorch refuses a leaf that requires grad),
# so the gradients reach the leaves through the in-place op (Note [In-place ATen ops])
case("aten.relu_.default", [R(3, 4, away=[0])])
case("aten.zero_.default", [R(3, 4)])
case("aten.add_.Tensor", [R(3, 4), R(4, seed=1)], {"alpha": 2.5})
case("aten.sub_.Tensor", [R(3, 4), R(3, 4, seed=1)])
case("aten.mul_.Tensor", [R(3, 4), R(3, 1, seed=1)])
case("aten.div_.Tensor", [R(3, 4), R(4, seed=1, low=0.5, high=2)])
case("aten.view.default", [x234], {"size": [6, -1]})
case("aten.view.default", [x234], {"size": [24]})
case("aten._unsafe_view.default", [x234], {"size": [4, 6]})
case("aten.mean.dim", [x234], {"dim": [-1], "keepdim": True})
case("aten.mean.dim", [x234], {"dim": [0, 2]})
case("aten.mean.dim", [x234], {"dim": None})
case("aten.sum.dim_IntList", [x234], {"dim": [1]})
case("aten.sum.dim_IntList", [x234], {"dim": [0, -1], "keepdim": True})
case("aten.sum.dim_IntList", [x234], {"dim": []})
case("aten.hardswish.default", [R(4, 5, low=-5, high=5, away=[-3, 3])])
case("aten.hardsigmoid.default", [R(4, 5, low=-5, high=5, away=[-3, 3])])
case("aten.sigmoid.default", [R(3, 4)])
case("aten.tanh.default", [R(3, 4)])
case("aten.pow.Tensor_Scalar", [R(3, 4)], {"exponent": 2})
case("aten.pow.Tensor_Scalar", [R(3, 4, low=0.5, high=2)], {"exponent": -0.5})
case("aten.pow.Tensor_Scalar", [R(3, 4)], {"exponent": 3.0})
case("aten.pow.Tensor_Scalar", [R(3, 4)], {"exponent": 0})
case("aten.rsqrt.default", [R(3, 4, low=0.5, high=3)])
case("aten.clone.default", [R(3, 4)])
case("aten.alias.default", [R(3, 4)])
case("aten.detach.default", [R(3, 4)], fd=False)   # records no node: nothing to differentiate
case("aten.expand.default", [R(3, 1)], {"size": [2, 3, 4]})
case("aten.expand.default", [R(3, 1)], {"size": [-1, 5]})
case("aten.permute.default", [x234], {"dims": [2, 0, 1]})
case("aten.permute.default", [x234], {"dims": [-1, 1, 0]})
case("aten.transpose.int", [x234], {"dim0": 0, "dim1": -1})
case("aten.select.int", [x234], {"dim": 1, "index": -1})
case("aten.select.int", [x234], {"dim": 0, "index": 1})
case("aten.slice.Tensor", [R(5, 6)], {"dim": 1, "start": 1, "end": 9223372036854775807, "step": 2})
case("aten.slice.Tensor", [R(5, 6)], {"dim": 0, "start": -3, "end": -1})
case("aten.slice.Tensor", [R(5, 6)], {"end": 2})
case("aten.unsqueeze.default", [R(2, 3)], {"dim": -1})
case("aten.unsqueeze.default", [R(2, 3)], {"dim": 1})
case("aten.squeeze.dim", [R(2, 1, 3)], {"dim": 1})
case("aten.squeeze.dim", [R(2, 1, 3)], {"dim": 0})
case("aten.cat.default", [[R(2, 3), R(1, 3, seed=1), R(4, 3, seed=2)]])
case("aten.cat.default", [[R(2, 3), R(2, 1, seed=1)]], {"dim": -1})
case("aten.cat.default", [[R(2, 3)]], {"dim": 1})
# legacy: 1-D empty inputs are skipped, get an empty gradient, and do not wrap dim
case("aten.cat.default", [[R(2, 3), R(0)]], {"dim": 1}, fd=False)
case("aten.cat.default", [[R(0), R(0, seed=1)]], {"dim": 3}, fd=False)
case("aten.stack.default", [[R(2, 3), R(2, 3, seed=1), R(2, 3, seed=2)]], {"dim": 1})
case("aten.stack.default", [[R(2, 3), R(2, 3, seed=1)]], {"dim": -1})
case("aten.split.Tensor", [R(7, 2)], {"split_size": 3})
case("aten.split.Tensor", [R(2, 6)], {"split_size": 2, "dim": -1})
case("aten.unsafe_split.Tensor", [R(5, 2)], {"split_size": 2})
case("aten.unbind.int", [R(3, 2)])
case("aten.unbind.int", [R(3, 2)], {"dim": 1})
case("aten.where.self", [R(3, 4) > 0, R(3, 4, seed=1), R(4, seed=2)], wrt=[1, 2])
case("aten.where.self", [R(3, 1) > 0, R(1, 4, seed=1), R(seed=2)], wrt=[1, 2])
case("aten.gelu.default", [R(3, 4) * 2])
case("aten.gelu.default", [R(3, 4) * 2], {"approximate": "tanh"})
case("aten._softmax.default", [R(3, 4)], {"dim": 1, "half_to_float": False})
case("aten._softmax.default", [x234], {"dim": 0, "half_to_float": False})
case("aten._safe_softmax.default", [R(3, 4)], {"dim": -1})
case("aten._safe_softmax.default", [np.where(np.arange(12).reshape(3, 4) < 4, -np.inf, R(3, 4))],
     {"dim": -1}, fd=False, id="aten._safe_softmax.default-masked-row")
case("aten._log_softmax.default", [R(3, 4)], {"dim": 1, "half_to_float": False})
case("aten._log_softmax.default", [x234], {"dim": -2, "half_to_float": False})
case("aten._softmax_backward_data.default", [R(3, 4), R(3, 4, low=0.1, high=1, seed=1)],
     {"dim": 1, "input_dtype": "float64"})
case("aten._log_softmax_backward_data.default", [R(3, 4), R(3, 4, low=-3, high=-0.1, seed=1)],
     {"dim": -1, "input_dtype": "float64"})
case("aten.gelu_backward.default", [R(3, 4), R(3, 4, seed=1) * 2])
case("aten.gelu_backward.default", [R(3, 4), R(3, 4, seed=1) * 2], {"approximate": "tanh"})
case("aten.embedding.default", [R(6, 3), I(1, 4, 1, 0)])
# fd=False: the padding row gets no gradient, and scale_grad_by_freq divides by the
# counts (PyTorch's choices, not the derivative): checked against torch and below
case("aten.embedding.default", [R(6, 3), np.array([[1, 5], [2, 1]])], {"padding_idx": 1}, fd=False)
case("aten.embedding.default", [R(6, 3), I(1, 4, 1, 0)], {"scale_grad_by_freq": True}, fd=False)
case("aten.embedding_dense_backward.default", [R(4, 3), I(1, 4, 1, 0)],
     {"num_weights": 6, "padding_idx": 4, "scale_grad_by_freq": False})
# fd=False: PyTorch's double backward ignores scale_grad_by_freq (checked against torch)
case("aten.embedding_dense_backward.default", [R(4, 3), I(1, 4, 1, 0)],
     {"num_weights": 5, "padding_idx": -1, "scale_grad_by_freq": True}, fd=False)
for reduction in (0, 1, 2):
    case("aten.nll_loss_forward.default", [R(4, 5), I(1, 0, 4, 1), None],
         {"reduction": reduction, "ignore_index": -100})
case("aten.nll_loss_forward.default", [R(4, 5), I(1, -100, 4, 1), R(5, low=0.5, high=2)],
     {"reduction": 1, "ignore_index": -100}, wrt=[0])
case("aten.nll_loss_forward.default", [R(4, 5), I(1, 3, 4, 3), None], {"reduction": 2, "ignore_index": 3})
case("aten.nll_loss_forward.default", [R(5), np.array(2), None], {"reduction": 1, "ignore_index": -100})
# total_weight is what nll_loss_forward makes (the sum of the kept targets' weights): the
# derivative for grad_output (derivatives.yaml: nll_loss(grad, ...)) recomputes it
_nll_w = R(5, low=0.5, high=2, seed=2)
for reduction in (0, 1, 2):
    case("aten.nll_loss_backward.default", [R(4) if reduction == 0 else R(), R(4, 5, seed=1), I(1, 0, 4, 1),
                                            _nll_w, np.array(_nll_w[[1, 0, 1]].sum())],
         {"reduction": reduction, "ignore_index": 4}, wrt=[0, 1])
for reduction in (0, 1, 2):
    case("aten.mse_loss.default", [R(3, 4), R(3, 4, seed=1)], {"reduction": reduction})
    case("aten.mse_loss_backward.default", [R(3, 4) if reduction == 0 else R(), R(3, 4, seed=1),
                                            R(3, 4, seed=2)], {"reduction": reduction})
case("aten.select_backward.default", [R(2, 4)], {"input_sizes": [2, 3, 4], "dim": 1, "index": -1})

CONV = "aten.convolution.default"
_conv = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "transposed": False,
         "output_padding": [0, 0], "groups": 1}
case(CONV, [R(2, 3, 5, 6), R(4, 3, 3, 3, seed=1), R(4, seed=2)], _conv)
case(CONV, [R(2, 3, 7, 6), R(4, 3, 3, 3, seed=1), None], dict(_conv, stride=[2, 2], padding=[1, 1]))
case(CONV, [R(1, 2, 7, 7), R(2, 2, 3, 2, seed=1), R(2, seed=2)], dict(_conv, dilation=[2, 1], padding=[2, 1]))
case(CONV, [R(2, 4, 5, 5), R(6, 2, 3, 3, seed=1), R(6, seed=2)], dict(_conv, groups=2, stride=[2, 1]))
case(CONV, [R(1, 3, 6, 6), R(3, 1, 3, 3, seed=1), None], dict(_conv, groups=3, padding=[1, 1]))
case(CONV, [R(2, 3, 8), R(4, 3, 3, seed=1), R(4, seed=2)],
     {"stride": [2], "padding": [1], "dilation": [1], "transposed": False, "output_padding": [0], "groups": 1})
case(CONV, [R(2, 4, 9), R(4, 1, 2, seed=1), None],
     {"stride": [1], "padding": [0], "dilation": [3], "transposed": False, "output_padding": [0], "groups": 4})
case(CONV, [R(2, 3, 5, 6), R(4, 3, 1, 1, seed=1), R(4, seed=2)], _conv, wrt=[1, 2])
# transposed (Note [Transposed convolution]): weight (C_in, C_out/groups, *k)
_convT = dict(_conv, transposed=True)
case(CONV, [R(2, 3, 4, 5), R(3, 2, 3, 3, seed=1), R(2, seed=2)], _convT)
case(CONV, [R(2, 4, 4, 3), R(4, 3, 3, 2, seed=1), R(6, seed=2)],
     dict(_convT, stride=[2, 3], padding=[1, 0], output_padding=[1, 2], groups=2))
case(CONV, [R(1, 2, 3, 3), R(2, 2, 2, 2, seed=1), None], dict(_convT, dilation=[2, 1], stride=[2, 2]))
case(CONV, [R(2, 3, 5), R(3, 4, 4, seed=1), R(4, seed=2)],
     {"stride": [2], "padding": [1], "dilation": [1], "transposed": True, "output_padding": [1], "groups": 1})
case(CONV, [R(1, 2, 2, 3, 2), R(2, 1, 2, 2, 2, seed=1), R(1, seed=2)],
     {"stride": [2, 1, 2], "padding": [0, 1, 0], "dilation": [1, 1, 1], "transposed": True,
      "output_padding": [1, 0, 0], "groups": 1})
MAXPOOL = "aten.max_pool2d_with_indices.default"
case(MAXPOOL, [R(2, 3, 7, 7)], {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1]})
case(MAXPOOL, [R(1, 2, 6, 5)], {"kernel_size": [2, 2]})
case(MAXPOOL, [R(1, 2, 7, 6)], {"kernel_size": [3, 2], "stride": [2, 2], "ceil_mode": True})
case(MAXPOOL, [R(2, 8, 8)], {"kernel_size": [2, 3], "stride": [1, 2], "padding": [1, 1], "dilation": [2, 2]})
case("aten.max_pool2d_with_indices_backward.default",
     [R(1, 2, 3, 3), R(1, 2, 5, 5, seed=1), np.array([[[[0, 2, 4], [10, 12, 14], [21, 23, 24]]] * 2])],
     {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "ceil_mode": False})
AMAXPOOL = "aten.adaptive_max_pool2d.default"
case(AMAXPOOL, [R(2, 3, 7, 5)], {"output_size": [3, 2]})              # overlapping windows
case(AMAXPOOL, [R(3, 4, 4)], {"output_size": [2, 4]})                 # unbatched
case(AMAXPOOL, [R(1, 2, 3, 3)], {"output_size": [5, 1]})              # more outputs than rows
case(AMAXPOOL, [np.swapaxes(R(2, 3, 5, 7), 2, 3)], {"output_size": [2, 3]})   # non-contiguous
case("aten.adaptive_max_pool2d_backward.default",
     [R(1, 2, 2, 2), R(1, 2, 4, 4, seed=1), np.array([[[[0, 3], [9, 15]]] * 2])], {})
FMAXPOOL = "aten.fractional_max_pool2d.default"
_u = np.random.default_rng(5).random((2, 3, 2))                      # samples in [0, 1)
case(FMAXPOOL, [R(2, 3, 9, 11), _u], {"kernel_size": [2, 3], "output_size": [5, 4]}, wrt=[0])
case(FMAXPOOL, [R(3, 7, 7), _u[:1]], {"kernel_size": [3, 3], "output_size": [3, 3]}, wrt=[0])   # unbatched
case(FMAXPOOL, [R(2, 3, 6, 6), _u], {"kernel_size": [2, 2], "output_size": [5, 1]}, wrt=[0])   # overlaps
case(FMAXPOOL, [np.swapaxes(R(2, 3, 8, 6), 2, 3), _u], {"kernel_size": [2, 2], "output_size": [3, 4]},
     wrt=[0])                                                          # non-contiguous
case("aten.fractional_max_pool2d_backward.default",
     [R(1, 2, 2, 2), R(1, 2, 4, 4, seed=1), np.array([[[[0, 3], [9, 15]]] * 2])],
     {"kernel_size": [2, 2], "output_size": [2, 2]}, wrt=[0, 1])
AVGPOOL = "aten.avg_pool2d.default"
case(AVGPOOL, [R(2, 3, 6, 6)], {"kernel_size": [2, 2], "stride": [2, 2]})
case(AVGPOOL, [R(1, 2, 5, 6)], {"kernel_size": [3, 3], "stride": [1, 2], "padding": [1, 1],
                                "count_include_pad": False})
case(AVGPOOL, [R(1, 2, 5, 6)], {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": True})
case(AVGPOOL, [R(1, 2, 5, 6)], {"kernel_size": [3, 2], "stride": [2, 2], "padding": [1, 0], "ceil_mode": True,
                                "count_include_pad": False})
case(AVGPOOL, [R(2, 5, 5)], {"kernel_size": [2, 2], "divisor_override": 3})
case("aten.avg_pool2d_backward.default", [R(1, 2, 3, 4), R(1, 2, 5, 6, seed=1)],
     {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1], "ceil_mode": True, "count_include_pad": False,
      "divisor_override": None})
case("aten.avg_pool2d_backward.default", [R(2, 2, 2), R(2, 5, 5, seed=1)],
     {"kernel_size": [2, 2], "stride": [2, 2], "padding": [0, 0], "ceil_mode": False, "count_include_pad": True,
      "divisor_override": 3})
ADAPTIVE = "aten._adaptive_avg_pool2d.default"
case(ADAPTIVE, [R(2, 3, 4, 5)], {"output_size": [1, 1]})
case(ADAPTIVE, [R(1, 2, 5, 7)], {"output_size": [2, 3]})
case(ADAPTIVE, [R(2, 6, 4)], {"output_size": [3, 4]})
case("aten._adaptive_avg_pool2d_backward.default", [R(1, 2, 2, 3), R(1, 2, 5, 7, seed=1)])

BN = "aten.native_batch_norm.default"
_bn = {"momentum": 0.1, "eps": 1e-5}
_stats = [R(3, seed=7) * 0.1, R(3, seed=8, low=0.5, high=2)]
case(BN, [R(2, 3, 4, 4), R(3, seed=1), R(3, seed=2)] + _stats, dict(_bn, training=True), wrt=[0, 1, 2])
case(BN, [R(2, 3, 4, 4), R(3, seed=1), R(3, seed=2)] + _stats, dict(_bn, training=False), wrt=[0, 1, 2])
case(BN, [R(4, 3), None, None] + _stats, dict(_bn, training=True), wrt=[0])
case(BN, [R(2, 3, 5), R(3, seed=1), None, None, None], dict(_bn, training=True, eps=1e-3), wrt=[0, 1])
LN = "aten.native_layer_norm.default"
case(LN, [R(2, 3, 4), R(4, seed=1), R(4, seed=2)], {"normalized_shape": [4], "eps": 1e-5})
case(LN, [R(2, 3, 4), None, None], {"normalized_shape": [3, 4], "eps": 1e-5})
case(LN, [R(3, 5), R(5, seed=1), None], {"normalized_shape": [5], "eps": 0.1})
SDPA = "aten._scaled_dot_product_flash_attention_for_cpu.default"
case(SDPA, [R(2, 2, 3, 4), R(2, 2, 5, 4, seed=1), R(2, 2, 5, 4, seed=2), None])
case(SDPA, [R(1, 2, 4, 3), R(1, 2, 4, 3, seed=1), R(1, 2, 4, 3, seed=2), None], {"is_causal": True})
case(SDPA, [R(2, 2, 3, 4), R(2, 2, 5, 4, seed=1), R(2, 2, 5, 4, seed=2), R(3, 5, seed=3)], {"scale": 0.3},
     wrt=[0, 1, 2])
# grouped-query attention: 4 query heads share 2 key/value heads (repeat_interleave)
case(SDPA, [R(2, 4, 3, 4), R(2, 2, 5, 4, seed=1), R(2, 2, 5, 4, seed=2), None], id=SDPA + "-gqa")
case(SDPA, [R(1, 6, 4, 3), R(1, 2, 4, 3, seed=1), R(1, 2, 4, 3, seed=2), None], {"is_causal": True},
     id=SDPA + "-gqa-causal")
case(SDPA, [R(1, 1, 3, 4), R(1, 1, 5, 4, seed=1), R(1, 1, 5, 4, seed=2),
            np.where(np.arange(15).reshape(3, 5) < 5, -np.inf, 0.0)], wrt=[0, 1, 2], fd=False,
     id=SDPA + "-masked-row")

for unary, make in [("neg", R), ("exp", R), ("log", lambda *s: R(*s, low=0.3, high=3)),
                    ("sqrt", lambda *s: R(*s, low=0.3, high=3)), ("abs", lambda *s: R(*s, away=[0])),
                    ("silu", R)]:
    case(f"aten.{unary}.default", [make(3, 4)])
case("aten.threshold_backward.default", [R(3, 4), R(3, 4, seed=1, away=[0.5])], {"threshold": 0.5})
case("aten.sigmoid_backward.default", [R(3, 4), R(3, 4, seed=1, low=0.1, high=0.9)])
case("aten.tanh_backward.default", [R(3, 4), R(3, 4, seed=1, low=-0.9, high=0.9)])
case("aten.hardswish_backward.default", [R(4, 5), R(4, 5, seed=1, low=-5, high=5, away=[-3, 3])])
case("aten.hardtanh_backward.default", [R(3, 4), R(3, 4, seed=1, low=-2, high=2, away=[-1, 1])],
     {"min_val": -1.0, "max_val": 1.0})
case("aten.hardtanh.default", [R(3, 4, low=-2, high=2, away=[-1, 1])])
case("aten.hardtanh.default", [R(3, 4, low=0, high=8, away=[6])], {"min_val": 0.0, "max_val": 6.0})
case("aten.add.Scalar", [R(3, 4)], {"other": 1.5, "alpha": 2})
case("aten.sub.Scalar", [R(3, 4)], {"other": 2})
case("aten.rsub.Scalar", [R(3, 4)], {"other": 1.0})
case("aten.rsub.Scalar", [R(3, 4)], {"other": 1.0, "alpha": 3})
case("aten.div.Scalar", [R(3, 4)], {"other": 4.0})
case("aten.masked_fill.Scalar", [R(3, 4), R(4, seed=1) > 0], {"value": -100.0})
case("aten.masked_fill.Scalar", [R(3, 4), R(3, 4, seed=1) > 0], {"value": 0.0})
case("aten.sum.default", [x234])
case("aten.mean.default", [x234])
case("aten._to_copy.default", [R(3, 4)], {"dtype": "float64"})
case("aten.squeeze.dims", [R(1, 3, 1, 2)], {"dim": [0, 2, 3]})
case("aten.squeeze.dims", [R(1, 3, 1)], {"dim": [-1]})

# -- boundaries: kinks and edge values exactly where PyTorch's kernels compare (fd=False:
# no derivative there; checked against torch). Note [hardswish boundaries] in pointwise.py.
_at3 = np.array([-4.0, -3.0, -2.9, 0.0, 2.9, 3.0, 4.0])
case("aten.hardswish.default", [_at3.copy()], fd=False, id="aten.hardswish.default-at-3")
case("aten.hardswish_backward.default", [R(7), _at3.copy()], fd=False, id="aten.hardswish_backward.default-at-3")
case("aten.hardsigmoid.default", [_at3.copy()], fd=False, id="aten.hardsigmoid.default-at-3")
case("aten.hardtanh.default", [np.array([-2.0, -1.0, 0.0, 1.0, 2.0])], fd=False, id="aten.hardtanh.default-at-1")
case("aten.hardtanh.default", [np.array([-1.0, 0.0, 3.0, 6.0, 7.0])], {"min_val": 0.0, "max_val": 6.0}, fd=False,
     id="aten.hardtanh.default-at-0-6")
case("aten.hardtanh_backward.default", [R(5), np.array([-2.0, -1.0, 0.0, 1.0, 2.0])],
     {"min_val": -1.0, "max_val": 1.0}, fd=False, id="aten.hardtanh_backward.default-at-1")
case("aten.relu.default", [np.array([-1.0, -0.0, 0.0, 1e-300, 1.0])], fd=False, id="aten.relu.default-at-0")
case("aten.threshold_backward.default", [R(4), np.array([0.0, 0.5, 0.5000001, 1.0])], {"threshold": 0.5},
     fd=False, id="aten.threshold_backward.default-at-threshold")
case("aten.gelu.default", [np.array([-1.0, -0.0, 0.0, 1.0])], fd=False, id="aten.gelu.default-at-0")
case("aten.gelu.default", [np.array([-0.0, 0.0])], {"approximate": "tanh"}, fd=False,
     id="aten.gelu.default-tanh-at-0")
case("aten.gelu_backward.default", [R(2), np.array([-0.0, 0.0])], fd=False, id="aten.gelu_backward.default-at-0")
# mean nll_loss with every target ignored: NaN (0/0) forward, zero gradient (as PyTorch)
case("aten.nll_loss_forward.default", [R(3, 4), I(-100, -100, -100), None], {"reduction": 1, "ignore_index": -100},
     fd=False, id="aten.nll_loss_forward.default-all-ignored")
case("aten.nll_loss_forward.default", [R(3, 4), I(2, 2, 2), R(4, low=0.5, high=2)],
     {"reduction": 1, "ignore_index": 2}, wrt=[0], fd=False, id="aten.nll_loss_forward.default-all-ignored-weight")
case("aten.nll_loss_forward.default", [R(4), np.array(1), None], {"reduction": 1, "ignore_index": 1},
     fd=False, id="aten.nll_loss_forward.default-1d-ignored")
case("aten.nll_loss_backward.default", [R(), R(3, 4, seed=1), I(-100, -100, -100), None, np.array(0.0)],
     {"reduction": 1, "ignore_index": -100}, wrt=[1], id="aten.nll_loss_backward.default-all-ignored")


# -- running a case ---------------------------------------------------------------------
def _flat(inputs):
    out = []
    for x in inputs:
        out.extend(x if isinstance(x, list) else [x])
    return out


def _rebuild(inputs, make):
    """``inputs`` with each flat element ``x`` at flat position ``i`` replaced by ``make(i, x)``."""
    out, i = [], 0
    for x in inputs:
        if isinstance(x, list):
            out.append([make(i + k, v) for k, v in enumerate(x)])
            i += len(x)
        else:
            out.append(make(i, x))
            i += 1
    return out


def _is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype.kind == "f"


def _wrt(inputs, wrt):
    return [i for i, x in enumerate(_flat(inputs)) if _is_float_array(x)] if wrt is None else wrt


def _as_float32(inputs):
    return _rebuild(inputs, lambda i, x: x.astype(np.float32) if _is_float_array(x) else x)


def _inplace(op_name):
    """An in-place overload (``aten.add_.Tensor``): the table runs it on a clone of self."""
    return op_name.split(".")[1].endswith("_")


def _is_array(x):
    """A NumPy array, or a device's (tests/test_gpu.py runs these rows on CuPy arrays)."""
    return isinstance(x, np.ndarray) or type(x).__module__.split(".")[0] == "cupy"


def _ours(op_name, inputs, args, wrt):
    """(flat input tensors, outputs) of the op run on gradcli Tensors."""
    tensors = _rebuild(inputs, lambda i, x: Tensor(x.copy(), requires_grad=i in wrt)
                       if _is_array(x) else x)
    called = list(tensors)
    if _inplace(op_name):
        from gradcli.ops import clone  # noqa: PLC0415

        called[0] = clone(called[0])
    out = OPS[op_name](*called, **args)
    return _flat(tensors), (list(out) if OPS[op_name].multi_output else [out])


def _torch_op(op_name):
    _, name, overload = op_name.split(".")
    return getattr(getattr(torch.ops.aten, name), overload)


def _torch_call(op_name, *tensors, **args):
    """Call the torch overload with the tensor inputs by their schema names, as the table lays them out."""
    names = [p.name for p in ATEN_OPS[op_name].schema.tensors]
    return _torch_op(op_name)(**dict(zip(names, tensors)), **_torch_args(args))


def _torch_args(args):
    return {k: getattr(torch, v) if k in ("dtype", "input_dtype") else v for k, v in args.items()}


def _theirs(op_name, inputs, args, wrt):
    tensors = _rebuild(inputs, lambda i, x: torch.tensor(x, requires_grad=i in wrt)
                       if isinstance(x, np.ndarray) else x)
    called = list(tensors)
    if _inplace(op_name):
        called[0] = called[0].clone()
    out = _torch_call(op_name, *called, **args)
    return _flat(tensors), (list(out) if isinstance(out, (tuple, list)) else [out])


def _upstream(outs, seed=0):
    """A random gradient for each output that carries one (None for the others)."""
    rng = np.random.default_rng(seed + 99)
    return [rng.standard_normal(o.shape).astype(o.dtype) if o.grad_fn is not None else None
            for o in outs]


def _numeric_grad(op, inputs, args, vs, i):
    """d/dx_i of sum_k sum(v_k * f_k(x)) by central differences, on the raw forward."""
    flat = [x.copy() if isinstance(x, np.ndarray) else x for x in _flat(inputs)]
    x = flat[i].reshape(-1)
    g = np.zeros(x.size)

    def objective():
        structured = _rebuild(inputs, lambda k, _: flat[k])
        outs = op.fn(*structured, **args)
        outs = list(outs) if op.multi_output else [outs]
        return sum(float(np.sum(v * o)) for v, o in zip(vs, outs) if v is not None)

    flat[i] = x.reshape(flat[i].shape)
    for j in range(x.size):
        orig = x[j]
        x[j] = orig + EPS
        plus = objective()
        x[j] = orig - EPS
        minus = objective()
        x[j] = orig
        g[j] = (plus - minus) / (2 * EPS)
    return g.reshape(flat[i].shape)


PARAMS = "op_name, inputs, args, wrt, fd"


# rows with fd=False (non-finite inputs) are checked against torch only
@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4]])
def test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd):
    wrt = _wrt(inputs, wrt)
    flat, outs = _ours(op_name, inputs, args, wrt)
    vs = _upstream(outs)
    used = [o for o, v in zip(outs, vs) if v is not None]
    grads = grad(used, [flat[i] for i in wrt], grad_outputs=[v for v in vs if v is not None])
    for i, g in zip(wrt, grads):
        assert g.shape == flat[i].shape and g.dtype == flat[i].dtype
        np.testing.assert_allclose(g, _numeric_grad(OPS[op_name], inputs, args, vs, i),
                                   rtol=1e-5, atol=1e-6, err_msg=f"input {i}")


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd):
    wrt = _wrt(inputs, wrt)
    flat, outs = _ours(op_name, inputs, args, wrt)
    tflat, touts = _theirs(op_name, inputs, args, wrt)
    assert len(outs) == len(touts)
    for o, t in zip(outs, touts):
        assert o.shape == tuple(t.shape)
        assert o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(o.data, t.detach().numpy(), rtol=1e-12, atol=1e-14)
        assert (o.grad_fn is None) == (t.grad_fn is None)
        if t.grad_fn is not None:
            # (a node of torch::autograd's own, CopyBackwards as CopySlices, is named as the
            # order comparison names it, without the namespace)
            assert o.grad_fn.name in (t.grad_fn.name(), t.grad_fn.name().rsplit("::", 1)[-1])
            assert o.grad_fn is outs[0].grad_fn and o.output_nr == t.output_nr
    if touts[0].grad_fn is None:        # detach: neither records a node (checked above)
        return
    node = outs[0].grad_fn
    # edges only to differentiable inputs (not where's condition, embedding's indices, ...)
    assert [e is None for e in node.next_edges] == [f[0] is None for f in touts[0].grad_fn.next_functions]
    vs = _upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    ours = grad([outs[k] for k in used], [flat[i] for i in wrt], grad_outputs=[vs[k] for k in used])
    theirs = torch.autograd.grad([touts[k] for k in used], [tflat[i] for i in wrt],
                                 [torch.tensor(vs[k]) for k in used])
    for i, a, b in zip(wrt, ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"input {i}")


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd):
    inputs32 = _as_float32(inputs)
    args32 = {k: "float32" if v == "float64" else v for k, v in args.items()}
    wrt = _wrt(inputs32, wrt)
    _, outs = _ours(op_name, inputs32, args32, wrt)
    _, touts = _theirs(op_name, inputs32, args32, wrt)
    for o, t in zip(outs, touts):
        assert o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(o.data, t.detach().numpy(), rtol=2e-5, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("op_name", sorted(ATEN_OPS))
def test_schema_is_torch_schema(op_name):
    theirs = str(_torch_op(op_name)._schema).removeprefix("aten::")
    if op_name == "aten._pdist_backward.default" and differs("pdist_backward_grad_output", torch.__version__):
        theirs = theirs.replace("Tensor grad_output,", "Tensor grad,")      # gradcli keeps 2.13's name
    assert ATEN_OPS[op_name].schema.text == theirs


def other_tables(covered="table_ops"):
    """What the other ATen tables (``tests/test_aten_*.py`` modules with a ``table_ops()``) cover:
    the union of their ``covered()`` sets."""
    import importlib

    out = set()
    for path in sorted(Path(__file__).parent.glob("test_aten_*.py")):
        if path.stem != Path(__file__).stem:
            fn = getattr(importlib.import_module(path.stem), covered, None)
            out |= fn() if fn is not None else set()
    return out


def _all_tables(name):
    """Every row of the table ``name`` in this file and in the other ATen table files
    (``tests/test_aten_*.py`` that say ``ATEN_TABLE = True``), so that each op's row may live
    beside its family."""
    import importlib

    rows = list(globals().get(name, []))
    for path in sorted(Path(__file__).parent.glob("test_aten_*.py")):
        if path.stem != Path(__file__).stem:
            module = importlib.import_module(path.stem)
            if getattr(module, "ATEN_TABLE", False):
                rows += list(getattr(module, name, []))
    return rows


def test_every_aten_op_has_a_case():
    # FORWARD_ONLY: rows with no gradient; RANDOM: random ops (their values are not PyTorch's);
    # other_tables(): the files with a table_ops()
    tables = _all_tables("CASES") + _all_tables("FORWARD_ONLY") + _all_tables("RANDOM")
    assert sorted(set(ATEN_OPS) - {p.values[0] for p in tables} - other_tables()) == []


# backticked words in that paragraph that are not op names
_SPEC_PROSE_WORDS = {"make_fx", "approximate", "nn.TransformerEncoderLayer"}


def _spec_aten_ops():
    spec = Path(__file__).resolve().parents[1] / "docs" / "graph-format.md"
    text = spec.read_text() if spec.exists() else ""
    section = text.partition("### ATen ops")[2].partition("\n### ")[0]
    if not section:
        pytest.skip("docs/graph-format.md has no ATen ops section yet")
    listed = section.partition("The ATen ops that must work")[2]
    names = set()
    for word in re.findall(r"`([A-Za-z_][\w.]*)`", listed):
        if word not in _SPEC_PROSE_WORDS:
            names.add("aten." + (word if "." in word else word + ".default"))
    return names


def test_every_op_the_spec_lists_is_implemented():
    assert sorted(n for n in _spec_aten_ops() if n not in ATEN_OPS) == []


def test_embedding_padding_row_gets_no_gradient():
    weight = Tensor(R(6, 3), requires_grad=True)
    out = OPS["aten.embedding.default"](weight, np.array([[1, 5], [2, 1]]), padding_idx=1)
    (g,) = grad(out, weight, grad_outputs=[np.ones((2, 2, 3))])
    np.testing.assert_array_equal(g[1], 0)
    np.testing.assert_array_equal(g[[2, 5]], 1)
    np.testing.assert_array_equal(g[[0, 3, 4]], 0)


# -- the adapter: promotion, calling conventions, outputs ------------------------------
@needs_torch
@pytest.mark.parametrize("a, b", [
    (np.arange(3), 0.5),                                    # int tensor * float: default float32
    (np.ones(3, np.float32), np.array(2.0)),                # float32 * float64 zero-dim: float32
    (np.arange(3), np.array(2.0)),                          # int * float64 zero-dim: float64
    (np.ones(3, np.float32), np.ones(3)),                   # float32 * float64: float64
    (np.ones((), np.float32), 3),                           # zero-dim float32 * int: float32
    (np.arange(3, dtype=np.int32), 2),                      # int32 * int: int32
    (np.ones(3, bool), 1.5),                                # bool * float: float32
], ids=["int*float", "f32*f64-0d", "int*f64-0d", "f32*f64", "f32-0d*int", "i32*int", "bool*float"])
def test_type_promotion_matches_torch(a, b):
    for name in ("aten.mul.Tensor", "aten.add.Tensor", "aten.div.Tensor", "aten.sub.Tensor"):
        if name == "aten.sub.Tensor" and a.dtype == bool:
            continue          # torch refuses bool subtraction
        ours = OPS[name](Tensor(a), b)
        theirs = _torch_op(name)(torch.tensor(a), torch.tensor(b) if isinstance(b, np.ndarray) else b)
        assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch.")), name
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)


@needs_torch
def test_unused_split_outputs_count_as_zeros_like_torch():
    x = R(7, 2)
    t = Tensor(x.copy(), requires_grad=True)
    outs = OPS["aten.split.Tensor"](t, split_size=3)
    (g,) = grad([outs[1]], [t], grad_outputs=[np.ones((3, 2))])
    tx = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad([torch.ops.aten.split.Tensor(tx, 3)[1]], [tx], [torch.ones(3, 2, dtype=torch.float64)])
    np.testing.assert_array_equal(g, tg.numpy())
    np.testing.assert_array_equal(g[:3], 0)


def test_non_differentiable_outputs_have_no_grad_fn():
    out, total = OPS["aten.nll_loss_forward.default"](Tensor(R(4, 5), requires_grad=True), I(1, 0, 4, 1),
                                                      None, reduction=1, ignore_index=-100)
    assert out.grad_fn.name == "NllLossBackward0"
    assert total.grad_fn is None and not total.requires_grad
    np.testing.assert_array_equal(total.data, 4.0)


def test_non_differentiable_inputs_get_no_edge_even_when_they_require_grad():
    # nll_loss's weight is not differentiable in PyTorch: no edge, so no AccumulateGrad runs for it
    x, w = Tensor(R(4, 5), requires_grad=True), Tensor(R(5, low=0.5, high=2), requires_grad=True)
    out, _ = OPS["aten.nll_loss_forward.default"](x, I(1, 0, 4, 1), w, reduction=1, ignore_index=-100)
    assert len(out.grad_fn.next_edges) == 1 and out.grad_fn.next_edges[0][0] is x.grad_accumulator
    only_w = OPS["aten.nll_loss_forward.default"](Tensor(R(4, 5)), I(1, 0, 4, 1), w, reduction=1,
                                                  ignore_index=-100)[0]
    assert only_w.grad_fn is None and not only_w.requires_grad


def test_tensor_list_inputs_become_one_edge_each_in_order():
    ts = [Tensor(R(2, 3, seed=k), requires_grad=k != 1) for k in range(3)]
    out = OPS["aten.cat.default"](ts, dim=0)
    edges = out.grad_fn.next_edges
    assert [e if e is None else e[0] for e in edges] == [ts[0].grad_accumulator, None, ts[2].grad_accumulator]
    g0, g2 = grad(out, [ts[0], ts[2]], grad_outputs=[np.arange(18.0).reshape(6, 3)])
    np.testing.assert_array_equal(g0, np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(g2, np.arange(12.0, 18.0).reshape(2, 3))


def test_raw_arrays_compute_without_recording():
    out = OPS["aten.addmm.default"](np.ones(2), np.eye(2), np.full((2, 2), 3.0))
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, np.full((2, 2), 4.0))
    # fn takes the inputs either as the schema lays them out or flattened
    op = OPS["aten.cat.default"]
    np.testing.assert_array_equal(op.fn([np.ones(1), np.zeros(2)]), op.fn(np.ones(1), np.zeros(2)))


def test_wrong_number_of_inputs_is_refused():
    with pytest.raises(TypeError, match="aten.mm.default takes 2 tensor inputs"):
        OPS["aten.mm.default"](Tensor(R(2, 2)))


@pytest.mark.parametrize("op_name, arg, value, expected", [
    ("aten.mse_loss.default", "reduction", None, 1),                       # int reduction=Mean
    ("aten.slice.Tensor", "end", None, None),
    ("aten.gelu.default", "approximate", None, "none"),
    ("aten.sum.dim_IntList", "dim", 1, (1,)),                               # int[1]: one int
    ("aten.view.default", "size", [2, -1], (2, -1)),
    ("aten.mean.dim", "dtype", "float32", "float32"),
])
def test_schema_args_have_torch_defaults_and_checks(op_name, arg, value, expected):
    spec = OPS[op_name].args[arg]
    assert (spec.default if value is None else spec.check(value)) == expected


@pytest.mark.parametrize("op_name, arg, value", [
    ("aten.transpose.int", "dim0", 1.5),
    ("aten.view.default", "size", ["a"]),
    ("aten.gelu.default", "approximate", 3),
    ("aten.mean.dim", "keepdim", 1),
    ("aten.mean.dim", "dtype", "float128"),
    ("aten.slice.Tensor", "start", 10 ** 30),                  # int and SymInt are int64, as torch's
    ("aten.slice.Tensor", "step", -2 ** 63 - 1),
    ("aten.split.Tensor", "split_size", 2 ** 63),
    ("aten.convolution.default", "stride", [10 ** 30, 1]),
])
def test_schema_arg_checks_refuse_bad_values(op_name, arg, value):
    with pytest.raises(ValueError):
        OPS[op_name].args[arg].check(value)


def test_required_args_are_required():
    assert OPS["aten.transpose.int"].args["dim0"].required
    assert not OPS["aten.slice.Tensor"].args["dim"].required


@needs_torch
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_updates_running_statistics_in_place_like_torch(training):
    x, w, b = R(4, 3, 2, 2), R(3, seed=1), R(3, seed=2)
    rm, rv = _stats[0].copy(), _stats[1].copy()
    trm, trv = torch.tensor(_stats[0]), torch.tensor(_stats[1])
    out = OPS[BN](Tensor(x, requires_grad=True), Tensor(w), Tensor(b), Tensor(rm), Tensor(rv),
                  training=training, momentum=0.3, eps=1e-5)
    theirs = torch.ops.aten.native_batch_norm.default(torch.tensor(x), torch.tensor(w), torch.tensor(b), trm, trv,
                                                      training, 0.3, 1e-5)
    np.testing.assert_allclose(rm, trm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv, trv.numpy(), rtol=1e-12)
    assert (rm != _stats[0]).all() == training and (rv != _stats[1]).all() == training
    for o, t in zip(out, theirs):
        assert o.shape == tuple(t.shape)


def test_attention_refuses_dropout():
    q = Tensor(R(1, 1, 2, 3), requires_grad=True)
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        OPS[SDPA](q, q, q, None, dropout_p=0.1)


def test_transposed_convolution_refuses_an_output_padding_as_large_as_stride_and_dilation():
    with pytest.raises(ValueError, match="output_padding .* must be smaller than either stride"):
        OPS[CONV](Tensor(R(1, 2, 3, 3)), Tensor(R(2, 2, 1, 1)), None,
                  **dict(_conv, transposed=True, stride=[2, 2], output_padding=[2, 0]))


# -- a small CNN of ATen ops, end to end: CPU vs a simulated accelerator, vs torch ---------
def _small_cnn(aten_call, params, x, target):
    """conv -> batch norm (train) -> relu -> max pool -> adaptive avg pool -> view -> addmm
    -> log_softmax -> nll_loss, written once for gradcli and torch."""
    w1, b1, g1, be1, rm, rv, w2, b2 = params
    c = aten_call("aten.convolution.default", x, w1, b1, stride=[1, 1], padding=[1, 1], dilation=[1, 1],
                  transposed=False, output_padding=[0, 0], groups=1)
    bn = aten_call("aten.native_batch_norm.default", c, g1, be1, rm, rv, training=True, momentum=0.1,
                   eps=1e-5)[0]
    r = aten_call("aten.relu.default", bn)
    p = aten_call("aten.max_pool2d_with_indices.default", r, kernel_size=[2, 2], stride=[2, 2])[0]
    a = aten_call("aten._adaptive_avg_pool2d.default", p, output_size=[1, 1])
    v = aten_call("aten.view.default", a, size=[x.shape[0], 4])
    logits = aten_call("aten.addmm.default", b2, v, aten_call("aten.t.default", w2))
    logp = aten_call("aten._log_softmax.default", logits, dim=1, half_to_float=False)
    return aten_call("aten.nll_loss_forward.default", logp, target, None, reduction=1, ignore_index=-100)[0]


def _cnn_arrays():
    return ([R(4, 3, 3, 3, seed=1), R(4, seed=2), R(4, seed=3, low=0.5, high=1.5), R(4, seed=4),
             np.zeros(4), np.ones(4), R(5, 4, seed=5), R(5, seed=6)],
            R(2, 3, 6, 6, seed=7), I(1, 4))


def _gradcli_cnn(dev):
    from gradcli.devices import device, to_device

    params, x, target = _cnn_arrays()
    place = (lambda a: to_device(a, device(dev))) if dev != "cpu" else (lambda a: a)
    leaves = [Tensor(place(p), requires_grad=k not in (4, 5)) for k, p in enumerate(params)]
    loss = _small_cnn(lambda name, *a, **k: OPS[name](*a, **k), leaves, Tensor(place(x)),
                      Tensor(place(target)))
    trainable = [t for t in leaves if t.requires_grad]
    return loss, trainable, grad(loss, trainable)


@pytest.mark.timeout(120)
def test_small_cnn_on_a_simulated_device_matches_cpu():
    from gradcli.devices import device, device_of, sim_device_count

    if sim_device_count() < 1:
        pytest.skip("needs GRADCLI_SIM_DEVICES >= 1")
    cpu_loss, _, cpu_grads = _gradcli_cnn("cpu")
    sim_loss, leaves, sim_grads = _gradcli_cnn("sim:0")
    assert device_of(sim_loss.data) is device("sim:0")
    np.testing.assert_allclose(np.asarray(sim_loss.data), cpu_loss.data, rtol=1e-12)
    for a, b, leaf in zip(sim_grads, cpu_grads, leaves):
        assert device_of(a) is device("sim:0")
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12)


@needs_torch
def test_small_cnn_gradients_match_torch():
    loss, _, ours = _gradcli_cnn("cpu")
    params, x, target = _cnn_arrays()
    tparams = [torch.tensor(p, requires_grad=k not in (4, 5)) for k, p in enumerate(params)]
    tloss = _small_cnn(_torch_call, tparams, torch.tensor(x),
                       torch.tensor(target))
    theirs = torch.autograd.grad(tloss, [t for t in tparams if t.requires_grad])
    np.testing.assert_allclose(loss.data, tloss.detach().numpy(), rtol=1e-12)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-12)


def _tiny_block(aten_call, params, tokens):
    """embedding -> layer norm -> qkv projection -> split heads -> flash attention -> merge heads
    -> projection + residual -> gelu(tanh) -> mean: a transformer block of ATen ops."""
    emb, ln_w, ln_b, w_qkv, b_qkv, w_o, b_o = params
    a = aten_call
    h = a("aten.embedding.default", emb, tokens)                                  # [2, 3, 4]
    n = a("aten.native_layer_norm.default", h, ln_w, ln_b, normalized_shape=[4], eps=1e-5)[0]
    qkv = a("aten.addmm.default", b_qkv, a("aten.view.default", n, size=[6, 4]), a("aten.t.default", w_qkv))
    q, k, v = a("aten.split.Tensor", a("aten.view.default", qkv, size=[2, 3, 12]), split_size=4, dim=-1)
    heads = [a("aten.transpose.int", a("aten.view.default", t, size=[2, 3, 2, 2]), dim0=1, dim1=2)
             for t in (q, k, v)]
    att = a("aten._scaled_dot_product_flash_attention_for_cpu.default", *heads, None, is_causal=True)[0]
    merged = a("aten._unsafe_view.default", a("aten.clone.default", a("aten.transpose.int", att, dim0=1, dim1=2)),
               size=[6, 4])
    out = a("aten.add.Tensor", a("aten.addmm.default", b_o, merged, a("aten.t.default", w_o)),
            a("aten.view.default", h, size=[6, 4]))
    g = a("aten.gelu.default", out, approximate="tanh")
    return a("aten.mean.dim", a("aten.pow.Tensor_Scalar", g, exponent=2), dim=None)


def _block_arrays():
    return [R(5, 4, seed=1), R(4, seed=2, low=0.5, high=1.5), R(4, seed=3), R(12, 4, seed=4), R(12, seed=5),
            R(4, 4, seed=6), R(4, seed=7)], np.array([[1, 4, 2], [0, 1, 3]])


def _record_order(root_fn, next_of, name_of, hook):
    """Register a pre-hook on every node reachable from ``root_fn`` that appends its name."""
    order, seen, stack = [], set(), [root_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        hook(fn, lambda *_, _fn=fn: order.append(name_of(_fn)))
        stack.extend(next_of(fn))
    return order


@needs_torch
@pytest.mark.parametrize("model", ["cnn", "block"])
def test_models_of_aten_ops_match_torch_gradients_and_node_order(model):
    from gradcli.autograd import set_multithreading_enabled

    if model == "cnn":
        params, x, target = _cnn_arrays()
        trainable = [k not in (4, 5) for k in range(len(params))]
        run = lambda call, ps, lift: _small_cnn(call, ps, lift(x), lift(target))  # noqa: E731
    else:
        params, tokens = _block_arrays()
        trainable = [True] * len(params)
        run = lambda call, ps, lift: _tiny_block(call, ps, lift(tokens))  # noqa: E731
    leaves = [Tensor(p.copy(), requires_grad=t) for p, t in zip(params, trainable)]
    loss = run(lambda name, *a, **k: OPS[name](*a, **k), leaves, Tensor)
    order = _record_order(loss.grad_fn, lambda fn: [e[0] for e in fn.next_edges if e is not None],
                          lambda fn: fn.name, lambda fn, f: fn.register_prehook(f))
    tleaves = [torch.tensor(p, requires_grad=t) for p, t in zip(params, trainable)]
    tloss = run(_torch_call, tleaves, torch.tensor)
    torder = _record_order(tloss.grad_fn, lambda fn: [f for f, _ in fn.next_functions],
                           lambda fn: fn.name(), lambda fn, f: fn.register_prehook(f))
    with set_multithreading_enabled(False):
        ours = grad(loss, [t for t in leaves if t.requires_grad])
    theirs = torch.autograd.grad(tloss, [t for t in tleaves if t.requires_grad])
    np.testing.assert_allclose(loss.data, tloss.detach().numpy(), rtol=1e-12)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-12)
    assert order == torder
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in order or model == "cnn"


@pytest.mark.parametrize("op_name, inputs, args", [
    (CONV, [R(1, 2, 4, 4), R(3, 2, 3, 3, seed=1), None], _conv),
    (MAXPOOL, [R(1, 1, 4, 4)], {"kernel_size": [2, 2]}),
    (LN, [R(2, 3), None, None], {"normalized_shape": [3], "eps": 1e-5}),
    (SDPA, [R(1, 1, 2, 3), R(1, 1, 3, 3, seed=1), R(1, 1, 3, 3, seed=2), None], {}),
    ("aten.hardsigmoid.default", [R(2, 3)], {}),
])
def test_kernel_backwards_record_or_refuse_a_recording_gradient(op_name, inputs, args):
    # a gradient that would record (create_graph) is never dropped silently: the backward
    # records itself (tests/test_aten_gradgrad.py checks its derivative) or, where PyTorch has
    # no double backward, records a NotImplemented node that raises when differentiated
    wrt = _wrt(inputs, None)
    _, outs = _ours(op_name, inputs, args, wrt)
    node = outs[0].grad_fn
    g = Tensor(np.ones(outs[0].shape), requires_grad=True)
    grads = [g] + [None] * (len(outs) - 1) if OPS[op_name].multi_output else [g]
    got = [x for x in node.apply(grads) if x is not None]
    assert got and all(type(x) is Tensor and x.requires_grad for x in got)
    names = {x.grad_fn.name for x in got}
    assert (names == {"torch::autograd::NotImplemented"}) == (op_name in (SDPA, "aten.hardsigmoid.default"))
    if names == {"torch::autograd::NotImplemented"}:
        with pytest.raises(RuntimeError, match="is not implemented"):
            grad(got, [g], grad_outputs=[np.ones(x.shape) for x in got])


@needs_torch
def test_addmm_with_beta_zero_ignores_nan_in_self_like_torch():
    bias = np.full((2, 2), np.nan)
    ours = OPS["aten.addmm.default"](Tensor(bias), Tensor(np.eye(2)), Tensor(np.ones((2, 2))), beta=0)
    theirs = torch.ops.aten.addmm.default(torch.tensor(bias), torch.eye(2, dtype=torch.float64),
                                          torch.ones(2, 2, dtype=torch.float64), beta=0)
    np.testing.assert_array_equal(ours.data, theirs.numpy())
    np.testing.assert_array_equal(ours.data, np.ones((2, 2)))


@pytest.mark.parametrize("op_name, inputs, args, wrt, fd", CASES)
def test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd):
    # what the loader infers for a graph entry (its meta rule, or the forward on stand-ins)
    # is the shape and dtype the forward makes
    from gradcli.ops.aten.registry import Slot

    shapes, dtypes = [], []

    def slot(i, x):
        if not isinstance(x, np.ndarray):
            return x
        shapes.append(x.shape)
        dtypes.append(x.dtype)
        return Slot(len(shapes) - 1)

    layout = _rebuild(inputs, slot)
    inferred = ATEN_OPS[op_name].bind(layout).infer_outputs(shapes, dtypes, args)
    out = OPS[op_name](*_rebuild(inputs, lambda i, x: x.copy() if isinstance(x, np.ndarray) else x), **args)
    outs = list(out) if OPS[op_name].multi_output else [out]
    assert inferred == [(tuple(o.shape), o.dtype) for o in outs]


@pytest.mark.parametrize("op_name, inputs, args", [
    ("aten.add.Tensor", [R(2, 3), R(4, seed=1)], {}),
    (CONV, [R(1, 2, 4, 4), R(3, 4, 3, 3, seed=1), None], _conv),
    (CONV, [R(1, 2, 2, 2), R(3, 2, 3, 3, seed=1), None], _conv),
    (CONV, [R(1, 2, 4, 4), R(3, 2, 3, 3, seed=1), R(2)], _conv),
])
def test_load_time_infer_refuses_what_the_forward_refuses(op_name, inputs, args):
    from gradcli.ops.aten.registry import Slot

    flat = _flat(inputs)
    layout = _rebuild(inputs, lambda i, x: Slot(i) if isinstance(x, np.ndarray) else x)
    arrays = [x for x in flat if isinstance(x, np.ndarray)]
    with pytest.raises(ValueError) as inferred:
        ATEN_OPS[op_name].bind(layout).infer_outputs([a.shape for a in arrays], [a.dtype for a in arrays],
                                                     args)
    with pytest.raises(ValueError):
        OPS[op_name](*inputs, **args)
    assert str(inferred.value)


# -- shape rules allocate nothing (Note [shape rules allocate nothing]) ---------------------------
def test_every_aten_op_has_a_shape_rule():
    from gradcli.ops.aten.registry import ELEMENTWISE

    assert sorted(n for n, op in ATEN_OPS.items() if op.meta is None) == []
    # elementwise rules run the forward on 0-d stand-ins only (for the dtype)
    assert {n for n, op in ATEN_OPS.items() if op.meta == ELEMENTWISE} >= {"aten.add.Tensor", "aten.gelu.default"}


@pytest.mark.parametrize("op_name, inputs, args, wrt, fd", CASES)
def test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch):
    # the forward may run during infer only on stand-ins that hold one element (0-d, or
    # zero-stride views), so that inferring allocates nothing whatever the shapes
    from gradcli.ops.aten.registry import Slot

    op = ATEN_OPS[op_name]
    real = op.forward

    def guarded(*xs, **kw):
        for x in _flat(xs):
            if isinstance(x, np.ndarray):
                assert x.ndim == 0 or not any(x.strides), f"{op_name}: infer computed on {x.shape}"
        return real(*xs, **kw)

    monkeypatch.setattr(op, "forward", guarded)
    shapes, dtypes = [], []

    def slot(i, x):
        if not isinstance(x, np.ndarray):
            return x
        shapes.append(x.shape)
        dtypes.append(x.dtype)
        return Slot(len(shapes) - 1)

    layout = _rebuild(inputs, slot)
    assert op.bind(layout).infer_outputs(shapes, dtypes, args)


_BIG = 10 ** 6      # 10^6 x 10^6 float64 is 8 TB


@pytest.mark.parametrize("op_name, layout, metas, args, expected", [
    ("aten.mm.default", [0, 1], [(_BIG, _BIG), (_BIG, 3)], {}, [((_BIG, 3), "float64")]),
    ("aten.bmm.default", [0, 1], [(2, _BIG, 5), (2, 5, _BIG)], {}, [((2, _BIG, _BIG), "float64")]),
    ("aten.addmm.default", [0, 1, 2], [(_BIG,), (_BIG, 4), (4, _BIG)], {}, [((_BIG, _BIG), "float64")]),
    ("aten.cat.default", [[0, 1]], [(_BIG, _BIG), (_BIG, _BIG)], {"dim": 1}, [((_BIG, 2 * _BIG), "float64")]),
    ("aten.stack.default", [[0, 1]], [(_BIG, _BIG), (_BIG, _BIG)], {}, [((2, _BIG, _BIG), "float64")]),
    ("aten.view.default", [0], [(_BIG, _BIG)], {"size": [-1]}, [((_BIG * _BIG,), "float64")]),
    ("aten.permute.default", [0], [(_BIG, 2, _BIG)], {"dims": [2, 0, 1]}, [((_BIG, _BIG, 2), "float64")]),
    ("aten.sum.dim_IntList", [0], [(_BIG, _BIG)], {"dim": [0]}, [((_BIG,), "float64")]),
    ("aten._softmax.default", [0], [(_BIG, _BIG)], {"dim": 1, "half_to_float": False},
     [((_BIG, _BIG), "float64")]),
    ("aten.embedding.default", [0, 1], [(10, _BIG), (_BIG, 4)], {}, [((_BIG, 4, _BIG), "float64")]),
    ("aten.max_pool2d_with_indices.default", [0], [(8, 8, _BIG, _BIG)], {"kernel_size": [2, 2]},
     [((8, 8, _BIG // 2, _BIG // 2), "float64"), ((8, 8, _BIG // 2, _BIG // 2), "int64")]),
    ("aten.avg_pool2d.default", [0], [(8, 8, _BIG, _BIG)], {"kernel_size": [2, 2]},
     [((8, 8, _BIG // 2, _BIG // 2), "float64")]),
    ("aten._adaptive_avg_pool2d.default", [0], [(8, _BIG, _BIG)], {"output_size": [_BIG, 7]},
     [((8, _BIG, 7), "float64")]),
    ("aten.native_batch_norm.default", [0, None, None, None, None], [(_BIG, 4, _BIG)],
     {"training": True, "momentum": 0.1, "eps": 1e-5},
     [((_BIG, 4, _BIG), "float64"), ((4,), "float64"), ((4,), "float64")]),
    ("aten.native_layer_norm.default", [0, None, None], [(_BIG, _BIG)], {"normalized_shape": [_BIG], "eps": 1e-5},
     [((_BIG, _BIG), "float64"), ((_BIG, 1), "float64"), ((_BIG, 1), "float64")]),
    ("aten._scaled_dot_product_flash_attention_for_cpu.default", [0, 1, 2, None],
     [(2, 4, _BIG, 8), (2, 4, _BIG, 8), (2, 4, _BIG, 8)], {},
     [((2, 4, _BIG, 8), "float64"), ((2, 4, _BIG), "float64")]),
])
def test_inferring_a_huge_result_allocates_nothing(op_name, layout, metas, args, expected):
    import tracemalloc

    from gradcli.ops.aten.registry import Slot

    def put(v):
        return [put(x) for x in v] if isinstance(v, list) else (Slot(v) if v is not None else None)

    dtypes = [np.dtype("int64") if op_name == "aten.embedding.default" and i == 1 else np.dtype("float64")
              for i in range(len(metas))]
    call = ATEN_OPS[op_name].bind([put(v) for v in layout])
    tracemalloc.start()
    try:
        got = call.infer_outputs(metas, dtypes, args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [(shape, np.dtype(dt)) for shape, dt in expected]
    assert peak < 1 << 20, f"{op_name}: inferring allocated {peak} bytes"


@pytest.mark.parametrize("op_name, inputs, args", [
    ("aten.mm.default", [R(2, 3), R(4, 2, seed=1)], {}),
    ("aten.bmm.default", [R(2, 2, 3), R(3, 3, 2, seed=1)], {}),
    ("aten.addmm.default", [R(3), R(2, 3, seed=1), R(3, 2, seed=2)], {}),
    ("aten.cat.default", [[R(2, 3), R(2, 4, seed=1)]], {}),
    ("aten.stack.default", [[R(2, 3), R(3, 2, seed=1)]], {}),
    ("aten.view.default", [R(2, 3)], {"size": [4, -1]}),
    ("aten.sum.dim_IntList", [R(2, 3)], {"dim": [2]}),
    ("aten._softmax.default", [R(2, 3)], {"dim": 2, "half_to_float": False}),
    (MAXPOOL, [R(1, 1, 2, 2)], {"kernel_size": [3, 3]}),
    (AVGPOOL, [R(2, 3)], {"kernel_size": [1, 1]}),
    ("aten.native_layer_norm.default", [R(2, 3), None, None], {"normalized_shape": [4], "eps": 1e-5}),
    ("aten.nll_loss_forward.default", [R(2, 3), I(0, 1, 2), None], {"reduction": 1, "ignore_index": -100}),
    (SDPA, [R(1, 1, 2, 3), R(1, 1, 3, 4, seed=1), R(1, 1, 3, 4, seed=2), None], {}),
])
def test_shape_rules_raise_what_the_forward_raises(op_name, inputs, args):
    # the same exception type (the loader reports ValueError, TypeError and IndexError as
    # one-line errors on the op's line)
    from gradcli.ops.aten.registry import Slot

    flat = _flat(inputs)
    layout = _rebuild(inputs, lambda i, x: Slot(i) if isinstance(x, np.ndarray) else x)
    arrays = [x for x in flat if isinstance(x, np.ndarray)]
    with pytest.raises((ValueError, TypeError, IndexError)) as forward:
        OPS[op_name](*inputs, **args)
    with pytest.raises(forward.type) as inferred:
        ATEN_OPS[op_name].bind(layout).infer_outputs([a.shape for a in arrays], [a.dtype for a in arrays], args)
    assert str(inferred.value)


# -- inputs PyTorch refuses are refused (not wrapped, clipped or deduplicated) ---------------
REFUSED = []


def refused(op, inputs, args, match, static=True, id=None, table=None):  # noqa: A002
    """One row: gradcli raises ValueError/TypeError matching ``match`` where torch raises;
    ``static``: the load-time shape rule refuses it too (the problem is in shapes, dtypes or
    arguments, not in values such as indices); ``table`` as for ``case``."""
    table = REFUSED if table is None else table
    n = sum(1 for c in table if c.values[0] == op)
    table.append(pytest.param(op, inputs, args, match, static, id=id or f"{op}-{n}"))


refused(FMAXPOOL, [R(1, 2, 5, 5), _u[:1, :2]], {"kernel_size": [3, 3], "output_size": [4, 3]},
        "too large relative to input height")
refused(FMAXPOOL, [R(1, 2, 5, 5), _u], {"kernel_size": [2, 2], "output_size": [3, 3]},
        r"random_samples of shape \[2, 3, 2\], expected \[1, 2, 2\]")
refused("aten.embedding.default", [R(6, 3), I(1, -1)], {}, "index -1 out of range", static=False)
refused("aten.embedding.default", [R(6, 3), I(0, 6)], {}, "index 6 out of range", static=False)
refused("aten.embedding.default", [R(0, 3), I(0)], {}, "out of range")
refused("aten.where.self", [R(3, 4), R(3, 4, seed=1), R(3, 4, seed=2)], {}, "condition to be a boolean")
refused("aten.where.self", [np.ones((3, 4), np.int64), R(3, 4, seed=1), R(3, 4, seed=2)], {},
        "condition to be a boolean")
refused("aten.masked_fill.Scalar", [R(3, 4), R(3, 4, seed=1)], {"value": 1.0}, "boolean masks")
refused("aten.masked_fill.Scalar", [R(3, 4), np.ones((3, 4), np.uint8)], {"value": 1.0}, "boolean masks")
for _k, _v, _m in [("dilation", [0, 0], "dilation must be positive"),
                   ("dilation", [-1, 1], "dilation must be positive"),
                   ("stride", [0, 0], "stride must be positive"), ("stride", [10 ** 30, 1], "stride must be positive"),
                   ("padding", [-1, 0], "padding must be non-negative"),
                   ("output_padding", [-1, 0], "output_padding must be non-negative"),
                   ("stride", [1, 1, 1], "stride must have 2 elements")]:
    refused(CONV, [R(1, 2, 5, 5), R(3, 2, 3, 3, seed=1), None], dict(_conv, **{_k: _v}), _m,
            id=f"{CONV}-{_k}={_v}")
for _name in ("aten.view.default", "aten._unsafe_view.default"):
    refused(_name, [x234], {"size": [-2]}, "invalid shape dimension -2")
    refused(_name, [x234], {"size": [24, -2]}, "invalid shape dimension -2 at index 1")
    refused(_name, [x234], {"size": [-1, -1]}, "only one dimension can be inferred")
    refused(_name, [R(0, 3)], {"size": [-1, 0]}, "ambiguous")
    refused(_name, [x234], {"size": [5, -1]}, "invalid for input of size 24")
refused("aten.sum.dim_IntList", [x234], {"dim": [0, 0]}, "dim 0 appears multiple times")
refused("aten.sum.dim_IntList", [x234], {"dim": [0, -3]}, "dim 0 appears multiple times")
refused("aten.sum.dim_IntList", [R()], {"dim": [0, -1]}, "dim 0 appears multiple times")
refused("aten.mean.dim", [x234], {"dim": [1, 1]}, "dim 1 appears multiple times")
refused("aten.squeeze.dims", [R(1, 3)], {"dim": [0, 0]}, "dim 0 appears multiple times")
refused("aten.squeeze.dims", [R(1, 3)], {"dim": [0, -2]}, "dim 0 appears multiple times")
refused("aten.squeeze.dims", [R()], {"dim": [0, -1]}, "dim 0 appears multiple times")
refused("aten.permute.default", [x234], {"dims": [0, 0, 1]}, "duplicate dims")
refused("aten.permute.default", [x234], {"dims": [0, 1]}, "has 3 dims but dims")
refused("aten.mse_loss.default", [R(3, 4), R(3, 4, seed=1)], {"reduction": 9}, "reduction must be 0")
refused("aten.mse_loss.default", [R(3, 4), R(3, 4, seed=1)], {"reduction": -1}, "reduction must be 0")
refused("aten.add.Tensor", [R(3, 4), R(3, 4, seed=1)], {"alpha": True}, "Boolean alpha")
refused("aten.add.Tensor", [np.arange(3), np.arange(3)], {"alpha": True}, "Boolean alpha")
refused("aten.add.Tensor", [np.arange(3), np.arange(3)], {"alpha": 1.5}, "alpha must not be a floating")
refused("aten.sub.Tensor", [R(3, 4), R(3, 4, seed=1)], {"alpha": True}, "Boolean alpha")
refused("aten.sub.Tensor", [R(3), R(3, seed=1) > 0], {}, "subtraction with a bool")
refused("aten.add.Scalar", [R(3, 4)], {"other": 1.0, "alpha": True}, "Boolean alpha")
refused("aten.sub.Scalar", [R(3, 4)], {"other": True}, "subtraction with a bool")
refused("aten.rsub.Scalar", [R(3, 4)], {"other": 1.0, "alpha": True}, "Boolean alpha")

# found probing the table's ops against torch: dtypes the kernels do not take, 0-dim and empty inputs
_i23, _b3 = np.ones((2, 3), np.int64), np.ones(3, bool)
for _u in ("gelu", "silu", "hardswish", "hardsigmoid"):
    refused(f"aten.{_u}.default", [_i23], {}, "not implemented for int64", id=f"aten.{_u}.default-int")
    refused(f"aten.{_u}.default", [_b3], {}, "not implemented for bool", id=f"aten.{_u}.default-bool")
for _u in ("relu", "hardtanh", "abs", "neg"):
    refused(f"aten.{_u}.default", [_b3], {}, "bool", id=f"aten.{_u}.default-bool")
for _u in ("gelu_backward", "hardswish_backward", "sigmoid_backward", "tanh_backward"):
    refused(f"aten.{_u}.default", [_i23, _i23], {}, "not implemented for int64", id=f"aten.{_u}.default-int")
refused("aten.hardtanh_backward.default", [_i23, _i23], {"min_val": -1, "max_val": 1}, "not implemented for int64")
refused("aten.threshold_backward.default", [_b3, _b3], {"threshold": 0}, "not implemented for bool")
for _s in ("_softmax", "_log_softmax"):
    refused(f"aten.{_s}.default", [_i23], {"dim": 0, "half_to_float": False}, "not implemented for int64")
    refused(f"aten.{_s}.default", [R()], {"dim": 1, "half_to_float": False}, "Dimension out of range")
    refused(f"aten.{_s}_backward_data.default", [_i23, _i23], {"dim": 0, "input_dtype": "int64"},
            "not implemented for int64")
refused("aten._safe_softmax.default", [_i23], {"dim": 0}, "not implemented for int64")
refused("aten._safe_softmax.default", [R()], {"dim": 1}, "Dimension out of range")
refused("aten.mse_loss.default", [_i23, _i23], {}, "not implemented for int64")
refused("aten.nll_loss_forward.default", [_i23, I(0, 1), None], {"reduction": 1, "ignore_index": -100},
        "not implemented for int64")
refused("aten.nll_loss_forward.default", [R(2, 3), np.zeros(2, np.int32), None], {"reduction": 1, "ignore_index": -100},
        "target dtype to be int64 or uint8")
refused("aten.embedding.default", [R(3, 2, 2), I(0, 1)], {}, "'weight' must be 2-D")
refused("aten.embedding.default", [R(3), I(0, 1)], {}, "'weight' must be 2-D")
refused("aten.embedding.default", [R(3, 2), np.zeros(2, np.uint8)], {}, "int64 or int32")
refused(ADAPTIVE, [np.ones((1, 1, 3, 3), np.int64)], {"output_size": [2, 2]}, "not implemented for int64")
for _dt in (np.int32, np.int8, np.uint8, bool):   # avg_pool2d takes int64 (its case above), not these
    refused(AVGPOOL, [np.ones((1, 1, 4, 4), _dt)], {"kernel_size": [2, 2]}, f"not implemented for {np.dtype(_dt)}",
            id=f"{AVGPOOL}-{np.dtype(_dt)}")
refused(SDPA, [np.ones((1, 1, 2, 2), np.int64)] * 3 + [None], {}, "not implemented for int64")
refused(BN, [np.ones((2, 3), np.int64), None, None, None, None], dict(_bn, training=True), "not implemented for int64")
refused(BN, [R(0, 3), None, None, None, None], dict(_bn, training=True), "at least one element")
refused(BN, [R(2, 0), None, None, None, None], dict(_bn, training=True), "at least one element")
refused(LN, [_i23, None, None], {"normalized_shape": [3], "eps": 1e-5}, "not implemented for int64")
refused("aten.transpose.int", [R()], {"dim0": 0, "dim1": 1}, "Dimension out of range")
refused("aten.select.int", [R()], {"dim": 0, "index": 0}, "0-dim tensor")
refused("aten.unbind.int", [R()], {}, "0-dim tensor")
refused("aten.split.Tensor", [R()], {"split_size": 1}, "at least a 1-dimensional")
refused("aten.unsafe_split.Tensor", [R()], {"split_size": 1}, "at least a 1-dimensional")
refused("aten.cat.default", [[]], {}, "non-empty list")
refused("aten.cat.default", [[R(), R(seed=1)]], {}, "zero-dimensional tensor")
refused("aten.stack.default", [[]], {}, "non-empty list")
refused("aten.select_backward.default", [R(2)], {"input_sizes": [2, 3], "dim": 1, "index": 5}, "index 5")

refused("aten.mm.default", [np.ones((2, 3), bool), np.ones((3, 2), bool)], {}, "not implemented for bool")
refused("aten.addmm.default", [R(2), R(2, 3, seed=1).astype(np.float32), R(3, 2, seed=2).astype(np.float32)], {},
        "self and mat2 must have the same dtype")
refused(CONV, [R(1, 2, 5, 5), R(3, 2, 3, 3, seed=1).astype(np.float32), None], _conv,
        "input and weight must have one dtype")
refused(CONV, [R(1, 2, 5, 5), R(0, 2, 3, 3, seed=1), None], _conv, "weight to be at least 1 at dimension 0")
refused(SDPA, [R(1, 1, 2, 2), R(1, 1, 2, 2, seed=1).astype(np.float32), R(1, 1, 2, 2, seed=2), None], {},
        "must have one dtype")
refused(LN, [R(2, 3), R(2, seed=1), None], {"normalized_shape": [3], "eps": 1e-5}, "same shape as normalized_shape")
refused(LN, [R(2, 3), R(3, seed=1).astype(np.float32), None], {"normalized_shape": [3], "eps": 1e-5}, "mixed dtype")
refused(LN, [R(2, 3), None, None], {"normalized_shape": [], "eps": 1e-5}, "at least 1-dimensional")
refused(BN, [R(2, 3), R(3, seed=1).astype(np.float32), None, None, None], dict(_bn, training=True), "mixed dtype")
refused(BN, [R(2, 3).astype(np.float32), None, None, R(3, seed=1), R(3, seed=2, low=0.5, high=1)],
        dict(_bn, training=False), "mixed dtype")
refused("aten.nll_loss_forward.default", [R(2, 3), I(0, 1), R(3, seed=1).astype(np.float32)],
        {"reduction": 1, "ignore_index": -100}, "weight must have the input's dtype")
refused(MAXPOOL, [R(1, 2, 5, 5)], {"kernel_size": [2, 2], "stride": [2 ** 62, 1]}, "must fit in 32 bits")
refused(AVGPOOL, [R(1, 2, 5, 5)], {"kernel_size": [2, 2], "stride": [2 ** 62, 1]}, "must fit in 32 bits")

refused(ADAPTIVE, [R(1, 2, 3, 3)], {"output_size": [-1, 2]}, "must be non-negative")
refused(ADAPTIVE, [R(1, 2, 0, 3)], {"output_size": [1, 2]}, "non-empty spatial dims")
refused(ADAPTIVE, [R(5, 2, 1)], {"output_size": [2]}, "output_size must be 2")
refused(ADAPTIVE, [R(5, 2, 1)], {"output_size": [1, 2, 3]}, "output_size must be 2")

def _inferred(op_name, inputs, args):
    from gradcli.ops.aten.registry import Slot

    arrays = [x for x in _flat(inputs) if isinstance(x, np.ndarray)]
    k = iter(range(len(arrays)))
    layout = _rebuild(inputs, lambda i, x: Slot(next(k)) if isinstance(x, np.ndarray) else x)
    return ATEN_OPS[op_name].bind(layout).infer_outputs([a.shape for a in arrays], [a.dtype for a in arrays], args)


@pytest.mark.parametrize("op_name, inputs, args, match, static", REFUSED)
def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static):
    wrt = _wrt(inputs, None)
    # IndexError for dims and indices out of range (as PyTorch); the loader reports all three
    with pytest.raises((ValueError, TypeError, IndexError), match=match) as ours:
        _ours(op_name, inputs, args, wrt)
    if static:   # the loader's shape rule refuses the entry at load, with the forward's error type
        with pytest.raises(ours.type, match=match):
            _inferred(op_name, inputs, args)
    if torch is not None:
        with pytest.raises(Exception):  # noqa: B017 - torch's RuntimeError/IndexError
            _theirs(op_name, inputs, args, wrt)


@needs_torch
def test_convolution_with_a_huge_stride_matches_torch():
    # any int64 stride is valid: the output is one window wide on that axis
    x, w = R(1, 2, 5, 5), R(3, 2, 3, 3, seed=1)
    args = dict(_conv, stride=[2 ** 62, 1])
    flat, outs = _ours(CONV, [x, w, None], args, [0, 1])
    tflat, touts = _theirs(CONV, [x, w, None], args, [0, 1])
    assert outs[0].shape == tuple(touts[0].shape) == (1, 3, 1, 3)
    assert _inferred(CONV, [x, w, None], args) == [((1, 3, 1, 3), np.dtype(np.float64))]
    np.testing.assert_allclose(outs[0].data, touts[0].detach().numpy(), rtol=1e-12)
    v = np.ones(outs[0].shape)
    for a, b in zip(grad(outs[0], flat[:2], grad_outputs=[v]),
                    torch.autograd.grad(touts[0], tflat[:2], torch.tensor(v))):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("entry, tensors, message", [
    ("{op: aten.embedding.default, inputs: [w, i], output: y}",
     ["w: {value: [[1.0, 2.0], [3.0, 4.0]], requires_grad: true}", "i: {value: [0, -1], dtype: int64}"],
     "embedding: index -1 out of range"),
    ("{op: aten.convolution.default, inputs: [w, k, null], output: y, args: {stride: [0, 0], padding: [0, 0], "
     "dilation: [1, 1], transposed: false, output_padding: [0, 0], groups: 1}}",
     ["w: {value: [[[[1.0, 2.0], [3.0, 4.0]]]], requires_grad: true}", "k: {value: [[[[1.0]]]]}"],
     "stride must be positive"),
    ("{op: aten.view.default, inputs: [w], output: y, args: {size: [-2]}}",
     ["w: {value: [1.0, 2.0], requires_grad: true}"], "invalid shape dimension -2"),
])
def test_a_graph_file_with_a_refused_entry_is_a_one_line_error(entry, tensors, message):
    from gradcli import loader
    from gradcli.errors import GraphError

    text = ("version: 1\ntensors:\n" + "".join(f"  {t}\n" for t in tensors) + f"ops:\n  - {entry}\n"
            "  - {op: aten.sum.default, inputs: [y], output: s}\nbackward: {roots: [s]}\n")
    with pytest.raises(GraphError, match=r"<graph>:\d+: ops\[0\] \(aten\.\w+\.default\): .*" + message) as err:
        loader.loads(text).run()
    assert "\n" not in str(err.value)


@needs_torch
def test_batch_norm_refuses_parameters_of_the_wrong_size_where_torch_reads_past_them():
    # Note [batch-norm parameter sizes]: a deliberate difference. PyTorch 2.13's CPU kernel
    # takes a weight of 2 entries for 3 channels (reading past it); gradcli refuses
    x = R(2, 3)
    torch.ops.aten.native_batch_norm.default(torch.tensor(x), torch.ones(2, dtype=torch.float64), None, None, None,
                                             True, 0.1, 1e-5)
    with pytest.raises(ValueError, match=r"weight must have shape \[3\]"):
        OPS[BN](Tensor(x), Tensor(np.ones(2)), None, None, None, **dict(_bn, training=True))
    with pytest.raises(ValueError, match=r"running_mean must have shape \[3\]"):
        _inferred(BN, [x, None, None, np.zeros(2), np.ones(3)], dict(_bn, training=False))


@needs_torch
def test_adaptive_pooling_to_an_empty_size_runs_forward_and_refuses_backward_like_torch():
    x = R(1, 2, 3, 3)
    flat, outs = _ours(ADAPTIVE, [x], {"output_size": [0, 2]}, [0])
    tflat, touts = _theirs(ADAPTIVE, [x], {"output_size": [0, 2]}, [0])
    assert outs[0].shape == tuple(touts[0].shape) == (1, 2, 0, 2)
    assert _inferred(ADAPTIVE, [x], {"output_size": [0, 2]}) == [((1, 2, 0, 2), np.dtype(np.float64))]
    with pytest.raises(RuntimeError):
        torch.autograd.grad(touts[0].sum(), tflat[0])
    with pytest.raises(ValueError, match="grad_output"):
        grad(outs[0], flat[:1], grad_outputs=[np.ones((1, 2, 0, 2))])


@needs_torch
def test_int64_avg_pool2d_gives_torchs_int64_result_and_its_shape_rule_says_so():
    # PyTorch's CPU avg_pool2d takes int64 (quotient truncated toward zero), no other integer type
    x, args = np.arange(-12, 13).reshape(1, 5, 5), {"kernel_size": [2, 2], "stride": [1, 1]}
    ours = OPS[AVGPOOL](x, **args)
    theirs = _torch_call(AVGPOOL, torch.tensor(x), **args).numpy()
    assert ours.dtype == theirs.dtype == np.int64
    np.testing.assert_array_equal(ours, theirs)
    assert _inferred(AVGPOOL, [x], args) == [(ours.shape, np.dtype(np.int64))]


_no_channels = {"stride": [1], "padding": [0], "dilation": [1], "transposed": False, "output_padding": [0]}


@needs_torch
@pytest.mark.parametrize("x_shape, w_shape, bias, args", [
    ((2, 0, 5, 5), (3, 0, 3, 3), True, dict(_conv)),
    ((2, 0, 5, 5), (3, 0, 3, 3), False, dict(_conv)),
    ((2, 0, 5, 5), (4, 0, 3, 3), True, dict(_conv, stride=[2, 2], padding=[1, 1], groups=2)),
    ((2, 0, 7), (3, 0, 3), True, dict(_no_channels, groups=1)),
    ((1, 0, 4, 4, 4), (2, 0, 3, 1, 2), True, dict(_no_channels, groups=1)),
    ((0, 0, 4, 4), (3, 0, 3, 3), True, dict(_conv)),
])
def test_convolution_without_input_channels_matches_torch(x_shape, w_shape, bias, args):
    # PyTorch gives (N, 0, *out), whatever C_out (Note [no input channels] in aten_kernels/conv.py):
    # zero gradients for the weight and the bias (C_out of them), and so at second order
    inputs = [R(*x_shape), R(*w_shape, seed=1), R(w_shape[0], seed=2) if bias else None]
    flat, outs = _ours(CONV, inputs, args, wrt=[0, 1, 2])
    tflat, touts = _theirs(CONV, inputs, args, wrt=[0, 1, 2])
    assert outs[0].shape == tuple(touts[0].shape) and outs[0].grad_fn.name == touts[0].grad_fn.name()
    assert _inferred(CONV, inputs, args) == [(outs[0].shape, np.dtype(np.float64))]
    leaves = [t for t in flat if t is not None]
    gs = grad([outs[0]], leaves, grad_outputs=[np.ones(outs[0].shape)], create_graph=True)
    tgs = torch.autograd.grad(touts[0], [t for t in tflat if t is not None], torch.ones(touts[0].shape))
    for g, tg in zip(gs, tgs):
        assert g.shape == tuple(tg.shape)
        np.testing.assert_array_equal(g.data, tg.numpy())
    grad([g for g in gs if g.requires_grad], leaves, grad_outputs=[np.ones(g.shape) for g in gs if g.requires_grad],
         allow_unused=True)
