"""The ATen array kernels against PyTorch itself: forwards against
``torch.ops.aten`` on the same inputs, backwards against the ATen backward
ops and ``torch.autograd`` (rtol 1e-10 in float64; float32 stays float32)."""
import numpy as np
import pytest

from gradcli.ops import aten_kernels as K
# the norm backwards (ops of their own, Note [normalisation double backward]), checked here on arrays
from gradcli.ops.aten.norm_attention import native_batch_norm_backward, native_layer_norm_backward

torch = pytest.importorskip("torch", reason="the kernels are checked against PyTorch")
A = torch.ops.aten
DTYPES = [np.float64, np.float32]


def T(a, grad=False):
    return torch.tensor(np.array(a), requires_grad=grad)


def close(ours, theirs, dtype):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    assert isinstance(ours, np.ndarray), type(ours)
    assert ours.dtype == dtype, (ours.dtype, dtype)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    if dtype == np.float64:
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def grads(outputs, inputs, cotangents):
    """``torch.autograd.grad`` of ``sum(out * cotangent)``."""
    loss = sum((o * T(c)).sum() for o, c in zip(outputs, cotangents))
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def test_array_module_is_numpy_for_numpy_arrays_and_subclasses():
    class Sub(np.ndarray):
        pass

    assert K.array_module(np.zeros(2)) is np
    assert K.array_module(None, np.zeros(2).view(Sub)) is np


