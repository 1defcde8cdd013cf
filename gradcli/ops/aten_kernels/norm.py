"""``native_batch_norm``, ``native_layer_norm`` and their backwards as array
functions (PyTorch's formulas; biased variance in the normalisation)."""
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


def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var,
                               save_mean, save_invstd, train, eps,
                               output_mask=(True, True, True)):
    """``aten.native_batch_norm_backward(Tensor grad_out, Tensor input,
    Tensor? weight, Tensor? running_mean, Tensor? running_var,
    Tensor? save_mean, Tensor? save_invstd, bool train, float eps,
    bool[3] output_mask) -> (Tensor, Tensor, Tensor)``.

    Returns ``(grad_input, grad_weight, grad_bias)`` (None where the mask is
    false; a missing ``weight`` counts as ones). ``train``: the batch
    statistics ``save_mean``/``save_invstd`` are functions of the input, so
    ``grad_input = w*invstd*(g - mean(g) - xhat*mean(g*xhat))``; eval: the
    running statistics are constants and ``grad_input = g*w*invstd``."""
    xp = array_module(grad_out, input)
    axes = _bn_axes(input)
    shape = _channel_shape(input)
    if train:
        mean, invstd = save_mean, save_invstd
    else:
        mean = running_mean
        invstd = 1.0 / xp.sqrt(running_var + eps)
    mean = mean.astype(input.dtype, copy=False).reshape(shape)
    invstd = invstd.astype(input.dtype, copy=False).reshape(shape)
    xhat = (input - mean) * invstd
    sum_dy = grad_out.sum(axis=axes)
    sum_dy_xhat = (grad_out * xhat).sum(axis=axes)
    gi = None
    if output_mask[0]:
        scale = invstd if weight is None else invstd * weight.reshape(shape)
        if train:
            n = input.size // input.shape[1]
            gi = (grad_out - (sum_dy / n).reshape(shape)
                  - xhat * (sum_dy_xhat / n).reshape(shape)) * scale
        else:
            gi = grad_out * scale
    gw = sum_dy_xhat if output_mask[1] else None
    gb = sum_dy if output_mask[2] else None
    return gi, gw, gb


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


def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight,
                               bias, output_mask=(True, True, True)):
    """``aten.native_layer_norm_backward(Tensor grad_out, Tensor input,
    SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight,
    Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)``.

    Returns ``(grad_input, grad_weight, grad_bias)``; ``grad_weight`` is None
    when the mask is false or ``weight`` is None, ``grad_bias`` likewise for
    ``bias`` (PyTorch has no such gradient then)."""
    axis, red = _ln_axes("native_layer_norm_backward", input, normalized_shape)
    xhat = (input - mean) * rstd
    batch = tuple(range(axis))
    gi = gw = gb = None
    if output_mask[0]:
        g = grad_out if weight is None else grad_out * weight
        gi = rstd * (g - g.mean(axis=red, keepdims=True)
                     - xhat * (g * xhat).mean(axis=red, keepdims=True))
    if output_mask[1] and weight is not None:
        gw = (grad_out * xhat).sum(axis=batch)
    if output_mask[2] and bias is not None:
        gb = grad_out.sum(axis=batch)
    return gi, gw, gb
