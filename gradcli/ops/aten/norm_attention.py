"""ATen batch norm, layer norm and CPU flash attention entries; their arithmetic is
``gradcli.ops.aten_kernels`` (tested against ``torch.ops.aten`` on their own).
"""
from __future__ import annotations

from .. import aten_kernels as K
from .registry import aten, defvjp_joint


# -- batch norm ------------------------------------------------------------------------
@aten("native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
      "bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)", "NativeBatchNormBackward0",
      differentiable_outputs=(True, False, False))
def native_batch_norm_op(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return K.native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)


def _batch_norm_vjp(gs, ans, input, weight, bias, running_mean, running_var, training, momentum, eps,
                    output_mask):
    # input, weight, bias: "grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean,
    #   running_var, result1, result2, training, eps, grad_input_mask) : ..."
    mask = [output_mask[0], output_mask[1] and weight is not None, output_mask[2] and bias is not None]
    return K.native_batch_norm_backward(gs[0], input, weight, running_mean, running_var, ans[1], ans[2],
                                        training, eps, mask) + (None, None)


defvjp_joint(native_batch_norm_op, _batch_norm_vjp, (True, True, True, False, False))


# -- layer norm --------------------------------------------------------------------------
@aten("native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
      "-> (Tensor, Tensor, Tensor)", "NativeLayerNormBackward0", differentiable_outputs=(True, False, False))
def native_layer_norm_op(input, weight, bias, normalized_shape, eps):
    return K.native_layer_norm(input, normalized_shape, weight, bias, eps)


def _layer_norm_vjp(gs, ans, input, weight, bias, normalized_shape, eps, output_mask):
    # input, weight, bias: "grad.defined() ? native_layer_norm_backward_symint(grad, input, normalized_shape,
    #   result1, result2, weight, bias, grad_input_mask) : ..."
    mask = [output_mask[0], output_mask[1] and weight is not None, output_mask[2] and bias is not None]
    return K.native_layer_norm_backward(gs[0], input, normalized_shape, ans[1], ans[2], weight, bias, mask)


defvjp_joint(native_layer_norm_op, _layer_norm_vjp, (True, True, True))


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


defvjp_joint(flash_attention_for_cpu, _attention_vjp, (True, True, True, False))
