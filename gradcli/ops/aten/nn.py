"""ATen reductions, matrix products, softmaxes, embedding and losses."""
from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from .. import aten_kernels as K
from ..aten_kernels._common import check_dtype
from .. import library as L
from ..library import _numel, _value
from .pointwise import as_dtype, div_scalar, masked_fill, mul, mul_scalar, neg, scalar, zeros
from .promotion import cast, result_type
from .registry import aten, defvjp
from .shape import _dim, _dims_once, contiguous, t, transpose, view
from .tensor_iterator import lay_out


# -- reductions -----------------------------------------------------------------------
def _axes(dim, ndim):
    """``int[1]? dim``: None or [] reduces every dim. A 0-dim tensor takes dims 0 and -1
    (``maybe_wrap_dim``) and has no axis to reduce: ``torch.sum(t0, 0)`` is ``t0``."""
    if dim is None or len(dim) == 0:
        return tuple(range(ndim))
    axes = tuple(sorted(_dims_once(dim, ndim)))
    return axes if ndim else ()


@aten("sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      "SumBackward1", saves=False)
def sum_dim(self, dim, keepdim=False, dtype=None):
    if dtype is not None:
        out_dt = np.dtype(dtype)
    else:
        out_dt = np.dtype(np.int64) if self.dtype.kind in "biu" else self.dtype
    return contiguous(as_dtype(np.sum(cast(self, out_dt), axis=_axes(dim, self.ndim), keepdims=keepdim), out_dt))


# self: sum_backward(grad, self.sym_sizes(), dim, keepdim)
defvjp(sum_dim, lambda g, ans, self, dim, keepdim=False, dtype=None: L.expand_reduced(
    g, tuple(self.shape), _axes(dim, len(self.shape)), keepdim))


@aten("mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
      "MeanBackward1", saves=False)
def mean_dim(self, dim, keepdim=False, dtype=None):
    out_dt = np.dtype(dtype) if dtype is not None else self.dtype
    if out_dt.kind not in "fc":
        raise ValueError(f"mean(): could not infer output dtype. Input dtype must be either a floating "
                         f"point or complex dtype. Got: {out_dt}")
    return contiguous(as_dtype(np.mean(cast(self, out_dt), axis=_axes(dim, self.ndim), keepdims=keepdim), out_dt))


def _mean_vjp(g, ans, self, dim, keepdim=False, dtype=None):
    # mean_backward(grad, self.sym_sizes(), dim, self.sym_numel(), keepdim): sum_backward(...) / n
    shape = tuple(self.shape)
    axes = _axes(dim, len(shape))
    n = 1
    for a in axes:
        n *= shape[a]
    return div_scalar(L.expand_reduced(g, shape, axes, keepdim), other=n)


defvjp(mean_dim, _mean_vjp)


@aten("sum(Tensor self, *, ScalarType? dtype=None) -> Tensor", "SumBackward0", saves=False)
def sum_all(self, dtype=None):
    return sum_dim.forward(self, None, dtype=dtype)


@aten("mean(Tensor self, *, ScalarType? dtype=None) -> Tensor", "MeanBackward0", saves=False)
def mean_all(self, dtype=None):
    return mean_dim.forward(self, None, dtype=dtype)


# self: grad.expand_symint(self.sym_sizes()); mean: ... / self.sym_numel()
defvjp(sum_all, lambda g, ans, self, dtype=None: L.expand(g, shape=tuple(self.shape)))
defvjp(mean_all, lambda g, ans, self, dtype=None: _mean_vjp(g, ans, self, None))


# -- matrix products --------------------------------------------------------------------
def _same_dtype(name, a, b):
    """The matrix products' operands: one dtype, not bool (no BLAS kernel for it)."""
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: expected both operands to have the same dtype, but got "
                        f"{a.dtype} != {b.dtype}")
    check_dtype(name, a, "iufc", "a non-bool")


def _addmm_self(self, mat1):
    if hasattr(self, "dtype") and self.dtype != mat1.dtype:
        raise TypeError(f"addmm: self and mat2 must have the same dtype, but got {self.dtype} and {mat1.dtype}")


@aten("mm(Tensor self, Tensor mat2) -> Tensor", "MmBackward0")
def mm(self, mat2):
    if self.ndim != 2 or mat2.ndim != 2:
        raise ValueError(f"mm: expected 2-D operands, got {self.ndim}-D and {mat2.ndim}-D")
    _same_dtype("mm", self, mat2)
    return np.matmul(self, mat2)


# self: mm_mat1_backward(grad, mat2, ...) = grad.mm(mat2.t()); mat2: mm_mat2_backward(...) = self.t().mm(grad)
# (on arrays, the forwards themselves: Note [VJPs on arrays call forwards] in shape.py)
def _mm_mat1_backward(g, mat2):
    if type(g) is Tensor or type(mat2) is Tensor:
        return mm(g, t(mat2))
    return mm.forward(g, t.forward(mat2))


