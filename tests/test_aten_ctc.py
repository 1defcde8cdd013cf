"""The CTC loss as ATen ops (``_ctc_loss.Tensor`` / ``.default`` and ``_ctc_loss_backward``),
against torch: both outputs of the forward, the gradient with a random upstream gradient, the
backward op on its own, first-order-only create_graph gradients, the refusals, and an exported
``F.ctc_loss`` model validated end to end.

Its rows are not in the shared ATen table (``tests/test_aten_ops.py``): PyTorch's ``log_alpha``
is uninitialised memory past each sample's lengths (Note [log_alpha beyond the lengths]), so
it is compared here on the region PyTorch writes, and gradcli's -inf checked elsewhere.
"""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import _inferred, needs_torch, torch

CTC = "aten._ctc_loss.Tensor"
CTC_INTS = "aten._ctc_loss.default"
CTCB = "aten._ctc_loss_backward.Tensor"
CTCB_INTS = "aten._ctc_loss_backward.default"


def _log_probs(t, n, c, dtype=np.float64, seed=0):
    x = np.random.default_rng(seed).standard_normal((t, n, c))
    x = x - np.log(np.exp(x).sum(-1, keepdims=True))
    return x.astype(dtype)


def _concat(padded, lengths):
    return np.concatenate([padded[b, :k] for b, k in enumerate(lengths)]).astype(np.int64)


# (id, T, C, padded targets, input lengths, target lengths, blank)
SETS = [
    # a batch of different lengths, one target empty, repeated labels needing a blank between
    ("mixed", 7, 5, [[1, 2, 2], [3, 0, 0], [1, 1, 1], [4, 4, 0]], [7, 4, 5, 3], [3, 1, 0, 2], 0),
    # impossible alignments: a target longer than its input, repeats with no frame for the blank
    ("impossible", 5, 4, [[1, 2, 3, 1], [2, 2, 2, 0], [1, 3, 0, 0]], [3, 4, 5], [4, 3, 2], 0),
    ("blank-last", 6, 4, [[0, 1, 2], [2, 2, 0]], [6, 6], [3, 2], 3),
    ("one-frame", 1, 3, [[1], [2], [0]], [1, 1, 1], [1, 0, 0], 0),
]


def _set(name, layout, dtype):
    _, t, c, padded, il, tl, blank = next(s for s in SETS if s[0] == name)
    padded = np.array(padded, np.int64)
    targets = padded if layout == "padded" else _concat(padded, tl)
    return _log_probs(t, len(il), c, dtype), targets, np.array(il), np.array(tl), blank


def _written(alpha, il, tl):
    """Where PyTorch's kernel writes log_alpha (Note [log_alpha beyond the lengths])."""
    mask = np.zeros(alpha.shape, bool)
    mask[:, 0, :] = True
    for b, (i, k) in enumerate(zip(il, tl)):
        mask[b, :i, :2 * k + 1] = True
    return mask


