"""``_ctc_loss`` and ``_ctc_loss_backward`` as array functions: PyTorch's CPU kernel
(``LossCTC.cpp``), the connectionist temporal classification loss in log space.

Note [extended labels]: a target ``l`` of length ``L`` is read as ``l'`` of length ``2L + 1``,
the blank between and around its labels (``l'[s]`` is the blank at even ``s``, ``l[(s-1)/2]``
at odd ``s``). ``log_alpha[b, t, s]`` is the log-probability of all alignments of the first
``t + 1`` frames ending in ``l'[s]``: it comes from ``s``, ``s - 1`` and, where
``l'[s] != l'[s - 2]``, ``s - 2`` of the frame before, summed as PyTorch sums them (shifted by
their maximum, a maximum of ``-inf`` taken as 0 so that nothing reachable gives ``-inf``, not
NaN). The recursion runs over time and is vectorised over the batch and the extended labels;
``log_beta`` runs the same way backwards from the last frame.

Note [log_alpha beyond the lengths]: PyTorch's kernel allocates ``log_alpha`` uninitialised
and writes only frame 0 (all of it) and, for ``0 < t < input_length``, the extended labels
``s <= 2 * target_length``; the rest is whatever memory held. Its backward reads nothing
else. gradcli writes ``-inf`` (unreachable) there, so its outputs are defined everywhere and
equal to PyTorch's wherever PyTorch's are.

Note [an input of length zero]: PyTorch's kernel reads frame ``input_length - 1``, i.e.
memory before the tensor, for an input length of 0. gradcli gives what the definition says:
the empty alignment has probability 1 for an empty target (loss 0) and none for any other
(loss inf). Its gradient is zero, as PyTorch's (which zeroes frames past the input length).

Note [target labels in range]: PyTorch reads a target label outside ``[0, C)`` out of bounds
(a silently wrong loss); gradcli refuses it. A label equal to the blank is allowed, as
PyTorch allows it (the arithmetic is defined, the loss merely unusual).
"""
import numpy as np

from ...devices import to_host
from ._common import array_module

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _integral(name, x):
    if np.dtype(x.dtype).kind not in "iu":
        raise TypeError(f"_ctc_loss: {name} must be an integer tensor, got {np.dtype(x.dtype)}")


def check_shapes(log_probs, targets, input_lengths, target_lengths, blank):
    """The checks PyTorch makes on shapes and dtypes (arrays or ``Meta``; lengths may be int
    lists): one-line errors, PyTorch's wording where it has one."""
    if np.dtype(log_probs.dtype) not in _FLOATS:
        raise TypeError(f"\"ctc_loss_cpu\" not implemented for {np.dtype(log_probs.dtype)}: log_probs must be "
                        "float32 or float64")
    if len(log_probs.shape) != 3:
        raise ValueError(f"Expected 3-dimensional tensor, but got {len(log_probs.shape)}-dimensional tensor for "
                         "argument #1 'log_probs' (F.ctc_loss adds the batch dim of an unbatched input)")
    _integral("targets", targets)
    t_max, n, c = (int(s) for s in log_probs.shape)
    if not 0 <= int(blank) < c:
        raise ValueError(f"blank must be in label range: blank={blank}, {c} labels")
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if isinstance(lengths, (list, tuple)):
            size = len(lengths)
        else:
            _integral(name, lengths)
            if len(lengths.shape) > 1:
                raise ValueError(f"_ctc_loss: {name} must be 1-D, got shape {list(lengths.shape)}")
            size = int(np.prod(lengths.shape, dtype=np.int64))
        if size != n:
            raise ValueError(f"{name} must be of size batch_size ({n}), got {size}")
    if len(targets.shape) not in (1, 2):
        raise ValueError(f"_ctc_loss: targets must be 1-D (concatenated) or 2-D (padded, [batch, S]), got "
                         f"shape {list(targets.shape)}")
    if len(targets.shape) == 2 and int(targets.shape[0]) != n:
        raise ValueError(f"Expected tensor to have size {n} at dimension 0, but got size {targets.shape[0]} for "
                         "argument #2 'targets'")
    return t_max, n, c


def _lengths(x):
    return np.asarray(to_host(x) if not isinstance(x, (list, tuple)) else x, dtype=np.int64).reshape(-1)