def _mm_mat2_backward(g, mat1):
    if type(g) is Tensor or type(mat1) is Tensor:
        return mm(t(mat1), g)
    return mm.forward(t.forward(mat1), g)


defvjp(mm, lambda g, ans, self, mat2: _mm_mat1_backward(g, mat2),
       lambda g, ans, self, mat2: _mm_mat2_backward(g, self))


@aten("bmm(Tensor self, Tensor mat2) -> Tensor", "BmmBackward0")
def bmm(self, mat2):
    if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0]:
        raise ValueError(f"bmm: expected 3-D operands with equal batch sizes, got "
                         f"{list(self.shape)} and {list(mat2.shape)}")
    _same_dtype("bmm", self, mat2)
    return np.matmul(self, mat2)


# self: grad.bmm(mat2.transpose(1, 2).conj()); mat2: self.transpose(1, 2).conj().bmm(grad)
defvjp(bmm, lambda g, ans, self, mat2: bmm(g, transpose(mat2, dim0=1, dim1=2)),
       lambda g, ans, self, mat2: bmm(transpose(self, dim0=1, dim1=2), g))


@aten("addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
      "AddmmBackward0")
def addmm(self, mat1, mat2, beta=1, alpha=1):
    prod = mm.forward(mat1, mat2)
    _addmm_self(self, mat1)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:                   # self is ignored, NaNs included (BLAS semantics)
        return prod
    bias = cast(self, prod.dtype) if hasattr(self, "dtype") else self
    return as_dtype(np.add(prod, bias if beta == 1 else np.multiply(bias, beta)), prod.dtype)


# self: maybe_multiply(grad, beta.conj()) (summed to self's shape by the engine)
# mat1: mm_mat1_backward(grad, mat2, ..., alpha); mat2: mm_mat2_backward(grad, mat1, ..., alpha)
def _scaled(x, alpha):
    return x if alpha == 1 else mul_scalar(x, other=alpha)


defvjp(addmm,
       lambda g, ans, self, mat1, mat2, beta=1, alpha=1: L.unbroadcast(_scaled(g, beta), self.shape),
       lambda g, ans, self, mat1, mat2, beta=1, alpha=1: _scaled(_mm_mat1_backward(g, mat2), alpha),
       lambda g, ans, self, mat1, mat2, beta=1, alpha=1: _scaled(_mm_mat2_backward(g, mat1), alpha))


# -- softmax ---------------------------------------------------------------------------
def _softmax_dtype(self, half_to_float):
    if half_to_float:
        if self.dtype != np.float16:
            raise ValueError("conversion is supported for Half type only")
        return np.dtype(np.float32)
    return self.dtype


@aten("_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", "SoftmaxBackward0")
def softmax(self, dim, half_to_float):
    check_dtype("_softmax", self, "f")
    x = cast(self, _softmax_dtype(self, half_to_float))
    d = _dim(dim, x.ndim)
    return contiguous(K._softmax(x, d)) if x.ndim else np.ones_like(x)


def _input_dtype(input_dtype):
    return np.dtype(getattr(input_dtype, "name", input_dtype))


@aten("_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
      "SoftmaxBackwardDataBackward0")
def softmax_backward_data(grad_output, output, dim, input_dtype):
    check_dtype("_softmax_backward_data", grad_output, "f")
    return contiguous(K._softmax_backward_data(grad_output, output, _dim(dim, output.ndim),
                                               _input_dtype(input_dtype)))


# self: _softmax_backward_data(grad, result, dim, self.scalar_type())
defvjp(softmax, lambda g, ans, self, dim, half_to_float: softmax_backward_data(
    g, ans, dim=dim, input_dtype=self.dtype))


def _sum_keep(x, dim):
    return L.sum_(x, axis=_dim(dim, len(x.shape)), keepdims=True)


# grad_output: _softmax_backward_data(grad, output, dim, input_dtype) (it is linear in grad_output)
# output: softmax_double_backward(grad, grad_output, dim, output)
#   = grad * grad_output - grad * sum(grad_output * output) - grad_output * sum(grad * output)
defvjp(softmax_backward_data,
       lambda gg, ans, go, y, dim, input_dtype: softmax_backward_data(gg, y, dim=dim, input_dtype=input_dtype),
       lambda gg, ans, go, y, dim, input_dtype: L.sub(
           L.mul(gg, go), L.add(L.mul(gg, _sum_keep(L.mul(go, y), dim)), L.mul(go, _sum_keep(L.mul(gg, y), dim)))))


