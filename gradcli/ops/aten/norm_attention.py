"""ATen batch norm, layer norm and CPU flash attention entries. The forwards are
``gradcli.ops.aten_kernels`` (tested against ``torch.ops.aten`` on their own); the
norm backwards are ops of their own, as PyTorch's (Note [normalisation double backward]).
"""
from __future__ import annotations

import numpy as np

from .. import aten_kernels as K
from .. import library as L
from ..core import Op, defvjp_all
from ..library import _value
from .pointwise import scalar
from .registry import aten, defvjp_joint
from .shape import contiguous


# -- batch norm ------------------------------------------------------------------------
@aten("native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, "
      "bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)", "NativeBatchNormBackward0",
      differentiable_outputs=(True, False, False), mutates=("running_mean", "running_var"))
def native_batch_norm_op(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return [contiguous(o) for o in K.native_batch_norm(input, weight, bias, running_mean, running_var, training,
                                                         momentum, eps)]


# Note [normalisation double backward]: as in PyTorch, the batch- and layer-norm backwards
# are ops of their own (``native_batch_norm_backward``, ``native_layer_norm_backward``):
# NativeBatchNormBackward0 / NativeLayerNormBackward0 call them, so under create_graph
# they record one node each (NativeBatchNormBackwardBackward0, ...) with edges to
# grad_out, input and weight (and bias for layer norm), and outputs the wanted gradients.
# The statistics (mean and invstd/rstd) are the forward's saved ones, constants of
# these ops as in PyTorch (its save_mean/save_invstd are outputs without gradient).
# Their VJP (``_norm_double_backward``) is PyTorch's batchnorm_double_backward /
# layer_norm_double_backward, the exact second derivative, written with ops: a
# third-order backward differentiates it with the statistics held constant, as
# PyTorch does (so its third derivative is PyTorch's, which is not the true one).
def _centred_grad(gx, xhat, invstd, axes, ops=L):
    # invstd * (gx - mean(gx) - xhat * mean(gx * xhat)): the gradient through the statistics
    return ops.mul(invstd, ops.sub(ops.sub(gx, ops.mean(gx, axis=axes, keepdims=True)),
                                   ops.mul(xhat, ops.mean(ops.mul(gx, xhat), axis=axes, keepdims=True))))


class _OnArrays:
    """The library ops' own functions, which ``Op.__call__`` runs when no input is a
    Tensor: the norm backwards' forwards (``_bn_backward_fn``, ``_ln_backward_fn``) are
    handed arrays, recording or not, so their formula calls these without the ops'
    dispatch per call (about fifteen calls a node). Same functions, same values."""

    mul = staticmethod(L.mul.fn)
    sub = staticmethod(L.sub.fn)
    mean = staticmethod(L.mean.fn)
    sum_ = staticmethod(L.sum_.fn)
    reshape = staticmethod(L.reshape.fn)


class _Norm:
    """How one normalisation lays out its statistics and parameters: the reduced ``axes``
    (of ``count`` elements), the statistics' shape ``stat_shape`` (broadcasting against the
    input), ``param`` (a weight-shaped tensor to its input-broadcasting shape) and
    ``to_param`` (an input-shaped tensor summed to the weight's shape)."""

    def __init__(self, shape, axes, stat_shape, param_shape, param_axes):
        self.axes, self.stat_shape = axes, stat_shape
        self.count = 1
        for a in axes:
            self.count *= shape[a]
        self.param_shape, self.param_axes = param_shape, param_axes

    def param(self, p, ops=L):
        return ops.reshape(p, shape=self.param_shape)

    def to_param(self, t, ops=L):
        return ops.sum_(t, axis=self.param_axes) if self.param_axes else t


def _batch_norm_layout(shape):
    axes = (0,) + tuple(range(2, len(shape)))
    channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    return _Norm(shape, axes, channel, channel, axes)


def _layer_norm_layout(shape, normalized_shape):
    start = len(shape) - len(normalized_shape)
    axes = tuple(range(start, len(shape)))
    return _Norm(shape, axes, tuple(shape[:start]) + (1,) * len(axes), tuple(shape[start:]), tuple(range(start)))


def _norm_grads(g, input, weight, mean, invstd, training, layout, mask):
    """(grad_input, grad_weight, grad_bias) of a normalisation (None where ``mask`` is false)
    on arrays (``_OnArrays``); ``mean``/``invstd`` constants shaped ``layout.stat_shape``."""
    ops = _OnArrays
    axes = layout.axes
    xhat = ops.mul(ops.sub(input, mean), invstd)
    gi = gw = gb = None
    if mask[0]:
        gx = g if weight is None else ops.mul(g, layout.param(weight, ops))
        gi = _centred_grad(gx, xhat, invstd, axes, ops) if training else ops.mul(gx, invstd)
    if mask[1] and weight is not None:
        gw = layout.to_param(ops.mul(g, xhat), ops)
    if mask[2]:
        gb = layout.to_param(g, ops)
    return gi, gw, gb


def _sum_keep(t, axes):
    return L.sum_(t, axis=axes, keepdims=True)


def _norm_double_backward(ggi, ggw, ggb, g, input, weight, mean, invstd, training, layout):
    """(d/d grad_out, d/d input, d/d weight) of <ggi, grad_input> + <ggw, grad_weight> +
    <ggb, grad_bias> (any of the three None: absent), the statistics functions of the input
    in the value and constants for what records (Note [normalisation double backward])."""
    axes, m = layout.axes, layout.count
    xhat = L.mul(L.sub(input, mean), invstd)
    w = None if weight is None else layout.param(weight)

    def project(v):        # grad_input's map gx -> grad_input, self-adjoint over each group
        return _centred_grad(v, xhat, invstd, axes) if training else L.mul(v, invstd)

    def add(a, b):
        return b if a is None else a if b is None else L.add(a, b)

    d_g = d_x = d_w = None
    if ggi is not None:
        pg = project(ggi)
        d_g = pg if w is None else L.mul(pg, w)
        if w is not None:
            d_w = layout.to_param(L.mul(g, pg))
        if training:
            # grad_input = invstd * T-shaped terms of xhat: through invstd (d invstd/dx =
            # -invstd^2 xhat / m) and through xhat (project(d/dxhat)), both with the
            # group sums of ggi and gx = g * weight
            u = g if w is None else L.mul(g, w)
            s_a, s_u = _sum_keep(ggi, axes), _sum_keep(u, axes)
            s_axh, s_uxh = _sum_keep(L.mul(ggi, xhat), axes), _sum_keep(L.mul(u, xhat), axes)
            t = L.sub(L.sub(_sum_keep(L.mul(ggi, u), axes), L.div(L.mul(s_u, s_a), scalar(m, _value(g)))),
                      L.div(L.mul(s_uxh, s_axh), scalar(m, _value(g))))
            through_invstd = L.neg(L.div(L.mul(L.mul(L.mul(invstd, invstd), t), xhat), scalar(m, _value(g))))
            v = L.neg(L.div(L.add(L.mul(u, s_axh), L.mul(ggi, s_uxh)), scalar(m, _value(g))))
            d_x = L.add(through_invstd, L.mul(invstd, project(v)))
    if ggw is not None and weight is not None:
        gw_b = layout.param(ggw)
        d_g = add(d_g, L.mul(gw_b, xhat))
        d_x = add(d_x, project(L.mul(gw_b, g)))
    if ggb is not None:
        gb_b = layout.param(ggb)
        d_g = L.add(d_g, gb_b) if d_g is not None else L.expand(gb_b, shape=tuple(g.shape))
    return d_g, d_x, d_w


def _masked(outs, mask):
    return [o for o, m in zip(outs, mask) if m]


def _unmasked(gs, mask):
    it = iter(gs)
    return [next(it) if m else None for m in mask]


# native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean,
#   Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask):
# its inputs are grad_out, input, weight, running_mean and running_var (PyTorch's node's edges, the
# last two never differentiable); save_mean and save_invstd (constants) come as args, already shaped
def _bn_backward_fn(grad_out, input, weight, running_mean, running_var, mean, invstd, training, output_mask):
    layout = _batch_norm_layout(tuple(input.shape))
    return _masked(_norm_grads(grad_out, input, weight, mean, invstd, training, layout, output_mask), output_mask)


def _bn_double_backward(gs, ans, inputs, needed, args):
    # input, weight, grad_out: batchnorm_double_backward(input, weight, grads[0], grads[1], grads[2], grad_out,
    #   running_mean, running_var, train, eps, save_mean, save_invstd, grad_input_mask)
    g, input, weight = inputs[:3]
    ggi, ggw, ggb = _unmasked(gs, args["output_mask"])
    d_g, d_x, d_w = _norm_double_backward(ggi, ggw, ggb, g, input, weight, args["mean"], args["invstd"],
                                          args["training"], _batch_norm_layout(tuple(input.shape)))
    return [d if need else None for d, need in zip((d_g, d_x, d_w, None, None), needed)]


batch_norm_backward = Op("native_batch_norm_backward", _bn_backward_fn, "NativeBatchNormBackwardBackward0",
                         arity=5, multi_output=True, public=False,
                         doc="the backward of native_batch_norm (one node, as PyTorch's)")
defvjp_all(batch_norm_backward, _bn_double_backward)


def native_batch_norm_backward(gs, ans, input, weight, bias, running_mean, running_var, training, momentum, eps,
                               output_mask):
    """The VJP of ``native_batch_norm``: (grad_input, grad_weight, grad_bias, None, None), None
    where ``output_mask`` is false or the parameter is absent; arrays, or recording Tensors
    (one ``native_batch_norm_backward`` node)."""
    # input, weight, bias: "grad.defined() ? native_batch_norm_backward(grad, input, weight, running_mean,
    #   running_var, result1, result2, training, eps, grad_input_mask) : ..."
    if len(input.shape) < 2:
        raise ValueError(f"native_batch_norm: expected an input with at least 2 dims, got {list(input.shape)}")
    dtype = _value(input).dtype
    channel = _batch_norm_layout(tuple(input.shape)).stat_shape
    if training:
        mean, invstd = _value(ans[1]), _value(ans[2])
    else:               # the running statistics
        mean, invstd = running_mean, 1.0 / np.sqrt(running_var + eps)
    mean = np.reshape(mean, channel).astype(dtype, copy=False)
    invstd = np.reshape(invstd, channel).astype(dtype, copy=False)
    mask = (bool(output_mask[0]), bool(output_mask[1]) and weight is not None,
            bool(output_mask[2]) and bias is not None)
    if not any(mask):
        return None, None, None, None, None
    outs = batch_norm_backward(gs[0], input, weight, running_mean, running_var, mean=mean, invstd=invstd,
                               training=bool(training), output_mask=mask)
    return tuple(_unmasked(outs, mask)) + (None, None)


defvjp_joint(native_batch_norm_op, native_batch_norm_backward, (True, True, True, False, False))


# -- layer norm --------------------------------------------------------------------------
@aten("native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
      "-> (Tensor, Tensor, Tensor)", "NativeLayerNormBackward0", differentiable_outputs=(True, False, False))
def native_layer_norm_op(input, weight, bias, normalized_shape, eps):
    return [contiguous(o) for o in K.native_layer_norm(input, normalized_shape, weight, bias, eps)]


# native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean,
#   Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask): its inputs are PyTorch's node's
# edges, in order: grad_out, input, mean and rstd (constants, already shaped: no edge), weight and
# bias (an edge and no gradient: "bias: Tensor()")
def _ln_backward_fn(grad_out, input, mean, rstd, weight, bias, normalized_shape, output_mask):
    layout = _layer_norm_layout(tuple(input.shape), normalized_shape)
    return _masked(_norm_grads(grad_out, input, weight, mean, rstd, True, layout, output_mask), output_mask)


def _ln_double_backward(gs, ans, inputs, needed, args):
    # input, weight, grad_out: layer_norm_double_backward(input, weight, grads[0], grads[1], grads[2], grad_out,
    #   mean, rstd, normalized_shape, grad_input_mask); bias: Tensor()
    g, input, mean, rstd, weight, _ = inputs
    ggi, ggw, ggb = _unmasked(gs, args["output_mask"])
    d_g, d_x, d_w = _norm_double_backward(ggi, ggw, ggb, g, input, weight, _value(mean), _value(rstd), True,
                                          _layer_norm_layout(tuple(input.shape), args["normalized_shape"]))
    return [d if need else None for d, need in zip((d_g, d_x, None, None, d_w, None), needed)]


layer_norm_backward = Op("native_layer_norm_backward", _ln_backward_fn, "NativeLayerNormBackwardBackward0",
                         arity=6, multi_output=True, public=False,
                         doc="the backward of native_layer_norm (one node, as PyTorch's)")
defvjp_all(layer_norm_backward, _ln_double_backward)


def native_layer_norm_backward(gs, ans, input, weight, bias, normalized_shape, eps, output_mask):
    """The VJP of ``native_layer_norm``: (grad_input, grad_weight, grad_bias), None where
    ``output_mask`` is false or the parameter is absent; arrays, or recording Tensors (one
    ``native_layer_norm_backward`` node)."""
    # input, weight, bias: "grad.defined() ? native_layer_norm_backward_symint(grad, input, normalized_shape,
    #   result1, result2, weight, bias, grad_input_mask) : ..."
    dtype = _value(input).dtype
    stat_shape = _layer_norm_layout(tuple(input.shape), normalized_shape).stat_shape
    mean = _value(ans[1]).reshape(stat_shape).astype(dtype, copy=False)
    rstd = _value(ans[2]).reshape(stat_shape).astype(dtype, copy=False)
    mask = (bool(output_mask[0]), bool(output_mask[1]) and weight is not None,
            bool(output_mask[2]) and bias is not None)
    if not any(mask):
        return None, None, None
    outs = layer_norm_backward(gs[0], input, mean, rstd, weight, bias, normalized_shape=tuple(normalized_shape),
                               output_mask=mask)
    return tuple(_unmasked(outs, mask))


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

# PyTorch's NativeBatchNormBackward0 saves result1 and result2 (the batch's mean and
# inverse std), not the normalized output: ``relu_`` on it leaves the node valid
native_batch_norm_op.saved_outputs = (1, 2)