def check_values(log_probs, targets, input_lengths, target_lengths, blank):
    """The checks on the lengths' and targets' values, before anything is allocated:
    ``(il, tl, labels)`` with ``labels`` the ``[N, S]`` padded targets (int64, host)."""
    t_max, n, c = check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    il, tl = _lengths(input_lengths), _lengths(target_lengths)
    for name, v in (("input_lengths", il), ("target_lengths", tl)):
        if v.size and int(v.min()) < 0:
            raise ValueError(f"Expected {name} to have value at least 0, but got value {int(v.min())}")
    if il.size and int(il.max()) > t_max:
        raise ValueError(f"Expected input_lengths to have value at most {t_max}, but got value {int(il.max())}")
    tg = np.asarray(to_host(targets)).astype(np.int64)
    s_max = int(tl.max()) if tl.size else 0
    if tg.ndim == 2:
        if tg.shape[1] < s_max:
            raise ValueError(f"Expected tensor to have size at least {s_max} at dimension 1, but got size "
                             f"{tg.shape[1]} for argument #2 'targets'")
        labels = tg[:, :s_max]
    else:
        total = int(tl.sum())
        if tg.shape[0] != total:
            raise ValueError(f"Expected tensor to have size {total} at dimension 0, but got size {tg.shape[0]} "
                             "for argument #2 'targets' (concatenated targets: the sum of target_lengths)")
        labels = np.full((n, s_max), int(blank), np.int64)
        starts = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64)
        for b in range(n):
            labels[b, :tl[b]] = tg[starts[b]:starts[b] + tl[b]]
    used = np.arange(s_max)[None, :] < tl[:, None]
    bad = used & ((labels < 0) | (labels >= c))
    if bad.any():
        b, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"_ctc_loss: target label {int(labels[b, k])} (batch {b}, position {k}) is out of "
                         f"range [0, {c})")
    labels = np.where(used, labels, int(blank))
    return il, tl, labels


def _extended(labels, blank):
    """``l'`` of every target ([N, 2S + 1]) and where the skip from ``s - 2`` is allowed."""
    n, s_max = labels.shape
    ext = np.full((n, 2 * s_max + 1), int(blank), np.int64)
    ext[:, 1::2] = labels
    skip = np.zeros(ext.shape, bool)
    skip[:, 2:] = ext[:, 2:] != ext[:, :-2]
    return ext, skip


def _sum3(xp, a1, a2, a3):
    """log(exp(a1) + exp(a2) + exp(a3)) as PyTorch's kernel computes it (Note [extended labels])."""
    m = xp.maximum(xp.maximum(a1, a2), a3)
    m = xp.where(m == -np.inf, 0, m)
    return xp.log(xp.exp(a1 - m) + xp.exp(a2 - m) + xp.exp(a3 - m)) + m


def _shift(xp, a, k):
    """``a`` moved ``k`` places along its last axis (towards larger ``s`` for k > 0), -inf filled."""
    out = xp.full_like(a, -np.inf)
    if k > 0:
        out[..., k:] = a[..., :-k]
    else:
        out[..., :k] = a[..., -k:]
    return out


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0):
    """``(neg_log_likelihood [N], log_alpha [N, T, 2S + 1])`` of ``log_probs`` ``[T, N, C]``
    (Note [extended labels], Note [log_alpha beyond the lengths]).

    >>> lp = np.log(np.full((2, 1, 2), 0.5))
    >>> [round(float(v), 4) for v in ctc_loss(lp, np.array([[1]]), [2], [1])[0]]
    [0.2877]
    """
    il, tl, labels = check_values(log_probs, targets, input_lengths, target_lengths, blank)
    xp = array_module(log_probs)
    t_max, n, _ = log_probs.shape
    ext, skip = _extended(labels, blank)
    width = ext.shape[1]
    bidx = np.arange(n)[:, None]
    lp_ext = log_probs[:, bidx, ext]                               # [T, N, 2S + 1]
    valid = np.arange(width)[None, :] < (2 * tl + 1)[:, None]      # [N, 2S + 1]
    alpha = xp.full((n, t_max, width), -np.inf, log_probs.dtype)
    if t_max:
        first = alpha[:, 0]
        started = il > 0
        first[started, 0] = lp_ext[0, started, 0]
        second = started & (tl > 0)
        first[second, 1] = lp_ext[0, second, 1]
    with np.errstate(all="ignore"):
        for t in range(1, t_max):
            prev = alpha[:, t - 1]
            a3 = xp.where(skip, _shift(xp, prev, 2), -np.inf)
            row = _sum3(xp, prev, _shift(xp, prev, 1), a3) + lp_ext[t]
            keep = valid & (t < il)[:, None]
            alpha[:, t] = xp.where(keep, row, -np.inf)
        nll = xp.empty(n, log_probs.dtype)
        for b in range(n):
            if il[b] == 0:                    # Note [an input of length zero]
                nll[b] = 0.0 if tl[b] == 0 else np.inf
                continue
            last = alpha[b, il[b] - 1]
            if tl[b] == 0:
                nll[b] = -last[0]
            else:
                l1, l2 = last[2 * tl[b]], last[2 * tl[b] - 1]
                m = max(l1, l2)
                m = 0.0 if m == -np.inf else m
                nll[b] = -(np.log(np.exp(l1 - m) + np.exp(l2 - m)) + m)
    return nll, alpha


