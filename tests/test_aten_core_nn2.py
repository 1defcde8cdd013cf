"""Core ATen ops, the nn half continued: pair distances (``_pdist_forward``), grid sampling
(``grid_sampler_2d``), bags of embeddings (``_embedding_bag``) and the real FFTs
(``_fft_r2c``, ``_fft_c2r``). One table row per case, run through the checks of
``tests/test_aten_ops.py`` (forward, dtypes, gradients and node names against torch, gradients
against finite differences, the load-time shape rule) and ``tests/test_aten_gradgrad.py``
(second derivatives), whose machinery this file reuses.

Rows cover float64 and float32 (every row runs in both), empty inputs and non-contiguous
inputs (``nc``); none of these ops broadcasts.
"""
from __future__ import annotations

import numpy as np
import pytest

import test_aten_gradgrad as GG
import test_aten_ops as T
from gradcli.autograd import Tensor, grad
from gradcli.bridges.torch.versions import differs
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import I, R, needs_torch, torch

CASES = []
REFUSED = []
GRADGRAD = {}
NODE_NAME_DIFFERENCES = {}
# ops whose second derivative PyTorch does not implement: op -> PyTorch's backward op, whose
# create_graph node raises "the derivative for '<backward op>' is not implemented."
NO_SECOND_DERIVATIVE = {}
# rows whose gradient is not compared with torch's: row id -> why (checked against finite
# differences, and by a test of their own)
NO_TORCH_GRADIENT = {}
BACKWARD_OPS = set()       # PyTorch's backward ops, rows of their own (no gradient checked)
# rows where the installed torch may behave differently from 2.13 (gradcli keeps 2.13's):
# row id -> the difference's name in gradcli/bridges/torch/versions.py
TORCH_CHANGED = {}


def _torch_changed(row_id):
    return torch is not None and row_id in TORCH_CHANGED and differs(TORCH_CHANGED[row_id], torch.__version__)


def case(op, inputs, args=None, wrt=None, fd=True, id=None):  # noqa: A002
    """One row, as ``tests/test_aten_ops.py``'s ``case``."""
    n = sum(1 for c in CASES if c.values[0] == op)
    CASES.append(pytest.param(op, inputs, args or {}, wrt, fd, id=id or f"{op}-{n}"))


def refused(op, inputs, args, match, static=True, id=None):  # noqa: A002
    """One row: refused as PyTorch refuses it (``tests/test_aten_ops.py``'s ``refused``)."""
    n = sum(1 for c in REFUSED if c.values[0] == op)
    REFUSED.append(pytest.param(op, inputs, args, match, static, id=id or f"{op}-{n}"))


def nc(x):
    """``x`` as a non-contiguous view with the same values (a transposed copy, transposed back)."""
    y = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1) if x.ndim >= 2 else x.repeat(2)[::2]
    assert not y.flags.c_contiguous and np.array_equal(x, y)
    return y


# -- pair distances ---------------------------------------------------------------------------------
PDIST = "aten._pdist_forward.default"
PDIST_BACKWARD = "aten._pdist_backward.default"
for _p in (2.0, 1.0, 3.0, 1.5, 0.5, float("inf")):
    case(PDIST, [R(5, 3)], {"p": _p})
case(PDIST, [R(4, 3)], {"p": 0.0}, fd=False)         # a count: its gradient is zero
case(PDIST, [R(4, 3)], {}, id=PDIST + "-default-p")
case(PDIST, [R(1, 3)], {"p": 2.0}, id=PDIST + "-one-row")
case(PDIST, [R(0, 3)], {"p": 2.0}, id=PDIST + "-empty")
NO_TORCH_GRADIENT[PDIST + "-empty"] = "torch 2.13's _pdist_backward crashes (segfault) on no rows"
case(PDIST, [R(3, 0)], {"p": 2.0}, fd=False, id=PDIST + "-no-columns")
# two equal rows: a zero distance, whose gradient is zero as PyTorch's kernel makes it
case(PDIST, [np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 3.0]])], {"p": 2.0}, fd=False, id=PDIST + "-equal-rows")
case(PDIST_BACKWARD, [R(6, seed=1), R(4, 3), np.abs(R(6, seed=2)) + 1], {"p": 2.0}, wrt=[], id=PDIST_BACKWARD)
TORCH_CHANGED[PDIST_BACKWARD] = "pdist_backward_grad_output"
BACKWARD_OPS.add(PDIST_BACKWARD)
NO_SECOND_DERIVATIVE[PDIST] = "_pdist_backward"
refused(PDIST, [np.ones((4, 3), np.int64)], {"p": 2.0}, "not implemented for int64")


def test_pdist_refuses_a_non_contiguous_input_like_torch():
    x = OPS["aten.transpose.int"](R(3, 4), dim0=0, dim1=1)
    with pytest.raises(ValueError, match="requires contiguous input"):
        OPS[PDIST](x, p=2.0)
    if torch is not None:
        with pytest.raises(RuntimeError, match="requires contiguous input"):
            torch.ops.aten._pdist_forward(torch.tensor(R(3, 4)).t(), 2.0)


