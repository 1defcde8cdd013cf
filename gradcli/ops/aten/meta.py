"""Shape rules of the ATen entries: outputs' shapes and dtypes from the inputs' (``Meta``)
without computing anything, for the loader's memory budget (Note [ATen infer on stand-ins]).

Note [shape rules allocate nothing]: every entry that is not elementwise has a rule
here, ``rule(*metas, **args) -> [(shape, dtype), ...]``, raising what the forward
raises for inputs that do not fit. View ops (``VIEW``) run their forward on
zero-stride stand-ins (``np.broadcast_to`` of one element): a reshape, transpose,
index or squeeze of such an array is a view of that one element at any size, so
the forward itself is the exact rule and allocates nothing. Everything else
computes its shapes here; dtypes follow promotion.py. tests/test_aten_ops.py checks
each rule against the forward on every row of the op table, and that inferring a
terabyte-sized result allocates nothing.
"""
from __future__ import annotations

import numpy as np

from ..aten_kernels._common import check_dtype
from ..aten_kernels.attention import _check as _attention_check, groups as _attention_groups
from ..aten_kernels.norm import _ln_axes, check_bn_params
from ..aten_kernels.pool import adaptive_output_size, check_avg_pool_dtype, fractional_params, pool_params
from . import conv_pool, nn, norm_attention  # noqa: F401 - the entries the rules attach to
from . import shape as shape_mod
from .promotion import result_type
from .registry import ATEN_OPS, Meta
from .shape import _dim, _skipped_in_cat, _split_points

_LONG = np.dtype(np.int64)


def _rule(*names):
    def attach(fn):
        for name in names:
            ATEN_OPS[name].meta = fn
        return fn
    return attach


def _shape_of(x):
    return tuple(int(s) for s in x.shape)


# -- views ---------------------------------------------------------------------------------
def _view_rule(name):
    op = ATEN_OPS[name]

    def rule(*inputs, **args):
        def stand_in(x):
            if isinstance(x, list):
                return [stand_in(v) for v in x]
            if hasattr(x, "ndim") and not isinstance(x, np.ndarray):
                return np.broadcast_to(np.zeros((), x.dtype), x.shape)
            return x
        out = op.forward(*[stand_in(x) for x in inputs], **args)
        outs = list(out) if op.multi_output else [out]
        return [(_shape_of(o), np.dtype(o.dtype)) for o in outs]
    return rule


for _name in ("aten.alias.default", "aten.detach.default", "aten.t.default", "aten.view.default", "aten._unsafe_view.default",
              "aten.expand.default", "aten.permute.default", "aten.transpose.int", "aten.select.int",
              "aten.slice.Tensor", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
              "aten.split.Tensor", "aten.unbind.int"):
    ATEN_OPS[_name].meta = _view_rule(_name)


@_rule("aten.unsafe_split.Tensor")
def _unsafe_split(self, split_size, dim=0):
    if self.ndim == 0:
        raise ValueError("split expects at least a 1-dimensional tensor")
    d = _dim(dim, self.ndim)
    n = self.shape[d]
    bounds = [0] + _split_points(n, split_size) + [n]
    if n == 0:
        bounds = [0, 0]
    return [(self.shape[:d] + (b - a,) + self.shape[d + 1:], self.dtype) for a, b in zip(bounds, bounds[1:])]


@_rule("aten.cat.default")
def _cat(tensors, dim=0):
    shape_mod._check_cat(tensors)
    dt = result_type(*tensors)
    kept = [x for x in tensors if not _skipped_in_cat(x)]
    if not kept:
        return [((0,), dt)]
    d = _dim(dim, kept[0].ndim)
    first = kept[0].shape
    for x in kept[1:]:
        if x.ndim != len(first) or any(a != b for i, (a, b) in enumerate(zip(x.shape, first)) if i != d):
            raise ValueError(f"cat: tensors must have the same shape except in dimension {d}, got "
                             f"{list(first)} and {list(x.shape)}")
    return [(first[:d] + (sum(x.shape[d] for x in kept),) + first[d + 1:], dt)]


