"""``grid_sampler_2d``, its backward and its double backward as array functions; the same functions
serve ``grid_sampler_3d`` (a 5-D input, a grid ``(N, Do, Ho, Wo, 3)``: the taps on three axes).

Note [grid sampling as taps]: each output pixel reads a few input pixels (taps: 1 for nearest,
2 x 2 for bilinear, 4 x 4 for bicubic), each with a weight that is a product of one weight per
axis, a function of that axis's grid coordinate. ``_axis_taps`` gives, per axis, the taps'
positions, whether they lie inside the input, and their weights with the weights' first and
second derivatives in the grid coordinate (through the unnormalization and the padding's
clipping or reflection, PyTorch's ``*_set_grad`` multipliers). The forward, the backward and
the double backward are then sums over taps: the output gathers ``weight * input``, the
input's gradient scatters ``weight * grad`` back, the grid's gradient sums ``d weight * input
* grad``, and the double backward uses the second derivatives (zero within a cell for bilinear
except the cross term, none at all for nearest).

``interpolation_mode``: 0 bilinear, 1 nearest, 2 bicubic; ``padding_mode``: 0 zeros, 1 border,
2 reflection (PyTorch's ``GridSamplerInterpolation`` and ``GridSamplerPadding``).
"""
import numpy as np

from ._common import array_module, check_dtype, scatter_add

_A = -0.75      # the cubic convolution's parameter, as PyTorch's


def check(input, grid, interpolation_mode, padding_mode, dims=2):
    """grid_sampler's argument checks, with PyTorch's messages; the output shape. ``dims``: 2
    (grid_sampler_2d, 4-D input) or 3 (grid_sampler_3d, 5-D input)."""
    check_dtype(f"grid_sampler_{dims}d", input, "f")
    if input.dtype != grid.dtype:
        raise TypeError(f"grid_sampler(): expected input and grid to have same dtype, but input has {input.dtype} "
                        f"and grid has {grid.dtype}")
    si, sg = list(input.shape), list(grid.shape)
    if len(si) != dims + 2 or len(sg) != dims + 2:
        raise ValueError(f"grid_sampler(): expected {dims + 2}D input and grid with same number of dimensions, but "
                         f"got input with sizes {si} and grid with sizes {sg}")
    if si[0] != sg[0]:
        raise ValueError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                         f"sizes {si} and grid with sizes {sg}")
    if sg[-1] != dims:
        raise ValueError(f"grid_sampler(): expected grid to have size {dims} in last dimension, but got grid with "
                         f"sizes {sg}")
    for d in range(2, dims + 2):
        if si[d] == 0:
            raise ValueError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                             f"sizes {si} with dimension {d} being empty")
    if interpolation_mode not in (0, 1, 2):
        raise ValueError(f"grid_sampler(): interpolation_mode must be 0 (bilinear), 1 (nearest) or 2 (bicubic), "
                         f"got {interpolation_mode}")
    if interpolation_mode == 2 and dims != 2:
        raise ValueError("grid_sampler(): bicubic interpolation only supports 4D input")
    if padding_mode not in (0, 1, 2):
        raise ValueError(f"grid_sampler(): padding_mode must be 0 (zeros), 1 (border) or 2 (reflection), "
                         f"got {padding_mode}")
    return tuple(si[:2] + sg[1:-1])


def _unnormalize(xp, g, size, align_corners):
    """(coordinate, d coordinate / d g) of a grid value in [-1, 1] (grid_sampler_unnormalize)."""
    if align_corners:
        return (g + 1) / 2 * (size - 1), (size - 1) / 2
    return ((g + 1) * size - 1) / 2, size / 2


def _clip(xp, c, size):
    """(clipped coordinate, its derivative): clip_coordinates_set_grad (1 on the boundary)."""
    inside = (c >= 0) & (c <= size - 1)
    return xp.clip(c, 0, size - 1), inside.astype(c.dtype)


def _reflect(xp, c, twice_low, twice_high):
    """(reflected coordinate, its derivative): reflect_coordinates_set_grad."""
    if twice_low == twice_high:
        return xp.zeros_like(c), xp.zeros_like(c)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    c = c - low
    sign = xp.where(c < 0, -1.0, 1.0).astype(c.dtype)
    c = xp.abs(c)
    extra = xp.fmod(c, span)
    flips = xp.floor(c / span)
    even = flips % 2 == 0
    return xp.where(even, extra + low, span - extra + low), xp.where(even, sign, -sign)


def _pad(xp, c, size, padding_mode, align_corners):
    """(coordinate after padding, its derivative): compute_coordinates with its grads."""
    if padding_mode == 0:
        return c, xp.ones_like(c)
    if padding_mode == 1:
        return _clip(xp, c, size)
    if align_corners:
        r, dr = _reflect(xp, c, 0, 2 * (size - 1))
    else:
        r, dr = _reflect(xp, c, -1, 2 * size - 1)
    out, dc = _clip(xp, r, size)
    return out, dr * dc


