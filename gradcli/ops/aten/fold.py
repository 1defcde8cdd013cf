"""``col2im`` (what ``nn.Fold`` records; forward in ``gradcli.ops.aten_kernels.fold``).

Its VJP is im2col (derivatives.yaml), written with ops: the gradient padded, then
read at each column entry's position with ``index``, so it records under create_graph.
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels import fold as K
from ..aten_kernels._common import array_module
from ..aten_kernels._common import check_dtype
from ..library import _value
from .index import index
from .pad import constant_pad_nd
from .registry import aten, defvjp


def _col2im_meta(self, output_size, kernel_size, dilation, padding, stride):
    check_dtype("col2im", self, "f")
    c, out, *_ = K.col2im_geometry(tuple(self.shape), output_size, kernel_size, dilation, padding, stride)
    return [(tuple(self.shape[:-2]) + (c,) + out, self.dtype)]


@aten("col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, "
      "int[2] stride) -> Tensor", "Col2ImBackward0", saves=False, meta=_col2im_meta)
def col2im(self, output_size, kernel_size, dilation, padding, stride):
    check_dtype("col2im", self, "f")
    return K.col2im(self, output_size, kernel_size, dilation, padding, stride)


def _col2im_vjp(g, ans, self, output_size, kernel_size, dilation, padding, stride):
    # self: im2col(grad, kernel_size, dilation, padding, stride)
    shape = tuple(self.shape)
    c, out, blocks, k, d, p, s, padded = K.col2im_geometry(shape, output_size, kernel_size, dilation, padding,
                                                          stride)
    lead = shape[:-2]
    planes = int(np.prod(lead, dtype=np.int64)) * c
    xp = array_module(_value(g))
    gp = L.reshape(constant_pad_nd(g, pad=[p[1], p[1], p[0], p[0]]), shape=(planes, padded[0] * padded[1]))
    pos = K.block_positions(xp, blocks, k, d, s, padded).reshape(1, -1)
    rows = xp.arange(planes, dtype=np.int64)[:, None]
    return L.reshape(index(gp, [rows, pos]), shape=shape)


defvjp(col2im, _col2im_vjp)