@pytest.mark.parametrize("p", [0.5, 2.0, float("inf")])
def test_pdist_computed_in_blocks_of_rows_gives_the_same_distances_and_gradient(p, monkeypatch):
    # Note [pdist in blocks of rows]: tiny blocks (a row or two at a time) against one block
    from gradcli.ops.aten_kernels import pdist as K

    x, v = R(9, 3), R(36, seed=1)
    whole = K.pdist_forward(x, p), K.pdist_backward(v, x, p, K.pdist_forward(x, p))
    monkeypatch.setattr(K, "_BLOCK", 40)
    assert len(list(K._blocks(9, 3))) == 9         # one row per block
    blocked = K.pdist_forward(x, p), K.pdist_backward(v, x, p, K.pdist_forward(x, p))
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


def test_pdist_of_no_rows_has_a_zero_gradient():
    # (torch 2.13 crashes computing this gradient, so it is not compared with torch's)
    x = Tensor(R(0, 3), requires_grad=True)
    y = OPS[PDIST](x, p=2.0)
    assert y.shape == (0,) and y.grad_fn.name == "PdistBackward0"
    (g,) = grad([y], [x], grad_outputs=[np.zeros(0)])
    assert g.shape == (0, 3) and g.dtype == np.float64


@pytest.mark.parametrize("inputs, args, match", [
    ([R(3, 4, 5)], {"p": 2.0}, "only supports 2D tensors"),
    ([R(4, 3)], {"p": -1.0}, "non-negative p"),
])
def test_pdist_refuses_what_torch_pdist_refuses(inputs, args, match):
    # gradcli deliberately differs from aten._pdist_forward itself, which computes on a 3-D
    # input and a negative p without complaint: it refuses them as torch.pdist (the one
    # caller PyTorch records the op from) does, so a graph file cannot reach undefined sizes
    with pytest.raises(ValueError, match=match):
        OPS[PDIST](*inputs, **args)
    with pytest.raises(ValueError, match=match):
        T._inferred(PDIST, inputs, args)
    if torch is not None:
        with pytest.raises(RuntimeError, match=match):
            torch.pdist(torch.tensor(inputs[0]), **args)


@pytest.mark.parametrize("op_name", sorted(NO_SECOND_DERIVATIVE))
def test_create_graph_gradient_records_torchs_backward_node_that_cannot_be_differentiated(op_name):
    backward = NO_SECOND_DERIVATIVE[op_name]
    inputs, args = next((c.values[1], c.values[2]) for c in CASES if c.values[0] == op_name)
    wrt = T._wrt(inputs, None)
    flat, outs = T._ours(op_name, inputs, args, wrt)
    vs = T._upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    gs = grad([outs[k] for k in used], [flat[i] for i in wrt],
              grad_outputs=[Tensor(vs[k], requires_grad=True) for k in used], create_graph=True)
    plain = grad([outs[k] for k in used], [flat[i] for i in wrt], grad_outputs=[vs[k] for k in used])
    for g, p in zip(gs, plain):
        np.testing.assert_array_equal(g.data, p)
    names = [g.grad_fn.name for g in gs]
    if torch is not None:
        tflat, touts = T._theirs(op_name, inputs, args, wrt)
        tgs = torch.autograd.grad([touts[k] for k in used], [tflat[i] for i in wrt],
                                  [torch.tensor(vs[k], requires_grad=True) for k in used], create_graph=True)
        assert names == [g.grad_fn.name() for g in tgs]
        if op_name == PDIST and differs("pdist_double_backward", torch.__version__):
            assert torch.autograd.grad(tgs[0].sum(), tflat[wrt[0]])[0] is not None   # 2.14 computes it
        else:
            with pytest.raises(RuntimeError, match=f"the derivative for '{backward}' is not implemented"):
                torch.autograd.grad(tgs[0].sum(), tflat[wrt[0]])
    with pytest.raises(RuntimeError, match=f"the derivative for '{backward}' is not implemented"):
        grad([gs[0]], [flat[wrt[0]]], grad_outputs=[np.ones(gs[0].shape)])


# -- bags of embeddings ---------------------------------------------------------------------------
EB = "aten._embedding_bag.default"
EBB = "aten._embedding_bag_backward.default"
PSWB = "aten._embedding_bag_per_sample_weights_backward.default"
_W = R(10, 3)
_IDX = I(1, 2, 4, 1, 4, 3, 2, 9)


def _eb(mode=0, **kw):
    return {"mode": mode, **kw}


for _m in (0, 1, 2):
    case(EB, [_W, _IDX, I(0, 3, 3), None], _eb(_m), id=f"{EB}-{_m}-empty-bag")
    case(EB, [_W, _IDX, I(0, 0, 5), None], _eb(_m, padding_idx=4), id=f"{EB}-{_m}-padding")
    case(EB, [_W, _IDX, I(0, 3, 8), None], _eb(_m, include_last_offset=True), id=f"{EB}-{_m}-last-offset")
    # (a scaled gradient, not the derivative: compared with torch's only)
    case(EB, [_W, _IDX, I(0, 2, 6), None], _eb(_m, scale_grad_by_freq=True, padding_idx=2), fd=_m == 2,
         id=f"{EB}-{_m}-freq")
    if _m != 2:         # (max ignores the scale)
        TORCH_CHANGED[f"{EB}-{_m}-freq"] = "embedding_bag_freq_by_own_count"
    case(EB, [nc(R(3, 10)).T, _IDX, I(0, 4), None], _eb(_m), id=f"{EB}-{_m}-nc")
