"""Helpers shared by the ATen kernels: the array module of an input (the device
registry decides), window views, scatter-add and ``erf`` that work on NumPy and
on NumPy-like modules."""
import math

import numpy as np

from ...devices import xp_of_array


def array_module(*arrays):
    """The array module (``numpy``, or ``cupy`` for CuPy arrays) that owns the
    first non-None, non-NumPy array of ``arrays``: the device registry decides
    (``devices.xp_of_array``; gradcli's sim arrays count as NumPy)."""
    for a in arrays:
        if a is not None and not isinstance(a, np.ndarray):
            return xp_of_array(a)
    return np


def check_dtype(op, x, kinds="fc", what="a floating point"):
    """Refuse ``x`` (an array or a ``Meta``) whose dtype kind is not in ``kinds``, as
    PyTorch's kernels do ("... not implemented for 'Long'") where NumPy would compute."""
    dt = np.dtype(x.dtype)
    if dt.kind not in kinds:
        raise TypeError(f"{op}: not implemented for {dt} inputs ({what} tensor is needed, as PyTorch)")


def expand_param(value, n, name):
    """``value`` (an int or a list of 1 or ``n`` ints) as a tuple of ``n``
    ints, as ATen expands ``stride=[2]`` for a 2-D op."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{name} must have {n} elements (or 1), got {list(value)}")
    return value


def windows(xp, x, lead, out_shape, kernel, stride, dilation):
    """A strided view of ``x`` shaped ``x.shape[:lead] + out_shape + kernel``:
    element ``[..., o..., k...]`` is ``x[..., o*stride + k*dilation ...]`` (no
    copy). ``x`` must be large enough on every window axis."""
    st = x.strides
    shape = tuple(x.shape[:lead]) + tuple(out_shape) + tuple(kernel)
    # an output axis of one window never steps: its stride is 0, so that a huge
    # stride (any int64 is valid, PyTorch's output is then 1 wide) cannot overflow
    strides = (tuple(st[:lead])
               + tuple(st[lead + i] * stride[i] if out_shape[i] > 1 else 0 for i in range(len(kernel)))
               + tuple(st[lead + i] * dilation[i] for i in range(len(kernel))))
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def window_slice(start, count, step):
    """The slice that picks ``count`` positions ``start, start+step, ...``."""
    return slice(start, start + step * (count - 1) + 1, step)


def scatter_add(xp, target, index, values):
    """``target[index] += values`` with repeated indices accumulated, in
    ``target``'s dtype (no promotion, unlike ``bincount``)."""
    at = getattr(getattr(xp, "add", None), "at", None)
    if at is not None:
        at(target, index, values)
        return target
    import cupyx  # CuPy without ufunc.at

    cupyx.scatter_add(target, index, values)
    return target


def erf(xp, x):
    """The error function elementwise, in ``x``'s dtype. NumPy has none, so
    on NumPy this maps ``math.erf`` (libm's values) over the elements as Python
    floats (Note [erf on the host]); CuPy uses ``cupyx.scipy.special.erf``."""
    if xp is not np:
        from cupyx.scipy.special import erf as cupy_erf

        return cupy_erf(x)
    return host_erf(x)


# Note [erf on the host]: NumPy has no erf ufunc, and a vectorised approximation would
# change the values (gelu's gradients with them), so each element goes through libm's
# erf (``math.erf``). The elements travel as a list of Python floats (``tolist``) and
# back through ``fromiter``: a ufunc made by ``frompyfunc`` builds an object array and
# converts it again, about 1.5x the time (gelu's erf was a sixth of a tiny ViT's run).
# The values are the same: every element is widened to float64 exactly, erf'd, then
# cast to the input's dtype; and so is the layout: the result is laid out as the
# ufunc's was, like the input (``empty_like``), which the ops' strides follow.
def host_erf(x):
    """erf of a NumPy array (or number) elementwise, in its dtype (Note [erf on the host]).

    >>> host_erf(np.array([0.0, 1.0], np.float32)).dtype
    dtype('float32')
    """
    x = np.asarray(x)
    out = np.empty_like(x, dtype=np.float64)
    out[...] = np.fromiter(map(math.erf, x.ravel().tolist()), np.float64,
                           count=x.size).reshape(x.shape)
    return out.astype(x.dtype, copy=False)
