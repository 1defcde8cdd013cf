"""In-place ops: ``x.add_(y)``, ``gradcli.ops.relu_(x)``: the op's result written into
``x``'s memory, ``x``'s version bumped and its history rebased onto the op's node.

Note [In-place ops]: an in-place op is its out-of-place op recorded on ``x``'s current
history, then copied into ``x``'s array: the node is the out-of-place op's
(``AddBackward0`` for ``add_``, ``ReluBackward0`` for ``relu_``, as PyTorch's), and
``x`` becomes that node's output 0. What PyTorch checks first is checked here:
- a leaf that requires grad (or a view of one) may not be changed in place while grad
  mode is on: its ``.grad`` would no longer be the gradient of the value it had;
- an op whose backward reads its input (``mul_``: the gradient of ``y`` is ``g * x``)
  records on a copy of ``x``'s old values, as PyTorch's generated code saves
  ``original_self``; the node keeps ``x``'s array as its saved output, at the version
  the op left it at, so a later in-place op on ``x`` fails its backward with PyTorch's
  "modified by an inplace operation" (Note [Version counters]);
- the result is cast into ``x``'s dtype when NumPy's ``same_kind`` rule allows it
  (float64 into float32), and refused otherwise (a float result into an int tensor),
  with PyTorch's message;
- a view of a tensor whose history is recorded gets its base's history rebased
  through ``CopySlices`` (Note [CopySlices]).
"""
from __future__ import annotations

import re

import numpy as np

from ..autograd.node import InputMetadata, Node
from ..devices import CPU, on_device, scalar, to_host, writeable
from .core import OpBackward
from ..autograd.state import STATE
from ..autograd.tensor import Tensor, bump_version, version_counter
from . import library as L

class InplaceError(RuntimeError, ValueError):
    """An in-place op refused on its inputs (PyTorch's RuntimeError); a ValueError too, so
    that a graph file whose entry makes it is invalid input, named by file, line and op."""


ERR_LEAF = "a leaf Variable that requires grad is being used in an in-place operation."
ERR_VIEW_OF_LEAF = ("a view of a leaf Variable that requires grad is being used in an "
                    "in-place operation.")


def _torch_dtype_name(dtype) -> str:
    names = {"f": "Float", "i": "Long", "u": "Byte", "b": "Bool", "c": "ComplexFloat"}
    if dtype == np.float64:
        return "Double"
    if dtype == np.float16:
        return "Half"
    if dtype == np.int32:
        return "Int"
    return names.get(dtype.kind, str(dtype))


def check_inplace(x) -> None:
    """Refuse an in-place op on a leaf that requires grad, or on a view of one."""
    if type(x) is not Tensor:
        raise TypeError(f"an in-place op needs a Tensor, got {type(x).__name__}")
    if not STATE.grad_enabled:
        return
    if x.grad_fn is None and x.requires_grad:
        raise InplaceError(ERR_VIEW_OF_LEAF if x._base is not None else ERR_LEAF)
    base = x._base
    if base is not None and base.grad_fn is None and base.requires_grad:
        raise InplaceError(ERR_VIEW_OF_LEAF)


# Note [View creation]: PyTorch refuses an in-place op that its engine would record on a
# view made in a way the rebase cannot honour (its CreationMeta): a view made under
# no_grad of a tensor that requires grad (the op would be half recorded), and an output
# of an op that returns several views (``split``, ``unbind``) or a view of one (each
# output's node covers them all). gradcli marks such views when it makes them
# (``ops/core.py``'s ``_mark_view``) and refuses with PyTorch's words.
ERR_NO_GRAD_VIEW = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You "
    "can clarify your code by moving both the view and the inplace either both inside the "
    "no_grad block (if you don't want the inplace to be tracked) or both outside (if you "
    "want the inplace to be tracked).")


def check_view_creation(x, others=()) -> None:
    """Refuse an in-place op on a view its creation forbids (Note [View creation])."""
    creation = x._creation
    if creation is None or not STATE.grad_enabled:
        return
    base = x._base
    if not (x.requires_grad or (base is not None and base.requires_grad) or any(
            type(o) is Tensor and o.requires_grad for o in others)):
        return
    if creation == "no_grad":
        raise InplaceError(ERR_NO_GRAD_VIEW)
    fn = x.grad_fn
    name = re.sub(r"Backward\d*$", "", fn.name) if fn is not None else "a view"
    raise InplaceError(
        f"Output {x.output_nr} of {name} is a view and is being modified inplace. This view "
        "is the output of a function that returns multiple views. Such functions do not "
        "allow the output views to be modified inplace. You should replace the inplace "
        "operation by an out-of-place one.")