@_rule("aten.stack.default")
def _stack(tensors, dim=0):
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    first = tensors[0].shape
    if any(x.shape != first for x in tensors):
        raise ValueError(f"stack expects each tensor to be equal size, got "
                         f"{[list(x.shape) for x in tensors]}")
    d = _dim(dim, len(first) + 1)
    return [(first[:d] + (len(tensors),) + first[d:], result_type(*tensors))]


# -- reductions -------------------------------------------------------------------------------
def _reduced(self, dim, keepdim):
    axes = nn._axes(dim, self.ndim)
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    return tuple(s for i, s in enumerate(self.shape) if i not in axes)


def _sum_dtype(self, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return _LONG if self.dtype.kind in "biu" else self.dtype


def _mean_dtype(self, dtype):
    out = np.dtype(dtype) if dtype is not None else self.dtype
    if out.kind not in "fc":
        raise ValueError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                         f"point or complex dtype. Got: {out}")
    return out


@_rule("aten.sum.dim_IntList")
def _sum_dim(self, dim, keepdim=False, dtype=None):
    return [(_reduced(self, dim, keepdim), _sum_dtype(self, dtype))]


@_rule("aten.sum.default")
def _sum_all(self, dtype=None):
    return [((), _sum_dtype(self, dtype))]


@_rule("aten.mean.dim")
def _mean_dim(self, dim, keepdim=False, dtype=None):
    return [(_reduced(self, dim, keepdim), _mean_dtype(self, dtype))]


@_rule("aten.mean.default")
def _mean_all(self, dtype=None):
    return [((), _mean_dtype(self, dtype))]


# -- matrix products -----------------------------------------------------------------------
@_rule("aten.mm.default")
def _mm(self, mat2):
    if self.ndim != 2 or mat2.ndim != 2:
        raise ValueError(f"mm: expected 2-D operands, got {self.ndim}-D and {mat2.ndim}-D")
    nn._same_dtype("mm", self, mat2)
    if self.shape[1] != mat2.shape[0]:
        raise ValueError(f"mm: mat1 and mat2 shapes cannot be multiplied ({self.shape[0]}x{self.shape[1]} "
                         f"and {mat2.shape[0]}x{mat2.shape[1]})")
    return [((self.shape[0], mat2.shape[1]), self.dtype)]


@_rule("aten.bmm.default")
def _bmm(self, mat2):
    if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0]:
        raise ValueError(f"bmm: expected 3-D operands with equal batch sizes, got "
                         f"{list(self.shape)} and {list(mat2.shape)}")
    nn._same_dtype("bmm", self, mat2)
    if self.shape[2] != mat2.shape[1]:
        raise ValueError(f"bmm: batch1 and batch2 shapes cannot be multiplied ({list(self.shape)} and "
                         f"{list(mat2.shape)})")
    return [((self.shape[0], self.shape[1], mat2.shape[2]), self.dtype)]


@_rule("aten.addmm.default")
def _addmm(self, mat1, mat2, beta=1, alpha=1):
    ((shape, dt),) = _mm(mat1, mat2)
    nn._addmm_self(self, mat1)
    if beta != 0 and hasattr(self, "shape"):
        try:
            np.broadcast_shapes(self.shape, shape)
        except ValueError:
            raise ValueError(f"addmm: self of shape {list(self.shape)} cannot be broadcast to the "
                             f"product's shape {list(shape)}") from None
    return [(shape, dt)]


# -- softmax family ----------------------------------------------------------------------------
def _keeps_shape(self, dim, dt):
    _dim(dim, self.ndim)
    return [(self.shape, dt)]


@_rule("aten._softmax.default", "aten._log_softmax.default")
def _softmax(self, dim, half_to_float):
    check_dtype("_softmax", self, "f")
    return _keeps_shape(self, dim, np.dtype(nn._softmax_dtype(self, half_to_float)))


@_rule("aten._safe_softmax.default")
def _safe_softmax(self, dim, dtype=None):
    dt = np.dtype(dtype) if dtype is not None else self.dtype
    check_dtype("_safe_softmax", Meta(self.shape, dt), "f")
    return _keeps_shape(self, dim, dt)