case(EB, [_W, _IDX, I(0, 3), R(8, seed=1)], _eb(0), id=EB + "-per-sample-weights")
case(EB, [_W, _IDX, I(0, 0, 5), R(8, seed=1)], _eb(0, padding_idx=2, scale_grad_by_freq=True), fd=False,
     id=EB + "-per-sample-weights-padding-freq")
TORCH_CHANGED[EB + "-per-sample-weights-padding-freq"] = "embedding_bag_freq_by_own_count"
case(EB, [_W, _IDX.astype(np.int32), I(0, 5).astype(np.int32), None], _eb(2), id=EB + "-int32")
case(EB, [_W, _IDX.astype(np.int32), I(0, 5), None], _eb(1), id=EB + "-int32-int64")
case(EB, [_W, I(), I(0, 0), None], _eb(1), id=EB + "-no-indices")
case(EB, [R(0, 3), I(), I(0), None], _eb(0), id=EB + "-empty-weight")
case(EB, [R(10, 0), _IDX, I(0, 3), None], _eb(2), id=EB + "-no-columns")
# the outputs PyTorch's backward reads, given as the forward made them
_ebo = [np.asarray(o) for o in OPS[EB](_W, _IDX, I(0, 3, 3), None, mode=1, padding_idx=4)]
case(EBB, [R(3, 3, seed=2), _IDX, I(0, 3, 3), _ebo[1], _ebo[2], _ebo[3], None],
     {"num_weights": 10, "scale_grad_by_freq": False, "mode": 1, "sparse": False, "padding_idx": 4}, wrt=[])
case(PSWB, [R(2, 3, seed=2), _W, _IDX, I(0, 3), I(0, 0, 0, 1, 1, 1, 1, 1)], {"mode": 0, "padding_idx": 4}, wrt=[])
BACKWARD_OPS.update({EBB, PSWB})
NO_SECOND_DERIVATIVE[EB] = "_embedding_bag_backward"
refused(EB, [_W, _IDX, I(0, 3), R(8, seed=1)], _eb(1), "only supported with mode='sum'")
refused(EB, [_W, _IDX, I(0, 3), None], _eb(3), "must be sum, mean, or max")
refused(EB, [R(10), _IDX, I(0, 3), None], _eb(0), "weight has to be a 2D Tensor")
refused(EB, [_W, _IDX.astype(np.float64), I(0, 3), None], _eb(0), "int64 or int32")
refused(EB, [_W, _IDX, I(0, 3).reshape(1, 2), None], _eb(0), "offsets has to be a 1D Tensor")
refused(EB, [_W, _IDX, I(0, 3), R(7, seed=1)], _eb(0), "one weight per index")
refused(EB, [_W, _IDX, I(1, 3), None], _eb(0), r"offsets\[0\] has to be 0", static=False)
refused(EB, [_W, _IDX, I(0, 9), None], _eb(0), r"offsets\[-1\] can not be greater", static=False)
refused(EB, [_W, I(1, 20), I(0), None], _eb(0), "found idx to be 20", static=False)
refused(EB, [_W, I(1, -2), I(0), None], _eb(0), "found idx to be -2", static=False)


@pytest.mark.parametrize("inputs, args, match, static", [
    ([_W, _IDX, I(), None], _eb(0), "at least one bag", True),
    ([_W, _IDX, I(0), None], _eb(0, include_last_offset=True), "at least one bag", True),
    ([_W, _IDX, I(0, 5, 3), None], _eb(0), "must not decrease", False),
    ([_W, _IDX, I(0, 3, 5), None], _eb(0, include_last_offset=True), r"offsets\[-1\] must be the number", False),
    ([_W, _IDX.reshape(2, 4), I(0, 1), None], _eb(0), "input has to be a 1D Tensor", True),
    ([_W, _IDX, I(0, 3), None], _eb(0, sparse=True), "sparse=True", True),
])
def test_embedding_bag_refuses_what_torch_crashes_on_or_reads_otherwise(inputs, args, match, static):
    # PyTorch 2.13 crashes the process on no bags, reads decreasing offsets out of order, reads
    # memory it never wrote for a short last offset (float32), reads a 2-D input by its first dim only; gradcli's gradients are dense. Refused, in one line, at load
    # time where the shapes tell
    with pytest.raises(ValueError, match=match):
        OPS[EB](*inputs, **args)
    if static:
        with pytest.raises(ValueError, match=match):
            T._inferred(EB, inputs, args)


def test_embedding_bag_frequency_scale_follows_torchs_sorted_position_count():
    # Note [embedding_bag's frequency scale]: index 3 occurs once, yet its row's gradient is
    # halved, because the sorted indices' third value (2) occurs twice
    w = Tensor(_W.copy(), requires_grad=True)
    out = OPS[EB](w, I(1, 2, 4, 1, 4, 3, 2, 9), I(0, 3), None, mode=0, scale_grad_by_freq=True)[0]
    (g,) = grad([out], [w], grad_outputs=[np.ones((2, 3))])
    assert g[3, 0] == 0.5 and g[9, 0] == 1.0 and g[1, 0] == 1.0
    if torch is not None and not differs("embedding_bag_freq_by_own_count", torch.__version__):
        tw = torch.tensor(_W, requires_grad=True)
        tout = torch.ops.aten._embedding_bag(tw, torch.tensor([1, 2, 4, 1, 4, 3, 2, 9]), torch.tensor([0, 3]),
                                             scale_grad_by_freq=True)[0]
        np.testing.assert_array_equal(g, torch.autograd.grad(tout.sum(), tw)[0].numpy())


