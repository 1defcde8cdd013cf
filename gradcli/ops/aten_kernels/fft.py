"""The real FFTs ``_fft_r2c`` and ``_fft_c2r`` as array functions, on complex values held in
their real view (Note [complex as its real view]).

Note [complex as its real view]: gradcli has no complex dtype. A complex tensor of shape ``S``
is held as the real tensor of shape ``S + [2]`` that ``torch.view_as_real`` makes of it (real
and imaginary parts on a last axis of two), and its gradient likewise: PyTorch's gradient of a
complex tensor (the conjugate Wirtinger one) is exactly the gradient of that real view. So
``_fft_r2c`` returns the real view of PyTorch's result, and ``_fft_c2r`` takes the real view of
PyTorch's input. Signal dims (``dim``) index the complex shape, so they index the real view
alike (its extra axis is last).

``normalization`` is PyTorch's ``fft_norm_mode``: 0 none, 1 by the square root of the signal's
number of points, 2 by that number (the ``norm="forward"`` of a forward transform, the default
``norm="backward"`` of an inverse one).
"""
import math

import numpy as np

from ._common import array_module


def check_dims(name, dim, ndim):
    """The signal dims, checked: at least one, each in ``[0, ndim)`` (PyTorch's callers wrap
    negative dims before they record the op) and no dim twice."""
    dim = [int(d) for d in dim]
    if not dim:
        raise ValueError(f"{name}: dim must name at least one dimension")
    for d in dim:
        if not 0 <= d < ndim:
            raise ValueError(f"{name}: dim {d} is out of range for a {ndim}-D signal (non-negative dims "
                             f"below {ndim} only)")
    if len(set(dim)) != len(dim):
        raise ValueError(f"{name}: dim {dim} repeats a dimension")
    return dim


def check_normalization(name, normalization):
    if normalization not in (0, 1, 2):
        raise ValueError(f"{name}: normalization must be 0 (none), 1 (by sqrt(n)) or 2 (by n), got {normalization}")


def scale(normalization, n):
    """The factor of ``normalization`` (Note [complex as its real view]) for ``n`` points."""
    return 1.0 if normalization == 0 else 1.0 / math.sqrt(n) if normalization == 1 else 1.0 / n


def r2c_shape(name, shape, dim, normalization, onesided):
    """The real view's shape of ``_fft_r2c``'s result."""
    dim = check_dims(name, dim, len(shape))
    check_normalization(name, normalization)
    for d in dim:
        if shape[d] < 1:
            raise ValueError(f"{name}: Invalid number of data points ({shape[d]}) specified")
    out = list(shape)
    if onesided:
        out[dim[-1]] = shape[dim[-1]] // 2 + 1
    return tuple(out) + (2,)


def c2r_shape(name, shape, dim, normalization, last_dim_size):
    """The shape of ``_fft_c2r``'s result for an input whose real view has ``shape``."""
    if len(shape) < 2 or shape[-1] != 2:
        raise ValueError(f"{name}: expected the real view of a complex tensor (a last dimension of "
                         f"size 2), got shape {list(shape)}")
    complex_shape = tuple(shape[:-1])
    dim = check_dims(name, dim, len(complex_shape))
    check_normalization(name, normalization)
    if last_dim_size < 1:
        raise ValueError(f"{name}: Invalid number of data points ({last_dim_size}) specified")
    half = last_dim_size // 2 + 1
    if complex_shape[dim[-1]] != half:
        # Note [c2r takes the onesided half]: PyTorch's kernel also takes the full signal there
        # (using its first half), but its backward then returns a gradient of the wrong size;
        # torch.fft.irfft always records the half
        raise ValueError(f"{name}: expected {half} entries (last_dim_size // 2 + 1) along dim {dim[-1]}, "
                         f"got {complex_shape[dim[-1]]}")
    for d in dim[:-1]:
        if complex_shape[d] < 1:
            raise ValueError(f"{name}: Invalid number of data points ({complex_shape[d]}) specified")
    out = list(complex_shape)
    out[dim[-1]] = int(last_dim_size)
    return tuple(out)


def _complex_dtype(dtype):
    return np.complex64 if np.dtype(dtype) == np.float32 else np.complex128


def fft_r2c(x, dim, normalization, onesided):
    """``aten._fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor``, its
    result in its real view.

    >>> import numpy as np
    >>> fft_r2c(np.array([1.0, 2.0, 3.0, 4.0]), [0], 0, True).tolist()
    [[10.0, 0.0], [-2.0, 2.0], [-2.0, 0.0]]
    """
    xp = array_module(x)
    r2c_shape("_fft_r2c", tuple(x.shape), dim, normalization, onesided)
    dim = [int(d) for d in dim]
    n = math.prod(x.shape[d] for d in dim)
    z = xp.fft.rfftn(x, axes=dim) if onesided else xp.fft.fftn(x, axes=dim)
    z = z * scale(normalization, n)
    z = z.astype(_complex_dtype(x.dtype), copy=False)
    return xp.ascontiguousarray(xp.stack([z.real, z.imag], axis=-1)).astype(x.dtype, copy=False)


def fft_c2r(z, dim, normalization, last_dim_size):
    """``aten._fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor``,
    ``self`` in its real view: the inverse of a onesided ``_fft_r2c`` (the signal is taken as
    Hermitian, so the imaginary parts of the zero and Nyquist frequencies count for nothing).

    >>> import numpy as np
    >>> fft_c2r(np.array([[10.0, 0.0], [-2.0, 2.0], [-2.0, 0.0]]), [0], 2, 4).tolist()
    [1.0, 2.0, 3.0, 4.0]
    """
    xp = array_module(z)
    out_shape = c2r_shape("_fft_c2r", tuple(z.shape), dim, normalization, last_dim_size)
    dim = [int(d) for d in dim]
    c = z[..., 0] + 1j * z[..., 1]
    sizes = [c.shape[d] for d in dim[:-1]] + [int(last_dim_size)]
    n = math.prod(sizes)
    out = xp.fft.irfftn(c, s=sizes, axes=dim, norm="forward") * scale(normalization, n)
    assert out.shape == out_shape
    return xp.ascontiguousarray(out).astype(z.dtype, copy=False)