@aten("_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor", "SafeSoftmaxBackward0")
def safe_softmax(self, dim, dtype=None):
    x = cast(self, np.dtype(dtype)) if dtype is not None else self
    check_dtype("_safe_softmax", x, "f")
    d = _dim(dim, x.ndim)
    return contiguous(K._safe_softmax(x, d)) if x.ndim else np.ones_like(x)


# self: _softmax_backward_data(grad, result, dim, self.scalar_type())
defvjp(safe_softmax, lambda g, ans, self, dim, dtype=None: softmax_backward_data(
    g, ans, dim=dim, input_dtype=self.dtype))


@aten("_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", "LogSoftmaxBackward0")
def log_softmax(self, dim, half_to_float):
    check_dtype("_log_softmax", self, "f")
    x = cast(self, _softmax_dtype(self, half_to_float))
    d = _dim(dim, x.ndim)
    return contiguous(K._log_softmax(x, d)) if x.ndim else np.zeros_like(x)


@aten("_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
      "LogSoftmaxBackwardDataBackward0")
def log_softmax_backward_data(grad_output, output, dim, input_dtype):
    check_dtype("_log_softmax_backward_data", grad_output, "f")
    return contiguous(K._log_softmax_backward_data(grad_output, output, _dim(dim, output.ndim),
                                                   _input_dtype(input_dtype)))


# self: _log_softmax_backward_data(grad, result, dim, self.scalar_type())
defvjp(log_softmax, lambda g, ans, self, dim, half_to_float: log_softmax_backward_data(
    g, ans, dim=dim, input_dtype=self.dtype))
# grad_output: grad - (grad * output.exp()).sum(dim, true)
# output: -grad_output.sum(dim, true) * output.exp() * grad
defvjp(log_softmax_backward_data,
       lambda gg, ans, go, y, dim, input_dtype: L.sub(gg, _sum_keep(L.mul(gg, L.exp(y)), dim)),
       lambda gg, ans, go, y, dim, input_dtype: L.mul(L.mul(L.neg(_sum_keep(go, dim)), L.exp(y)), gg))


# -- embedding ----------------------------------------------------------------------------
def _embedding_check(weight, indices):
    """embedding's argument checks: int64/int32 indices, a 2-D weight (shape rule and forward)."""
    if np.dtype(indices.dtype) not in (np.int64, np.int32):
        raise TypeError(f"embedding: indices must be an int64 or int32 tensor, got {indices.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: 'weight' must be 2-D, got shape {list(weight.shape)}")


@aten("embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, "
      "bool sparse=False) -> Tensor", "EmbeddingBackward0")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    _embedding_check(weight, indices)
    n = weight.shape[0]
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n):
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise ValueError(f"embedding: index {bad} out of range for a weight of {n} rows "
                         f"(indices must be in [0, {n}))")
    return np.take(weight, indices, axis=0)


@aten("embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, "
      "bool scale_grad_by_freq) -> Tensor", "EmbeddingDenseBackwardBackward0")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    return K.embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)


# weight: embedding_backward(grad, indices, weight.sym_size(0), padding_idx, scale_grad_by_freq, sparse)
defvjp(embedding,
       lambda g, ans, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False:
       embedding_dense_backward(g, indices, num_weights=weight.shape[0], padding_idx=padding_idx,
                                scale_grad_by_freq=scale_grad_by_freq),
       None)


def _embedding_double_backward(gg, ans, go, indices, num_weights, padding_idx, scale_grad_by_freq):
    # embedding_dense_double_backward(grad, indices, padding_idx): the rows of grad at the indices
    # (index_select, here embedding), padding rows zero (masked_fill), viewed as indices + (-1,).
    # PyTorch ignores scale_grad_by_freq here (so it is not this op's exact derivative then).
    idx = _value(indices).reshape(-1)
    rows = embedding(gg, idx)
    if padding_idx >= 0:
        rows = masked_fill(rows, (idx == padding_idx)[:, None], value=0)
    return view(rows, size=list(_value(indices).shape) + [-1])


defvjp(embedding_dense_backward, _embedding_double_backward, None)


# -- losses -------------------------------------------------------------------------------
def _nll_dtypes(op, self, target, weight=None):
    """nll_loss's dtype checks: a floating point input, an int64 or uint8 target."""
    check_dtype(op, self, "f")
    if np.dtype(target.dtype) not in (np.int64, np.uint8):
        raise TypeError(f"{op}: expected target dtype to be int64 or uint8, but got {target.dtype}")
    if weight is not None and weight.dtype != self.dtype:
        raise TypeError(f"{op}: weight must have the input's dtype {self.dtype}, got {weight.dtype}")


@aten("nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) "
      "-> (Tensor output, Tensor total_weight)", "NllLossBackward0", differentiable_outputs=(True, False))
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    _nll_dtypes("nll_loss_forward", self, target, weight)
    return K.nll_loss_forward(self, target, None if weight is None else cast(weight, self.dtype),
                              reduction, ignore_index)