@needs_torch
@pytest.mark.parametrize("offsets, kw", [(I(0, 3, 3), {}), (I(0, 3, 8), {"include_last_offset": True}),
                                         (I(0, 3), {"per_sample_weights": True})])
def test_embedding_bag_float32_sum_gradients_match_torch_without_offset2bag(offsets, kw):
    # Note [no offset2bag on the fast path]: the forward's offset2bag is empty, and the backward
    # ops make the bags from the offsets again (the last bag running to the end of the indices)
    w = _W.astype(np.float32)
    psw = R(8, seed=1).astype(np.float32) if kw.pop("per_sample_weights", False) else None
    leaves = [Tensor(w.copy(), requires_grad=True)] + ([Tensor(psw.copy(), requires_grad=True)] if psw is not None
                                                        else [])
    outs = OPS[EB](leaves[0], _IDX, offsets, leaves[1] if psw is not None else None, mode=0, **kw)
    assert outs[1].shape == (0,)
    v = R(*outs[0].shape, seed=3).astype(np.float32)
    ours = grad([outs[0]], leaves, grad_outputs=[v])
    tl = [torch.tensor(x, requires_grad=True) for x in ([w] + ([psw] if psw is not None else []))]
    touts = torch.ops.aten._embedding_bag(tl[0], torch.tensor(_IDX), torch.tensor(offsets), mode=0,
                                          per_sample_weights=tl[1] if psw is not None else None, **kw)
    assert tuple(touts[1].shape) == (0,)
    theirs = torch.autograd.grad(touts[0], tl, torch.tensor(v))
    for a, b in zip(ours, theirs):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("indices, offsets", [(I(0, 1, 2, 3), I(0, 2, 2)), (I(1, 0, 2), I(0)), (I(3, 3), I(0, 1)),
                                              (I(2, 1, 2, 0), I(0, 1, 3))])
def test_embedding_bag_max_keeps_torchs_scan_order_for_ties_and_nan(indices, offsets):
    # Note [the bag maximum's scan]: the first maximum wins, a NaN first stays, a NaN later is passed over
    w = np.array([[np.nan, 1.0, 0.0], [2.0, np.nan, 0.0], [2.0, 5.0, -np.inf], [-np.inf, -np.inf, -np.inf]])
    out, _, size, arg = (np.asarray(o) for o in OPS[EB](w, indices, offsets, None, mode=2))
    if torch is None:
        return
    tout = torch.ops.aten._embedding_bag(torch.tensor(w), torch.tensor(indices), torch.tensor(offsets), mode=2)
    np.testing.assert_array_equal(out, tout[0].numpy())            # NaN where torch has NaN
    np.testing.assert_array_equal(arg, tout[3].numpy())
    np.testing.assert_array_equal(size, tout[2].numpy())


def test_embedding_bag_bookkeeping_outputs_have_no_node():
    outs = OPS[EB](Tensor(_W.copy(), requires_grad=True), _IDX, I(0, 3), None, mode=2)
    assert outs[0].grad_fn.name == "EmbeddingBagBackward0"
    assert all(o.grad_fn is None and not o.requires_grad for o in outs[1:])


# -- grid sampling ------------------------------------------------------------------------------------
GS, GSB = "aten.grid_sampler_2d.default", "aten.grid_sampler_2d_backward.default"
MODES = [(i, p, a) for i in (0, 1, 2) for p in (0, 1, 2) for a in (False, True)]


def _grid(*shape, seed=0):
    return R(*shape, 2, seed=seed, low=-1.25, high=1.25)     # some points outside [-1, 1]: the padding


def _gs_args(i, p, a):
    return {"interpolation_mode": i, "padding_mode": p, "align_corners": a}


for _i, _p, _a in MODES:
    case(GS, [R(2, 2, 3, 4), _grid(2, 2, 3)], _gs_args(_i, _p, _a), id=f"{GS}-{_i}-{_p}-{_a}")
case(GS, [nc(R(1, 3, 4, 3)), nc(_grid(1, 2, 2))], _gs_args(0, 0, False), id=GS + "-nc")
case(GS, [R(1, 2, 1, 1), _grid(1, 2, 2)], _gs_args(2, 2, False), id=GS + "-one-pixel")
case(GS, [R(0, 2, 3, 4), _grid(0, 2, 3)], _gs_args(0, 0, False), id=GS + "-empty-batch")
case(GS, [R(1, 0, 3, 4), _grid(1, 2, 3)], _gs_args(2, 1, True), id=GS + "-no-channels")
case(GS, [R(1, 2, 3, 4), _grid(1, 0, 3)], _gs_args(1, 2, False), id=GS + "-empty-grid")
GRADGRAD[GS] = ([R(1, 2, 3, 4), _grid(1, 2, 3)], _gs_args(2, 2, False), None)
case(GSB, [R(1, 2, 2, 3, seed=3), R(1, 2, 3, 4), _grid(1, 2, 3)], dict(_gs_args(0, 1, True), output_mask=[True, True]),
     wrt=[])