# ---------------------------------------------------------------- convolution
# x shape, weight shape, stride, padding, dilation, groups, transposed, output_padding, bias
CONV_CASES = [
    ((2, 3, 9, 9), (4, 3, 3, 3), [1, 1], [0, 0], [1, 1], 1, False, [0, 0], True),
    ((2, 4, 9, 8), (6, 2, 3, 2), [2, 1], [1, 0], [1, 2], 2, False, [0, 0], True),
    ((2, 3, 16, 16), (8, 3, 7, 7), [2, 2], [3, 3], [1, 1], 1, False, [0, 0], False),
    ((2, 6, 7, 7), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1], 6, False, [0, 0], True),   # depthwise
    ((2, 6, 7, 7), (12, 1, 3, 3), [2, 2], [1, 1], [2, 2], 6, False, [0, 0], False),
    ((1, 4, 5, 5), (8, 4, 1, 1), [2, 2], [0, 0], [1, 1], 1, False, [0, 0], True),   # 1x1 downsample
    ((3, 4, 10), (6, 2, 3), [2], [2], [2], 2, False, [0], True),                    # 1-D
    ((2, 3, 7), (5, 3, 1), [1], [0], [1], 1, False, [0], False),
    ((2, 2, 4, 5, 3), (3, 2, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], 1, False, [0, 0, 0], True),
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], 2, True, [1, 0], True),     # transposed
    ((2, 4, 5, 6), (4, 3, 3, 3), [2, 1], [1, 1], [3, 1], 2, True, [2, 0], False),
    ((2, 3, 6), (3, 2, 4), [3], [1], [1], 1, True, [2], True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
def test_convolution_and_backward_match_torch(case, dtype):
    xs, ws, stride, padding, dilation, groups, transposed, op, has_bias = case
    rng = np.random.default_rng(len(xs) * 31 + ws[0])
    x, w = rand(rng, xs, dtype), rand(rng, ws, dtype)
    out_ch = ws[1] * groups if transposed else ws[0]
    b = rand(rng, (out_ch,), dtype) if has_bias else None
    tx, tw = T(x, True), T(w, True)
    tb = T(b, True) if has_bias else None
    ty = A.convolution(tx, tw, tb, stride, padding, dilation, transposed, op, groups)
    y = K.convolution(x, w, b, stride, padding, dilation, transposed, op, groups)
    close(y, ty, dtype)
    go = rand(rng, y.shape, dtype)
    gi, gw, gb = K.convolution_backward(go, x, w, [out_ch] if has_bias else None, stride,
                                        padding, dilation, transposed, op, groups,
                                        [True, True, has_bias])
    want = grads([ty], [tx, tw] + ([tb] if has_bias else []), [go])
    close(gi, want[0], dtype)
    close(gw, want[1], dtype)
    if has_bias:
        close(gb, want[2], dtype)
    else:
        assert gb is None
    ref = A.convolution_backward(T(go), T(x), T(w), [out_ch], stride, padding, dilation,
                                 transposed, op, groups, [True, True, True])
    close(gi, ref[0], dtype)
    close(gw, ref[1], dtype)


def test_convolution_backward_output_mask_leaves_undefined_gradients():
    rng = np.random.default_rng(0)
    x, w = rand(rng, (2, 3, 6, 6), np.float64), rand(rng, (4, 3, 3, 3), np.float64)
    go = rand(rng, (2, 4, 4, 4), np.float64)
    gi, gw, gb = K.convolution_backward(go, x, w, None, [1, 1], [0, 0], [1, 1], False,
                                        [0, 0], 1, [False, True, False])
    assert gi is None and gb is None
    close(gw, A.convolution_backward(T(go), T(x), T(w), None, [1, 1], [0, 0], [1, 1], False,
                                     [0, 0], 1, [False, True, False])[1], np.float64)


def test_convolution_expands_single_element_size_lists():
    rng = np.random.default_rng(1)
    x, w = rand(rng, (1, 2, 8, 8), np.float64), rand(rng, (3, 2, 3, 3), np.float64)
    close(K.convolution(x, w, None, [2], [1], [1], False, [0], 1),
          A.convolution(T(x), T(w), None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1), np.float64)


def test_kernels_accept_non_contiguous_views():
    rng = np.random.default_rng(4)
    x = rand(rng, (9, 3, 2, 8), np.float64).transpose(2, 1, 3, 0)   # (2, 3, 8, 9) view
    w = rand(rng, (4, 3, 3, 3), np.float64)[:, :, ::-1]
    args = ([1, 2], [1, 1], [1, 1], False, [0, 0], 1)
    close(K.convolution(x, w, None, *args), A.convolution(T(x), T(w), None, *args), np.float64)
    go = rand(rng, (2, 4, 8, 5), np.float64)
    ref = A.convolution_backward(T(go), T(x), T(w), None, *args, [True, True, False])
    gi, gw, _ = K.convolution_backward(go, x, w, None, *args, [True, True, False])
    close(gi, ref[0], np.float64)
    close(gw, ref[1], np.float64)
    o, i = K.max_pool2d_with_indices(x, [2, 2], [2, 2])
    to, ti = A.max_pool2d_with_indices(T(x), [2, 2], [2, 2])
    close(o, to, np.float64)
    assert np.array_equal(i, ti.numpy())


def test_convolution_refuses_unbatched_input_as_aten():
    with pytest.raises(ValueError, match="expected 4-dimensional input"):
        K.convolution(np.zeros((4, 7, 7)), np.zeros((5, 4, 3, 3)), None, [1, 1], [1, 1],
                      [1, 1], False, [0, 0], 1)


def test_convolution_refuses_mismatched_channels_and_groups():
    with pytest.raises(ValueError, match="expects 6"):
        K.convolution(np.zeros((1, 4, 5, 5)), np.zeros((4, 3, 3, 3)), None, [1, 1], [0, 0],
                      [1, 1], False, [0, 0], 2)
    with pytest.raises(ValueError, match="groups=3"):
        K.convolution(np.zeros((1, 6, 5, 5)), np.zeros((4, 2, 3, 3)), None, [1, 1], [0, 0],
                      [1, 1], False, [0, 0], 3)


def test_convolution_with_an_empty_output_raises():
    with pytest.raises(ValueError, match="empty"):
        K.convolution(np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 3, 3)), None, [1, 1], [0, 0],
                      [1, 1], False, [0, 0], 1)


