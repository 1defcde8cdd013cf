"""The layout of an elementwise op's output, as PyTorch's TensorIterator chooses it.

PyTorch's elementwise kernels (add, mul, where, the activations and their backward
ops, ...) run through TensorIterator, which allocates the output in the memory order
of its inputs: when the inputs agree, the output has their layout (a permuted input
gives a permuted output); when they disagree, the first input whose strides decide
wins (Note [TensorIterator's layout]). NumPy's ufuncs keep the inputs' order too,
but where the inputs disagree NumPy falls back to row-major. A later ``view`` sees
the difference: PyTorch's ``view`` accepts a tensor that NumPy's layout would refuse
(Note [view strides] in shape.py).

``iterator_strides(shape, operands)`` computes the output's strides;
``lay_out(out, operands)`` gives an op's result that layout (a copy only where it
differs); ``lays_out(forward)`` wraps an ATen entry's forward with it.
"""
from __future__ import annotations

import functools

import numpy as np

_ndarray = np.ndarray


def _broadcast_strides(shape, x):
    """``x``'s element strides against the broadcast ``shape``: 0 where ``x`` is
    broadcast (a missing leading dim, or a size-1 dim of a larger output dim)."""
    nd, xd = len(shape), x.ndim
    out = [0] * nd
    item = x.itemsize
    for i in range(xd):
        if not (x.shape[i] == 1 and shape[nd - xd + i] != 1):
            out[nd - xd + i] = x.strides[i] // item
    return out


# Note [TensorIterator's layout]: PyTorch's ``reorder_dimensions`` sorts the dims
# from the fastest-moving to the slowest with an insertion sort that starts from the
# row-major order. Two dims compare by the first operand (in the op's input order)
# whose strides tell them apart: a broadcast dim (stride 0) asks the next operand; a
# smaller stride is the faster dim; equal strides (a size-1 dim) put the larger
# dim later, or ask the next operand. When no operand tells, the dims keep their
# row-major order. The output is then dense in that order (``compatible_stride``,
# ``invert_perm``). Before that, PyTorch's fast setup gives outputs of same-shaped
# row-major inputs the row-major layout (and of same-shaped channels-last inputs the
# channels-last one, which the sort reaches as well). NumPy differs in one rule:
# where two operands disagree, row-major wins.
def iterator_strides(shape, operands):
    """The element strides TensorIterator gives an output of ``shape`` computed from
    ``operands`` (arrays in the op's input order; 0-d arrays and numbers do not vote).

    Example: ``iterator_strides((2, 3), [np.zeros((3, 2)).T, np.zeros((2, 3))])`` is
    ``(1, 2)``: the first input is column-major, so the output is.
    """
    nd = len(shape)
    strides = [_broadcast_strides(shape, x) for x in operands if x.ndim]

    def should_swap(d0, d1):
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(nd - 1, -1, -1))      # fastest first
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    out = [0] * nd
    step = 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return tuple(out)


def _same_layout(x, strides):
    """Do ``x``'s strides equal ``strides`` (elements) on every dim larger than 1?"""
    item = x.itemsize
    return all(n == 1 or s == t * item for n, s, t in zip(x.shape, x.strides, strides))


def lay_out(out, operands):
    """``out`` (an op's result, of the broadcast shape of ``operands``) with the
    layout TensorIterator gives it: ``out`` itself when it has it, else a copy.

    Example: ``lay_out(np.add(a, b), [a, b])`` with ``a`` column-major and ``b``
    row-major is column-major, as ``torch.add(a, b)``.
    """
    arrays = [x for x in operands if getattr(x, "ndim", 0)]
    if out.ndim < 2 or out.size < 2 or not arrays or (
            out.flags.c_contiguous and all(x.flags.c_contiguous for x in arrays)):
        return out                      # row-major inputs: a row-major output (the common case)
    shape = out.shape
    if any(len(x.shape) > len(shape) for x in arrays):
        return out
    strides = iterator_strides(shape, arrays)
    if _same_layout(out, strides):
        return out
    perm = sorted(range(len(shape)), key=lambda d: -strides[d])     # slowest first
    from ..aten_kernels._common import array_module  # noqa: PLC0415 - accelerator arrays only

    xp = array_module(out)
    laid = xp.empty([shape[d] for d in perm], dtype=out.dtype).transpose(np.argsort(perm))
    laid[...] = out
    return laid


def lays_out(forward, order=None):
    """``forward`` (an elementwise ATen entry's, tensor inputs first) with its
    outputs laid out as TensorIterator lays them out (``lay_out``). ``order``: the
    tensor inputs' positions in the order PyTorch's kernel hands them to
    TensorIterator, where it differs from the schema's (``threshold_backward``
    iterates ``self`` before ``grad_output``).

    Example: ``lays_out(threshold_backward_forward, order=(1, 0))``; registry.py wraps
    every entry whose meta is ELEMENTWISE.
    """
    @functools.wraps(forward)
    def laid_out(*inputs, **args):
        out = forward(*inputs, **args)
        if type(out) is _ndarray:
            # lay_out's common case first, in one loop: a row-major result of row-major
            # arrays (or one no layout changes) is the result itself
            if out.ndim < 2 or out.size < 2:
                return out
            if out.flags.c_contiguous:
                for x in inputs:
                    if type(x) is _ndarray:
                        if x.ndim and not x.flags.c_contiguous:
                            break
                    elif x is not None and getattr(x, "ndim", 0):
                        break
                else:
                    return out
        operands = inputs if order is None else [inputs[i] for i in order if i < len(inputs)]
        arrays = [x for x in operands if getattr(x, "strides", None) is not None]
        if not arrays:
            return out
        if isinstance(out, (list, tuple)):
            return type(out)(lay_out(o, arrays) if hasattr(o, "ndim") else o for o in out)
        return lay_out(out, arrays) if hasattr(out, "ndim") else out
    return laid_out


# Note [channels-last outputs]: PyTorch's CPU convolution allocates its output in the
# memory format its input or weight suggests (``thnn_conv_use_channels_last``,
# ``mkldnn_conv_use_channels_last``: either one channels-last gives a channels-last
# output). A model that reaches a convolution through ``transpose(1, 2).view(B, C, H,
# W)`` (SegFormer's Mix-FFN) hands it a channels-last input without asking, and its
# later ``flatten(2).transpose(1, 2)`` then ``view`` relies on the output's layout.
def suggests_channels_last(x) -> bool:
    """PyTorch's ``suggest_memory_format() == ChannelsLast`` of a 4-d array
    (``is_channels_last_strides_2d``): dims 1, 3, 2, 0 in increasing stride order, with
    its tie-breaks (a size-1 channel dim, or N111 shapes, stay contiguous).

    >>> suggests_channels_last(np.zeros((2, 4, 3, 3)).transpose(0, 3, 1, 2))
    False
    >>> suggests_channels_last(np.zeros((2, 3, 3, 4)).transpose(0, 3, 1, 2))
    True
    """
    if getattr(x, "ndim", 0) != 4:
        return False
    sizes = x.shape
    strides = [s // x.itemsize for s in x.strides]
    if strides[1] == 0:
        return False
    low = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < low:
            return False
        if d == 0 and low == strides[1]:
            return False
        low = strides[d] * (sizes[d] if sizes[d] > 1 else 1)
    return True


def channels_last(y):
    """``y`` (4-d) laid out channels-last: the same values, NHWC in memory."""
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