BACKWARD_OPS.add(GSB)
refused(GS, [R(2, 4, 5), _grid(2, 2, 3)], _gs_args(0, 0, False), "expected 4D input and grid")
refused(GS, [R(2, 2, 3, 4), _grid(1, 2, 3)], _gs_args(0, 0, False), "same batch size")
refused(GS, [R(1, 2, 3, 4), R(1, 2, 3, 3)], _gs_args(0, 0, False), "size 2 in last dimension")
refused(GS, [R(1, 2, 0, 4), _grid(1, 2, 3)], _gs_args(0, 0, False), "non-empty spatial dimensions")
refused(GS, [np.ones((1, 2, 3, 4), np.int64), np.zeros((1, 2, 3, 2), np.int64)], _gs_args(0, 0, False),
        "not implemented for int64")


@pytest.mark.parametrize("args, match", [
    (_gs_args(3, 0, False), "interpolation_mode must be"),
    (_gs_args(0, 3, False), "padding_mode must be"),
])
def test_grid_sampler_refuses_modes_torch_does_not_define(args, match):
    # torch 2.13 casts any int to its mode enums and computes something; gradcli refuses
    with pytest.raises(ValueError, match=match):
        OPS[GS](R(1, 2, 3, 4), _grid(1, 2, 3), **args)
    with pytest.raises(ValueError, match=match):
        T._inferred(GS, [R(1, 2, 3, 4), _grid(1, 2, 3)], args)


def test_grid_sampler_refuses_a_grid_of_another_dtype_like_torch():
    with pytest.raises(TypeError, match="same dtype"):
        OPS[GS](R(1, 2, 3, 4), _grid(1, 2, 3).astype(np.float32), **_gs_args(0, 0, False))
    if torch is not None:
        with pytest.raises(RuntimeError):
            torch.ops.aten.grid_sampler_2d(torch.tensor(R(1, 2, 3, 4)), torch.tensor(_grid(1, 2, 3)).float(),
                                           0, 0, False)


def test_grid_sampler_backward_refuses_a_partial_mask():
    # PyTorch leaves grad_input undefined for [false, true]; a gradcli output is always an array
    with pytest.raises(ValueError, match="gradcli computes every output"):
        OPS[GSB](R(1, 2, 2, 3), R(1, 2, 3, 4), _grid(1, 2, 3), **_gs_args(0, 0, False), output_mask=[False, True])


@pytest.mark.parametrize("mode", [pytest.param(m, id="-".join(map(str, m))) for m in MODES])
def test_grid_sampler_second_derivatives_match_torch_in_every_mode(mode):
    x, g, v = R(2, 2, 3, 4), _grid(2, 2, 3), R(2, 2, 2, 3, seed=5)
    ggi, ggg = R(2, 2, 3, 4, seed=6), R(2, 2, 3, 2, seed=7)
    args = _gs_args(*mode)
    xt, gt, vt = (Tensor(a.copy(), requires_grad=True) for a in (x, g, v))
    gi, gg = grad([OPS[GS](xt, gt, **args)], [xt, gt], grad_outputs=[vt], create_graph=True)
    assert gi.grad_fn.name == gg.grad_fn.name == "GridSampler2DBackwardBackward0"
    ours = grad([gi, gg], [vt, xt, gt], grad_outputs=[ggi, ggg], allow_unused=True)
    if torch is None:
        return
    tx, tg, tv = (torch.tensor(a, requires_grad=True) for a in (x, g, v))
    tgi, tgg = torch.autograd.grad(torch.ops.aten.grid_sampler_2d(tx, tg, *args.values()), [tx, tg], tv,
                                   create_graph=True)
    assert tgi.grad_fn.name() == tgg.grad_fn.name() == "GridSampler2DBackwardBackward0"
    theirs = torch.autograd.grad([tgi, tgg], [tv, tx, tg], [torch.tensor(ggi), torch.tensor(ggg)], allow_unused=True)
    for a, b in zip(ours, theirs):
        b = np.zeros(a.shape) if b is None else b.numpy()
        np.testing.assert_allclose(np.zeros(b.shape) if a is None else a, b, rtol=1e-10, atol=1e-12)


def test_grid_sampler_third_derivative_is_refused_in_one_line():
    # gradcli deliberately stops at the second derivative: PyTorch's double backward is made of
    # differentiable ops, gradcli's computes on arrays (Note [a derivative gradcli does not go
    # beyond]); the third derivative raises when reached, never a silent zero
    xt, gt, vt = Tensor(R(1, 2, 3, 4), requires_grad=True), Tensor(_grid(1, 2, 3), requires_grad=True), \
        Tensor(R(1, 2, 2, 3, seed=5), requires_grad=True)
    gi, gg = grad([OPS[GS](xt, gt, **_gs_args(0, 0, False))], [xt, gt], grad_outputs=[vt], create_graph=True)
    second = grad([gi, gg], [vt, xt, gt], grad_outputs=[np.ones(gi.shape), np.ones(gg.shape)], create_graph=True)
    assert all(s.requires_grad for s in second)
    with pytest.raises(RuntimeError, match="second order only") as err:
        grad([second[2]], [gt], grad_outputs=[np.ones(gt.shape)])
    assert "\n" not in str(err.value)


