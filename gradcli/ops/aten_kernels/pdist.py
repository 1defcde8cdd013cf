"""``_pdist_forward`` and ``_pdist_backward`` as array functions: the p-norm distances
between every pair of rows of one matrix, in the order of the upper triangle (row by row).

Note [pdist through cdist]: a pair's distance is ``cdist``'s and its gradient for both rows
follows from ``cdist_backward`` given a symmetric gradient matrix: the gradient of
``d(x_i, x_j)`` for ``x_i`` with ``j`` either side of ``i`` is one row of that product, the
zero distance on the diagonal contributing zero as PyTorch's kernel makes it."""
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


# Note [pdist in blocks of rows]: the differences of a block of rows with every row are
# (rows, n, m) values; blocks keep that near _BLOCK values whatever n and m, so the memory
# beside the result stays bounded (a whole n x n x m at once would be m times the result)
_BLOCK = 1 << 22


def _blocks(n, m):
    step = max(1, _BLOCK // max(1, n * max(m, 1)))
    return ((a, min(n, a + step)) for a in range(0, n, step))


def _pair_index(xp, rows, n):
    """For rows ``i`` and every column ``j``: the position of pair (min, max) in the condensed
    upper triangle, row by row (the diagonal maps to 0; its value is masked by the caller)."""
    i = rows[:, None]
    j = xp.arange(n)[None, :]
    lo, hi = xp.minimum(i, j), xp.maximum(i, j)
    return xp.where(lo == hi, 0, lo * n - lo * (lo + 1) // 2 + (hi - lo - 1))


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
    n, m = x.shape
    out = xp.zeros(shape, x.dtype)
    for a, b in _blocks(n, m):              # Note [pdist in blocks of rows]
        d = cdist_forward(x[a:b], x, p)     # (b - a, n)
        for i in range(a, b):
            k = i * n - i * (i + 1) // 2
            out[k:k + n - i - 1] = d[i - a, i + 1:]
    return out


def pdist_backward(grad, x, p, pdist):
    """``aten._pdist_backward(Tensor grad, Tensor self, float p, Tensor pdist) -> Tensor``: the
    gradient for ``self`` (Note [pdist through cdist]), a block of rows at a time."""
    xp = array_module(grad, x)
    n, m = x.shape
    out = xp.zeros(x.shape, x.dtype)
    if pdist.shape[0] == 0:
        return out
    for a, b in _blocks(n, m):
        rows = xp.arange(a, b)
        k = _pair_index(xp, rows, n)
        diagonal = rows[:, None] == xp.arange(n)[None, :]
        g = xp.where(diagonal, 0, grad[k]).astype(grad.dtype, copy=False)
        d = xp.where(diagonal, 0, pdist[k]).astype(pdist.dtype, copy=False)
        out[a:b] = cdist_backward(g, x[a:b], x, p, d)
    return out
