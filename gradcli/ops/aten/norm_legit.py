"""ATen normalisation entries of the core opset: the ``_native_batch_norm_legit`` family
(what ``torch.export`` records for BatchNorm) and ``native_layer_norm_backward`` as a
graph op of its own.

The batch-norm overloads are ``native_batch_norm`` with the running statistics required
(``_native_batch_norm_legit``), absent (``.no_stats``) or used without training
(``_no_training``); derivatives.yaml gives all three native_batch_norm's formula, so
they share its VJP (Note [normalisation double backward] in norm_attention.py).
"""
from __future__ import annotations

import numpy as np

from ..library import _value
from .group_norm import _full_mask
from .meta import _batch_norm as _batch_norm_meta
from .norm_attention import (_layer_norm_layout, _ln_backward_fn, _norm_double_backward, _unmasked,
                             native_batch_norm_backward, native_batch_norm_op)
from .registry import aten, defvjp, defvjp_joint

_BN = (True, False, False)      # output_differentiability: only the normalised output


@aten("_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, "
      "Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
      "NativeBatchNormLegitBackward0", differentiable_outputs=_BN, meta=_batch_norm_meta)
def native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return native_batch_norm_op.fn(input, weight, bias, running_mean, running_var, training=training,
                                   momentum=momentum, eps=eps)


defvjp_joint(native_batch_norm_legit, native_batch_norm_backward, (True, True, True, False, False))


def _no_stats_meta(input, weight, bias, training, momentum, eps):
    _check_no_stats(training)
    return _batch_norm_meta(input, weight, bias, None, None, training, momentum, eps)


def _check_no_stats(training):
    # Note [batch norm without statistics or training]: with neither running statistics nor
    # training there is nothing to normalise with; PyTorch 2.13's CPU kernel crashes the
    # process there (a segmentation fault), gradcli refuses the entry
    if not training:
        raise ValueError("_native_batch_norm_legit.no_stats: training must be true when no running statistics "
                         "are given (PyTorch's kernel crashes on this input)")


@aten("_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, "
      "float momentum, float eps) -> (Tensor, Tensor, Tensor)", "NativeBatchNormLegitBackward1",
      differentiable_outputs=_BN, meta=_no_stats_meta)
def native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    _check_no_stats(training)
    return native_batch_norm_op.fn(input, weight, bias, None, None, training=training, momentum=momentum, eps=eps)


def _no_stats_vjp(gs, ans, input, weight, bias, training, momentum, eps, output_mask):
    return native_batch_norm_backward(gs, ans, input, weight, bias, None, None, training, momentum, eps,
                                      list(output_mask) + [False, False])[:3]


defvjp_joint(native_batch_norm_legit_no_stats, _no_stats_vjp, (True, True, True))


def _no_training_meta(input, weight, bias, running_mean, running_var, momentum, eps):
    return _batch_norm_meta(input, weight, bias, running_mean, running_var, False, momentum, eps)


@aten("_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, "
      "Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
      "NativeBatchNormLegitNoTrainingBackward0", differentiable_outputs=_BN, meta=_no_training_meta)
def native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    return native_batch_norm_op.fn(input, weight, bias, running_mean, running_var, training=False,
                                   momentum=momentum, eps=eps)


def _no_training_vjp(gs, ans, input, weight, bias, running_mean, running_var, momentum, eps, output_mask):
    return native_batch_norm_backward(gs, ans, input, weight, bias, running_mean, running_var, False, momentum,
                                      eps, output_mask)


defvjp_joint(native_batch_norm_legit_no_training, _no_training_vjp, (True, True, True, False, False))


# -- native_layer_norm_backward ----------------------------------------------------------------
def _ln_backward_check(grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask):
    """Its checks (shape rule and forward); the statistics' shape (``mean``/``rstd`` may come
    flattened: PyTorch reads them as one value per normalised row)."""
    _full_mask(output_mask)
    if weight is None or bias is None:
        raise ValueError("native_layer_norm_backward: weight and bias must be given when their gradients are "
                         "asked for (PyTorch fails without them)")
    layout = _layer_norm_layout(tuple(input.shape), list(normalized_shape))
    if tuple(weight.shape) != tuple(normalized_shape) or tuple(bias.shape) != tuple(normalized_shape):
        raise ValueError(f"native_layer_norm_backward: weight and bias must have the shape normalized_shape "
                         f"{list(normalized_shape)}")
    if tuple(grad_out.shape) != tuple(input.shape):
        raise ValueError(f"native_layer_norm_backward: grad_out of shape {list(grad_out.shape)} does not match "
                         f"the input {list(input.shape)}")
    rows = int(np.prod(layout.stat_shape, dtype=np.int64))
    for name, t in (("mean", mean), ("rstd", rstd)):
        if int(np.prod(t.shape, dtype=np.int64)) != rows:
            raise ValueError(f"native_layer_norm_backward: {name} of shape {list(t.shape)} must hold {rows} values")
    return layout


def _ln_backward_meta(grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask):
    _ln_backward_check(grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask)
    return [(tuple(input.shape), input.dtype), (tuple(weight.shape), input.dtype), (tuple(bias.shape), input.dtype)]


@aten("native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, "
      "Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
      "NativeLayerNormBackwardBackward0", meta=_ln_backward_meta)
def native_layer_norm_backward(grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask):
    layout = _ln_backward_check(grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask)
    return _ln_backward_fn(grad_out, input, mean.reshape(layout.stat_shape), rstd.reshape(layout.stat_shape),
                           weight, bias, list(normalized_shape), (True, True, True))


def _ln_double_backward_part(k):
    # grad_out, input, weight: layer_norm_double_backward(input, weight, grads[0], grads[1], grads[2],
    #   grad_out, mean, rstd, normalized_shape, grad_input_mask): the statistics are functions of the
    #   input there, so this is not the partial derivative with mean and rstd held (checked against torch)
    def vjp(gs, ans, grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask):
        layout = _layer_norm_layout(tuple(input.shape), list(normalized_shape))
        ggi, ggw, ggb = _unmasked(gs, (True, True, True))
        m = _value(mean).reshape(layout.stat_shape)
        r = _value(rstd).reshape(layout.stat_shape)
        return _norm_double_backward(ggi, ggw, ggb, grad_out, input, weight, m, r, True, layout)[k]
    return vjp


def _not_implemented(what):
    def vjp(*_, **__):
        raise RuntimeError(f"the derivative for 'native_layer_norm_backward {what}' is not implemented.")
    return vjp


# mean, rstd: not_implemented(...); bias: Tensor() (an edge, no gradient)
defvjp(native_layer_norm_backward, _ln_double_backward_part(0), _ln_double_backward_part(1),
       _not_implemented("mean"), _not_implemented("rstd"), _ln_double_backward_part(2),
       lambda *_, **__: None)

# (as native_batch_norm: the node saves the mean and inverse std, not the output)
for _op in (native_batch_norm_legit, native_batch_norm_legit_no_stats,
            native_batch_norm_legit_no_training):
    _op.saved_outputs = (1, 2)
del _op