# -- real FFTs, complex values as their real views ------------------------------------------------
# Note [complex as its real view] (gradcli/ops/aten_kernels/fft.py): gradcli holds a complex tensor
# as torch.view_as_real of it, so these rows are compared with torch through view_as_real and
# view_as_complex, and run by the gradcli-only checks of the table above and below
R2C, C2R = "aten._fft_r2c.default", "aten._fft_c2r.default"
AS_REAL, AS_COMPLEX = "aten.view_as_real.default", "aten.view_as_complex.default"
COMPLEX_IN = {C2R, AS_REAL}         # their input is complex in torch
COMPLEX_OUT = {R2C, AS_COMPLEX}     # their output is complex in torch
FFT_CASES = []


def fft_case(op, x, args, id=None, gradgrad=True):  # noqa: A002
    n = sum(1 for c in FFT_CASES if c.values[0] == op)
    FFT_CASES.append(pytest.param(op, x, args, gradgrad, id=id or f"{op}-{n}"))


for _shape, _dim, _norm, _one in [((3, 8), [1], 0, True), ((3, 7), [1], 1, True), ((4, 6), [0, 1], 2, True),
                                  ((5, 3), [0], 2, True), ((3, 8), [1], 0, False), ((4, 5), [0, 1], 1, False),
                                  ((2, 3, 4), [0, 2], 0, False), ((2, 3, 4), [2, 0], 1, True), ((6,), [0], 0, True),
                                  ((3, 1), [1], 0, True)]:
    fft_case(R2C, R(*_shape), {"dim": _dim, "normalization": _norm, "onesided": _one})
fft_case(R2C, nc(R(4, 6)), {"dim": [0], "normalization": 0, "onesided": True}, id=R2C + "-nc")
for _cshape, _dim, _norm, _n in [((3, 5), [1], 0, 8), ((3, 4), [1], 2, 7), ((4, 4), [0, 1], 1, 6),
                                 ((2, 3, 2), [0, 2], 0, 3), ((3, 1), [1], 2, 1), ((4, 2), [1], 0, 2)]:
    fft_case(C2R, R(*_cshape, 2), {"dim": _dim, "normalization": _norm, "last_dim_size": _n})
fft_case(C2R, nc(R(3, 5, 2)), {"dim": [1], "normalization": 2, "last_dim_size": 9}, id=C2R + "-nc")
fft_case(AS_REAL, R(3, 4, 2), {})
fft_case(AS_COMPLEX, R(3, 4, 2), {})
refused(R2C, [R(3, 8)], {"dim": [2], "normalization": 0, "onesided": True}, "out of range")
refused(R2C, [R(3, 8)], {"dim": [-1], "normalization": 0, "onesided": True}, "out of range")
refused(R2C, [R(3, 0)], {"dim": [1], "normalization": 0, "onesided": True}, "Invalid number of data points")
refused(R2C, [np.ones((3, 4), np.int64)], {"dim": [1], "normalization": 0, "onesided": True},
        "not implemented for int64")
refused(AS_COMPLEX, [R(3, 4)], {}, "last dimension of size 2")


@pytest.mark.parametrize("op_name, x, args, match", [
    (R2C, R(3, 8), {"dim": [], "normalization": 0, "onesided": True}, "at least one dimension"),
    (R2C, R(3, 8), {"dim": [1, 1], "normalization": 0, "onesided": True}, "repeats a dimension"),
    (R2C, R(3, 8), {"dim": [1], "normalization": 3, "onesided": True}, "normalization must be"),
    (C2R, R(3, 8, 2), {"dim": [1], "normalization": 0, "last_dim_size": 8}, r"expected 5 entries"),
    (C2R, R(3, 5, 2), {"dim": [1], "normalization": 0, "last_dim_size": 20}, r"expected 11 entries"),
    (C2R, R(3, 5), {"dim": [1], "normalization": 0, "last_dim_size": 8}, "real view of a complex tensor"),
    (C2R, R(3, 1, 2), {"dim": [1], "normalization": 0, "last_dim_size": 0}, "Invalid number of data points"),
    (AS_REAL, R(3, 4), {}, "last dimension of size 2"),
])
def test_fft_arguments_are_checked_where_torch_asserts_or_differs(op_name, x, args, match):
    # refused by gradcli, at load time too: torch accepts a repeated dim and normalization 3,
    # computes c2r from a full signal (whose gradient then has the wrong size: Note [c2r takes
    # the onesided half]) and fails an internal assert on the others
    with pytest.raises(ValueError, match=match):
        OPS[op_name](x, **args)
    with pytest.raises(ValueError, match=match):
        T._inferred(op_name, [x], args)


def _torch_leaf(op_name, x):
    t = torch.tensor(x)
    if op_name in COMPLEX_IN:
        t = torch.view_as_complex(t.contiguous()).clone()
    return t.requires_grad_()


def _real(t):
    return torch.view_as_real(t) if t.is_complex() else t


