"""``native_batch_norm`` and ``native_layer_norm`` as array functions (PyTorch's
formulas; biased variance in the normalisation). Their backwards are ops of their
own in ``gradcli.ops.aten.norm_attention``, written with ops (Note [normalisation
double backward])."""
from ...devices import reduce_mean
from ._common import array_module, check_dtype


def _acc_dtype(xp, dtype):
    # Note [batch-norm statistics in double]: PyTorch's CPU batch norm
    # collects mean and variance in double for float inputs (acc_type), so
    # float32 statistics are accumulated in float64 and stored as float32.
    return xp.float64 if xp.dtype(dtype).kind == "f" else dtype


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _bn_axes(x, training=False):
    check_dtype("native_batch_norm", x, "f")
    if training and 0 in x.shape:
        raise ValueError(f"native_batch_norm: input tensor must have at least one element in training, "
                         f"got shape {list(x.shape)}")
    if x.ndim < 2:
        raise ValueError(f"native_batch_norm: expected an input with at least 2 dims "
                         f"(N, C, ...), got shape {list(x.shape)}")
    return (0,) + tuple(range(2, x.ndim))


def native_batch_norm(input, weight, bias, running_mean, running_var, training,
                      momentum, eps):
    """``aten.native_batch_norm(Tensor input, Tensor? weight, Tensor? bias,
    Tensor? running_mean, Tensor? running_var, bool training, float momentum,
    float eps) -> (Tensor, Tensor, Tensor)``.

    Returns ``(out, save_mean, save_invstd)``. Training: per-channel batch
    mean and biased variance over every dim but 1, ``save_invstd =
    1/sqrt(var + eps)``, and ``running_mean``/``running_var`` (when given)
    are updated IN PLACE to ``(1 - momentum) * running + momentum * stat``
    with the unbiased variance ``var * n / (n - 1)`` (NaN when ``n == 1``, as
    PyTorch). Eval: normalises with the running statistics and returns
    ``save_mean``/``save_invstd`` as empty ``(0,)`` arrays, as PyTorch's CPU
    kernel does."""
    xp = array_module(input)
    axes = _bn_axes(input, training)
    check_bn_params(input, (weight, bias, running_mean, running_var))
    shape = _channel_shape(input)
    c = input.shape[1]
    n = input.size // c if c else 0
    if training:
        acc = _acc_dtype(xp, input.dtype)
        mean = xp.mean(input, axis=axes, dtype=acc)
        centred = input.astype(acc, copy=False) - mean.reshape(shape)
        var = xp.mean(centred * centred, axis=axes)
        invstd = 1.0 / xp.sqrt(var + eps)
        if running_mean is not None:
            running_mean[...] = ((1 - momentum) * running_mean
                                 + momentum * mean).astype(running_mean.dtype, copy=False)
        if running_var is not None:
            unbiased = var * (n / (n - 1)) if n > 1 else var * float("nan")
            running_var[...] = ((1 - momentum) * running_var
                                + momentum * unbiased).astype(running_var.dtype, copy=False)
        save_mean = mean.astype(input.dtype)
        save_invstd = invstd.astype(input.dtype)
        use_mean, use_invstd = save_mean, save_invstd
    else:
        if running_mean is None or running_var is None:
            raise ValueError("native_batch_norm: running_mean and running_var must be "
                             "given when training is false")
        use_mean = running_mean.astype(input.dtype, copy=False)
        use_invstd = (1.0 / xp.sqrt(running_var + eps)).astype(input.dtype, copy=False)
        save_mean = xp.empty((0,), dtype=input.dtype)
        save_invstd = xp.empty((0,), dtype=input.dtype)
    scale = use_invstd if weight is None else use_invstd * weight
    out = (input - use_mean.reshape(shape)) * scale.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out, save_mean, save_invstd


def check_bn_params(input, params):
    """Note [batch-norm parameter sizes]: weight, bias and the running statistics have one
    entry per channel. PyTorch 2.13's CPU kernel does not check this (it reads past a
    short parameter); gradcli refuses (tests/test_aten_ops.py says so)."""
    c = input.shape[1] if input.ndim >= 2 else None
    for name, p in zip(("weight", "bias", "running_mean", "running_var"), params):
        if p is not None and c is not None and tuple(p.shape) != (c,):
            raise ValueError(f"native_batch_norm: {name} must have shape [{c}] (one entry per channel of "
                             f"input {list(input.shape)}), got {list(p.shape)}")
    check_params("native_batch_norm", input, params)


def check_params(op, input, params):
    """The norms' parameters (weight, bias, running statistics; None for absent): in the
    input's dtype ("mixed dtype (CPU)" in PyTorch; a float32 parameter for a float16 or
    bfloat16 input is its one mixed case, which NumPy has no bfloat16 for)."""
    for p in params:
        if p is not None and p.dtype != input.dtype and not (
                input.dtype.itemsize == 2 and p.dtype == "float32"):
            raise TypeError(f"{op}: mixed dtype: parameters must have the input's dtype {input.dtype}, "
                            f"got {p.dtype}")


def _ln_axes(op, input, normalized_shape, weight=None, bias=None):
    check_dtype(op, input, "f")
    check_params(op, input, (weight, bias))
    ns = tuple(int(v) for v in normalized_shape)
    if not ns:
        raise ValueError(f"{op}: expected normalized_shape to be at least 1-dimensional, got []")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != ns:
            raise ValueError(f"{op}: expected {name} to be of same shape as normalized_shape {list(ns)}, "
                             f"got {list(p.shape)}")
    axis = input.ndim - len(ns)
    if axis < 0 or tuple(input.shape[axis:]) != ns:
        raise ValueError(f"{op}: normalized_shape {list(ns)} does not match the trailing "
                         f"dims of input shape {list(input.shape)}")
    return axis, tuple(range(axis, input.ndim))


def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """``aten.native_layer_norm(Tensor input, SymInt[] normalized_shape,
    Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)``.

    Returns ``(out, mean, rstd)``; ``mean`` and ``rstd = 1/sqrt(var + eps)``
    (biased variance over the trailing ``normalized_shape`` dims) have shape
    ``input.shape[:axis] + (1,) * len(normalized_shape)``, as PyTorch."""
    xp = array_module(input)
    _, red = _ln_axes("native_layer_norm", input, normalized_shape, weight, bias)
    mean = reduce_mean(input, axis=red, keepdims=True)
    centred = input - mean
    rstd = 1.0 / xp.sqrt(reduce_mean(centred * centred, axis=red, keepdims=True) + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd.astype(input.dtype, copy=False)