def _cubic(xp, t):
    """The four cubic convolution weights of fraction ``t`` and their first and second derivatives."""
    a = _A

    def inner(x):        # cubic_convolution1 and its derivatives
        return ((a + 2) * x - (a + 3)) * x * x + 1, (3 * (a + 2) * x - 2 * (a + 3)) * x, 6 * (a + 2) * x - 2 * (a + 3)

    def outer(x):        # cubic_convolution2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, (3 * a * x - 10 * a) * x + 8 * a, 6 * a * x - 10 * a
    parts = [outer(t + 1), inner(t), inner(1 - t), outer(2 - t)]
    signs = [1, 1, -1, -1]           # d/dt of a function of (1 - t) or (2 - t)
    w = xp.stack([p[0] for p in parts], -1)
    dw = xp.stack([s * p[1] for s, p in zip(signs, parts)], -1)
    d2w = xp.stack([p[2] for p in parts], -1)
    return w, dw, d2w


def _axis_taps(xp, g, size, interpolation_mode, padding_mode, align_corners):
    """Per grid value: (positions, inside, w, dw, d2w), each ``g.shape + (taps,)``; the
    derivatives are in ``g`` (Note [grid sampling as taps])."""
    c, du = _unnormalize(xp, g, size, align_corners)
    if interpolation_mode == 2:
        # bicubic pads each tap's position, not the coordinate: the weights see no padding
        c0 = xp.floor(c)
        w, dw, d2w = _cubic(xp, c - c0)
        dw, d2w = dw * du, d2w * du * du
        raw = c0[..., None] + xp.arange(-1, 3, dtype=c.dtype)
        pos = _pad(xp, raw, size, padding_mode, align_corners)[0]
        pos = xp.where(xp.isfinite(pos), pos, -1)
        ipos = pos.astype(np.int64)          # truncation, as get_value_bounded's cast
        inside = (pos > -1) & (ipos >= 0) & (ipos < size)
        return ipos, inside, w, dw, d2w
    c, dp = _pad(xp, c, size, padding_mode, align_corners)
    mult = (du * dp)[..., None]
    if interpolation_mode == 1:
        pos = xp.rint(c)[..., None]          # nearbyint: halves to even
        w = xp.ones_like(pos)
        dw = xp.zeros_like(pos)
        d2w = dw
    else:
        c0 = xp.floor(c)
        f = (c - c0)[..., None]
        pos = c0[..., None] + xp.arange(2, dtype=c.dtype)
        w = xp.concatenate([1 - f, f], -1)
        dw = xp.concatenate([-xp.ones_like(f), xp.ones_like(f)], -1) * mult
        d2w = xp.zeros_like(w)
    finite = xp.isfinite(pos)
    ipos = xp.where(finite, pos, -1).astype(np.int64)
    inside = finite & (ipos >= 0) & (ipos < size)
    return ipos, inside, w, dw, d2w


class _Taps:
    """Every spatial axis's taps of one grid, combined: arrays ``(N, *out, K)`` for K the product of
    the axes' tap counts. ``sizes``: the input's spatial sizes (H, W) or (D, H, W); the grid's last
    dim lists the coordinates the other way round (x for W first)."""

    def __init__(self, xp, grid, sizes, interpolation_mode, padding_mode, align_corners):
        n_ax = len(sizes)
        # axes[a]: the taps along spatial axis a (0: D or H, the last: W); grid[..., n_ax - 1 - a] feeds it
        axes = [_axis_taps(xp, grid[..., n_ax - 1 - a], sizes[a], interpolation_mode, padding_mode, align_corners)
                for a in range(n_ax)]
        lead = grid.shape[:-1]
        counts = [ax[0].shape[-1] for ax in axes]
        k = int(np.prod(counts))

        def outer(parts):        # one (.., K_a) per axis -> (.., K), axis 0 slowest
            out = 1
            for a, part in enumerate(parts):
                out = out * part.reshape(lead + (1,) * a + (counts[a],) + (1,) * (n_ax - a - 1))
            return xp.broadcast_to(out, lead + tuple(counts)).reshape(lead + (k,))

        self.inside = outer([ax[1] for ax in axes]).astype(bool)
        self.pos = [xp.where(self.inside, outer([ax[0] if b == a else xp.ones_like(ax[0]) for b, ax in enumerate(axes)]),
                             0) for a in range(n_ax)]
        self.w = outer([ax[2] for ax in axes])

        def with_(derivs):       # the weight with axis a's factor replaced by derivs[a] where given
            return outer([derivs.get(a, axes[a][2]) for a in range(n_ax)])
        # d[c]: the weight's derivative in grid coordinate c (c = n_ax - 1 - a); dd[c][e]: second
        self.d = [with_({n_ax - 1 - c: axes[n_ax - 1 - c][3]}) for c in range(n_ax)]
        self.dd = [[with_({n_ax - 1 - c: axes[n_ax - 1 - c][4]}) if c == e else
                    with_({n_ax - 1 - c: axes[n_ax - 1 - c][3], n_ax - 1 - e: axes[n_ax - 1 - e][3]})
                    for e in range(n_ax)] for c in range(n_ax)]
        self.n = xp.arange(grid.shape[0]).reshape((grid.shape[0],) + (1,) * (n_ax + 1))
        self.xp = xp

    def gather(self, image):
        """``image`` (N, C, *sizes) at every tap: (N, C, *out, K), zero outside."""
        v = image[(self.n, slice(None)) + tuple(self.pos)]    # (N, *out, K, C)
        v = v * self.inside[..., None]
        return self.xp.moveaxis(v, -1, 1)

    def scatter(self, values, shape, dtype):
        """Add ``values`` (N, C, *out, K) into a zero (N, C, *sizes) image at the taps."""
        xp = self.xp
        out = xp.zeros(shape, dtype)
        v = xp.moveaxis(values, 1, -1) * self.inside[..., None]    # (N, *out, K, C)
        idx = tuple(xp.broadcast_to(a, self.pos[0].shape) for a in [self.n] + self.pos)
        flat = xp.moveaxis(out, 1, -1)                        # a view: (N, *sizes, C)
        scatter_add(xp, flat, idx, v)
        return out

    def grid_grad(self, seen):
        """sum over taps of ``seen`` (N, *out, K) times each coordinate's weight derivative: the grid's shape."""
        return self.xp.stack([(seen * d).sum(-1) for d in self.d], -1)