def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                      blank, zero_infinity=False):
    """The gradient for ``log_probs`` given ``grad`` ([N], for the loss) and the forward's
    outputs, as PyTorch's ``ctc_loss_backward_cpu_template``: ``exp(lp) - exp(log(sum of
    alpha * beta over the extended labels showing c) + nll - lp)``, times ``grad``; zero past
    each input's length, and for a whole sample whose loss is inf under ``zero_infinity``.

    >>> lp = np.log(np.full((2, 1, 2), 0.5))
    >>> nll, alpha = ctc_loss(lp, np.array([[1]]), [2], [1])
    >>> ctc_loss_backward(np.ones(1), lp, np.array([[1]]), [2], [1], nll, alpha, 0)[:, 0].round(4).tolist()
    [[0.1667, -0.1667], [0.1667, -0.1667]]
    """
    il, tl, labels = check_values(log_probs, targets, input_lengths, target_lengths, blank)
    xp = array_module(log_probs)
    t_max, n, c = log_probs.shape
    ext, skip = _extended(labels, blank)
    width = ext.shape[1]
    if tuple(log_alpha.shape) != (n, t_max, width) or tuple(neg_log_likelihood.shape) != (n,) \
            or tuple(grad.shape) != (n,):
        raise ValueError(f"_ctc_loss_backward: grad {list(grad.shape)}, neg_log_likelihood "
                         f"{list(neg_log_likelihood.shape)} and log_alpha {list(log_alpha.shape)} do not fit "
                         f"the forward's outputs ([{n}], [{n}], [{n}, {t_max}, {width}])")
    bidx = np.arange(n)[:, None]
    lp_ext = log_probs[:, bidx, ext]                               # [T, N, 2S + 1]
    valid = np.arange(width)[None, :] < (2 * tl + 1)[:, None]
    skip_up = _shift(np, skip.astype(float), -2) > 0               # the skip from s + 2 down to s
    beta = xp.full((n, t_max, width), -np.inf, log_probs.dtype)
    last_col = 2 * tl
    with np.errstate(all="ignore"):
        for t in range(t_max - 1, -1, -1):
            starts = il - 1 == t                                   # each input's last frame
            if starts.any():
                row = xp.full((n, width), -np.inf, log_probs.dtype)
                b = np.nonzero(starts)[0]
                row[b, last_col[b]] = lp_ext[t, b, last_col[b]]
                b2 = b[tl[b] > 0]
                row[b2, last_col[b2] - 1] = lp_ext[t, b2, last_col[b2] - 1]
                beta[:, t] = xp.where(starts[:, None], row, beta[:, t])
            inside = t < il - 1
            if t + 1 < t_max and inside.any():
                nxt = beta[:, t + 1]
                b3 = xp.where(skip_up, _shift(xp, nxt, -2), -np.inf)
                row = _sum3(xp, nxt, _shift(xp, nxt, -1), b3) + lp_ext[t]
                beta[:, t] = xp.where(valid & inside[:, None], row, beta[:, t])
        # log of the sum of alpha * beta over the extended labels showing each label
        ab = log_alpha.transpose(1, 0, 2) + beta.transpose(1, 0, 2)   # [T, N, 2S + 1]
        alive = (np.arange(t_max)[:, None, None] < il[None, :, None]) & valid[None]
        ab = xp.where(alive, ab, -np.inf)
        acc = xp.full((t_max, n, c), -np.inf, log_probs.dtype)
        # one frame at a time: the index arrays stay [N, 2S + 1], not the size of log_alpha
        rows, labels_flat = np.broadcast_to(bidx, ext.shape).ravel(), ext.ravel()
        for t in range(t_max):
            np.logaddexp.at(acc[t], (rows, labels_flat), ab[t].ravel())
        nll = neg_log_likelihood[None, :, None]
        out = (xp.exp(log_probs) - xp.exp(acc + nll - log_probs)) * grad[None, :, None]
    out[np.arange(t_max)[:, None] >= il[None, :]] = 0
    if zero_infinity:
        out[:, neg_log_likelihood == np.inf] = 0
    return out.astype(log_probs.dtype, copy=False)
