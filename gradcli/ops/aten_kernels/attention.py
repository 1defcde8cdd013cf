"""The math of ``_scaled_dot_product_flash_attention_for_cpu`` and its
backward, as array functions (no dropout)."""
import math

import numpy as np

from ._common import array_module, check_dtype

_OP = "_scaled_dot_product_flash_attention_for_cpu"


def _check(query, key, value, dropout_p, attn_mask):
    if dropout_p != 0:
        raise ValueError(f"{_OP}: dropout_p must be 0 (got {dropout_p}); gradcli replays "
                         "attention deterministically, so export the model in eval mode "
                         "or with attention dropout 0")
    for x in (query, key, value):
        check_dtype(_OP, x, "f")
        if x.dtype != query.dtype:
            raise TypeError(f"{_OP}: query, key and value must have one dtype, got {query.dtype}, "
                            f"{key.dtype} and {value.dtype}")
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ValueError(f"{_OP}: query, key and value must be 4-D (batch, heads, seq, dim)")
    if not (query.shape[-1] == key.shape[-1] == value.shape[-1]):
        raise ValueError(f"{_OP}: Q/K/V should have the same head size")
    if attn_mask is not None and attn_mask.dtype != query.dtype:
        raise ValueError(f"{_OP}: attn_mask must have the query's dtype {query.dtype} "
                         f"(an additive mask), got {attn_mask.dtype}")


def groups(query, key) -> int:
    """Note [Grouped-query attention]: how many query heads share one key/value head.

    PyTorch's CPU kernels (and ``scaled_dot_product_attention(enable_gqa=True)``)
    take key/value with fewer heads than the query when the query's head count is a
    multiple of theirs: query head ``h`` attends with key/value head ``h // groups``
    (``repeat_interleave`` on the head dim). 1 when the heads are equal or broadcast."""
    if query.ndim != 4 or key.ndim != 4:
        return 1
    hq, hk = query.shape[1], key.shape[1]
    if hq == hk or hk == 1 or hq == 1 or hq % hk:
        return 1
    return hq // hk


def _expand_heads(xp, x, g):
    return x if g == 1 else xp.repeat(x, g, axis=1)


def _fold_heads(a, g):
    """The gradient of ``_expand_heads``: each key/value head sums its query heads."""
    if g == 1:
        return a
    b, h = a.shape[:2]
    return a.reshape((b, h // g, g) + a.shape[2:]).sum(axis=2)


def _scale(query, scale):
    return 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)


def _last_two_swapped(xp, a):
    """``a`` with its last two dims swapped (a view); a host array's own method, without
    NumPy's Python wrapper around it (``np.swapaxes``)."""
    return a.swapaxes(-1, -2) if type(a) is np.ndarray else xp.swapaxes(a, -1, -2)


def _scores(xp, query, key, is_causal, attn_mask, scale):
    s = xp.matmul(query, _last_two_swapped(xp, key)) * scale
    if is_causal:
        L, S = s.shape[-2:]
        future = xp.arange(S)[None, :] > xp.arange(L)[:, None]   # top-left aligned
        s = xp.where(future, -xp.inf, s).astype(query.dtype, copy=False)
    if attn_mask is not None:
        s = s + attn_mask
    return s


def _sum_to(xp, a, shape):
    """``a`` summed over the broadcast dims so that it has ``shape``."""
    if a.shape == tuple(shape):
        return a
    axes = tuple(i for i, (n, m) in enumerate(zip(a.shape, shape)) if m == 1 and n != 1)
    return a.sum(axis=axes, keepdims=True).reshape(shape)


def _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p=0.0,
                                                is_causal=False, *, attn_mask=None,
                                                scale=None):
    """``aten._scaled_dot_product_flash_attention_for_cpu(Tensor query,
    Tensor key, Tensor value, float dropout_p=0.0, bool is_causal=False, *,
    Tensor? attn_mask=None, float? scale=None) -> (Tensor output,
    Tensor logsumexp)``.

    ``query`` ``(B, H, L, E)``, ``key``/``value`` ``(B, H, S, E)`` (batch and
    head dims broadcast); ``scores = q @ k^T * scale`` (default
    ``1/sqrt(E)``), ``-inf`` above the diagonal when ``is_causal``
    (top-left aligned), plus ``attn_mask`` (additive, the query's dtype).
    Returns ``output = softmax(scores) @ v`` ``(B, H, L, E)`` and
    ``logsumexp`` ``(B, H, L)`` of the scores. A row whose scores are all
    ``-inf`` gives output 0 and logsumexp 0, as PyTorch's CPU kernel.
    ``dropout_p`` other than 0 raises ValueError."""
    _check(query, key, value, dropout_p, attn_mask)
    xp = array_module(query, key, value)
    g = groups(query, key)
    key, value = _expand_heads(xp, key, g), _expand_heads(xp, value, g)
    s = _scores(xp, query, key, is_causal, attn_mask, _scale(query, scale))
    m = s.max(axis=-1, keepdims=True)
    dead = (m == -xp.inf)
    m = xp.where(dead, 0, m).astype(s.dtype, copy=False)
    e = xp.exp(s - m)
    z = e.sum(axis=-1, keepdims=True)
    z = xp.where(dead, 1, z).astype(s.dtype, copy=False)
    out = xp.matmul(e / z, value)
    lse = xp.where(dead, 0, xp.log(z) + m).astype(s.dtype, copy=False)[..., 0]
    # PyTorch's layouts (what a later view sees, Note [view strides]): the output is
    # empty_like(query), the logsumexp (B, L, H) transposed to (B, H, L)
    if out.shape == query.shape:
        laid = xp.empty_like(query, dtype=out.dtype)
        laid[...] = out
        out = laid
    if lse.ndim >= 2:
        laid = xp.empty_like(lse, shape=lse.shape[:-2] + lse.shape[:-3:-1], order="C").swapaxes(-1, -2)
        laid[...] = lse
        lse = laid
    return out, lse


def _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out,
                                                         logsumexp, dropout_p, is_causal,
                                                         *, attn_mask=None, scale=None):
    """``aten._scaled_dot_product_flash_attention_for_cpu_backward(
    Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out,
    Tensor logsumexp, float dropout_p, bool is_causal, *,
    Tensor? attn_mask=None, float? scale=None) -> (Tensor grad_query,
    Tensor grad_key, Tensor grad_value)``.

    Recomputes the probabilities as ``exp(scores - logsumexp)`` and returns
    the gradients (``attn_mask`` gets none, as PyTorch); ``grad_key`` and
    ``grad_value`` are summed back to broadcast shapes."""
    _check(query, key, value, dropout_p, attn_mask)
    xp = array_module(grad_out, query, key, value)
    g = groups(query, key)
    key_shape, value_shape = key.shape, value.shape
    key, value = _expand_heads(xp, key, g), _expand_heads(xp, value, g)
    sc = _scale(query, scale)
    s = _scores(xp, query, key, is_causal, attn_mask, sc)
    p = xp.exp(s - logsumexp[..., None])
    gv = xp.matmul(_last_two_swapped(xp, p), grad_out)
    dp = xp.matmul(grad_out, _last_two_swapped(xp, value))
    ds = p * (dp - (grad_out * out).sum(axis=-1, keepdims=True))
    gq = xp.matmul(ds, key) * sc
    gk = xp.matmul(_last_two_swapped(xp, ds), query) * sc
    return (_sum_to(xp, gq, query.shape), _sum_to(xp, _fold_heads(gk, g), key_shape),
            _sum_to(xp, _fold_heads(gv, g), value_shape))
