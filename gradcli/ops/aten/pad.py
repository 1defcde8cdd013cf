"""ATen padding entries: ``constant_pad_nd``, ``reflection_pad1d/2d/3d`` and
``replication_pad2d/3d`` (forwards in ``gradcli.ops.aten_kernels.pad``).

constant_pad_nd's VJP is constant_pad_nd with the padding negated (derivatives.yaml),
so it records PyTorch's node under create_graph. The reflection and replication pads
are gathers along each padded dim (Note [padding as a gather]); their VJP adds the
gradient back along the same positions with an accumulating ``index_put``, which a
second derivative differentiates (PyTorch records one ``ReflectionPad2DBackwardBackward0``
node there instead).
"""
from __future__ import annotations

from ..aten_kernels import pad as K
from ..aten_kernels._common import array_module
from ..library import _value
from .index import index_put
from .pointwise import zeros
from .registry import aten, defvjp


def _constant_pad_meta(self, pad, value=0):
    return [(K.constant_pad_shape(tuple(self.shape), pad), self.dtype)]


@aten("constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor", "ConstantPadNdBackward0",
      saves=False, meta=_constant_pad_meta)
def constant_pad_nd(self, pad, value=0):
    return K.constant_pad_nd(self, pad, value)


# self: constant_pad_nd_backward(grad, pad): the gradient cropped back (the padding negated)
defvjp(constant_pad_nd, lambda g, ans, self, pad, value=0: constant_pad_nd(g, pad=[-int(p) for p in pad]))


def _pad_vjp(mode):
    # self: reflection_padNd_backward(grad, self, padding) / replication_padNd_backward: each
    # output position's gradient added to the input position it read, dim by dim backwards
    def vjp(g, ans, self, padding):
        shape = tuple(self.shape)
        xp = array_module(_value(g))
        k = len(padding) // 2
        for j in reversed(range(k)):
            d = len(shape) - 1 - j
            positions = K.pad_positions(xp, shape[d], int(padding[2 * j]), int(padding[2 * j + 1]), mode)
            target = tuple(g.shape[:d]) + (shape[d],) + tuple(g.shape[d + 1:])
            g = index_put(zeros(target, g), [None] * d + [positions], g, accumulate=True)
        return g
    return vjp


def _register(name, k, mode, node):
    schema = f"{name}(Tensor self, SymInt[{2 * k}] padding) -> Tensor"

    def meta(self, padding):
        return [(K.check_pad(name, tuple(self.shape), padding, mode), self.dtype)]

    @aten(schema, node, saves=False, meta=meta)
    def forward(self, padding):
        return K.pad_by_positions(self, padding, mode, name)

    defvjp(forward, _pad_vjp(mode))
    return forward


reflection_pad1d = _register("reflection_pad1d", 1, "reflect", "ReflectionPad1DBackward0")
reflection_pad2d = _register("reflection_pad2d", 2, "reflect", "ReflectionPad2DBackward0")
reflection_pad3d = _register("reflection_pad3d", 3, "reflect", "ReflectionPad3DBackward0")
replication_pad2d = _register("replication_pad2d", 2, "replicate", "ReplicationPad2DBackward0")
replication_pad3d = _register("replication_pad3d", 3, "replicate", "ReplicationPad3DBackward0")
