"""ATen batch norm, layer norm and CPU flash attention entries. The forwards are
``gradcli.ops.aten_kernels`` (tested against ``torch.ops.aten`` on their own); the
norm backwards are written with ops (Note [normalisation backward with ops]).
"""
from __future__ import annotations

import numpy as np

from .. import aten_kernels as K
from .. import library as L
from ...autograd.tensor import Tensor
from ..library import _value
from .pointwise import scalar
from .registry import aten, defvjp_joint


# -- batch norm ------------------------------------------------------------------------
@aten("native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
      "bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)", "NativeBatchNormBackward0",
      differentiable_outputs=(True, False, False))
def native_batch_norm_op(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return K.native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


# Note [normalisation backward with ops]: the batch- and layer-norm backwards are
# written with ops, so that under create_graph they record themselves; one formula
# serves every order. The statistics (mean, invstd) are functions of the input: when
# the input is a Tensor that requires grad (create_graph) they are recomputed from it
# with ops, so the second derivative sees them vary (PyTorch's batchnorm_double_backward
# / layer_norm_double_backward); otherwise they are constants of this backward and the
# forward's saved ones are used (save_mean/save_invstd, mean/rstd: the same values).
def _normalised(x, axes, eps, saved_mean, saved_invstd, keep_shape):
    """(xhat, invstd) of ``x`` over ``axes`` (biased variance), in ``keep_shape``."""
    if not (type(x) is Tensor and x.requires_grad):
        mu = np.reshape(_value(saved_mean), keep_shape)
        invstd = np.reshape(_value(saved_invstd), keep_shape)
        return L.mul(L.sub(x, mu), invstd), invstd
    mu = L.mean(x, axis=axes, keepdims=True)
    xc = L.sub(x, mu)
    var = L.mean(L.mul(xc, xc), axis=axes, keepdims=True)
    invstd = L.div(scalar(1, _value(x)), L.sqrt(L.add(var, scalar(eps, _value(x)))))
    return L.mul(xc, invstd), invstd


def _centred_grad(gx, xhat, invstd, axes):
    # invstd * (gx - mean(gx) - xhat * mean(gx * xhat)): the gradient through the batch statistics
    return L.mul(invstd, L.sub(L.sub(gx, L.mean(gx, axis=axes, keepdims=True)),
                               L.mul(xhat, L.mean(L.mul(gx, xhat), axis=axes, keepdims=True))))


def native_batch_norm_backward(gs, ans, input, weight, bias, running_mean, running_var, training, momentum, eps,
                               output_mask):
    """The VJP of ``native_batch_norm``: (grad_input, grad_weight, grad_bias, None, None), None
    where ``output_mask`` is false or the parameter is absent; arrays or recording Tensors."""
    # input, weight, bias: "grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean,
    #   running_var, result1, result2, training, eps, grad_input_mask) : ..."
    g = gs[0]
    if len(input.shape) < 2:
        raise ValueError(f"native_batch_norm: expected an input with at least 2 dims, got {list(input.shape)}")
    axes = (0,) + tuple(range(2, len(input.shape)))
    channel = (1, input.shape[1]) + (1,) * (len(input.shape) - 2)
    if training:
        xhat, invstd = _normalised(input, axes, eps, ans[1], ans[2], channel)
    else:           # the running statistics are constants
        raw = _value(input)
        invstd = np.reshape(1.0 / np.sqrt(running_var + eps), channel).astype(raw.dtype, copy=False)
        xhat = L.mul(L.sub(input, np.reshape(running_mean, channel).astype(raw.dtype, copy=False)), invstd)
    gi = gw = gb = None
    if output_mask[0]:
        gx = g if weight is None else L.mul(g, L.reshape(weight, shape=channel))
        gi = _centred_grad(gx, xhat, invstd, axes) if training else L.mul(gx, invstd)
    if output_mask[1] and weight is not None:
        gw = L.sum_(L.mul(g, xhat), axis=axes)
    if output_mask[2] and bias is not None:
        gb = L.sum_(g, axis=axes)
    return gi, gw, gb, None, None


defvjp_joint(native_batch_norm_op, native_batch_norm_backward, (True, True, True, False, False))


# -- layer norm --------------------------------------------------------------------------
@aten("native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
      "-> (Tensor, Tensor, Tensor)", "NativeLayerNormBackward0", differentiable_outputs=(True, False, False))
def native_layer_norm_op(input, weight, bias, normalized_shape, eps):
    return K.native_layer_norm(input, normalized_shape, weight, bias, eps)


def native_layer_norm_backward(gs, ans, input, weight, bias, normalized_shape, eps, output_mask):
    """The VJP of ``native_layer_norm``: (grad_input, grad_weight, grad_bias), None where
    ``output_mask`` is false or the parameter is absent; arrays or recording Tensors."""
    # input, weight, bias: "grad.defined() ? native_layer_norm_backward_symint(grad, input, normalized_shape,
    #   result1, result2, weight, bias, grad_input_mask) : ..."
    g = gs[0]
    start = len(input.shape) - len(normalized_shape)
    axes = tuple(range(start, len(input.shape)))
    batch = tuple(range(start))
    xhat, rstd = _normalised(input, axes, eps, ans[1], ans[2], tuple(input.shape[:start]) + (1,) * len(axes))
    gi = gw = gb = None
    if output_mask[0]:
        gi = _centred_grad(g if weight is None else L.mul(g, weight), xhat, rstd, axes)
    if output_mask[1] and weight is not None:
        gw = L.sum_(L.mul(g, xhat), axis=batch) if batch else L.mul(g, xhat)
    if output_mask[2] and bias is not None:
        gb = L.sum_(g, axis=batch) if batch else g
    return gi, gw, gb


defvjp_joint(native_layer_norm_op, native_layer_norm_backward, (True, True, True))


# -- attention ----------------------------------------------------------------------------
@aten("_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., "
      "bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)",
      "ScaledDotProductFlashAttentionForCpuBackward0", differentiable_outputs=(True, False))
def flash_attention_for_cpu(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    return K._scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal,
                                                          attn_mask=attn_mask, scale=scale)


def _attention_vjp(gs, ans, query, key, value, attn_mask, dropout_p=0.0, is_causal=False, scale=None,
                   output_mask=None):
    # query, key, value: _scaled_dot_product_flash_attention_for_cpu_backward(grad, query, key, value,
    #   output, logsumexp, dropout_p, is_causal, attn_mask, scale); attn_mask: not differentiable
    return K._scaled_dot_product_flash_attention_for_cpu_backward(
        gs[0], query, key, value, ans[0], ans[1], dropout_p, is_causal, attn_mask=attn_mask,
        scale=scale) + (None,)


defvjp_joint(flash_attention_for_cpu, _attention_vjp, (True, True, True, False),
             first_order_only="_scaled_dot_product_flash_attention_for_cpu_backward")
