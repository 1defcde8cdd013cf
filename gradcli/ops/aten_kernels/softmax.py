"""``_softmax``, ``_log_softmax``, ``_safe_softmax`` and the backward data
functions of softmax and log-softmax, as array functions."""
from ._common import array_module


def _to_dtype(xp, a, dtype):
    if dtype is None:
        return a
    if not isinstance(dtype, str):
        dtype = getattr(dtype, "name", None) or str(dtype).replace("torch.", "")
    return a.astype(xp.dtype(dtype.replace("torch.", "")), copy=False)


def _half_to_float(xp, self, half_to_float):
    if half_to_float:
        if self.dtype != xp.float16:
            raise ValueError("softmax: half_to_float conversion is supported for float16 only, "
                             f"got {self.dtype}")
        return self.astype(xp.float32)
    return self


def _softmax(self, dim, half_to_float=False):
    """``aten._softmax(Tensor self, int dim, bool half_to_float) -> Tensor``:
    ``exp(x - max) / sum(exp(x - max))`` along ``dim`` (a row of ``-inf``
    gives NaN, as PyTorch)."""
    xp = array_module(self)
    x = _half_to_float(xp, self, half_to_float)
    if x.size == 0:         # an empty result, as PyTorch (max() of no element raised)
        return xp.exp(x)
    e = xp.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax(self, dim, half_to_float=False):
    """``aten._log_softmax(Tensor self, int dim, bool half_to_float) ->
    Tensor``: ``x - max - log(sum(exp(x - max)))`` along ``dim``."""
    xp = array_module(self)
    x = _half_to_float(xp, self, half_to_float)
    if x.size == 0:         # an empty result, as PyTorch
        return x.copy()
    shifted = x - x.max(axis=dim, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=dim, keepdims=True))


def _safe_softmax(self, dim, dtype=None):
    """``aten._safe_softmax(Tensor self, int dim, ScalarType? dtype=None) ->
    Tensor``: softmax along ``dim`` (computed in ``dtype`` when given),
    except that a slice whose entries are all ``-inf`` gives zeros instead
    of NaN."""
    xp = array_module(self)
    x = _to_dtype(xp, self, dtype)
    if x.size == 0:         # an empty result, as PyTorch
        return xp.exp(x)
    m = x.max(axis=dim, keepdims=True)
    dead = (m == -xp.inf)
    e = xp.exp(x - xp.where(dead, 0, m).astype(x.dtype, copy=False))
    s = e.sum(axis=dim, keepdims=True)
    return xp.where(dead, 0, e / xp.where(dead, 1, s)).astype(x.dtype, copy=False)


def _softmax_backward_data(grad_output, output, dim, input_dtype):
    """``aten._softmax_backward_data(Tensor grad_output, Tensor output,
    int dim, ScalarType input_dtype) -> Tensor``:
    ``output * (grad_output - sum(grad_output * output, dim))`` in
    ``input_dtype`` (a dtype or its name, e.g. ``"float32"``)."""
    xp = array_module(grad_output, output)
    gi = output * (grad_output - (grad_output * output).sum(axis=dim, keepdims=True))
    return _to_dtype(xp, gi, input_dtype)


def _log_softmax_backward_data(grad_output, output, dim, input_dtype):
    """``aten._log_softmax_backward_data(Tensor grad_output, Tensor output,
    int dim, ScalarType input_dtype) -> Tensor``:
    ``grad_output - exp(output) * sum(grad_output, dim)`` in ``input_dtype``."""
    xp = array_module(grad_output, output)
    gi = grad_output - xp.exp(output) * grad_output.sum(axis=dim, keepdims=True)
    return _to_dtype(xp, gi, input_dtype)
