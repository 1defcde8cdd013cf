"""``_pdist_forward`` and ``_pdist_backward`` as array functions: the p-norm distances
between every pair of rows of one matrix, in the order of the upper triangle (row by row).

Note [pdist through cdist]: a pair's distance is ``cdist``'s and its gradient for both rows
follows from ``cdist_backward`` given a symmetric gradient matrix: the gradient of
``d(x_i, x_j)`` for ``x_i`` with ``j`` either side of ``i`` is one row of that product, the
zero distance on the diagonal contributing zero as PyTorch's kernel makes it."""
import math

import numpy as np

from ._common import array_module, check_dtype
from .cdist import cdist_backward, cdist_forward


def pdist_shape(shape, p):
    """``(n (n - 1) / 2,)`` for an ``(n, m)`` input, checked as ``torch.pdist`` checks it."""
    if len(shape) != 2:
        raise ValueError(f"pdist only supports 2D tensors, got: {len(shape)}D")
    if not p >= 0:                  # NaN too
        raise ValueError("pdist only supports non-negative p values")
    n = shape[0]
    return (n * (n - 1) // 2,)


def pdist_forward(x, p=2.0):
    """``aten._pdist_forward(Tensor self, float p=2.) -> Tensor``.

    >>> import numpy as np
    >>> pdist_forward(np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0]])).tolist()
    [5.0, 1.0, 4.242640687119285]
    """
    check_dtype("pdist", x, "f")
    shape = pdist_shape(tuple(x.shape), p)
    if not x.flags.c_contiguous:
        raise ValueError("_pdist_forward requires contiguous input")
    xp = array_module(x)
    n = x.shape[0]
    if shape[0] == 0:
        return xp.zeros(shape, x.dtype)
    rows, cols = np.triu_indices(n, 1)
    return xp.ascontiguousarray(cdist_forward(x, x, p)[rows, cols])


def pdist_backward(grad, x, p, pdist):
    """``aten._pdist_backward(Tensor grad, Tensor self, float p, Tensor pdist) -> Tensor``: the
    gradient for ``self`` (Note [pdist through cdist])."""
    xp = array_module(grad, x)
    n = x.shape[0]
    if pdist.shape[0] == 0:
        return xp.zeros(x.shape, x.dtype)
    rows, cols = np.triu_indices(n, 1)
    full_g = xp.zeros((n, n), grad.dtype)
    full_g[rows, cols] = grad
    full_g[cols, rows] = grad
    full_d = xp.zeros((n, n), pdist.dtype)
    full_d[rows, cols] = pdist
    full_d[cols, rows] = pdist
    return xp.ascontiguousarray(cdist_backward(full_g, x, x, p, full_d))