def _alias(x, data):
    """A Tensor with ``x``'s history and ``data`` (the old values an op saves)."""
    t = Tensor(data, requires_grad=x.requires_grad)
    t.grad_fn, t.output_nr, t._grad_accumulator = x.grad_fn, x.output_nr, x._grad_accumulator
    return t


def _write(x, value) -> None:
    """Copy ``value`` into ``x``'s array (PyTorch's cast rule: same kind or safer)."""
    dst = x.data
    if not np.can_cast(value.dtype, dst.dtype, "same_kind"):
        raise InplaceError(f"result type {_torch_dtype_name(value.dtype)} can't be cast to the "
                           f"desired output type {_torch_dtype_name(dst.dtype)}")
    if not writeable(dst):
        if any(s == 0 for s, n in zip(dst.strides, dst.shape) if n > 1):
            raise InplaceError("unsupported operation: more than one element of the written-to "
                               "tensor refers to a single memory location. Please clone() the "
                               "tensor before performing the operation.")
        if x._base is not None or x._vc is not None:
            raise InplaceError("an in-place op cannot write into a read-only array that other "
                               "tensors share; clone() the tensor first")
        x.data = dst = dst.copy()       # read-only memory nothing else sees: own a copy
    if np.broadcast_shapes(value.shape, dst.shape) != dst.shape:
        raise InplaceError(f"output with shape {list(dst.shape)} doesn't match the broadcast "
                           f"shape {list(np.broadcast_shapes(value.shape, dst.shape))}")
    np.copyto(dst, value, casting="same_kind")


def _raw(o):
    """An operand's array (a ``Tensor?[]`` such as index_put's indices: each one's)."""
    if type(o) is Tensor:
        return o.data
    if type(o) is list:
        return [_raw(v) for v in o]
    return o


def apply_inplace(op, x, *others, **args):
    """Run ``op(x, *others, **args)`` into ``x`` (Note [In-place ops]); returns ``x``.

    Example::

        y = x * 2
        apply_inplace(gradcli.ops.OPS["relu"], y)      # y.relu_()
    """
    check_inplace(x)
    check_view_creation(x, others)
    needs = STATE.grad_enabled and (x.requires_grad or any(
        type(o) is Tensor and o.requires_grad for o in others))
    if not needs:
        raw = [_raw(o) for o in others]
        _write(x, op.fn(x.data, *raw, **args))
        bump_version(x)
        return x
    base = x._base
    if base is not None:
        return _inplace_on_view(op, x, base, others, args)
    src = _alias(x, x.data.copy()) if op.saves else x
    others = tuple(src if o is x else o for o in others)
    result = op(src, *others, **args)
    _write(x, result.data)
    version = bump_version(x)
    node = result.grad_fn
    x.requires_grad = True
    rebase_history(x, node, result.output_nr)
    _keep_output(op, node, result, x, version)
    return x


# Note [retain_grad after an in-place op]: ``x.retain_grad()`` asks for the gradient of
# ``x``'s latest version, as PyTorch's: an in-place op that gives ``x`` a new node moves
# the retains-grad hook from the old node to the new one (``a.mul_(2)`` after
# ``a.retain_grad()``: ``a.grad`` is the gradient at the product, not at ``a``'s old value).
def rebase_history(t, node, output_nr) -> None:
    """Make ``node``'s output ``output_nr`` ``t``'s history, moving a retains-grad hook
    along (Note [retain_grad after an in-place op]).

    Example::

        rebase_history(x, result.grad_fn, result.output_nr)
    """
    old, old_nr = t.grad_fn, t.output_nr
    t.grad_fn, t.output_nr = node, output_nr
    if t.retains_grad and old is not None and old is not node:
        hooks = old.hooks.retains_grad if old.hooks is not None else None
        hook = hooks.pop(old_nr, None) if hooks else None
        if hook is not None and node is not None:
            node.set_retains_grad_hook(output_nr, hook)


def _keep_output(op, node, result, x, version):
    """The node's saved output is ``x``'s memory at ``version`` (Note [Version counters])."""
    if op.saves and node is not None and type(getattr(node, "saved", None)) is tuple:
        saved = node.saved
        n = len(saved) >> 1
        if saved[n] is result.data and result.data.dtype == x.data.dtype:
            node.saved = (*saved[:n], x.data, *saved[n + 1:])
        node.note_output_version(0, version_counter(x), version)


