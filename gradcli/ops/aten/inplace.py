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
import numpy as np

from .. import library as L
from .registry import ATEN_OPS, AtenOp, aten, defvjp


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


def _inplace(schema, base_name, meta=_self_shape):
    """Register the in-place overload ``schema`` of the out-of-place op ``base_name``
    (``meta``: its shape rule, ``self``'s shape unless the out-of-place one says it)."""
    base = ATEN_OPS[base_name]
    op = aten(schema, base.node_name, saves=base.saves, meta=meta or base.meta)(base.forward)
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
# (``qkv_bias[k:2 * k].zero_()`` on a clone, as swin_v2's attention writes it)
zero_ = _inplace("zero_(Tensor(a!) self) -> Tensor(a!)", "aten.zero.default")
# (``x[mask] = v``, ``x[idx] += v``: index_put's own shape rule checks the indices and values)
index_put_ = _inplace("index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, "
                      "bool accumulate=False) -> Tensor(a!)", "aten.index_put.default", meta=None)


# Note [as_strided_]: ``as_strided_`` changes ``self``'s geometry, not its values: the
# same tensor now reads ``size``/``stride``/``storage_offset`` of its memory (row-major,
# Note [as_strided reads the input row-major]). PyTorch records ``AsStridedBackward1``
# (the formula of ``as_strided``'s ``AsStridedBackward0``: each element's gradient added
# at the position it reads), bumps ``self``'s version and refuses a leaf that requires
# grad, as for any in-place op. ``self``'s array becomes the strided view of its old
# one, so later ops on either name see the new geometry; the entry's output is ``self``.
class AsStridedInplaceOp(AtenOp):
    """``aten.as_strided_.default``: ``self`` restrided in place (Note [as_strided_])."""

    __slots__ = ()
    restrides_self = True       # the loader gives self's name the output's shape

    def __call__(self, *inputs, **args):
        if not inputs or type(inputs[0]) is not Tensor:
            return AtenOp.__call__(self, *inputs, **args)      # raw arrays: out of place
        from ..inplace import check_inplace, check_view_creation, rebase_history  # noqa: PLC0415
        from ...autograd.tensor import bump_version  # noqa: PLC0415

        x = inputs[0]
        check_inplace(x)
        check_view_creation(x)
        result = AtenOp.__call__(self, x, **args)
        x.data = result.data
        bump_version(x)
        if result.grad_fn is not None:
            x.requires_grad = True
            rebase_history(x, result.grad_fn, result.output_nr)
        return x


def _as_strided_inplace():
    base = ATEN_OPS["aten.as_strided.default"]
    op = aten("as_strided_(Tensor(a!) self, SymInt[] size, SymInt[] stride, "
              "SymInt? storage_offset=None) -> Tensor(a!)", "AsStridedBackward1", saves=False,
              meta=base.meta)(base.forward)
    op.__class__ = AsStridedInplaceOp
    op.schema_vjps, op.vjps, op.vjp_all = base.schema_vjps, base.vjps, base.vjp_all
    return op


as_strided_ = _as_strided_inplace()


# Note [copy_]: ``self.copy_(src)`` (``x[:, 1:] = y``, and the write-back of ``x[:, 1:] +=
# y``) records PyTorch's ``CopyBackwards``: no gradient for ``self``'s old values (zeros),
# ``src`` gets the gradient summed to its shape in its dtype. The functional ``copy`` has
# no derivative in PyTorch (Note [copy has no derivative]); the in-place one has this one.
def _copy_backwards_self(g, ans, self, src, non_blocking=False):
    from .pointwise import zeros  # noqa: PLC0415

    return zeros(np.shape(g), g)                # (a constant: records nothing, as PyTorch's)


def _copy_backwards_src(g, ans, self, src, non_blocking=False):
    from .promotion import cast  # noqa: PLC0415

    g = L.unbroadcast(g, tuple(np.shape(src)))
    return cast(g, src.dtype) if hasattr(src, "dtype") and hasattr(g, "dtype") and \
        g.dtype != src.dtype and src.dtype.kind == "f" else g


def _copy_inplace():
    base = ATEN_OPS["aten.copy.default"]
    op = aten("copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
              "CopyBackwards", saves=False, meta=base.meta)(base.forward)
    op.__class__ = InplaceCopyOp
    defvjp(op, _copy_backwards_self, _copy_backwards_src)
    return op


class InplaceCopyOp(InplaceAtenOp):
    """``aten.copy_.default``: ``src`` written into ``self`` (Note [copy_]); it records
    its own node (``CopyBackwards``), not an out-of-place op's."""

    __slots__ = ()

    @property
    def base(self):
        return _Recorded(self)


class _Recorded:
    """An in-place entry seen as the op ``apply_inplace`` records: its own forward,
    node and VJPs, called as an out-of-place ATen op."""

    __slots__ = ("op",)

    def __init__(self, op):
        self.op = op

    @property
    def fn(self):
        return self.op.fn

    @property
    def saves(self):
        return self.op.saves

    def __call__(self, *inputs, **args):
        return AtenOp.__call__(self.op, *inputs, **args)


copy_ = _copy_inplace()