def _fft_first_order(op_name, x, args, dtype=np.float64, create_graph=False):
    """(ours, theirs): each (input leaf, output, upstream, gradient), gradcli's and torch's."""
    x = x.astype(dtype)
    xt = Tensor(x.copy(), requires_grad=True)
    y = OPS[op_name](xt, **args)
    v = np.random.default_rng(7).standard_normal(y.shape).astype(dtype)
    vt = Tensor(v.copy(), requires_grad=True) if create_graph else v
    (g,) = grad([y], [xt], grad_outputs=[vt], create_graph=create_graph)
    if torch is None:
        return (xt, y, vt, g), None
    tx = _torch_leaf(op_name, x)
    ty = T._torch_op(op_name)(tx, **args)
    tv = torch.tensor(v, requires_grad=create_graph)
    (tg,) = torch.autograd.grad(_real(ty), tx, tv, create_graph=create_graph)
    return (xt, y, vt, g), (tx, ty, tv, tg)


FFT_PARAMS = "op_name, x, args, gradgrad"


@needs_torch
@pytest.mark.parametrize(FFT_PARAMS, FFT_CASES)
def test_fft_forward_gradient_and_node_match_torch_through_the_real_view(op_name, x, args, gradgrad):
    (xt, y, _, g), (tx, ty, _, tg) = _fft_first_order(op_name, x, args)
    assert y.dtype == np.float64 and y.shape == tuple(_real(ty).shape)
    np.testing.assert_allclose(y.data, _real(ty).detach().numpy(), rtol=1e-12, atol=1e-13)
    assert y.grad_fn.name == ty.grad_fn.name()
    assert g.shape == x.shape
    np.testing.assert_allclose(g, _real(tg).numpy(), rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize(FFT_PARAMS, FFT_CASES)
def test_fft_float32_stays_float32_like_torch(op_name, x, args, gradgrad):
    (_, y, _, g), (_, ty, _, tg) = _fft_first_order(op_name, x, args, dtype=np.float32)
    assert y.dtype == np.float32 and g.dtype == np.float32
    assert str(_real(ty).dtype) == "torch.float32"
    np.testing.assert_allclose(y.data, _real(ty).detach().numpy(), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(g, _real(tg).numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(FFT_PARAMS, FFT_CASES)
def test_fft_gradients_match_finite_differences(op_name, x, args, gradgrad):
    T.test_gradients_match_finite_differences(op_name, [x], args, None, True)


@pytest.mark.parametrize(FFT_PARAMS, FFT_CASES)
def test_fft_load_time_infer_matches_the_forward(op_name, x, args, gradgrad, monkeypatch):
    T.test_load_time_infer_matches_the_forward(op_name, [x], args, None, True)
    T.test_load_time_infer_never_computes_on_full_size_inputs(op_name, [x], args, None, True, monkeypatch)


@needs_torch
@pytest.mark.parametrize(FFT_PARAMS, [c for c in FFT_CASES if c.values[3]])
def test_fft_second_derivative_matches_torch_through_the_real_view(op_name, x, args, gradgrad):
    # the ops are linear: the second derivative is the one for the upstream gradient (none
    # for the input), and the create_graph gradient records the other FFT's node
    (xt, _, vt, g), (tx, _, tv, tg) = _fft_first_order(op_name, x, args, create_graph=True)
    w = np.random.default_rng(8).standard_normal(g.shape)
    ours = grad([g], [xt, vt], grad_outputs=[w], allow_unused=True)
    theirs = torch.autograd.grad(_real(tg), [tx, tv], torch.tensor(w), allow_unused=True)
    assert ours[0] is None and theirs[0] is None
    np.testing.assert_allclose(ours[1], theirs[1].numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op_name, x, args", [
    (R2C, R(0, 6), {"dim": [1], "normalization": 2, "onesided": True}),
    (C2R, R(0, 5, 2), {"dim": [1], "normalization": 2, "last_dim_size": 8}),
    (AS_COMPLEX, R(0, 2), {}),
])
def test_fft_of_an_empty_batch_is_empty(op_name, x, args):
    # gradcli computes the empty result and its empty gradient; torch 2.13's CPU kernels fail
    # there (an MKL configuration error; view_as_complex asks an empty tensor for a unit stride)
    xt = Tensor(x.copy(), requires_grad=True)
    y = OPS[op_name](xt, **args)
    assert y.shape == T._inferred(op_name, [x], args)[0][0] and y.data.size == 0
    (g,) = grad([y], [xt], grad_outputs=[np.zeros(y.shape)])
    assert g.shape == x.shape and g.dtype == x.dtype
    if torch is not None:
        with pytest.raises(RuntimeError):
            T._torch_op(op_name)(_torch_leaf(op_name, x), **args)


def test_fft_gradients_record_the_other_fft():
    # Note [real FFT gradients as real FFTs]: c2r's gradient is an r2c (times the doubled
    # frequencies) and r2c's a c2r, so differentiating again runs the FFT ops' own VJPs
    x = Tensor(R(3, 8), requires_grad=True)
    y = OPS[R2C](x, dim=[1], normalization=0, onesided=True)
    v = Tensor(R(3, 5, 2, seed=1), requires_grad=True)
    (g,) = grad([y], [x], grad_outputs=[v], create_graph=True)
    assert g.grad_fn.name == "FftC2RBackward0"
    z = Tensor(R(3, 5, 2), requires_grad=True)
    y = OPS[C2R](z, dim=[1], normalization=2, last_dim_size=8)
    (g,) = grad([y], [z], grad_outputs=[Tensor(R(3, 8, seed=1), requires_grad=True)], create_graph=True)
    assert g.grad_fn.name == "MulBackward0" and g.grad_fn.next_edges[0][0].name == "FftR2CBackward0"


@pytest.mark.parametrize(FFT_PARAMS, [c for c in FFT_CASES if c.values[3]])
def test_fft_second_derivative_matches_finite_differences(op_name, x, args, gradgrad):
    GG.test_second_derivative_matches_finite_differences(op_name, [x], args, None)


# -- the checks of tests/test_aten_ops.py, on this table ----------------------------------------
PARAMS = T.PARAMS


@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4] and c.values[3] != []])
def test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd):
    T.test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[3] != [] and c.id not in NO_TORCH_GRADIENT])