@_rule("aten._softmax_backward_data.default", "aten._log_softmax_backward_data.default")
def _softmax_backward_data(grad_output, output, dim, input_dtype):
    check_dtype("_softmax_backward_data", grad_output, "f")
    np.broadcast_shapes(grad_output.shape, output.shape)
    return _keeps_shape(output, dim, nn._input_dtype(input_dtype))


# -- embedding and losses ---------------------------------------------------------------------
@_rule("aten.embedding.default")
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    nn._embedding_check(weight, indices)
    if weight.shape[0] == 0 and 0 not in indices.shape:
        # indices' values are unknown here, but no index fits a weight with no rows
        raise ValueError("embedding: index out of range for a weight of 0 rows (indices must be in [0, 0))")
    return [(indices.shape + weight.shape[1:], weight.dtype)]


@_rule("aten.embedding_dense_backward.default")
def _embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    # PyTorch's checks (NumPy's reshape and boolean-index errors before): int indices,
    # grad_output viewed as [indices.numel(), D], a non-negative num_weights
    name = "embedding_dense_backward"
    if np.dtype(indices.dtype) not in (np.int64, np.int32):
        raise ValueError(f"{name}: indices must be an int64 or int32 tensor, got {indices.dtype}")
    d = grad_output.shape[-1] if grad_output.ndim else 1
    n = int(np.prod(indices.shape, dtype=np.int64))
    if int(np.prod(grad_output.shape, dtype=np.int64)) != n * d:
        raise ValueError(f"{name}: shape '[{n}, {d}]' is invalid for input of size "
                         f"{int(np.prod(grad_output.shape, dtype=np.int64))} (grad_output "
                         f"{list(grad_output.shape)}, indices {list(indices.shape)})")
    if int(num_weights) < 0:
        raise ValueError(f"{name}: num_weights must be non-negative, got {num_weights}")
    return [((int(num_weights), d), grad_output.dtype)]


def _nll_check(op, self, target, weight, reduction):
    nn._nll_dtypes(op, self, target, weight)
    if reduction not in (0, 1, 2):
        raise ValueError(f"{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")
    if self.ndim not in (1, 2):
        raise ValueError(f"{op}: input must be 1-D or 2-D, got shape {list(self.shape)}")
    if target.ndim != self.ndim - 1 or (self.ndim == 2 and target.shape[0] != self.shape[0]):
        raise ValueError(f"{op}: target shape {list(target.shape)} does not match "
                         f"input shape {list(self.shape)}")
    if weight is not None and weight.shape != (self.shape[-1],):
        raise ValueError(f"{op}: weight must have shape [{self.shape[-1]}], got {list(weight.shape)}")


@_rule("aten.nll_loss_forward.default")
def _nll_loss_forward(self, target, weight, reduction, ignore_index):
    _nll_check("nll_loss_forward", self, target, weight, reduction)
    out = (self.shape[0],) if reduction == 0 and self.ndim == 2 else ()
    return [(out, self.dtype), ((), self.dtype)]


@_rule("aten.nll_loss_backward.default")
def _nll_loss_backward(grad_output, self, target, weight, total_weight, reduction, ignore_index):
    _nll_check("nll_loss_backward", self, target, weight, reduction)
    return [(self.shape, grad_output.dtype)]


@_rule("aten.mse_loss.default")
def _mse_loss(self, target, reduction=1):
    nn._check_reduction("mse_loss", reduction)
    check_dtype("mse_loss", Meta((), result_type(self, target)), "f")
    shape = np.broadcast_shapes(self.shape, target.shape)
    return [(tuple(shape) if reduction == 0 else (), result_type(self, target))]