# Note [CopySlices]: an in-place op on a view ``v`` of ``base`` changes base's values
# too, so base's history gets a new node, ``CopySlices``, as PyTorch's: given base's
# gradient, it hands the region outside the view to base's old history unchanged, and
# runs the in-place op's node on the view's region: that node's gradient for its
# ``self`` (the view's old values, part of base's old values) goes back into the region,
# its other gradients (``other`` of ``mul_``) along its own edges. The view's own
# history becomes an ``AsStridedBackward0`` of base's new one, as PyTorch regenerates
# it. The region is found from the view's strides and offset into base's memory.
class CopySlices(Node):
    """Base's new history after an in-place op on one of its views (Note [CopySlices])."""

    __slots__ = ("fn", "view_shape", "view_strides", "offset", "base_strides", "itemsize")

    def __init__(self, base, view, fn):
        edge = base.gradient_edge() if base.requires_grad else None
        super().__init__("CopySlices", (edge, *fn.next_edges[1:]),
                         [InputMetadata.of(base.data)])
        self.fn = fn
        self.view_shape = view.data.shape
        self.view_strides = view.data.strides
        self.base_strides = base.data.strides
        self.itemsize = base.data.itemsize
        self.offset = (view.data.__array_interface__["data"][0]
                       - base.data.__array_interface__["data"][0])

    def region(self, array):
        """The view's elements within ``array`` (laid out as base)."""
        return np.lib.stride_tricks.as_strided(
            array.reshape(-1)[self.offset // self.itemsize:], self.view_shape,
            self.view_strides, writeable=True)

    def positions(self):
        """The flat index into the base of each element of the view (view-shaped)."""
        size = int(np.prod(self.input_metadata[0].shape, dtype=np.int64))
        index = np.arange(size, dtype=np.int64)
        return np.lib.stride_tricks.as_strided(
            index[self.offset // self.itemsize:], self.view_shape,
            tuple(s // self.itemsize * index.itemsize for s in self.view_strides)).copy()

    def apply(self, grads):
        g = grads[0]
        if g is None:
            return [None] * len(self.next_edges)
        if STATE.grad_enabled:                 # create_graph (g may still be an array)
            return self._apply_recording(g)
        # (the base is C-contiguous: Note [CopySlices]; a gradient laid out otherwise, a
        # transposed one, is copied into the base's layout)
        g = np.array(to_host(g.data if type(g) is Tensor else g), copy=True, order="C")
        region = self.region(g)
        res = self.fn.apply([_on(region.copy(), self.input_metadata[0].device)])
        region[...] = 0 if res[0] is None else to_host(res[0])
        return [_on(g, self.input_metadata[0].device), *res[1:]]

    # Note [CopySlices under create_graph]: a create_graph backward needs the base's
    # gradient as ops that record, so that a second backward goes through the in-place
    # op's node too (PyTorch's CopySlices computes with tensor ops, which record under
    # create_graph). The region is read with ``index`` at the view's flat positions, the
    # wrapped node runs on it (recording its own backward), and its gradient for the
    # view's old values is written back with ``index_put``: the gradient outside the view
    # passes through unchanged, as in the array path. The wrapped node's saved output
    # (``relu_``'s) is the view: under create_graph it unpacks with the view's regenerated
    # history (``view_fn``), as PyTorch's, so a second backward reaches the wrapped node
    # only through CopySlices and never runs it on its own.
    def _apply_recording(self, g):
        from .core import OPS  # noqa: PLC0415

        shape = self.input_metadata[0].shape
        pos = self.positions()
        flat = L.reshape(g, shape=(-1,))
        res = self.fn.apply([OPS["aten.index.Tensor"](flat, [pos])])
        new = res[0]
        if new is None:
            new = np.zeros(self.view_shape, dtype=g.dtype)
        out = OPS["aten.index_put.default"](flat, [pos], new)
        return [L.reshape(out, shape=tuple(shape)), *res[1:]]

    def release_variables(self):
        self.fn.release_variables()


class AsStridedView(Node):
    """A view's history regenerated from its base's new one (``AsStridedBackward0``)."""

    __slots__ = ("copy_slices",)

    def __init__(self, base, view, copy_slices):
        super().__init__("AsStridedBackward0", ((copy_slices, 0),),
                         [InputMetadata.of(view.data)])
        self.copy_slices = copy_slices

    def apply(self, grads):
        g = grads[0]
        meta = self.copy_slices.input_metadata[0]
        if STATE.grad_enabled:          # create_graph: Note [CopySlices under create_graph]
            return [scatter_to_base(g, self.copy_slices.positions(), meta.shape, meta.dtype)]
        out = np.zeros(meta.shape, meta.dtype)
        if g is not None:
            self.copy_slices.region(out)[...] = to_host(g.data if type(g) is Tensor else g)
        return [_on(out, meta.device)]


def _on(array, device):
    """A host array computed for a node whose input lives on ``device``: tagged with it
    (simulated devices), as the engine checks each gradient's device."""
    return array if device is CPU else on_device(array, device)


def scatter_to_base(g, positions, shape, dtype):
    """A view's gradient ``g`` (a Tensor, recording) added into zeros of its base's
    ``shape`` at the view's flat ``positions`` (``AsStridedBackward0``'s formula).

    Example::

        scatter_to_base(g, np.array([1, 2]), (3,), np.float64)   # [0, g0, g1]
    """
    from .core import OPS  # noqa: PLC0415

    size = int(np.prod(shape, dtype=np.int64))
    values = L.reshape(g, shape=(-1,))
    out = OPS["aten.index_put.default"](np.zeros(size, dtype), [np.asarray(positions).reshape(-1)],
                                        values, accumulate=True)
    return L.reshape(out, shape=tuple(shape))


def _inplace_on_view(op, x, base, others, args):
    if not base.data.flags.c_contiguous:
        raise RuntimeError("an in-place op on a view of a non-contiguous tensor that requires "
                           "grad is not supported; clone() the base first")
    view_src = _alias(x, x.data.copy())
    others = tuple(view_src if o is x else o for o in others)
    result = op(view_src, *others, **args)
    fn = result.grad_fn
    _write(x, result.data)
    version = bump_version(x)
    _keep_output(op, fn, result, x, version)
    copy_slices = CopySlices(base, x, fn)
    base.requires_grad = True
    rebase_history(base, copy_slices, 0)
    x.requires_grad = True
    rebase_history(x, AsStridedView(base, x, copy_slices), 0)
    x._view_of_fn = copy_slices              # (other views of base regenerate theirs)
    if isinstance(fn, OpBackward):
        fn.view_fn = x.grad_fn               # its saved output is the view, with that history
    return x


# -- the in-place variants, as functions of gradcli.ops and Tensor methods -------------
def _as_operand(value, like):
    if type(value) is Tensor or hasattr(value, "shape"):
        return value
    return scalar(value, like.dtype)


def add_(x, other, alpha=1):
    """``x += alpha * other`` in place (``AddBackward0``). Example: ``x.add_(y, alpha=2)``."""
    if alpha != 1:
        other = L.mul(_as_operand(other, x), scalar(alpha, x.dtype))
    return apply_inplace(L.add, x, _as_operand(other, x))


def sub_(x, other, alpha=1):
    """``x -= alpha * other`` in place (``SubBackward0``). Example: ``x.sub_(1.0)``."""
    if alpha != 1:
        other = L.mul(_as_operand(other, x), scalar(alpha, x.dtype))
    return apply_inplace(L.sub, x, _as_operand(other, x))


def mul_(x, other):
    """``x *= other`` in place (``MulBackward0``). Example: ``x.mul_(2.0)``."""
    return apply_inplace(L.mul, x, _as_operand(other, x))


def div_(x, other):
    """``x /= other`` in place (``DivBackward0``). Example: ``x.div_(y)``."""
    return apply_inplace(L.div, x, _as_operand(other, x))


def pow_(x, exponent):
    """``x **= exponent`` in place (``PowBackward1``). Example: ``x.pow_(2.0)``."""
    return apply_inplace(L.pow_, x, _as_operand(exponent, x))


def clamp_(x, min=None, max=None):  # noqa: A002 - PyTorch's names
    """Clip ``x`` into [min, max] in place (``ClampBackward1``). Example: ``x.clamp_(0, 1)``."""
    return apply_inplace(L.clamp, x, min=min, max=max)


def _unary_inplace(op):
    def inplace(x):
        return apply_inplace(op, x)
    inplace.__name__ = inplace.__qualname__ = op.name + "_"
    inplace.__doc__ = (f"``{op.name}`` in place ({op.node_name}). "
                       f"Example: ``x.{op.name}_()``.")
    return inplace


relu_ = _unary_inplace(L.relu)
neg_ = _unary_inplace(L.neg)
exp_ = _unary_inplace(L.exp)
log_ = _unary_inplace(L.log)
sin_ = _unary_inplace(L.sin)
cos_ = _unary_inplace(L.cos)
tanh_ = _unary_inplace(L.tanh)
sigmoid_ = _unary_inplace(L.sigmoid)
sqrt_ = _unary_inplace(L.sqrt)
abs_ = _unary_inplace(L.abs_)


INPLACE_FUNCTIONS = {f.__name__: f for f in (
    add_, sub_, mul_, div_, pow_, clamp_, relu_, neg_, exp_, log_, sin_, cos_, tanh_,
    sigmoid_, sqrt_, abs_)}


def install(tensor_cls) -> None:
    """Make each in-place function a method of ``tensor_cls`` (``x.add_(y)``)."""
    for name, fn in INPLACE_FUNCTIONS.items():
        setattr(tensor_cls, name, fn)
    tensor_cls.__iadd__ = add_
    tensor_cls.__isub__ = sub_
    tensor_cls.__imul__ = mul_
    tensor_cls.__itruediv__ = div_
