"""``_ctc_loss`` (what ``F.ctc_loss`` records: ``.Tensor`` with tensor lengths, node
``CtcLossBackward1``; ``.default`` with int lists, ``CtcLossBackward0``) and its backward op
``_ctc_loss_backward`` (arithmetic in ``gradcli.ops.aten_kernels.ctc``).

Only ``log_probs`` is differentiable, and only the first output (the loss); ``log_alpha`` is
saved for the backward. PyTorch has no derivative for ``_ctc_loss_backward``: the gradient is
first order only (Note [no double backward]), and the backward op called on Tensors records
PyTorch's NotImplemented node.

Note [a shape the values decide]: ``log_alpha`` is ``[N, T, 2 * max(target_lengths) + 1]``,
which the lengths' values decide, so the shape rule checks what the shapes allow and answers
unknown (as ``nonzero``'s). What the forward allocates stays bounded by the shapes: the
lengths are checked against them first (a target length past a padded target's width, or
concatenated targets whose lengths do not add up to their count, is refused), so
``log_alpha`` is at most ``[N, T, 2 S + 1]`` for targets of ``S`` columns (or ``S`` labels in
all).

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> lp = np.log(np.full((2, 1, 2), 0.5))
    >>> nll, alpha = OPS["aten._ctc_loss.Tensor"](lp, np.array([[1]]), np.array([2]), np.array([1]))
    >>> round(float(nll[0]), 4), alpha.shape
    (0.2877, (1, 2, 3))
"""
from __future__ import annotations

from ..aten_kernels import ctc as K
from .registry import aten, defvjp


def _meta(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    K.check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    return None          # Note [a shape the values decide]


@aten("_ctc_loss.Tensor(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, "
      "int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)", "CtcLossBackward1",
      differentiable_outputs=[True, False], meta=_meta)
def ctc_loss_tensor(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return list(K.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank))


@aten("_ctc_loss(Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, int blank=0, "
      "bool zero_infinity=False) -> (Tensor, Tensor)", "CtcLossBackward0",
      differentiable_outputs=[True, False], meta=_meta)
def ctc_loss_ints(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return list(K.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank))


def _backward_meta(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
                   blank, zero_infinity=False):
    K.check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    n = log_probs.shape[1]
    for name, x, shape in (("grad", grad, (n,)), ("neg_log_likelihood", neg_log_likelihood, (n,))):
        if tuple(x.shape) != shape:
            raise ValueError(f"_ctc_loss_backward: {name} must have shape {list(shape)}, got {list(x.shape)}")
    if len(log_alpha.shape) != 3 or tuple(log_alpha.shape[:2]) != (n, log_probs.shape[0]):
        raise ValueError(f"_ctc_loss_backward: log_alpha must have shape [{n}, {log_probs.shape[0]}, 2S + 1], "
                         f"got {list(log_alpha.shape)}")
    return [(tuple(log_probs.shape), log_probs.dtype)]


@aten("_ctc_loss_backward.Tensor(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, "
      "Tensor target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) "
      "-> Tensor", "torch::autograd::NotImplemented", meta=_backward_meta)
def ctc_loss_backward_tensor(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                             log_alpha, blank, zero_infinity=False):
    return K.ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                               log_alpha, blank, zero_infinity)


@aten("_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, int[] input_lengths, "
      "int[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) "
      "-> Tensor", "torch::autograd::NotImplemented", meta=_backward_meta)
def ctc_loss_backward_ints(grad, log_probs, targets, neg_log_likelihood, log_alpha, input_lengths,
                           target_lengths, blank, zero_infinity=False):
    return K.ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                               log_alpha, blank, zero_infinity)


# log_probs: _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, result0, result1,
#            blank, zero_infinity); the second output is not differentiable
def _vjp_tensor(g, ans, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return K.ctc_loss_backward(g[0], log_probs, targets, input_lengths, target_lengths, ans[0], ans[1], blank,
                               zero_infinity)


def _vjp_ints(g, ans, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    return K.ctc_loss_backward(g[0], log_probs, targets, input_lengths, target_lengths, ans[0], ans[1], blank,
                               zero_infinity)


defvjp(ctc_loss_tensor, _vjp_tensor, None, None, None, first_order_only="_ctc_loss_backward")
defvjp(ctc_loss_ints, _vjp_ints, None, first_order_only="_ctc_loss_backward")


def _not_implemented(*_, **__):
    # derivatives.yaml has no formula for it: PyTorch records a NotImplemented node
    raise RuntimeError("derivative for aten::_ctc_loss_backward is not implemented")


# grad, log_probs, neg_log_likelihood, log_alpha: NotImplemented; targets and lengths are integers
defvjp(ctc_loss_backward_tensor, _not_implemented, _not_implemented, None, None, None, _not_implemented,
       _not_implemented)
defvjp(ctc_loss_backward_ints, _not_implemented, _not_implemented, None, _not_implemented, _not_implemented)
