"""In-place ATen overloads (``aten.relu_.default``, ``aten.add_.Tensor``, ...): a graph
exported from PyTorch keeps the in-place calls it traced.

Note [In-place ATen ops]: each entry is its out-of-place overload run in place on its
``self`` (Note [In-place ops] in ops/inplace.py): PyTorch's schema (``Tensor(a!) self``),
the out-of-place op's node (``ReluBackward0`` for ``relu_``), ``self``'s version bumped,
its history rebased, and the entry's output the same tensor as ``self``: a graph file
names it again, and later ops that read either name see the new values, as in PyTorch.
A leaf that requires grad cannot be the ``self`` of one (PyTorch's error). On raw arrays
(gradcheck's finite differences, shape inference) the forward is the out-of-place one:
it never writes into its caller's arrays.
"""
from __future__ import annotations

from ...autograd.tensor import Tensor
from ..core import OPS
from ..inplace import apply_inplace
from .registry import ATEN_OPS, AtenOp, aten


class InplaceAtenOp(AtenOp):
    """An in-place ATen overload: its out-of-place ``base`` applied into ``self``."""

    __slots__ = ()

    @property
    def base(self):
        name = self.name.split(".")
        return OPS[f"{name[0]}.{name[1].rstrip('_')}.{name[2]}"]

    def __call__(self, *inputs, **args):
        if not inputs or type(inputs[0]) is not Tensor:
            return self.base(*inputs, **args)           # raw arrays: out of place
        return apply_inplace(self.base, inputs[0], *inputs[1:], **args)


def _self_shape(self, *others, **args):
    """The output is ``self``: the others must broadcast to its shape (PyTorch's rule)."""
    import numpy as np  # noqa: PLC0415

    shapes = [self.shape] + [o.shape for o in others if hasattr(o, "shape")]
    try:
        full = np.broadcast_shapes(*shapes)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if tuple(full) != tuple(self.shape):
        raise ValueError(f"output with shape {list(self.shape)} doesn't match the broadcast "
                         f"shape {list(full)}")
    return [(tuple(self.shape), self.dtype)]


def _inplace(schema, base_name):
    """Register the in-place overload ``schema`` of the out-of-place op ``base_name``."""
    base = ATEN_OPS[base_name]
    op = aten(schema, base.node_name, saves=base.saves, meta=_self_shape)(base.forward)
    op.__class__ = InplaceAtenOp
    # (not ``view``: that promises that ``fn`` on raw arrays returns its input's memory,
    # and on raw arrays an in-place entry computes out of place; the loader's memory
    # budget then counts its output as an allocation, which over-counts, never under)
    op.schema_vjps, op.vjps, op.vjp_all = base.schema_vjps, base.vjps, base.vjp_all
    op.differentiable_inputs = list(base.differentiable_inputs)
    return op


relu_ = _inplace("relu_(Tensor(a!) self) -> Tensor(a!)", "aten.relu.default")
add_ = _inplace("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
                "aten.add.Tensor")
sub_ = _inplace("sub_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
                "aten.sub.Tensor")
mul_ = _inplace("mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", "aten.mul.Tensor")
div_ = _inplace("div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", "aten.div.Tensor")
