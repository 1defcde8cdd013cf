"""``nll_loss_forward`` and ``nll_loss_backward`` as array functions.

``reduction`` is ATen's int: 0 none, 1 mean, 2 sum."""
import numpy as np

from ._common import array_module

_REDUCTIONS = (0, 1, 2)


def _setup(op, self, target, weight, reduction, ignore_index):
    xp = array_module(self, target)
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")
    if self.ndim not in (1, 2):
        raise ValueError(f"{op}: input must be 1-D or 2-D, got shape {list(self.shape)}")
    x2 = self[None] if self.ndim == 1 else self
    t = target.reshape(-1).astype(xp.int64, copy=False)
    if t.shape[0] != x2.shape[0] or target.ndim != self.ndim - 1:
        raise ValueError(f"{op}: target shape {list(target.shape)} does not match "
                         f"input shape {list(self.shape)}")
    c = x2.shape[1]
    if weight is not None and weight.shape != (c,):
        raise ValueError(f"{op}: weight must have shape [{c}], got {list(weight.shape)}")
    valid = t != int(ignore_index)
    bad = valid & ((t < 0) | (t >= c))
    if bool(bad.any()):
        raise ValueError(f"{op}: Target {int(t[xp.argmax(bad)])} is out of bounds.")
    t_safe = xp.where(valid, t, 0)
    w = xp.ones(t.shape, dtype=self.dtype) if weight is None else weight[t_safe]
    w = xp.where(valid, w, 0).astype(self.dtype, copy=False)
    return xp, x2, t_safe, valid, w


def nll_loss_forward(self, target, weight, reduction, ignore_index):
    """``aten.nll_loss_forward(Tensor self, Tensor target, Tensor? weight,
    int reduction, SymInt ignore_index) -> (Tensor output, Tensor total_weight)``.

    ``self`` is ``(N, C)`` log-probabilities (or ``(C,)``), ``target`` ``(N,)``
    (or ``()``) class indices. Per element ``-w[t] * self[i, t]`` with
    ``w[t] = 0`` where ``t == ignore_index``; ``output`` is those (none),
    their sum (sum) or their sum over ``total_weight = sum(w)`` (mean, NaN
    when every target is ignored). ``total_weight`` is a 0-dim array (0 for
    none on a 2-D input; a 1-D input always reduces, so there it is
    ``w[t]``). An out-of-range target raises ValueError."""
    xp, x2, t, valid, w = _setup("nll_loss_forward", self, target, weight, reduction,
                                 ignore_index)
    picked = xp.take_along_axis(x2, t[:, None], axis=1)[:, 0]
    losses = xp.where(valid, -picked * w, 0).astype(self.dtype, copy=False)
    if reduction == 0 and self.ndim == 2:
        return losses, xp.zeros((), dtype=self.dtype)
    # Note [1-D nll_loss]: as ATen, an unbatched input takes the reducing
    # path even for reduction none: a 0-dim output and total_weight = w[t].
    total = xp.asarray(w.sum(), dtype=self.dtype)
    out = xp.asarray(losses.sum(), dtype=self.dtype)
    if reduction == 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            out = xp.asarray(out / total, dtype=self.dtype)
    return out, total


def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index,
                      total_weight):
    """``aten.nll_loss_backward(Tensor grad_output, Tensor self,
    Tensor target, Tensor? weight, int reduction, SymInt ignore_index,
    Tensor total_weight) -> Tensor``.

    Zeros shaped like ``self`` except ``[i, t_i] = -w[t_i] * g_i`` where
    ``g`` is ``grad_output`` (none), its scalar (sum) or the scalar over
    ``total_weight`` (mean)."""
    xp, x2, t, valid, w = _setup("nll_loss_backward", self, target, weight, reduction,
                                 ignore_index)
    g = grad_output.reshape(-1) if reduction == 0 else grad_output.reshape(())
    # every target ignored under mean: total_weight is 0 and g NaN, but every weight is 0 too
    # and the gradient is all zeros, as PyTorch's (no entry is written)
    with np.errstate(invalid="ignore", divide="ignore"):
        if reduction == 1:
            g = g / total_weight
        vals = (-w * g).astype(grad_output.dtype, copy=False)
    gi = xp.zeros(x2.shape, dtype=grad_output.dtype)
    gi[xp.arange(x2.shape[0]), t] = xp.where(valid, vals, 0)   # one entry per row
    return gi.reshape(self.shape)
