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
#
# Note [erf's last results]: gelu's backward evaluates erf at exactly the points its forward
# did (``self * sqrt(1/2)`` of the same saved input), as PyTorch's kernel does; on the host
# each is a tenth of a ViT's run. host_erf keeps its last few results, each with its
# argument's dtype, shape and bytes, and answers an argument that is the same bit for bit
# (so -0.0 is not 0.0, and NaN payloads differ) with a copy of that result, laid out like
# the new argument: the values a second evaluation gives. The results are replaced as a
# whole tuple (one assignment), so concurrent runs read one consistent set.
_ERF_KEPT = 8                   # results kept
_ERF_KEPT_SIZE = 1 << 16        # the largest argument kept, in elements
_erf_results = ()               # (((dtype, shape, bytes) of the argument, result), ...), newest first


def host_erf(x):
    """erf of a NumPy array (or number) elementwise, in its dtype (Note [erf on the host],
    Note [erf's last results]).

    >>> host_erf(np.array([0.0, 1.0], np.float32)).dtype
    dtype('float32')
    """
    global _erf_results
    x = np.asarray(x)
    kept = 0 < x.size <= _ERF_KEPT_SIZE
    if kept:
        key = (x.dtype, x.shape, x.tobytes())
        for argument, result in _erf_results:
            if argument == key:
                out = np.empty_like(x)
                out[...] = result
                return out
    out = _host_erf(x)
    if kept:
        _erf_results = ((key, out.copy()),) + _erf_results[:_ERF_KEPT - 1]
    return out


def _host_erf(x):
    out = np.empty_like(x, dtype=np.float64)
    out[...] = np.fromiter(map(math.erf, x.ravel().tolist()), np.float64,
                           count=x.size).reshape(x.shape)
    return out.astype(x.dtype, copy=False)


# Note [an accurate erfinv]: NumPy has no inverse error function either. gradcli starts from
# Pavlis' rational approximation (erfinv.m, the one PyTorch's calc_erfinv took: one fraction for
# |y| <= 0.7, one in sqrt(-log((1 - |y|) / 2)) beyond, good to about 1e-7) and refines it by
# Newton steps in float64, libm's erf and erfc (Note [erf on the host]). Near +-1, erf(x) - y
# cancels: erf(x) is 1 less a few ulps of 1, and Newton on erf there would leave errors of
# thousands of ulps. So for |y| >= 0.5 the steps solve erfc(x) = 1 - |y| instead (1 - |y| is
# exact there, and erfc keeps its relative precision as it falls to 1e-16), and below 0.5
# erf(x) = y. Three steps from 1e-7 reach float64's precision; float32 inputs are computed in
# float64 and rounded once. The result is within an ulp of PyTorch's (correctly rounded) one
# at float64 and float32 over (-1, 1), ends included (tests/test_aten_more.py); +-1 give
# +-inf, |y| > 1 and NaN give NaN.
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)
_TWO_OVER_SQRT_PI = 1.12837916709551257390


def _host_map(fn, x):
    return np.fromiter(map(fn, x.tolist()), np.float64, count=x.size)


def host_erfinv(y):
    """The inverse error function of a float NumPy array elementwise, in its dtype (Note [an
    accurate erfinv]).

    >>> float(host_erfinv(np.array(0.5)))
    0.4769362762044699
    """
    y = np.asarray(y)
    flat = np.asarray(y, np.float64).reshape(-1)
    a, b, c, d = _ERFINV_A, _ERFINV_B, _ERFINV_C, _ERFINV_D
    with np.errstate(all="ignore"):
        ya = np.abs(flat)
        z = flat * flat
        num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0]
        dem = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0
        central = ya * num / dem
        z = np.sqrt(-np.log((1.0 - ya) / 2.0))
        tail = (((c[3] * z + c[2]) * z + c[1]) * z + c[0]) / ((d[1] * z + d[0]) * z + 1.0)
        x = np.where(ya <= 0.7, central, tail)          # |result|, refined below
        ok = ya < 1.0                                    # (not +-1, beyond, NaN)
        near = ok & (ya >= 0.5)
        mid = ok & ~near
        q = 1.0 - ya[near]                               # exact for |y| >= 0.5
        for _ in range(3):
            xn, xm = x[near], x[mid]
            x[near] = xn + (_host_map(math.erfc, xn) - q) / (_TWO_OVER_SQRT_PI * np.exp(-xn * xn))
            x[mid] = xm - (_host_map(math.erf, xm) - ya[mid]) / (_TWO_OVER_SQRT_PI * np.exp(-xm * xm))
        x = np.where(ya == 1.0, np.inf, np.where(ok, x, np.nan))
        out = np.copysign(x, flat)
    return out.reshape(y.shape).astype(y.dtype, copy=False)
