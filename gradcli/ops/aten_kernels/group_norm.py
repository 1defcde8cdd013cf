"""``native_group_norm`` and ``native_group_norm_backward`` as array functions.

The input ``(N, C, *)`` is seen as ``(N, group, C // group * HxW)``: each row is one
group of one sample, normalised with its own mean and biased variance. The arrays'
module is the input's (NumPy or CuPy)."""
from ._common import array_module, check_dtype


def check_group_norm(input, weight, bias, N, C, HxW, group):
    """native_group_norm's argument checks (``input`` may be an array or a ``Meta``)."""
    check_dtype("native_group_norm", input, "f")
    if group <= 0:
        raise ValueError(f"native_group_norm: Expected number of groups to be positive, got {group}")
    if C % group:
        raise ValueError(f"native_group_norm: Expected number of channels in input to be divisible by "
                         f"num_groups, but got input of shape {list(input.shape)} and num_groups={group}")
    numel = 1
    for s in input.shape:
        numel *= int(s)
    if input.ndim < 2 or int(input.shape[0]) != N or int(input.shape[1]) != C or numel != N * C * HxW:
        raise ValueError(f"native_group_norm: Expected the input of shape {list(input.shape)} to be "
                         f"(N={N}, C={C}, ...) with {N * C * HxW} elements (HxW={HxW})")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (tuple(p.shape) != (C,)):
            raise ValueError(f"native_group_norm: Expected {name} to be a vector of size equal to the number "
                             f"of channels in input, but got {name} of shape {list(p.shape)} and input of "
                             f"shape {list(input.shape)}")
        if p is not None and p.dtype != input.dtype:
            raise TypeError(f"native_group_norm: mixed dtype: input is {input.dtype}, {name} is {p.dtype}")


def _grouped(xp, x, N, group):
    return x.reshape(N, group, -1) if N * group else x.reshape(N, group, 0)


def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """``aten.native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N,
    SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)``.

    Returns ``(out, mean, rstd)``, the statistics shaped ``(N, group)``, ``rstd =
    1/sqrt(var + eps)`` with the biased variance.

    >>> import numpy as np
    >>> out, mean, rstd = native_group_norm(np.arange(8.0).reshape(1, 4, 2), None, None, 1, 4, 2, 2, 0.0)
    >>> mean.tolist()
    [[1.5, 5.5]]
    """
    xp = array_module(input, weight, bias)
    check_group_norm(input, weight, bias, N, C, HxW, group)
    # PyTorch's CPU kernel takes a row-major input only (F.group_norm makes it so first)
    if not input.flags.c_contiguous:
        raise ValueError("native_group_norm: Expected the input to be contiguous (row-major), as PyTorch's "
                         "kernel does")
    x = _grouped(xp, input, N, group)
    mean = xp.mean(x, axis=2, keepdims=True) if x.shape[2] else xp.full((N, group, 1), float("nan"), input.dtype)
    centred = x - mean
    var = xp.mean(centred * centred, axis=2, keepdims=True) if x.shape[2] else mean
    rstd = (1.0 / xp.sqrt(var + eps)).astype(input.dtype, copy=False)
    out = (centred * rstd).reshape(input.shape)
    affine = (1, C) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(affine)
    if bias is not None:
        out = out + bias.reshape(affine)
    return (xp.ascontiguousarray(out.astype(input.dtype, copy=False)),
            mean.reshape(N, group).astype(input.dtype, copy=False),
            rstd.reshape(N, group))


def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    """``aten.native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd,
    Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask)
    -> (Tensor, Tensor, Tensor)``: (grad_input, grad_weight, grad_bias), None where
    ``output_mask`` is false (and grad_weight/grad_bias None without a weight is
    PyTorch's too only for the input: they are computed whenever asked)."""
    xp = array_module(grad_out, input)
    check_group_norm(input, weight, None, N, C, HxW, group)
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t.size != N * group:
            raise ValueError(f"native_group_norm_backward: Expected {name} to have {N * group} elements, "
                             f"got shape {list(t.shape)}")
    if tuple(grad_out.shape) != tuple(input.shape):
        raise ValueError(f"native_group_norm_backward: Expected grad_out of shape {list(input.shape)}, "
                         f"got {list(grad_out.shape)}")
    stat = (N, group, 1)
    m = mean.reshape(stat)
    r = rstd.reshape(stat)
    x = _grouped(xp, input, N, group)
    xhat = ((x - m) * r).reshape(N, C, -1) if x.size else input.reshape(N, C, 0)
    g = grad_out.reshape(N, C, -1) if grad_out.size else grad_out.reshape(N, C, 0)
    gi = gw = gb = None
    if output_mask[0]:
        gx = g if weight is None else g * weight.reshape(1, C, 1)
        gx = _grouped(xp, gx, N, group)
        xh = _grouped(xp, xhat, N, group)
        count = max(gx.shape[2], 1)
        gi = r * (gx - gx.sum(axis=2, keepdims=True) / count - xh * (gx * xh).sum(axis=2, keepdims=True) / count)
        gi = xp.ascontiguousarray(gi.reshape(input.shape).astype(input.dtype, copy=False))
    if output_mask[1]:
        gw = (g * xhat).sum(axis=(0, 2)).astype(input.dtype, copy=False)
    if output_mask[2]:
        gb = g.sum(axis=(0, 2)).astype(input.dtype, copy=False)
    return gi, gw, gb
