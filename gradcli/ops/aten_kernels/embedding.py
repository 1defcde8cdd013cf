"""``embedding_dense_backward`` as an array function."""
from ._common import array_module, scatter_add


def embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
                             scale_grad_by_freq):
    """``aten.embedding_dense_backward(Tensor grad_output, Tensor indices,
    SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) ->
    Tensor``.

    ``grad_output`` is ``indices.shape + (D,)``; returns the
    ``(num_weights, D)`` weight gradient: each row of ``grad_output`` is
    added to the row its index names, except rows whose index equals
    ``padding_idx`` (so ``-1``, PyTorch's "none", skips nothing); with
    ``scale_grad_by_freq`` each row is first divided by how often its index
    occurs in ``indices``."""
    xp = array_module(grad_output, indices)
    num_weights = int(num_weights)
    idx = indices.reshape(-1).astype(xp.int64, copy=False)
    d = grad_output.shape[-1]
    g = grad_output.reshape(idx.size, d)     # not (-1, d): d may be 0
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= num_weights):
        raise ValueError(f"embedding_dense_backward: an index is out of range "
                         f"[0, {num_weights})")
    if scale_grad_by_freq:
        counts = xp.bincount(idx, minlength=num_weights).astype(g.dtype)
        g = g / counts[idx][:, None]
    keep = idx != int(padding_idx)
    out = xp.zeros((num_weights, d), dtype=grad_output.dtype)
    return scatter_add(xp, out, idx[keep], g[keep])
