"""ATen batch norm, layer norm and CPU flash attention: entries and their NumPy kernels.

As in ``conv_pool``, each kernel is named after the ATen function it stands
for and takes its arguments; the arithmetic follows the CPU kernels' order of
operations where that changes the last bits (``x * alpha + beta`` with
per-channel ``alpha = invstd * weight``, and so on).
"""
from __future__ import annotations

import math

import numpy as np

from .pointwise import array_module, as_dtype
from .registry import aten, defvjp_joint


# -- batch norm ------------------------------------------------------------------------
def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _reduce_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _batch_norm_stats(x, eps):
    axes = _reduce_axes(x)
    mean = np.mean(x, axis=axes)
    var = np.mean(np.square(x - mean.reshape(_channel_shape(x))), axis=axes)
    return mean, var, 1 / np.sqrt(var + eps)


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """(output, save_mean, save_invstd); in training the running statistics are updated in place."""
    x = input
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected an input with at least 2 dims, got {list(x.shape)}")
    c = x.shape[1]
    if training:
        n = x.size // c
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(x.shape)}")
        mean, var, invstd = _batch_norm_stats(x, eps)
        if running_mean is not None:
            running_mean[...] = momentum * mean + (1 - momentum) * running_mean
        if running_var is not None:
            running_var[...] = momentum * var * (n / (n - 1)) + (1 - momentum) * running_var
        save_mean, save_invstd = mean, invstd
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are required when not training")
        mean, invstd = running_mean, 1 / np.sqrt(running_var + eps)
        save_mean = save_invstd = np.zeros_like(x, shape=(0,))
    alpha = invstd if weight is None else invstd * weight
    beta = -mean * alpha if bias is None else bias - mean * alpha
    shape = _channel_shape(x)
    out = x * alpha.reshape(shape) + beta.reshape(shape)
    return (as_dtype(out, x.dtype), as_dtype(save_mean, x.dtype), as_dtype(save_invstd, x.dtype))


def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                               train, eps, output_mask):
    x = input
    shape, axes = _channel_shape(x), _reduce_axes(x)
    if train:
        mean, invstd = save_mean, save_invstd
    else:
        mean, invstd = running_mean, 1 / np.sqrt(running_var + eps)
    centered = x - mean.reshape(shape)
    total = np.sum(grad_out, axis=axes)
    dotp = np.sum(centered * grad_out, axis=axes)
    w = np.ones_like(invstd) if weight is None else weight
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if train:
            n = x.size // x.shape[1]
            k = (dotp * invstd * invstd / n).reshape(shape)
            grad_input = (grad_out - (total / n).reshape(shape) - centered * k) * (invstd * w).reshape(shape)
        else:
            grad_input = grad_out * (invstd * w).reshape(shape)
        grad_input = as_dtype(grad_input, x.dtype)
    if output_mask[1]:
        grad_weight = dotp * invstd
    if output_mask[2]:
        grad_bias = total
    return grad_input, grad_weight, grad_bias


@aten("native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
      "bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)", "NativeBatchNormBackward0",
      differentiable_outputs=(True, False, False))