@aten("nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction, "
      "SymInt ignore_index, Tensor total_weight) -> Tensor", "NllLossBackwardBackward0")
def nll_loss_backward(grad_output, self, target, weight, total_weight, reduction, ignore_index):
    _nll_dtypes("nll_loss_backward", self, target, weight)
    return K.nll_loss_backward(grad_output, self, target, None if weight is None else cast(weight, self.dtype),
                               reduction, ignore_index, total_weight)


# self: nll_loss_backward(grad, self, target, weight, reduction, ignore_index, total_weight)
defvjp(nll_loss_forward,
       lambda gs, ans, self, target, weight, reduction, ignore_index: nll_loss_backward(
           gs[0], self, target, weight, ans[1], reduction=reduction, ignore_index=ignore_index),
       None, None)
# grad_output: nll_loss(grad, target, weight, reduction, ignore_index); self: zeros_like(grad);
# target, weight, total_weight: not differentiable
defvjp(nll_loss_backward,
       lambda gg, ans, go, self, target, weight, total_weight, reduction, ignore_index: nll_loss_forward(
           gg, target, weight, reduction=reduction, ignore_index=ignore_index)[0],
       lambda gg, ans, go, self, target, weight, total_weight, reduction, ignore_index: zeros(self.shape, gg),
       None, None, None)


def _check_reduction(op, reduction):
    if reduction not in (0, 1, 2):
        raise ValueError(f"{op}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")


@aten("mse_loss(Tensor self, Tensor target, int reduction=1) -> Tensor", "MseLossBackward0")
def mse_loss(self, target, reduction=1):
    _check_reduction("mse_loss", reduction)
    dt = result_type(self, target)
    check_dtype("mse_loss", np.empty(0, dt), "f")
    sq = np.square(np.subtract(cast(self, dt), cast(target, dt)))
    if reduction == 0:                # an elementwise kernel (Note [TensorIterator's layout])
        return lay_out(as_dtype(sq, dt), [self, target])
    return as_dtype(np.mean(sq) if reduction == 1 else np.sum(sq), dt)


def _mse_norm(self, target, reduction):
    n = _numel(np.broadcast_shapes(tuple(self.shape), tuple(target.shape)))
    return 2.0 / max(n, 1) if reduction == 1 else 2.0


@aten("mse_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction) -> Tensor",
      "MseLossBackwardBackward0")
def mse_loss_backward(grad_output, self, target, reduction):
    # norm * (self - target) * grad, norm 2 (/ numel for mean); like PyTorch it takes any
    # reduction other than mean as sum (only mse_loss itself checks it)
    dt = result_type(self, target)
    diff = np.subtract(cast(self, dt), cast(target, dt))
    return contiguous(as_dtype(diff * scalar(_mse_norm(self, target, reduction), dt) * grad_output, dt))


# self: mse_loss_backward(grad, self, target, reduction); target: mse_loss_backward(grad, target, self, reduction)
defvjp(mse_loss,
       lambda g, ans, self, target, reduction=1: L.unbroadcast(
           mse_loss_backward(g, self, target, reduction=reduction), tuple(self.shape)),
       lambda g, ans, self, target, reduction=1: L.unbroadcast(
           mse_loss_backward(g, target, self, reduction=reduction), tuple(target.shape)))


def _mse_double(sign):
    # self: mse_loss_double_backward(grad * grad_output, self, reduction);
    # target: -mse_loss_double_backward(grad * grad_output, target, reduction);
    # mse_loss_double_backward(g, input, reduction) = 2 * g, then / input.numel() for mean:
    # the ops PyTorch runs, so a create_graph backward records its nodes (Mul, Mul.Scalar, Div.Scalar, Neg)
    def vjp(gg, ans, go, self, target, reduction):
        x = self if sign > 0 else target
        out = mul_scalar(mul(gg, go), other=2)
        if reduction == 1:
            out = div_scalar(out, other=_numel(x.shape))
        return L.unbroadcast(out if sign > 0 else neg(out), tuple(x.shape))
    return vjp


def _mse_double_grad_output(gg, ans, go, self, target, reduction):
    # grad_output: mse_loss_double_backward_grad_output(grad, grad_output, self, target, reduction):
    # mse_loss_backward(grad, self, target, reduction), summed (sum()) to a 0-d grad_output (a
    # reduced loss's); a grad_output of the input's shape (one order up) takes it as it is
    out = mse_loss_backward(gg, self, target, reduction=reduction)
    if len(go.shape) == 0 and len(out.shape) != 0:
        return sum_all(out)
    return L.unbroadcast(out, tuple(go.shape))


defvjp(mse_loss_backward, _mse_double_grad_output, _mse_double(1), _mse_double(-1))