def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    """``aten.grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode,
    bool align_corners) -> Tensor``.

    >>> import numpy as np
    >>> grid_sampler_2d(np.arange(4.0).reshape(1, 1, 2, 2), np.zeros((1, 1, 1, 2)), 0, 0, True).tolist()
    [[[[1.5]]]]
    """
    xp = array_module(input, grid)
    taps = _Taps(xp, grid, input.shape[2:], interpolation_mode, padding_mode, align_corners)
    out = (taps.gather(input) * taps.w[:, None]).sum(-1)
    return xp.ascontiguousarray(out).astype(input.dtype, copy=False)


def grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners):
    """``aten.grid_sampler_2d_backward(...)`` with every output asked for: (grad_input, grad_grid)."""
    xp = array_module(grad_output, input, grid)
    taps = _Taps(xp, grid, input.shape[2:], interpolation_mode, padding_mode, align_corners)
    go = grad_output[..., None]                              # (N, C, *out, 1)
    grad_input = taps.scatter(go * taps.w[:, None], input.shape, input.dtype)
    seen = (taps.gather(input) * go).sum(1)                  # (N, *out, K): summed over channels
    grad_grid = taps.grid_grad(seen)
    return [grad_input.astype(input.dtype, copy=False), xp.ascontiguousarray(grad_grid).astype(grid.dtype, copy=False)]


def grid_sampler_2d_double_backward(ggi, ggg, grad_output, input, grid, interpolation_mode, padding_mode,
                                    align_corners):
    """The gradients of ``<ggi, grad_input> + <ggg, grad_grid>`` for (grad_output, input, grid)
    (Note [grid sampling as taps]); ``ggi``/``ggg`` may be None (zero)."""
    xp = array_module(grad_output, input, grid)
    taps = _Taps(xp, grid, input.shape[2:], interpolation_mode, padding_mode, align_corners)
    n_ax = grid.shape[-1]
    dt = input.dtype
    d_go = xp.zeros(grad_output.shape, dt)
    d_input = xp.zeros(input.shape, dt)
    d_grid = xp.zeros(grid.shape, dt)
    go = grad_output[..., None]
    if ggi is not None:
        seen = taps.gather(ggi)                              # (N, C, *out, K)
        d_go = d_go + (seen * taps.w[:, None]).sum(-1)
        d_grid = d_grid + taps.grid_grad((seen * go).sum(1))
    if ggg is not None:
        gc = [ggg[..., c:c + 1] for c in range(n_ax)]        # (N, *out, 1) each
        dw = sum(taps.d[c] * gc[c] for c in range(n_ax))     # the weights' change along ggg
        vals = taps.gather(input)
        d_go = d_go + (vals * dw[:, None]).sum(-1)
        d_input = d_input + taps.scatter(go * dw[:, None], input.shape, dt)
        s = (vals * go).sum(1)
        d_grid = d_grid + xp.stack([(s * sum(taps.dd[c][e] * gc[e] for e in range(n_ax))).sum(-1)
                                    for c in range(n_ax)], -1)
    return [d_go.astype(dt, copy=False), d_input.astype(dt, copy=False), d_grid.astype(dt, copy=False)]

