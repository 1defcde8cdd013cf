"""``aten.convolution`` and ``aten.convolution_backward`` as array functions.

Note [im2col by strided view]: the input is zero-padded once, then viewed
(no copy) as ``(N, G, C/G, *out, *kernel)`` windows with ``as_strided``; one
reshape makes the im2col matrix per group and a batched ``matmul`` over the
groups does the work in BLAS. The input gradient multiplies back into column
space and folds it into the padded input with one strided add per kernel
offset (a loop over at most prod(kernel) offsets, never over pixels).
Transposed convolution is the input gradient of the plain one (and its
gradients are the plain forward and weight gradient with roles swapped)."""
import itertools

from ._common import array_module, expand_param, window_slice, windows


def _out_size(in_size, k, s, p, d):
    return [(i + 2 * pp - dd * (kk - 1) - 1) // ss + 1
            for i, kk, ss, pp, dd in zip(in_size, k, s, p, d)]


def _pad(xp, x, padding):
    if not any(padding):
        return x
    return xp.pad(x, ((0, 0), (0, 0)) + tuple((p, p) for p in padding))


def _cols(xp, x, out, k, stride, padding, dilation, groups):
    """The im2col matrix ``(G, N*L, C/G*K)`` of ``x`` for output size ``out``."""
    n, c = x.shape[:2]
    d = len(k)
    xpad = _pad(xp, x, padding)
    xpad = xpad.reshape((n, groups, c // groups) + tuple(xpad.shape[2:]))
    win = windows(xp, xpad, 3, out, k, stride, dilation)
    order = (1, 0) + tuple(range(3, 3 + d)) + (2,) + tuple(range(3 + d, 3 + 2 * d))
    L = 1
    for o in out:
        L *= o
    K = 1
    for kk in k:
        K *= kk
    return win.transpose(order).reshape(groups, n * L, (c // groups) * K)


def _grad_rows(grad_output, groups):
    """``grad_output`` ``(N, O, *out)`` as ``(G, N*L, O/G)``."""
    n, o = grad_output.shape[:2]
    out = grad_output.shape[2:]
    d = len(out)
    g = grad_output.reshape((n, groups, o // groups) + tuple(out))
    g = g.transpose((1, 0) + tuple(range(3, 3 + d)) + (2,))
    return g.reshape(groups, -1, o // groups)


def _forward(xp, x, weight, stride, padding, dilation, groups, out=None):
    n = x.shape[0]
    o = weight.shape[0]
    k = tuple(weight.shape[2:])
    d = len(k)
    if out is None:
        out = _out_size(x.shape[2:], k, stride, padding, dilation)
    if any(v <= 0 for v in out):
        raise ValueError(f"convolution: output size {list(out)} is empty for input "
                         f"{list(x.shape)} and weight {list(weight.shape)}")
    cols = _cols(xp, x, out, k, stride, padding, dilation, groups)
    wm = weight.reshape(groups, o // groups, -1).transpose(0, 2, 1)
    y = xp.matmul(cols, wm)                           # (G, N*L, O/G)
    y = y.reshape((groups, n) + tuple(out) + (o // groups,))
    y = y.transpose((1, 0, 2 + d) + tuple(range(2, 2 + d)))
    return xp.ascontiguousarray(y.reshape((n, o) + tuple(out)))


def _grad_weight(xp, x, grad_output, k, stride, padding, dilation, groups):
    out = tuple(grad_output.shape[2:])
    cols = _cols(xp, x, out, k, stride, padding, dilation, groups)
    # (G, O/G, N*L) @ (G, N*L, C/G*K) lands in the weight's own layout: no
    # transpose of the (large) weight-shaped result. It is written into an array
    # of the weight's shape, so the result owns its memory (not a reshaped view):
    # AccumulateGrad can keep it as .grad without a copy (Note [Stealing gradients]).
    rows = _grad_rows(grad_output, groups).transpose(0, 2, 1)
    o = grad_output.shape[1]
    gw = xp.empty((o, x.shape[1] // groups) + tuple(k), dtype=xp.result_type(rows, cols))
    xp.matmul(rows, cols, out=gw.reshape(groups, o // groups, -1))
    return gw


def _grad_input(xp, grad_output, weight, in_shape, stride, padding, dilation, groups):
    """The gradient w.r.t. an input of shape ``in_shape`` (col2im)."""
    n = grad_output.shape[0]
    out = tuple(grad_output.shape[2:])
    k = tuple(weight.shape[2:])
    d = len(k)
    cg = weight.shape[1]
    c = cg * groups
    wm = weight.reshape(groups, weight.shape[0] // groups, -1)
    dcols = xp.matmul(_grad_rows(grad_output, groups), wm)   # (G, N*L, Cg*K)
    dcols = dcols.reshape((groups, n) + out + (cg,) + k)
    order = ((1, 0, 2 + d) + tuple(range(3 + d, 3 + 2 * d)) + tuple(range(2, 2 + d)))
    dcols = dcols.transpose(order).reshape((n, c) + k + out)
    padded = tuple(i + 2 * p for i, p in zip(in_shape[2:], padding))
    gpad = xp.zeros((n, c) + padded, dtype=dcols.dtype)
    full = (slice(None), slice(None))
    for kidx in itertools.product(*(range(kk) for kk in k)):
        region = tuple(window_slice(ki * di, oi, si)
                       for ki, di, oi, si in zip(kidx, dilation, out, stride))
        gpad[full + region] += dcols[full + kidx]
    crop = tuple(slice(p, p + i) for p, i in zip(padding, in_shape[2:]))
    return xp.ascontiguousarray(gpad[full + crop])


_INT64_MAX = 2 ** 63 - 1


def _params(weight, stride, padding, dilation, output_padding):
    """The spatial dims and the four size lists expanded to them, checked as ATen's
    ``check_shape_forward``: stride and dilation positive, padding and output_padding
    non-negative, all of them int64s (SymInt)."""
    d = weight.ndim - 2
    if d < 1:
        raise ValueError(f"convolution: weight must have at least 3 dims, got {list(weight.shape)}")
    out = [d]
    for name, value, low in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1),
                             ("output_padding", output_padding, 0)):
        v = expand_param(value, d, name)
        if any(not low <= x <= _INT64_MAX for x in v):
            need = "positive" if low else "non-negative"
            raise ValueError(f"convolution: {name} must be {need} ints (at most 2**63-1), got {list(v)}")
        out.append(v)
    return tuple(out)


def _check_input(op, input, weight, d, transposed, groups):
    if input.dtype != weight.dtype:
        raise TypeError(f"{op}: input and weight must have one dtype, got {input.dtype} and {weight.dtype}")
    if input.ndim != d + 2:
        raise ValueError(f"{op}: expected {d + 2}-dimensional input for {d + 2}-dimensional "
                         f"weight {list(weight.shape)}, got input of shape {list(input.shape)}")
    if weight.shape[0] < 1:
        raise ValueError(f"{op}: expected weight to be at least 1 at dimension 0, but got weight of size "
                         f"{list(weight.shape)} instead")
    if groups < 1 or weight.shape[0] % groups:
        raise ValueError(f"{op}: groups={groups} must be positive and divide weight's first "
                         f"dim {weight.shape[0]}")
    in_ch = weight.shape[0] if transposed else weight.shape[1] * groups
    if input.shape[1] != in_ch:
        raise ValueError(f"{op}: input of shape {list(input.shape)} has {input.shape[1]} "
                         f"channels, weight {list(weight.shape)} with groups={groups} "
                         f"expects {in_ch}")


def convolution(input, weight, bias, stride, padding, dilation, transposed,
                output_padding, groups):
    """``aten.convolution(Tensor input, Tensor weight, Tensor? bias,
    SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed,
    SymInt[] output_padding, SymInt groups) -> Tensor``.

    N-D (1-D, 2-D, 3-D) convolution, cross-correlation as PyTorch. ``input``
    is ``(N, C_in, *spatial)`` (unbatched input is refused, as ATen does);
    ``weight`` is ``(C_out, C_in/groups, *kernel)``, or for ``transposed``
    ``(C_in, C_out/groups, *kernel)``; ``bias`` is ``(C_out,)`` or None.
    Size lists of one element are expanded to every spatial dim. Returns an
    array of the inputs' result dtype (float32 stays float32)."""
    xp = array_module(input, weight)
    d, stride, padding, dilation, output_padding = _params(
        weight, stride, padding, dilation, output_padding)
    groups = int(groups)
    _check_input("convolution", input, weight, d, transposed, groups)
    x = input
    if not transposed and x.shape[1] == 0:
        # Note [no input channels]: PyTorch's convolution of an input without channels
        # gives an output without channels, (N, 0, *out), whatever the weight's C_out
        # (no bias added); its gradients are zeros (the bias's too, C_out of them)
        out = _out_size(x.shape[2:], weight.shape[2:], stride, padding, dilation)
        if any(v <= 0 for v in out):
            raise ValueError(f"convolution: output size {list(out)} is empty for input "
                             f"{list(x.shape)} and weight {list(weight.shape)}")
        dt = xp.result_type(x, weight) if bias is None else xp.result_type(x, weight, bias)
        return xp.zeros_like(x, dtype=dt, shape=(x.shape[0], 0) + tuple(out))
    if transposed:
        out = [(i - 1) * s - 2 * p + dd * (kk - 1) + op + 1 for i, s, p, dd, kk, op in zip(
            x.shape[2:], stride, padding, dilation, weight.shape[2:], output_padding)]
        if any(v <= 0 for v in out):
            raise ValueError(f"convolution: transposed output size {out} is empty")
        shape = (x.shape[0], weight.shape[1] * groups) + tuple(out)
        y = _grad_input(xp, x, weight, shape, stride, padding, dilation, groups)
    else:
        y = _forward(xp, x, weight, stride, padding, dilation, groups)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * d)
    return y


def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
                         dilation, transposed, output_padding, groups,
                         output_mask=(True, True, True)):
    """``aten.convolution_backward(Tensor grad_output, Tensor input,
    Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding,
    SymInt[] dilation, bool transposed, SymInt[] output_padding,
    SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)``.

    Returns ``(grad_input, grad_weight, grad_bias)``; an entry whose
    ``output_mask`` flag is false is None (ATen's undefined tensor).
    ``grad_bias`` is ``grad_output`` summed over every dim but 1."""
    xp = array_module(grad_output, input, weight)
    d, stride, padding, dilation, output_padding = _params(
        weight, stride, padding, dilation, output_padding)
    groups = int(groups)
    _check_input("convolution_backward", input, weight, d, transposed, groups)
    x, go = input, grad_output
    k = tuple(weight.shape[2:])
    gi = gw = gb = None
    if not transposed and x.shape[1] == 0:          # Note [no input channels]
        return tuple(xp.zeros_like(go, shape=shape) if m else None for m, shape in zip(
            output_mask, (x.shape, weight.shape, weight.shape[:1])))
    if output_mask[0]:
        if transposed:
            gi = _forward(xp, go, weight, stride, padding, dilation, groups,
                          out=tuple(x.shape[2:]))
        else:
            gi = _grad_input(xp, go, weight, x.shape, stride, padding, dilation, groups)
    if output_mask[1]:
        if transposed:
            gw = _grad_weight(xp, go, x, k, stride, padding, dilation, groups)
        else:
            gw = _grad_weight(xp, x, go, k, stride, padding, dilation, groups)
    if output_mask[2]:
        gb = go.sum(axis=(0,) + tuple(range(2, go.ndim)))
    return gi, gw, gb