# -- pooling ------------------------------------------------------------------------------------
@_rule("aten.max_pool2d_with_indices.default")
def _max_pool2d(self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    out = pool_params("max_pool2d_with_indices", tuple(self.shape), 2, kernel_size, stride, padding, dilation,
                      ceil_mode)[4]
    shape = self.shape[:-2] + tuple(out)
    return [(shape, self.dtype), (shape, _LONG)]


@_rule("aten.avg_pool2d.default")
def _avg_pool2d(self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    check_avg_pool_dtype("avg_pool2d", self)
    out = pool_params("avg_pool2d", tuple(self.shape), 2, kernel_size, stride, padding, 1, ceil_mode)[4]
    if divisor_override is not None and divisor_override == 0:
        raise ValueError("avg_pool2d: divisor must be not zero")
    return [(self.shape[:-2] + tuple(out), self.dtype)]


@_rule("aten._adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(self, output_size):
    out = adaptive_output_size("_adaptive_avg_pool2d", self, output_size)
    return [(self.shape[:-2] + tuple(out), self.dtype)]


@_rule("aten.adaptive_max_pool2d.default")
def _adaptive_max_pool2d(self, output_size):
    out = adaptive_output_size("adaptive_max_pool2d", self, output_size)
    if min(out) < 1:
        raise ValueError(f"adaptive_max_pool2d: output_size {list(out)} must be positive")
    shape = self.shape[:-2] + tuple(out)
    return [(shape, self.dtype), (shape, _LONG)]


@_rule("aten.adaptive_max_pool2d_backward.default")
def _adaptive_max_pool2d_backward(grad_output, self, indices):
    return _scatter_backward("adaptive_max_pool2d_backward", grad_output, self, indices)


def _scatter_backward(name, grad_output, self, indices):
    # grad_output and indices are the pooled output's shape: self's leading dims
    check_dtype(name, self, "f")
    if np.dtype(indices.dtype) != _LONG:
        raise ValueError(f"{name}: indices must be int64, got {indices.dtype}")
    if tuple(grad_output.shape) != tuple(indices.shape) or grad_output.ndim != self.ndim \
            or grad_output.shape[:-2] != self.shape[:-2]:
        raise ValueError(f"{name}: grad_output {list(grad_output.shape)} and indices "
                         f"{list(indices.shape)} must have one shape, with the leading dims of self "
                         f"{list(self.shape)}")
    return [(self.shape, grad_output.dtype)]


@_rule("aten.fractional_max_pool2d.default")
def _fractional_max_pool2d(self, random_samples, kernel_size, output_size):
    _, _, oh, ow = fractional_params(self, kernel_size, output_size, random_samples)
    shape = self.shape[:-2] + (oh, ow)
    return [(shape, self.dtype), (shape, _LONG)]


@_rule("aten.fractional_max_pool2d_backward.default")
def _fractional_max_pool2d_backward(grad_output, self, indices, kernel_size, output_size):
    return _scatter_backward("fractional_max_pool2d_backward", grad_output, self, indices)


@_rule("aten._adaptive_avg_pool2d_backward.default")
def _adaptive_avg_pool2d_backward(grad_output, self):
    # PyTorch's adaptive_avg_pool2d_backward_out_cpu_template: grad_output has self's
    # rank and dtype. Its sizes are the pooled output's, so only its last two dims may
    # differ from self's. PyTorch does not check the leading dims (a smaller
    # grad_output is read past its end); gradcli refuses them (a deliberate difference,
    # tests/test_aten_loader.py) rather than broadcasting them into a wrong gradient.
    name = "_adaptive_avg_pool2d_backward"
    if grad_output.ndim != self.ndim:
        raise ValueError(f"{name}: expected dimensions {self.ndim} for grad_output but got "
                         f"dimensions {grad_output.ndim} (grad_output {list(grad_output.shape)}, "
                         f"self {list(self.shape)})")
    if grad_output.dtype != self.dtype:
        raise ValueError(f"{name}: expected dtype {self.dtype} for grad_output but got dtype "
                         f"{grad_output.dtype}")
    if grad_output.shape[:-2] != self.shape[:-2]:
        raise ValueError(f"{name}: grad_output {list(grad_output.shape)} must have the leading "
                         f"dims of self {list(self.shape)} (only the last two are pooled)")
    return [(self.shape, grad_output.dtype)]


@_rule("aten.max_pool2d_with_indices_backward.default", "aten.avg_pool2d_backward.default")
def _pool_backward(grad_output, self, *indices, kernel_size, stride, padding, ceil_mode,
                   dilation=1, **args):
    # the gradient of the pooling's input: shaped as self, in grad_output's dtype.
    # grad_output (and max's indices) must be shaped as the pooling's output, as
    # PyTorch's check_dim_size checks them (a NumPy broadcast error otherwise).
    name = "max_pool2d_with_indices_backward" if indices else "avg_pool2d_backward"
    out = pool_params(name, tuple(self.shape), 2, kernel_size, stride, padding, dilation, ceil_mode)[4]
    want = self.shape[:-2] + tuple(out)
    for what, t in (("grad_output", grad_output), *(("indices", i) for i in indices)):
        if tuple(t.shape) != want:
            raise ValueError(f"{name}: {what} {list(t.shape)} must have the shape of the pooling's "
                             f"output {list(want)} (self {list(self.shape)})")
    return [(self.shape, grad_output.dtype)]


# -- normalisation and attention ------------------------------------------------------------------
@_rule("aten.native_batch_norm.default")
def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    check_dtype("native_batch_norm", input, "f")
    check_bn_params(input, (weight, bias, running_mean, running_var))
    if training and 0 in input.shape:
        raise ValueError(f"native_batch_norm: input tensor must have at least one element in training, "
                         f"got shape {list(input.shape)}")
    if input.ndim < 2:
        raise ValueError(f"native_batch_norm: expected an input with at least 2 dims "
                         f"(N, C, ...), got shape {list(input.shape)}")
    if not training and (running_mean is None or running_var is None):
        raise ValueError("native_batch_norm: running_mean and running_var must be "
                         "given when training is false")
    stats = (input.shape[1],) if training else (0,)
    return [(input.shape, input.dtype), (stats, input.dtype), (stats, input.dtype)]


@_rule("aten.native_layer_norm.default")
def _layer_norm(input, weight, bias, normalized_shape, eps):
    axis, _ = _ln_axes("native_layer_norm", input, normalized_shape, weight, bias)
    stats = input.shape[:axis] + (1,) * (input.ndim - axis)
    return [(input.shape, input.dtype), (stats, input.dtype), (stats, input.dtype)]


class _Heads:
    """A key/value stand-in with the query's head count (grouped-query attention)."""

    def __init__(self, meta, heads):
        self.shape = meta.shape[:1] + (heads,) + meta.shape[2:]
        self.dtype = meta.dtype
        self.ndim = meta.ndim


@_rule("aten._scaled_dot_product_flash_attention_for_cpu.default")
def _attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    _attention_check(query, key, value, dropout_p, attn_mask)
    scores = query.shape[:-2] + (query.shape[-2], key.shape[-2])
    if _attention_groups(query, key) > 1:       # Note [Grouped-query attention]
        key = _Heads(key, query.shape[1])
        value = _Heads(value, query.shape[1])
    try:
        scores = np.broadcast_shapes(scores, key.shape[:-2] + scores[-2:],
                                     *([attn_mask.shape] if attn_mask is not None else []))
        batch = np.broadcast_shapes(scores[:-2], value.shape[:-2])
    except ValueError:
        raise ValueError(f"_scaled_dot_product_flash_attention_for_cpu: query {list(query.shape)}, key "
                         f"{list(key.shape)}, value {list(value.shape)} do not broadcast") from None
    if value.shape[-2] != key.shape[-2]:
        raise ValueError("_scaled_dot_product_flash_attention_for_cpu: key and value must have the same "
                         "sequence length")
    return [(tuple(batch) + (query.shape[-2], value.shape[-1]), query.dtype), (tuple(scores[:-1]), query.dtype)]


@_rule("aten.mse_loss_backward.default")
def _mse_loss_backward(grad_output, self, target, reduction):
    shape = np.broadcast_shapes(self.shape, target.shape, grad_output.shape)
    return [(tuple(shape), result_type(self, target))]


@_rule("aten.select_backward.default")
def _select_backward(grad_output, input_sizes, dim, index):
    shape = shape_mod._select_backward_check(grad_output, input_sizes, dim, index)
    return [(shape, grad_output.dtype)]