def test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd, request):
    if _torch_changed(request.node.callspec.id):
        # torch 2.14 scales by each index's own count: the rows' forward still matches, and the
        # gradients differ where 2.13's sorted-position count is not the index's own
        test_float64_forward_matches_torch_without_gradients(op_name, inputs, args, wrt, fd, request)
        w = T._wrt(inputs, wrt)
        flat, outs = T._ours(op_name, inputs, args, w)
        tflat, touts = T._theirs(op_name, inputs, args, w)
        v = T._upstream(outs)[0]
        ours = grad([outs[0]], [flat[w[0]]], grad_outputs=[v])[0]
        theirs = torch.autograd.grad(touts[0], tflat[w[0]], torch.tensor(v))[0].numpy()
        assert not np.allclose(ours, theirs)
        return
    T.test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd)


def _theirs_by_position(op_name, inputs, args):
    """torch's outputs, the tensors passed by torch's own names (for a torch that renamed one)."""
    op = T._torch_op(op_name)
    names = [a.name for a in op._schema.arguments if str(a.type) == "Tensor"]
    return [op(**dict(zip(names, [torch.tensor(x) for x in inputs])), **args)]


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float64_forward_matches_torch_without_gradients(op_name, inputs, args, wrt, fd, request):
    _, outs = T._ours(op_name, inputs, args, [])
    if _torch_changed(request.node.callspec.id) and op_name == PDIST_BACKWARD:
        touts = _theirs_by_position(op_name, inputs, args)
    else:
        _, touts = T._theirs(op_name, inputs, args, [])
    assert len(outs) == len(touts)
    for o, t in zip(outs, touts):
        assert o.shape == tuple(t.shape) and o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(o.data, t.numpy(), rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd, request):
    if _torch_changed(request.node.callspec.id) and op_name == PDIST_BACKWARD:
        inputs32 = T._as_float32(inputs)
        (o,), (t,) = T._ours(op_name, inputs32, args, [])[1], _theirs_by_position(op_name, inputs32, args)
        assert o.dtype == np.float32 and str(t.dtype) == "torch.float32"
        np.testing.assert_allclose(o.data, t.numpy(), rtol=2e-5, atol=1e-6)
        return
    T.test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd)


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd):
    T.test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd)


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch):
    T.test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch)


@pytest.mark.parametrize("op_name, inputs, args, match, static", REFUSED)
def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static):
    T.test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static)


# -- the checks of tests/test_aten_gradgrad.py, on this table -------------------------------------
GG_CASES = [pytest.param(n, *GRADGRAD[n], id=n) for n in sorted(GRADGRAD)]


@pytest.mark.parametrize("op_name, arrays, args, wrt", GG_CASES)
def test_second_derivative_matches_finite_differences(op_name, arrays, args, wrt):
    GG.test_second_derivative_matches_finite_differences(op_name, arrays, args, wrt)


@needs_torch
@pytest.mark.parametrize("op_name, arrays, args, wrt", GG_CASES)
def test_second_derivative_matches_torch_double_backward(op_name, arrays, args, wrt):
    GG.test_second_derivative_matches_torch_double_backward(op_name, arrays, args, wrt)


@needs_torch
@pytest.mark.parametrize("op_name", sorted(GRADGRAD))
def test_create_graph_gradients_have_torchs_node_names(op_name, monkeypatch):
    monkeypatch.setattr(GG, "GRADGRAD", {**GG.GRADGRAD, **GRADGRAD})
    monkeypatch.setattr(GG, "NODE_NAME_DIFFERENCES", NODE_NAME_DIFFERENCES)
    GG.test_create_graph_gradients_have_torchs_node_names(op_name)


def table_ops():
    """The ops this table covers (the coverage checks of the other tables ask)."""
    return {c.values[0] for c in CASES} | {c.values[0] for c in FFT_CASES}


def gradgrad_ops():
    """The ops with a second-derivative row here, or none because PyTorch has none (their
    backward ops' nodes raise PyTorch's error, tested above)."""
    return set(GRADGRAD) | set(NO_SECOND_DERIVATIVE) | BACKWARD_OPS | {c.values[0] for c in FFT_CASES if c.values[3]}


def test_every_op_of_this_table_is_registered_with_torchs_schema():
    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            T.test_schema_is_torch_schema(name)
