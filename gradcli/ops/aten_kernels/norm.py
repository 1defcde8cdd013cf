"""``native_batch_norm`` and ``native_layer_norm`` as array functions (PyTorch's
formulas; biased variance in the normalisation). Their backwards are written with
ops in ``gradcli.ops.aten.norm_attention`` (one formula for every order of
derivative: Note [normalisation backward with ops])."""
from ._common import array_module


def _acc_dtype(xp, dtype):
    # Note [batch-norm statistics in double]: PyTorch's CPU batch norm
    # collects mean and variance in double for float inputs (acc_type), so
    # float32 statistics are accumulated in float64 and stored as float32.
    return xp.float64 if xp.dtype(dtype).kind == "f" else dtype


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _bn_axes(x):
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
    axes = _bn_axes(input)
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


def _ln_axes(op, input, normalized_shape):
    ns = tuple(int(v) for v in normalized_shape)
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
    _, red = _ln_axes("native_layer_norm", input, normalized_shape)
    mean = input.mean(axis=red, keepdims=True)
    centred = input - mean
    rstd = 1.0 / xp.sqrt((centred * centred).mean(axis=red, keepdims=True) + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd.astype(input.dtype, copy=False)