def native_batch_norm_op(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def _batch_norm_vjp(gs, ans, input, weight, bias, running_mean, running_var, training, momentum, eps,
                    output_mask):
    # input, weight, bias: "grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean,
    #   running_var, result1, result2, training, eps, grad_input_mask) : ..."
    mask = [output_mask[0], output_mask[1] and weight is not None, output_mask[2] and bias is not None]
    return native_batch_norm_backward(gs[0], input, weight, running_mean, running_var, ans[1], ans[2],
                                      training, eps, mask) + (None, None)


defvjp_joint(native_batch_norm_op, _batch_norm_vjp, (True, True, True, False, False))


# -- layer norm --------------------------------------------------------------------------
def _layer_norm_axes(x, normalized_shape):
    k = len(normalized_shape)
    if tuple(x.shape[x.ndim - k:]) != tuple(normalized_shape) or k == 0:
        raise ValueError(f"layer_norm: normalized_shape {list(normalized_shape)} does not match the end of "
                         f"input shape {list(x.shape)}")
    return tuple(range(x.ndim - k, x.ndim))


def native_layer_norm(input, normalized_shape, weight, bias, eps):
    x = input
    axes = _layer_norm_axes(x, normalized_shape)
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return as_dtype(out, x.dtype), as_dtype(mean, x.dtype), as_dtype(rstd, x.dtype)


def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    x = input
    axes = _layer_norm_axes(x, normalized_shape)
    n = int(np.prod(normalized_shape))
    x_hat = (x - mean) * rstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gw = grad_out if weight is None else grad_out * weight
        ds = np.sum(gw * x, axis=axes, keepdims=True)
        db = np.sum(gw, axis=axes, keepdims=True)
        b = (db * mean - ds) * rstd ** 3 / n
        c = -b * mean - db * rstd / n
        grad_input = as_dtype(rstd * gw + b * x + c, x.dtype)
    batch = tuple(range(x.ndim - len(axes)))
    if output_mask[1]:
        grad_weight = np.sum(grad_out * x_hat, axis=batch)
    if output_mask[2]:
        grad_bias = np.sum(grad_out, axis=batch)
    return grad_input, grad_weight, grad_bias


@aten("native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
      "-> (Tensor, Tensor, Tensor)", "NativeLayerNormBackward0", differentiable_outputs=(True, False, False))
def native_layer_norm_op(input, weight, bias, normalized_shape, eps):
    return native_layer_norm(input, normalized_shape, weight, bias, eps)


def _layer_norm_vjp(gs, ans, input, weight, bias, normalized_shape, eps, output_mask):
    # input, weight, bias: "grad.defined() ? native_layer_norm_backward_symint(grad, input, normalized_shape,
    #   result1, result2, weight, bias, grad_input_mask) : ..."
    mask = [output_mask[0], output_mask[1] and weight is not None, output_mask[2] and bias is not None]
    return native_layer_norm_backward(gs[0], input, normalized_shape, ans[1], ans[2], weight, bias, mask)


defvjp_joint(native_layer_norm_op, _layer_norm_vjp, (True, True, True))


# -- attention ----------------------------------------------------------------------------
def _attention_scores(query, key, is_causal, attn_mask, scale):
    if scale is None:
        scale = 1 / math.sqrt(query.shape[-1])
    s = np.matmul(query, np.swapaxes(key, -1, -2)) * scale
    if is_causal:
        lq, lk = s.shape[-2:]
        s = np.where(array_module(s).tril(array_module(s).ones((lq, lk), bool)), s, -np.inf)
    if attn_mask is not None:
        s = s + attn_mask
    return s, scale


def _check_attention(query, key, value, dropout_p, attn_mask):
    if dropout_p != 0:
        raise ValueError("_scaled_dot_product_flash_attention_for_cpu: dropout_p must be 0 (random dropout "
                         "cannot be replayed; export the model in eval mode or with dropout disabled)")
    if not (query.shape[-1] == key.shape[-1] == value.shape[-1]):
        raise ValueError("scaled_dot_product_attention_flash_attention: Q/K/V should have the same head size")
    if attn_mask is not None and attn_mask.dtype != query.dtype:
        raise ValueError("scaled_dot_product_attention_flash_attention: Attention mask is the same data "
                         "type as query")


def scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, attn_mask, scale):
    """(output, logsumexp): softmax(q k^T * scale + mask) v; a fully masked row gives 0 (and logsumexp 0)."""
    _check_attention(query, key, value, dropout_p, attn_mask)
    s, _ = _attention_scores(query, key, is_causal, attn_mask, scale)
    m = np.max(s, axis=-1, keepdims=True)
    dead = m == -np.inf
    m = np.where(dead, 0, m)
    e = np.exp(s - m)
    total = np.sum(e, axis=-1, keepdims=True)
    p = np.where(dead, 0, e / np.where(dead, 1, total))
    lse = np.where(dead, 0, np.log(np.where(dead, 1, total)) + m)[..., 0]
    return as_dtype(np.matmul(p, value), query.dtype), as_dtype(lse, query.dtype)


def scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p,
                                                        is_causal, attn_mask, scale):
    s, scale = _attention_scores(query, key, is_causal, attn_mask, scale)
    p = np.exp(s - logsumexp[..., None])
    grad_value = np.matmul(np.swapaxes(p, -1, -2), grad_out)
    dp = np.matmul(grad_out, np.swapaxes(value, -1, -2))
    ds = p * (dp - np.sum(grad_out * out, axis=-1, keepdims=True))
    grad_query = np.matmul(ds, key) * scale
    grad_key = np.matmul(np.swapaxes(ds, -1, -2), query) * scale
    return grad_query, grad_key, grad_value


@aten("_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., "
      "bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)",
      "ScaledDotProductFlashAttentionForCpuBackward0", differentiable_outputs=(True, False))
def flash_attention_for_cpu(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    return scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, attn_mask, scale)


def _attention_vjp(gs, ans, query, key, value, attn_mask, dropout_p=0.0, is_causal=False, scale=None,
                   output_mask=None):
    # query, key, value: _scaled_dot_product_flash_attention_for_cpu_backward(grad, query, key, value,
    #   output, logsumexp, dropout_p, is_causal, attn_mask, scale); attn_mask: not differentiable
    return scaled_dot_product_flash_attention_for_cpu_backward(
        gs[0], query, key, value, ans[0], ans[1], dropout_p, is_causal, attn_mask, scale) + (None,)


defvjp_joint(flash_attention_for_cpu, _attention_vjp, (True, True, True, False))
