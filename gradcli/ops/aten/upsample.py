"""ATen 2-D upsampling entries: ``upsample_nearest2d.vec``, ``upsample_bilinear2d.vec`` and
``_upsample_bilinear2d_aa`` (antialiased: other matrices, the same products)
(forwards in ``gradcli.ops.aten_kernels.upsample``).

The ``.vec`` overloads are composite in PyTorch: they compute the output size and call
the ``.default`` overload, whose node (``UpsampleNearest2DBackward0``,
``UpsampleBilinear2DBackward0``) is what the backward records. The VJPs are written
with ops (an accumulating ``index_put`` for nearest, two matrix products for
bilinear: Note [upsampling is separable]), so a second derivative follows.
"""
from __future__ import annotations

from .. import library as L
from ..aten_kernels import upsample as K
from ..aten_kernels._common import array_module, check_dtype
from ..library import _value
from .index import index_put
from .pointwise import zeros
from .registry import aten, defvjp


def _nearest_meta(input, output_size, scale_factors):
    oh, ow, _, _ = K.output_size("upsample_nearest2d", tuple(input.shape), output_size, scale_factors)
    return [((input.shape[0], input.shape[1], oh, ow), input.dtype)]


@aten("upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor",
      "UpsampleNearest2DBackward0", saves=False, meta=_nearest_meta)
def upsample_nearest2d(input, output_size, scale_factors):
    oh, ow, sh, sw = K.output_size("upsample_nearest2d", tuple(input.shape), output_size, scale_factors)
    return K.upsample_nearest2d(input, oh, ow, sh, sw)


def _nearest_vjp(g, ans, input, output_size, scale_factors):
    # input: upsample_nearest2d_backward(grad, output_size, input.sizes(), scales_h, scales_w):
    # each output's gradient added to the input pixel it read, W first, then H
    shape = tuple(input.shape)
    oh, ow, sh, sw = K.output_size("upsample_nearest2d", shape, output_size, scale_factors)
    xp = array_module(_value(g))
    cols = K.nearest_positions(xp, shape[3], ow, sw)
    g = index_put(zeros(shape[:2] + (oh, shape[3]), g), [None, None, None, cols], g, accumulate=True)
    rows = K.nearest_positions(xp, shape[2], oh, sh)
    return index_put(zeros(shape, g), [None, None, rows], g, accumulate=True)


defvjp(upsample_nearest2d, _nearest_vjp)


def _bilinear_meta(input, output_size, align_corners, scale_factors):
    check_dtype("upsample_bilinear2d", input, "f")
    oh, ow, _, _ = K.output_size("upsample_bilinear2d", tuple(input.shape), output_size, scale_factors)
    return [((input.shape[0], input.shape[1], oh, ow), input.dtype)]


@aten("upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) "
      "-> Tensor", "UpsampleBilinear2DBackward0", saves=False, meta=_bilinear_meta)
def upsample_bilinear2d(input, output_size, align_corners, scale_factors):
    check_dtype("upsample_bilinear2d", input, "f")
    oh, ow, sh, sw = K.output_size("upsample_bilinear2d", tuple(input.shape), output_size, scale_factors)
    return K.upsample_bilinear2d(input, oh, ow, align_corners, sh, sw)


def _bilinear_vjp(g, ans, input, output_size, align_corners, scale_factors):
    # input: upsample_bilinear2d_backward(grad, output_size, input.sizes(), align_corners, scales_h,
    # scales_w): the transposed interpolation, Mh.T @ grad @ Mw, its matrices PyTorch's backward kernel's
    # (an axis of unchanged size is not skipped there: with a scale given, not the forward's identity)
    shape = tuple(input.shape)
    oh, ow, sh, sw = K.output_size("upsample_bilinear2d", shape, output_size, scale_factors)
    gv = _value(g)
    xp = array_module(gv)
    mh = K.bilinear_matrix(xp, shape[2], oh, align_corners, sh, gv.dtype)
    mw = K.bilinear_matrix(xp, shape[3], ow, align_corners, sw, gv.dtype)
    return L.matmul(xp.ascontiguousarray(mh.T), L.matmul(g, mw))


defvjp(upsample_bilinear2d, _bilinear_vjp)


# -- _upsample_bilinear2d_aa (F.interpolate(..., mode="bilinear", antialias=True)) ----------------------------------
def _aa_meta(self, output_size, align_corners, scales_h=None, scales_w=None):
    check_dtype("_upsample_bilinear2d_aa", self, "f")
    oh, ow, _, _ = K.output_size("_upsample_bilinear2d_aa", tuple(self.shape), output_size, None)
    return [((self.shape[0], self.shape[1], oh, ow), self.dtype)]


@aten("_upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, "
      "float? scales_w=None) -> Tensor", "UpsampleBilinear2DAaBackward0", saves=False, meta=_aa_meta)
def upsample_bilinear2d_aa(self, output_size, align_corners, scales_h=None, scales_w=None):
    ((shape, _),) = _aa_meta(self, output_size, align_corners, scales_h, scales_w)
    return K.upsample_bilinear2d_aa(self, shape[2], shape[3], align_corners, scales_h, scales_w)


def _aa_vjp(g, ans, self, output_size, align_corners, scales_h=None, scales_w=None):
    # self: _upsample_bilinear2d_aa_backward(grad, output_size, self.sym_sizes(), align_corners, scales_h,
    # scales_w): the transposed interpolation, Mh.T @ grad @ Mw, its matrices PyTorch's backward kernel's
    # (an axis of unchanged size is not skipped there: with a scale given, not the forward's identity)
    shape = tuple(self.shape)
    gv = _value(g)
    xp = array_module(gv)
    mh = K.bilinear_aa_matrix(xp, shape[2], int(output_size[0]), align_corners, scales_h, gv.dtype, False)
    mw = K.bilinear_aa_matrix(xp, shape[3], int(output_size[1]), align_corners, scales_w, gv.dtype, False)
    return L.matmul(xp.ascontiguousarray(mh.T), L.matmul(g, mw))


defvjp(upsample_bilinear2d_aa, _aa_vjp)