# ---------------------------------------------------------------- max pooling
# x shape, kernel_size, stride, padding, dilation, ceil_mode
MAXPOOL_CASES = [
    ((2, 3, 9, 8), [3, 3], [2, 2], [1, 1], [1, 1], False),      # resnet stem
    ((2, 3, 10, 7), [3, 2], [2, 3], [1, 1], [2, 1], True),
    ((3, 7, 7), [2, 2], [], [0, 0], [1, 1], True),               # unbatched, default stride
    ((1, 2, 6, 6), [2, 2], [2, 2], [0, 0], [1, 1], False),
    ((2, 2, 5, 9), [3, 3], [1, 2], [1, 0], [1, 3], True),
    ((1, 1, 4, 4), [4, 4], [1, 1], [2, 2], [1, 1], False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", MAXPOOL_CASES)
def test_max_pool2d_with_indices_and_backward_match_torch(case, dtype):
    xs, k, s, p, d, ceil = case
    rng = np.random.default_rng(sum(xs))
    x = rand(rng, xs, dtype)
    tx = T(x, True)
    to, ti = A.max_pool2d_with_indices(tx, k, s, p, d, ceil)
    o, i = K.max_pool2d_with_indices(x, k, s, p, d, ceil)
    close(o, to, dtype)
    assert i.dtype == np.int64 and np.array_equal(i, ti.numpy())
    go = rand(rng, o.shape, dtype)
    gi = K.max_pool2d_with_indices_backward(go, x, k, s, p, d, ceil, i)
    close(gi, grads([to], [tx], [go])[0], dtype)


def test_max_pool2d_ties_nans_and_all_minus_inf_windows_pick_torchs_index():
    x = np.array([[[[1.0, 1.0, 0.0, np.nan],
                    [1.0, 0.0, np.nan, np.nan],
                    [-np.inf, -np.inf, 2.0, 2.0],
                    [-np.inf, -np.inf, 2.0, 1.0]]]])
    for args in ([[2, 2], [2, 2], [0, 0], [1, 1], False], [[3, 3], [1, 1], [1, 1], [1, 1], False]):
        o, i = K.max_pool2d_with_indices(x, *args)
        to, ti = A.max_pool2d_with_indices(T(x), *args)
        np.testing.assert_array_equal(o, to.numpy())
        np.testing.assert_array_equal(i, ti.numpy())


def test_max_pool2d_backward_accumulates_overlapping_windows():
    x = np.array([[[[0.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 0.0]]]])
    o, i = K.max_pool2d_with_indices(x, [2, 2], [1, 1], [0, 0], [1, 1], False)
    gi = K.max_pool2d_with_indices_backward(np.ones_like(o), x, [2, 2], [1, 1], [0, 0],
                                            [1, 1], False, i)
    assert gi[0, 0, 1, 1] == 4.0 and gi.sum() == 4.0


def test_pooling_rejects_padding_over_half_the_kernel():
    with pytest.raises(ValueError, match="pad should be at most half"):
        K.max_pool2d_with_indices(np.zeros((1, 1, 5, 5)), [2, 2], [1, 1], [2, 2])


@pytest.mark.parametrize("pool", [
    lambda x: K.max_pool2d_with_indices(x, [2, 2], [1, 1], [1, 1]),
    lambda x: K.avg_pool2d(x, [2, 2], [1, 1], [1, 1]),
])
def test_2d_pooling_refuses_an_empty_spatial_dim_even_when_padding_makes_room(pool):
    # as PyTorch ("Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size"), and as
    # the 3-D poolings: one checker serves both
    with pytest.raises(ValueError, match="too small for input"):
        pool(np.zeros((1, 2, 0, 4)))


# ---------------------------------------------------------------- avg pooling
# x shape, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
AVGPOOL_CASES = [
    ((2, 3, 9, 8), [3, 3], [2, 2], [1, 1], False, True, None),
    ((2, 3, 10, 7), [3, 2], [2, 3], [1, 1], True, False, None),
    ((2, 3, 10, 7), [3, 3], [2, 2], [1, 0], True, True, None),
    ((3, 7, 7), [2, 2], [], [0, 0], True, True, 3),
    ((1, 2, 6, 5), [2, 3], [1, 2], [1, 1], False, False, 5),
    ((2, 2, 4, 4), [2, 2], [2, 2], [0, 0], False, True, None),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", AVGPOOL_CASES)
def test_avg_pool2d_and_backward_match_torch(case, dtype):
    xs, k, s, p, ceil, cip, dov = case
    rng = np.random.default_rng(sum(xs) + 7)
    x = rand(rng, xs, dtype)
    tx = T(x, True)
    to = A.avg_pool2d(tx, k, s, p, ceil, cip, dov)
    o = K.avg_pool2d(x, k, s, p, ceil, cip, dov)
    close(o, to, dtype)
    go = rand(rng, o.shape, dtype)
    gi = K.avg_pool2d_backward(go, x, k, s, p, ceil, cip, dov)
    close(gi, grads([to], [tx], [go])[0], dtype)


@pytest.mark.parametrize("case", AVGPOOL_CASES)
def test_int64_avg_pool2d_and_backward_match_torch(case):
    # PyTorch's CPU kernel takes int64: int64 result, the quotient truncated toward zero
    xs, k, s, p, ceil, cip, dov = case
    rng = np.random.default_rng(sum(xs) + 8)
    x = rng.integers(-50, 50, size=xs)
    o = K.avg_pool2d(x, k, s, p, ceil, cip, dov)
    assert o.dtype == np.int64
    np.testing.assert_array_equal(o, A.avg_pool2d(T(x), k, s, p, ceil, cip, dov).numpy())
    go = rng.integers(-50, 50, size=o.shape)
    gi = K.avg_pool2d_backward(go, x, k, s, p, ceil, cip, dov)
    assert gi.dtype == np.int64
    np.testing.assert_array_equal(gi, A.avg_pool2d_backward(T(go), T(x), k, s or k, p, ceil, cip, dov).numpy())


# x shape, output_size
ADAPTIVE_CASES = [
    ((2, 3, 9, 8), [4, 3]),
    ((3, 7, 5), [7, 10]),          # unbatched, upsampling windows
    ((2, 3, 4, 4), [1, 1]),        # global average pooling
    ((1, 2, 5, 7), [3, 3]),        # overlapping windows
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_avg_pool2d_and_backward_match_torch(case, dtype):
    xs, out = case
    rng = np.random.default_rng(sum(xs) + 3)
    x = rand(rng, xs, dtype)
    tx = T(x, True)
    to = A._adaptive_avg_pool2d(tx, out)
    o = K._adaptive_avg_pool2d(x, out)
    close(o, to, dtype)
    go = rand(rng, o.shape, dtype)
    close(K._adaptive_avg_pool2d_backward(go, x), grads([to], [tx], [go])[0], dtype)
    close(K._adaptive_avg_pool2d_backward(go, x), A._adaptive_avg_pool2d_backward(T(go), T(x)),
          dtype)


# ---------------------------------------------------------------- batch norm
# x shape, training, affine, running stats given
BN_CASES = [
    ((4, 3, 5, 2), True, True, True),
    ((4, 3, 5, 2), False, True, True),
    ((4, 3, 5, 2), True, False, True),
    ((4, 3, 5, 2), True, True, False),      # training without running stats
    ((6, 5), True, True, True),             # BatchNorm1d on (N, C)
    ((3, 4, 7), False, False, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", BN_CASES)
def test_native_batch_norm_and_backward_match_torch(case, dtype):
    xs, training, affine, running = case
    rng = np.random.default_rng(sum(xs) + training)
    c = xs[1]
    x = rand(rng, xs, dtype) * 2 + 1
    w = rand(rng, (c,), dtype) if affine else None
    b = rand(rng, (c,), dtype) if affine else None
    rm = rand(rng, (c,), dtype) if running else None
    rv = (rng.random(c) + 0.5).astype(dtype) if running else None
    tx = T(x, True)
    tw, tb = (T(w, True), T(b, True)) if affine else (None, None)
    trm, trv = (T(rm), T(rv)) if running else (None, None)
    tout = A.native_batch_norm(tx, tw, tb, trm, trv, training, 0.1, 1e-5)
    out = K.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
    close(out[0], tout[0], dtype)
    close(out[1], tout[1], dtype)
    close(out[2], tout[2], dtype)
    if running:   # updated in place, as PyTorch's
        close(rm, trm, dtype)
        close(rv, trv, dtype)
    go = rand(rng, x.shape, dtype)
    gi, gw, gb, _, _ = native_batch_norm_backward([go], out, x, w, b, rm, rv, training, 0.1, 1e-5,
                                                  output_mask=[True, affine, affine])
    want = grads([tout[0]], [tx] + ([tw, tb] if affine else []), [go])
    close(gi, want[0], dtype)
    if affine:
        close(gw, want[1], dtype)
        close(gb, want[2], dtype)
    else:
        assert gw is None and gb is None


def test_native_batch_norm_with_one_value_per_channel_makes_running_var_nan_as_torch():
    x = np.array([[[[1.5]], [[-2.0]]]])
    rm, rv = np.zeros(2), np.ones(2)
    trm, trv = T(rm), T(rv)
    K.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    A.native_batch_norm(T(x), None, None, trm, trv, True, 0.1, 1e-5)
    np.testing.assert_array_equal(rm, trm.numpy())
    assert np.isnan(rv).all() and np.isnan(trv.numpy()).all()


def test_native_batch_norm_eval_needs_running_stats():
    with pytest.raises(ValueError, match="running_mean"):
        K.native_batch_norm(np.zeros((2, 3)), None, None, None, None, False, 0.1, 1e-5)


# ---------------------------------------------------------------- layer norm
# x shape, normalized_shape, weight, bias
LN_CASES = [
    ((2, 3, 4, 5), [4, 5], True, True),
    ((2, 7, 16), [16], True, True),
    ((5, 6), [6], False, False),
    ((3, 4, 6), [4, 6], True, False),
    ((2, 3, 4), [2, 3, 4], False, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", LN_CASES)
def test_native_layer_norm_and_backward_match_torch(case, dtype):
    xs, ns, has_w, has_b = case
    rng = np.random.default_rng(sum(xs) + len(ns))
    x = rand(rng, xs, dtype) * 3 - 1
    w = rand(rng, ns, dtype) if has_w else None
    b = rand(rng, ns, dtype) if has_b else None
    tx = T(x, True)
    tw = T(w, True) if has_w else None
    tb = T(b, True) if has_b else None
    tout = A.native_layer_norm(tx, ns, tw, tb, 1e-5)
    out = K.native_layer_norm(x, ns, w, b, 1e-5)
    for ours, theirs in zip(out, tout):
        close(ours, theirs, dtype)
    go = rand(rng, x.shape, dtype)
    gi, gw, gb = native_layer_norm_backward([go], out, x, w, b, ns, 1e-5, output_mask=[True] * 3)
    params = [t for t in (tw, tb) if t is not None]
    want = grads([tout[0]], [tx] + params, [go])
    close(gi, want[0], dtype)
    if has_w:
        close(gw, want[1], dtype)
    else:
        assert gw is None
    if has_b:
        close(gb, want[-1], dtype)
    else:
        assert gb is None


def test_native_layer_norm_rejects_a_mismatched_normalized_shape():
    with pytest.raises(ValueError, match="normalized_shape"):
        K.native_layer_norm(np.zeros((2, 3)), [4], None, None, 1e-5)


# ---------------------------------------------------------------- embedding
# indices, num_weights, padding_idx, scale_grad_by_freq
EMBEDDING_CASES = [
    ([[0, 2, 2], [5, 0, 2]], 7, -1, False),
    ([[0, 2, 2], [5, 0, 2]], 7, 2, False),
    ([[0, 2, 2], [5, 0, 2]], 7, -1, True),
    ([1, 1, 1, 3], 4, 3, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", EMBEDDING_CASES)
def test_embedding_dense_backward_matches_torch(case, dtype):
    idx, nw, pad, freq = case
    rng = np.random.default_rng(nw)
    indices = np.array(idx, dtype=np.int64)
    go = rand(rng, indices.shape + (5,), dtype)
    ours = K.embedding_dense_backward(go, indices, nw, pad, freq)
    close(ours, A.embedding_dense_backward(T(go), T(indices), nw, pad, freq), dtype)
    tw = T(rand(rng, (nw, 5), dtype), True)
    out = torch.nn.functional.embedding(T(indices), tw, padding_idx=None if pad < 0 else pad,
                                        scale_grad_by_freq=freq)
    close(ours, grads([out], [tw], [go])[0], dtype)


# ---------------------------------------------------------------- softmax
# shape, dim
SOFTMAX_CASES = [((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -1), ((2, 3, 4), 1), ((6,), 0)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SOFTMAX_CASES)
def test_softmax_family_and_backward_data_match_torch(case, dtype):
    shape, dim = case
    rng = np.random.default_rng(len(shape) + dim)
    x = rand(rng, shape, dtype) * 3
    name = np.dtype(dtype).name
    tdtype = getattr(torch, name)
    for ours_f, theirs_f, back, theirs_back in (
            (K._softmax, A._softmax, K._softmax_backward_data, A._softmax_backward_data),
            (K._log_softmax, A._log_softmax, K._log_softmax_backward_data,
             A._log_softmax_backward_data)):
        tx = T(x, True)
        ty = theirs_f(tx, dim, False)
        y = ours_f(x, dim, False)
        close(y, ty, dtype)
        go = rand(rng, shape, dtype)
        gi = back(go, y, dim, name)
        close(gi, grads([ty], [tx], [go])[0], dtype)
        close(gi, theirs_back(T(go), T(y), dim, tdtype), dtype)
    close(K._safe_softmax(x, dim), A._safe_softmax(T(x), dim), dtype)


def test_safe_softmax_gives_zeros_for_all_minus_inf_rows():
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, 1.0, -np.inf]])
    ours = K._safe_softmax(x, 1)
    np.testing.assert_allclose(ours, A._safe_softmax(T(x), 1).numpy(), rtol=1e-12)
    assert (ours[0] == 0).all()


# ---------------------------------------------------------------- nll_loss
# input shape, target, weight, reduction, ignore_index
NLL_CASES = [
    ((4, 5), [0, 3, 4, 1], False, 1, -100),
    ((4, 5), [0, 3, 4, 1], True, 1, -100),
    ((4, 5), [0, 3, 4, 1], True, 2, 3),
    ((4, 5), [0, 3, 4, 1], True, 0, 4),
    ((4, 5), [2, 2, 0, 2], False, 1, 2),
    ((5,), 3, True, 1, -100),        # unbatched
    ((5,), 3, False, 0, -100),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", NLL_CASES)
def test_nll_loss_forward_and_backward_match_torch(case, dtype):
    xs, target, has_w, red, ignore = case
    rng = np.random.default_rng(red + has_w * 2 + len(xs))
    x = rand(rng, xs, dtype)
    t = np.array(target, dtype=np.int64)
    w = (rng.random(xs[-1]) + 0.5).astype(dtype) if has_w else None
    tx = T(x, True)
    tw = T(w) if has_w else None
    tout, ttot = A.nll_loss_forward(tx, T(t), tw, red, ignore)
    out, tot = K.nll_loss_forward(x, t, w, red, ignore)
    close(out, tout, dtype)
    close(tot, ttot, dtype)
    go = rand(rng, out.shape, dtype)
    gi = K.nll_loss_backward(go, x, t, w, red, ignore, tot)
    close(gi, grads([tout], [tx], [go])[0], dtype)
    close(gi, A.nll_loss_backward(T(go), T(x), T(t), tw, red, ignore, ttot), dtype)


def test_nll_loss_mean_with_every_target_ignored_is_nan_as_torch():
    x, t = np.zeros((2, 3)), np.array([1, 1])
    out, tot = K.nll_loss_forward(x, t, None, 1, 1)
    tout, ttot = A.nll_loss_forward(T(x), T(t), None, 1, 1)
    assert np.isnan(out) and np.isnan(tout.item()) and tot == ttot.item() == 0


def test_nll_loss_rejects_an_out_of_bounds_target():
    with pytest.raises(ValueError, match="Target 7 is out of bounds"):
        K.nll_loss_forward(np.zeros((2, 3)), np.array([0, 7]), None, 1, -100)


# ---------------------------------------------------------------- gelu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_backward_match_torch(approximate, dtype):
    rng = np.random.default_rng(5)
    x = np.concatenate([rand(rng, (50,), dtype) * 4, np.array([0.0, -8.0, 8.0, 1e-8], dtype)])
    tx = T(x, True)
    ty = A.gelu(tx, approximate=approximate)
    close(K.gelu(x, approximate), ty, dtype)
    go = rand(rng, x.shape, dtype)
    gi = K.gelu_backward(go, x, approximate)
    close(gi, grads([ty], [tx], [go])[0], dtype)
    close(gi, A.gelu_backward(T(go), T(x), approximate=approximate), dtype)


def test_gelu_rejects_an_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        K.gelu_backward(np.ones(2), np.ones(2), "erf")


# ---------------------------------------------------------------- attention
# q shape, kv shape, is_causal, mask shape (additive, or None), scale
SDPA_CASES = [
    ((2, 3, 4, 8), (2, 3, 6, 8), False, None, None),
    ((2, 3, 4, 8), (2, 3, 6, 8), True, None, None),        # causal, L != S
    ((2, 3, 5, 8), (2, 3, 5, 8), True, None, 0.3),
    ((2, 3, 4, 8), (2, 3, 6, 8), False, (4, 6), None),
    ((2, 3, 4, 8), (2, 3, 6, 8), False, (2, 1, 4, 6), 0.5),
    ((2, 3, 4, 8), (2, 1, 6, 8), False, None, None),        # key/value broadcast over heads
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SDPA_CASES)
def test_flash_attention_math_and_backward_match_torch(case, dtype):
    qs, kvs, causal, mask_shape, scale = case
    rng = np.random.default_rng(qs[2] + kvs[1] + causal)
    q, k, v = rand(rng, qs, dtype), rand(rng, kvs, dtype), rand(rng, kvs, dtype)
    mask = rand(rng, mask_shape, dtype) if mask_shape else None
    tq, tk, tv = T(q, True), T(k, True), T(v, True)
    tmask = T(mask) if mask_shape else None
    tout, tlse = A._scaled_dot_product_flash_attention_for_cpu(
        tq, tk, tv, 0.0, causal, attn_mask=tmask, scale=scale)
    out, lse = K._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale)
    close(out, tout, dtype)
    close(lse, tlse, dtype)
    go = rand(rng, out.shape, dtype)
    g = K._scaled_dot_product_flash_attention_for_cpu_backward(
        go, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale)
    want = grads([tout], [tq, tk, tv], [go])
    for ours, theirs in zip(g, want):
        close(ours, theirs, dtype)


def test_flash_attention_fully_masked_rows_match_torch():
    rng = np.random.default_rng(9)
    q, k, v = (rand(rng, (1, 2, 3, 4), np.float64) for _ in range(3))
    mask = np.zeros((3, 3))
    mask[1] = -np.inf
    out, lse = K._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask)
    tq = T(q, True)
    tout, tlse = A._scaled_dot_product_flash_attention_for_cpu(tq, T(k), T(v), 0.0, False,
                                                               attn_mask=T(mask))
    close(out, tout, np.float64)
    close(lse, tlse, np.float64)
    go = np.ones_like(out)
    gq = K._scaled_dot_product_flash_attention_for_cpu_backward(
        go, q, k, v, out, lse, 0.0, False, attn_mask=mask)[0]
    close(gq, grads([tout], [tq], [go])[0], np.float64)


def test_flash_attention_refuses_dropout():
    x = np.zeros((1, 1, 2, 4))
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        K._scaled_dot_product_flash_attention_for_cpu(x, x, x, 0.1)
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        K._scaled_dot_product_flash_attention_for_cpu_backward(x, x, x, x, x, x[..., 0], 0.1,
                                                               False)
