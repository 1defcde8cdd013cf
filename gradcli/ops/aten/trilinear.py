"""``_trilinear``: what ``nn.Bilinear`` (``torch.bilinear``) records, node ``TrilinearBackward0``.

Each input is unsqueezed at the dims its ``expandK`` names, so that the three have
``total = i1.dim() + len(expand1)`` dims; their product is summed over ``sumdim``, and those
dims are dropped. ``torch.bilinear(x1, x2, w, b)`` is ``_trilinear(x1, w, x2, [1, 3], [0],
[1, 2], [2, 3]) + b``.

Note [_trilinear's sizes]: PyTorch takes each dim's size from the last input that is not
expanded there (i3, else i2, else i1) and broadcasts a size-1 input dim to it; a dim every
input expands has size 0 in the output, unless it is summed (then it is dropped, as any
summed dim). gradcli computes the sum as one ``einsum`` over the inputs as they are (an
expanded dim, or a size-1 one, is simply not among that input's letters), which needs no
broadcast copies; ``unroll_dim`` only picks how PyTorch's kernel loops, not the result, but
no input broadcasts along it (the kernel reads every index of it from each input there).

The backward is ``_trilinear`` again (``_trilinear_backward``: each input's gradient is the
product of the gradient and the two other inputs, summed over that input's expanded dims),
so a create_graph backward records TrilinearBackward0 nodes, as PyTorch's.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> x1, w, x2 = np.ones((2, 3)), np.ones((4, 3, 5)), np.ones((2, 5))
    >>> OPS["aten._trilinear.default"](x1, w, x2, expand1=[1, 3], expand2=[0], expand3=[1, 2],
    ...                                sumdim=[2, 3]).shape
    (2, 4)
"""
from __future__ import annotations

import string

import numpy as np

from .registry import aten, defvjp_joint
from .shape import _dims_once


def _plan(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """(output shape, the dims each input keeps, the summed dims, the full sizes), checked as
    PyTorch's kernel checks them (Note [_trilinear's sizes])."""
    inputs, expands = (i1, i2, i3), (expand1, expand2, expand3)
    total = i1.ndim + len(expand1)
    if not 0 <= unroll_dim < total:
        raise ValueError(f"_trilinear: unroll_dim must be in [0,{total - 1}], got {unroll_dim}")
    dts = {np.dtype(x.dtype) for x in inputs}
    if len(dts) != 1:
        raise TypeError(f"_trilinear: expected all inputs to have the same dtype, got "
                        f"{', '.join(str(np.dtype(x.dtype)) for x in inputs)}")
    marks = []
    for k, (x, e) in enumerate(zip(inputs, expands)):
        dims = set(_dims_once(e, total)) if total else set()
        if x.ndim + len(e) != total:
            raise ValueError(f"_trilinear: i{k + 1} has {x.ndim} dims and expand{k + 1} {len(e)}, but i1 and "
                             f"expand1 make {total} dims")
        marks.append(dims)
    summed = set(_dims_once(sumdim, total)) if total else set()
    kept = [[d for d in range(total) if d not in marks[k]] for k in range(3)]
    sizes = []
    for d in range(total):
        s = 0
        for k in range(3):
            if d not in marks[k]:
                s = int(inputs[k].shape[kept[k].index(d)])
        for k in range(3):
            if d not in marks[k]:
                n = int(inputs[k].shape[kept[k].index(d)])
                if n not in (s, 1) or (n != s and d == unroll_dim):
                    # (PyTorch's kernel narrows every input that is not expanded at unroll_dim
                    # to each index of it: no size 1 broadcasts there)
                    raise ValueError(f"_trilinear: the size of i{k + 1} ({n}) does not match {s} at dim {d} "
                                     f"(shapes {[list(x.shape) for x in inputs]})")
        sizes.append(s)
    out = tuple(s for d, s in enumerate(sizes) if d not in summed)
    return out, kept, summed, sizes


def _meta(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    out = _plan(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim)[0]
    return [(out, np.dtype(i1.dtype))]


@aten("_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, "
      "int unroll_dim=1) -> Tensor", "TrilinearBackward0", meta=_meta)
def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    out_shape, kept, summed, sizes = _plan(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim)
    letters = string.ascii_letters
    operands, subs = [], []
    present = set()
    for x, dims in zip((i1, i2, i3), kept):
        x = np.asarray(x)
        # a size-1 dim where the others are wider broadcasts: it is squeezed out of the einsum
        ones = [a for a, d in enumerate(dims) if x.shape[a] == 1 and sizes[d] != 1]
        if ones:
            x = x.reshape([n for a, n in enumerate(x.shape) if a not in ones])
        ds = [d for a, d in enumerate(dims) if a not in ones]
        present.update(ds)
        operands.append(x)
        subs.append("".join(letters[d] for d in ds))
    out_dims = [d for d in range(len(sizes)) if d not in summed]
    inner = [d for d in out_dims if d in present]
    res = np.einsum(",".join(subs) + "->" + "".join(letters[d] for d in inner), *operands, optimize=True)
    if len(inner) != len(out_dims):         # a dim no input has: broadcast to PyTorch's size
        res = np.broadcast_to(res.reshape([sizes[d] if d in present else 1 for d in out_dims]), out_shape)
    return np.ascontiguousarray(res, dtype=np.dtype(i1.dtype)).reshape(out_shape)


def _trilinear_vjp(g, ans, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1, output_mask=None):
    # i1, i2, i3: _trilinear_backward(grad, i1, i2, i3, expand1, expand2, expand3, sumdim, grad_input_mask):
    # _trilinear(grad, i2, i3, sumdim, expand2, expand3, expand1) and its two rotations
    out = [None, None, None]
    if output_mask[0]:
        out[0] = trilinear(g, i2, i3, expand1=sumdim, expand2=expand2, expand3=expand3, sumdim=expand1)
    if output_mask[1]:
        out[1] = trilinear(i1, g, i3, expand1=expand1, expand2=sumdim, expand3=expand3, sumdim=expand2)
    if output_mask[2]:
        out[2] = trilinear(i1, i2, g, expand1=expand1, expand2=expand2, expand3=sumdim, sumdim=expand3)
    return out


defvjp_joint(trilinear, _trilinear_vjp, (True, True, True))