def _tol(dtype):
    return {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else {"rtol": 2e-5, "atol": 2e-5}


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("name", [s[0] for s in SETS])
def test_forward_outputs_match_torch_where_torch_writes_them(name, layout, dtype):
    lp, targets, il, tl, blank = _set(name, layout, dtype)
    nll, alpha = OPS[CTC](lp, targets, il, tl, blank=blank)
    tnll, talpha = torch.ops.aten._ctc_loss.Tensor(torch.tensor(lp), torch.tensor(targets), torch.tensor(il),
                                                  torch.tensor(tl), blank, False)
    assert nll.dtype == alpha.dtype == np.dtype(dtype)
    assert alpha.shape == tuple(talpha.shape)
    np.testing.assert_allclose(nll, tnll.numpy(), **_tol(dtype))
    written = _written(alpha, il, tl)
    np.testing.assert_allclose(alpha[written], talpha.numpy()[written], **_tol(dtype))
    assert np.all(alpha[~written] == -np.inf)       # gradcli's defined value where torch's is garbage
    ints = OPS[CTC_INTS](lp, targets, input_lengths=il.tolist(), target_lengths=tl.tolist(), blank=blank)
    np.testing.assert_array_equal(ints[0], nll)
    np.testing.assert_array_equal(ints[1], alpha)


def test_an_impossible_alignment_has_an_infinite_loss_and_an_empty_target_the_blanks_only():
    lp, targets, il, tl, blank = _set("impossible", "padded", np.float64)
    nll, _ = OPS[CTC](lp, targets, il, tl)
    assert nll[0] == np.inf and nll[1] == np.inf and np.isfinite(nll[2])
    lp, targets, il, tl, blank = _set("mixed", "padded", np.float64)
    nll, _ = OPS[CTC](lp, targets, il, tl)
    assert nll[2] == pytest.approx(-lp[:5, 2, 0].sum())    # the empty target: blank in every frame


def test_an_input_of_length_zero_has_the_empty_alignments_loss_and_no_gradient():
    # Note [an input of length zero]: PyTorch reads before its tensor here; gradcli gives the definition
    lp = _log_probs(4, 2, 3)
    x = Tensor(lp.copy(), requires_grad=True)
    nll, _ = OPS[CTC](x, np.array([[1], [0]]), np.array([0, 0]), np.array([1, 0]))
    assert nll.data.tolist() == [np.inf, 0.0]
    (g,) = grad([nll], [x], grad_outputs=[np.array([0.0, 1.0])])
    assert np.all(g == 0)


def _gradients(op_name, lp, targets, il, tl, blank, zero_infinity, upstream):
    x = Tensor(lp.copy(), requires_grad=True)
    lengths = (il, tl) if op_name == CTC else (il.tolist(), tl.tolist())
    if op_name == CTC:
        nll, alpha = OPS[op_name](x, targets, il, tl, blank=blank, zero_infinity=zero_infinity)
    else:
        nll, alpha = OPS[op_name](x, targets, input_lengths=lengths[0], target_lengths=lengths[1], blank=blank,
                                  zero_infinity=zero_infinity)
    assert alpha.grad_fn is None and not alpha.requires_grad       # log_alpha is not differentiable
    (g,) = grad([nll], [x], grad_outputs=[upstream])
    return nll.grad_fn.name, g


@needs_torch
@pytest.mark.parametrize("op_name", [CTC, CTC_INTS])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
@pytest.mark.parametrize("name", [s[0] for s in SETS])
def test_gradient_matches_torch_with_a_random_upstream_gradient(name, layout, dtype, zero_infinity, op_name):
    lp, targets, il, tl, blank = _set(name, layout, dtype)
    upstream = np.random.default_rng(7).random(len(il)).astype(dtype)
    node, g = _gradients(op_name, lp, targets, il, tl, blank, zero_infinity, upstream)
    tx = torch.tensor(lp, requires_grad=True)
    if op_name == CTC:
        tnll, _ = torch.ops.aten._ctc_loss.Tensor(tx, torch.tensor(targets), torch.tensor(il), torch.tensor(tl),
                                                  blank, zero_infinity)
    else:
        tnll, _ = torch.ops.aten._ctc_loss(tx, torch.tensor(targets), il.tolist(), tl.tolist(), blank,
                                           zero_infinity)
    (tg,) = torch.autograd.grad(tnll, tx, torch.tensor(upstream))
    assert node == tnll.grad_fn.name()
    # an impossible alignment without zero_infinity: the same NaN and infinite entries as torch's
    np.testing.assert_allclose(g, tg.numpy(), equal_nan=True, **_tol(dtype))
    if name == "impossible":
        assert np.isfinite(g).all() == zero_infinity


@needs_torch
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_backward_op_on_its_own_matches_torchs(layout, zero_infinity):
    lp, targets, il, tl, blank = _set("impossible", layout, np.float64)
    nll, alpha = OPS[CTC](lp, targets, il, tl, blank=blank)
    upstream = np.random.default_rng(3).standard_normal(len(il))
    ours = OPS[CTCB](upstream, lp, targets, il, tl, nll, alpha, blank=blank, zero_infinity=zero_infinity)
    ours_ints = OPS[CTCB_INTS](upstream, lp, targets, nll, alpha, input_lengths=il.tolist(),
                               target_lengths=tl.tolist(), blank=blank, zero_infinity=zero_infinity)
    tlp, ttg = torch.tensor(lp), torch.tensor(targets)
    tnll, talpha = torch.ops.aten._ctc_loss.Tensor(tlp, ttg, torch.tensor(il), torch.tensor(tl), blank, False)
    theirs = torch.ops.aten._ctc_loss_backward.Tensor(torch.tensor(upstream), tlp, ttg, torch.tensor(il),
                                                      torch.tensor(tl), tnll, talpha, blank, zero_infinity)
    np.testing.assert_allclose(ours, theirs.numpy(), equal_nan=True, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ours_ints, ours)
    assert _inferred(CTCB, [upstream, lp, targets, il, tl, nll, alpha], {"blank": blank}) == [
        (lp.shape, np.dtype(np.float64))]


@needs_torch
@pytest.mark.parametrize("op_name", [CTC, CTC_INTS])
def test_create_graph_gradient_is_first_order_only_as_in_torch(op_name):
    lp, targets, il, tl, blank = _set("mixed", "padded", np.float64)
    x = Tensor(lp.copy(), requires_grad=True)
    if op_name == CTC:
        nll, _ = OPS[op_name](x, targets, il, tl)
    else:
        nll, _ = OPS[op_name](x, targets, input_lengths=il.tolist(), target_lengths=tl.tolist())
    (g,) = grad([nll], [x], grad_outputs=[Tensor(np.ones(len(il)), requires_grad=True)], create_graph=True)
    tx = torch.tensor(lp, requires_grad=True)
    tnll, _ = torch.ops.aten._ctc_loss.Tensor(tx, torch.tensor(targets), torch.tensor(il), torch.tensor(tl), 0,
                                              False)
    (tg,) = torch.autograd.grad(tnll, tx, torch.ones(len(il), dtype=torch.float64, requires_grad=True),
                                create_graph=True)
    assert g.grad_fn.name == tg.grad_fn.name() == "torch::autograd::NotImplemented"
    np.testing.assert_allclose(g.data, tg.detach().numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="derivative for aten::_ctc_loss_backward is not implemented"):
        grad([g], [x], grad_outputs=[np.ones(g.shape)])


@pytest.mark.parametrize("op_name", [CTCB, CTCB_INTS])
def test_backward_op_on_tensors_records_a_node_that_raises(op_name):
    lp, targets, il, tl, blank = _set("mixed", "padded", np.float64)
    nll, alpha = OPS[CTC](lp, targets, il, tl)
    up = Tensor(np.ones(len(il)), requires_grad=True)
    if op_name == CTCB:
        g = OPS[op_name](up, lp, targets, il, tl, nll, alpha, blank=0)
    else:
        g = OPS[op_name](up, lp, targets, nll, alpha, input_lengths=il.tolist(), target_lengths=tl.tolist(),
                         blank=0)
    assert g.grad_fn.name == "torch::autograd::NotImplemented"
    with pytest.raises(RuntimeError, match="derivative for aten::_ctc_loss_backward is not implemented"):
        grad([g], [up], grad_outputs=[np.ones(g.shape)])


_LP = _log_probs(6, 2, 5)
_TG = np.array([[1, 2, 2], [3, 0, 0]])
_IL, _TL = np.array([6, 4]), np.array([3, 1])


@pytest.mark.parametrize("inputs, args, match, static", [
    ([_LP[:, 0], _TG[0], _IL[:1], _TL[:1]], {}, "Expected 3-dimensional tensor, but got 2-dimensional", True),
    ([_LP.astype(np.float16), _TG, _IL, _TL], {}, "not implemented for float16", True),
    ([_LP, _TG.astype(np.float64), _IL, _TL], {}, "targets must be an integer tensor", True),
    ([_LP, _TG, _IL, _TL], {"blank": 5}, "blank must be in label range", True),
    ([_LP, _TG, _IL, _TL], {"blank": -1}, "blank must be in label range", True),
    ([_LP, _TG, _IL[:1], _TL], {}, "input_lengths must be of size batch_size", True),
    ([_LP, _TG, _IL, np.array([3, 1, 1])], {}, "target_lengths must be of size batch_size", True),
    ([_LP, _TG[:1], _IL, _TL], {}, "Expected tensor to have size 2 at dimension 0", True),
    ([_LP, _TG[None], _IL, _TL], {}, "targets must be 1-D .concatenated. or 2-D", True),
    ([_LP, _TG, np.array([7, 4]), _TL], {}, "input_lengths to have value at most 6, but got value 7", False),
    ([_LP, _TG, np.array([-1, 4]), _TL], {}, "input_lengths to have value at least 0, but got value -1", False),
    ([_LP, _TG, _IL, np.array([-1, 1])], {}, "target_lengths to have value at least 0, but got value -1", False),
    ([_LP, _TG, _IL, np.array([4, 1])], {}, "to have size at least 4 at dimension 1, but got size 3", False),
    ([_LP, np.array([1, 2, 2, 3, 1]), _IL, _TL], {}, "to have size 4 at dimension 0, but got size 5", False),
    # PyTorch reads a label out of range out of bounds (Note [target labels in range]): refused
    ([_LP, np.array([[1, 2, 5], [3, 0, 0]]), _IL, _TL], {}, r"target label 5 \(batch 0, position 2\) is out", False),
    ([_LP, np.array([1, 2, 2, -3]), _IL, _TL], {}, r"target label -3 \(batch 1, position 0\) is out", False),
])
def test_bad_shapes_and_lengths_are_refused_in_one_line(inputs, args, match, static):
    with pytest.raises((ValueError, TypeError), match=match) as info:
        OPS[CTC](*inputs, **args)
    assert "\n" not in str(info.value)
    if static:          # the loader's shape rule refuses it before anything runs
        with pytest.raises((ValueError, TypeError), match=match):
            _inferred(CTC, inputs, args)
    else:               # the values decide: the rule lets it through (Note [a shape the values decide])
        assert _inferred(CTC, inputs, args) is None


def test_hostile_lengths_are_refused_before_anything_is_allocated():
    # log_alpha is [N, T, 2 max(target_lengths) + 1]: a length past the targets' width would ask
    # for terabytes; it is checked against the shapes first
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="to have size at least 10000000000000"):
            OPS[CTC](_LP, _TG, _IL, np.array([10 ** 13, 1]))
        with pytest.raises(ValueError, match="to have size 10000000000001 at dimension 0"):
            OPS[CTC](_LP, np.array([1, 2, 2, 3]), _IL, np.array([10 ** 13, 1]))
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def table_ops():
    """The ops this file covers (the coverage check of tests/test_aten_ops.py asks)."""
    return {CTC, CTC_INTS, CTCB, CTCB_INTS}


def gradgrad_ops():
    """None has a second derivative: PyTorch has none for ``_ctc_loss_backward`` (tested above)."""
    return {CTC, CTC_INTS, CTCB, CTCB_INTS}


def test_every_op_of_this_file_is_registered():
    assert table_ops() <= set(ATEN_OPS)
