"""``torch.linalg``'s ATen ops (gradcli/ops/aten/linalg.py): one table row per case, checked
against PyTorch (schema, node names, forward values, dtypes and gradients at float64 and
float32), against finite differences (first and second derivatives, float64) and for the
load-time shape rule (``tests/test_aten_ops.py``'s checks).

Rows are batched, some with an empty batch or an empty matrix, some with a non-contiguous
input (``nc``: the matrix column-major, as ``A.mT.contiguous().mT``; det and slogdet factor
another matrix then, Note [PyTorch factors A transposed]).

Note [Singular value and eigenvector signs] (in the op module): NumPy's LAPACK and
PyTorch's may pick opposite signs for a singular vector or an eigenvector. The comparisons
with torch flip gradcli's columns to torch's, and give gradcli the upstream gradient flipped
the same way: the same loss, so the same gradient.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import test_aten_ops as T
from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import needs_torch, torch

DET, SLOGDET, INV = "aten._linalg_det.default", "aten._linalg_slogdet.default", "aten.linalg_inv_ex.default"
SOLVE, CHOL, QR = "aten._linalg_solve_ex.default", "aten.linalg_cholesky_ex.default", "aten.linalg_qr.default"
SVD, EIGH = "aten._linalg_svd.default", "aten._linalg_eigh.default"


def R(*shape, seed=0):
    rng = np.random.default_rng(zlib.crc32(repr((shape, seed)).encode()))
    return rng.standard_normal(shape)


def well(*shape, seed=0):
    """Square matrices far from singular: a random one plus a multiple of the identity."""
    n = shape[-1]
    return R(*shape, seed=seed) + 2.5 * np.eye(n)


def spd(*shape, seed=0):
    a = R(*shape, seed=seed)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def sym(*shape, seed=0):
    a = R(*shape, seed=seed)
    return a + np.swapaxes(a, -1, -2)


CASES = []
REFUSED = []
GRADGRAD = []


def case(op, inputs, args=None, nc=False, fd=True, gradgrad=False, id=None,  # noqa: A002
         cases=CASES, gradgrads=GRADGRAD):
    """A row of ``cases`` (this module's tables unless another linalg table passes its own),
    and of ``gradgrads`` too with ``gradgrad``."""
    n = sum(1 for c in cases if c.values[0] == op)
    param = pytest.param(op, inputs, args or {}, nc, fd, id=id or f"{op}-{n}")
    cases.append(param)
    if gradgrad:
        gradgrads.append(param)


def refused(op, inputs, args, match, static=True, table=REFUSED):
    n = sum(1 for c in table if c.values[0] == op)
    table.append(pytest.param(op, inputs, args, match, static, id=f"{op}-refused-{n}"))


for _op in (DET, SLOGDET, INV):
    case(_op, [well(3, 3)], gradgrad=True)
    case(_op, [well(2, 4, 4, seed=1)])
    case(_op, [well(2, 3, 3, seed=2)], nc=True, id=f"{_op}-nc")
    case(_op, [R(0, 3, 3)], fd=False, id=f"{_op}-empty-batch")
    case(_op, [R(2, 0, 0)], fd=False, id=f"{_op}-empty-matrix")
    case(_op, [R(1, 1, seed=3) + 3], id=f"{_op}-1x1")
case(DET, [R(2, 3, 3, seed=4)], id=DET + "-random")
case(SOLVE, [well(3, 3), R(3, 2, seed=1)], gradgrad=True)
case(SOLVE, [well(2, 3, 3), R(2, 3, seed=1)], id=SOLVE + "-batch-of-vectors")
case(SOLVE, [well(2, 3, 3), R(3, seed=1)], id=SOLVE + "-vector")
case(SOLVE, [well(3, 3), R(2, 4, 3, seed=1)], {"left": False}, id=SOLVE + "-right-broadcast")
case(SOLVE, [well(2, 1, 3, 3), R(4, 3, 2, seed=1)], id=SOLVE + "-broadcast")
case(SOLVE, [well(2, 3, 3), R(2, 3, 2, seed=1)], nc=True, id=SOLVE + "-nc")
case(SOLVE, [R(0, 3, 3), R(0, 3, 2, seed=1)], fd=False, id=SOLVE + "-empty-batch")
case(SOLVE, [well(2, 3, 3), R(2, 2, 3, seed=1)], {"left": False, "check_errors": True}, gradgrad=True,
     id=SOLVE + "-right")
for _upper in (False, True):
    case(CHOL, [spd(3, 3)], {"upper": _upper}, gradgrad=True, id=f"{CHOL}-{_upper}")
    case(CHOL, [spd(2, 4, 4, seed=1)], {"upper": _upper}, id=f"{CHOL}-batch-{_upper}")
case(CHOL, [spd(2, 3, 3, seed=2)], nc=True, id=CHOL + "-nc")
case(CHOL, [R(0, 3, 3)], fd=False, id=CHOL + "-empty-batch")
for _shape in ((4, 3), (3, 3), (3, 4), (2, 5, 3), (2, 3, 5)):
    case(QR, [R(*_shape)], gradgrad=_shape in ((4, 3), (3, 4)), id=f"{QR}-{_shape}")
case(QR, [R(2, 3, 5)], {"mode": "complete"}, id=QR + "-complete-wide")
case(QR, [R(2, 5, 3)], {"mode": "r"}, fd=False, id=QR + "-r")
case(QR, [R(2, 4, 3)], nc=True, id=QR + "-nc")
case(QR, [R(0, 4, 3)], fd=False, id=QR + "-empty-batch")
for _shape in ((4, 3), (3, 3), (3, 4), (2, 5, 3), (2, 3, 5)):
    case(SVD, [R(*_shape)], gradgrad=_shape in ((4, 3), (3, 4)), id=f"{SVD}-{_shape}")
case(SVD, [R(2, 4, 3)], {"full_matrices": True}, fd=False, id=SVD + "-full")   # (U's extra columns: any basis)
case(SVD, [R(2, 3, 4)], {"compute_uv": False}, fd=False, id=SVD + "-values-only")
case(SVD, [R(2, 4, 3)], nc=True, id=SVD + "-nc")
case(SVD, [R(0, 4, 3)], fd=False, id=SVD + "-empty-batch")
for _uplo in ("L", "U"):
    case(EIGH, [sym(3, 3)], {"UPLO": _uplo}, gradgrad=True, id=f"{EIGH}-{_uplo}")
    case(EIGH, [R(2, 4, 4)], {"UPLO": _uplo}, fd=False, id=f"{EIGH}-reads-one-triangle-{_uplo}")
case(EIGH, [sym(2, 4, 4)], id=EIGH + "-batch")
case(EIGH, [sym(2, 3, 3)], {"compute_v": False}, fd=False, id=EIGH + "-values-only")
case(EIGH, [sym(2, 3, 3)], nc=True, id=EIGH + "-nc")
case(EIGH, [R(0, 3, 3)], fd=False, id=EIGH + "-empty-batch")

_I64 = np.ones((3, 3), np.int64)
for _op in (DET, SLOGDET, INV, CHOL, EIGH):
    refused(_op, [R(3, 4)], {}, "square matrices")
    refused(_op, [R(3)], {}, "at least 2 dimensions")
    refused(_op, [_I64], {}, "floating point")
for _op in (QR, SVD):
    refused(_op, [R(3)], {}, "at least 2 dimensions")
refused(QR, [R(3, 3)], {"mode": "full"}, "unrecognized mode")
refused(EIGH, [sym(3, 3)], {"UPLO": "X"}, "UPLO")
refused(SVD, [R(3, 3)], {"driver": "gesvd"}, "only supported on CUDA")
refused(SOLVE, [R(3, 3), R(4, 2)], {}, r"Incompatible shapes of A and B for the equation AX = B \(3x3 and 4x2\)")
refused(SOLVE, [R(3, 3), R(2, 4)], {"left": False}, r"equation XA = B \(3x3 and 2x4\)")
refused(SOLVE, [R(3, 3), R(3)], {"left": False}, "Vector broadcasting")
refused(SOLVE, [R(2, 3, 3), R(4, 3, 1)], {}, "do not broadcast")
refused(SOLVE, [R(3, 3), R(3).astype(np.float32)], {}, "same dtype")
refused(INV, [np.array([[1.0, 2.0], [2.0, 4.0]])], {"check_errors": True}, "diagonal element 2 is zero", False)
refused(SOLVE, [np.zeros((2, 2, 2)), R(2, 2)], {"check_errors": True},
        r"\(Batch element 0\): The solver failed because the input matrix is singular", False)
refused(CHOL, [-np.eye(3)], {"check_errors": True}, "leading minor of order 1 is not positive-definite", False)

# the outputs that are a singular vector or an eigenvector: (output index, axis of the vectors)
GAUGE = {SVD: ((0, -2), (2, -1)), EIGH: ((1, -2),)}


# -- running a row -------------------------------------------------------------------------
def _nc_ours(t):
    tr = OPS["aten.transpose.int"]
    return tr(OPS["aten.clone.default"](tr(t, dim0=-2, dim1=-1), memory_format="contiguous_format"), dim0=-2, dim1=-1)


def _ours(op_name, inputs, args, nc, dtype=np.float64, requires_grad=True):
    leaves = [Tensor(np.array(x, dtype=dtype), requires_grad=requires_grad) for x in inputs]
    called = [_nc_ours(t) if nc and k == 0 else t for k, t in enumerate(leaves)]
    if nc:
        assert not called[0].data.flags.c_contiguous or called[0].data.size <= 1
    return leaves, _outputs(OPS[op_name](*called, **args))


def _theirs(op_name, inputs, args, nc, dtype=np.float64):
    leaves = [torch.tensor(np.array(x, dtype=dtype), requires_grad=True) for x in inputs]
    called = [t.mT.contiguous().mT if nc and k == 0 else t for k, t in enumerate(leaves)]
    return leaves, _outputs(T._torch_call(op_name, *called, **args))


def _outputs(result):
    """An op's outputs as a list (a single-output op returns its tensor)."""
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _signs(op_name, outs, ref):
    """For each gauge output: +-1 per vector making gradcli's vectors torch's ``ref``'s."""
    out = {}
    for k, axis in GAUGE.get(op_name, ()):
        a, b = np.asarray(outs[k], np.float64), np.asarray(ref[k], np.float64)
        if a.ndim < 2:
            continue
        if op_name == SVD:         # (full_matrices: the columns beyond k have no singular value)
            kk = np.asarray(outs[1]).shape[-1]
            a, b = (a[..., :kk] if axis == -2 else a[..., :kk, :]), (b[..., :kk] if axis == -2 else b[..., :kk, :])
        s = np.sign(np.sum(a * b, axis=axis))
        out[k] = np.where(s == 0, 1.0, s)
    return out


def _flip(op_name, k, x, signs):
    """``x`` (an output or its gradient) with its vectors' signs flipped by ``signs``."""
    if k not in signs:
        return x
    axis = dict(GAUGE[op_name])[k]
    s = signs[k]
    x = np.array(x, copy=True)
    if axis == -2:
        x[..., : s.shape[-1]] *= s[..., None, :]
    else:
        x[..., : s.shape[-1], :] *= s[..., :, None]
    return x


def _data(x):
    return x.data if type(x) is Tensor else np.asarray(x)


def _one_triangle(op_name, args, i, g):
    """Cholesky and eigh read one triangle of their input and PyTorch's gradient is the symmetric
    one: as finite differences see it, the other triangle's half folded onto the triangle read
    (``g + g^T`` off the diagonal, zero on the other side)."""
    if i != 0 or op_name not in (CHOL, EIGH):
        return g
    upper = args.get("upper", False) if op_name == CHOL else args.get("UPLO", "L") == "U"
    folded = g + np.swapaxes(g, -1, -2) - g * np.eye(g.shape[-1])
    return np.triu(folded) if upper else np.tril(folded)


def _upstream(outs, seed=0):
    rng = np.random.default_rng(seed + 5)
    return [rng.standard_normal(o.shape).astype(o.dtype) if o.grad_fn is not None else None for o in outs]


PARAMS = "op_name, inputs, args, nc, fd"


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(PARAMS, CASES)
def test_forward_gradients_and_node_names_match_torch(op_name, inputs, args, nc, fd, dtype):
    leaves, outs = _ours(op_name, inputs, args, nc, dtype)
    tleaves, touts = _theirs(op_name, inputs, args, nc, dtype)
    signs = _signs(op_name, [o.data for o in outs], [t.detach().numpy() for t in touts])
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (2e-4, 2e-5)
    assert len(outs) == len(touts)
    for k, (o, t) in enumerate(zip(outs, touts)):
        assert o.shape == tuple(t.shape) and o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(_flip(op_name, k, o.data, signs), t.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"output {k}")
        assert (o.grad_fn is None) == (t.grad_fn is None)
        if t.grad_fn is not None:
            assert o.grad_fn.name == t.grad_fn.name() and o.output_nr == t.output_nr
    vs = _upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    if not used or args.get("compute_uv") is False or args.get("compute_v") is False or args.get("mode") == "r":
        return
    ours = grad([outs[k] for k in used], leaves, grad_outputs=[_flip(op_name, k, vs[k], signs) for k in used])
    theirs = torch.autograd.grad([touts[k] for k in used], tleaves, [torch.tensor(vs[k]) for k in used])
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b.numpy(), rtol=rtol * 10, atol=atol * 10, err_msg=f"input {i}")


def _numeric(op_name, inputs, args, vs, i, ref, eps=1e-6):
    """d/dx_i sum_k <v_k, f_k(x)> by central differences, the vectors' signs held to ``ref``'s."""
    op = OPS[op_name]
    xs = [np.array(x, dtype=np.float64) for x in inputs]
    x = xs[i].reshape(-1)
    out = np.zeros(x.size)

    def objective():
        outs = [np.asarray(o) for o in _outputs(op(*[y.reshape(inputs[k].shape) if k == i else y
                                                     for k, y in enumerate(xs)], **args))]
        signs = _signs(op_name, outs, ref)
        return sum(float(np.sum(v * _flip(op_name, k, o, signs))) for k, (v, o) in enumerate(zip(vs, outs))
                   if v is not None)

    xs[i] = x
    for j in range(x.size):
        orig = x[j]
        x[j] = orig + eps
        plus = objective()
        x[j] = orig - eps
        minus = objective()
        x[j] = orig
        out[j] = (plus - minus) / (2 * eps)
    return out.reshape(inputs[i].shape)


@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4]])
def test_gradients_match_finite_differences(op_name, inputs, args, nc, fd):
    leaves, outs = _ours(op_name, inputs, args, nc)
    vs = _upstream(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    got = grad([outs[k] for k in used], leaves, grad_outputs=[vs[k] for k in used])
    ref = [o.data for o in outs]
    for i, g in enumerate(got):
        assert g.shape == leaves[i].shape
        np.testing.assert_allclose(_one_triangle(op_name, args, i, g), _numeric(op_name, inputs, args, vs, i, ref),
                                   rtol=1e-5, atol=1e-6,
                                   err_msg=f"input {i}")


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_matches_the_forward(op_name, inputs, args, nc, fd, monkeypatch):
    T.test_load_time_infer_matches_the_forward(op_name, inputs, args, None, fd)
    T.test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, None, fd, monkeypatch)


@pytest.mark.parametrize("op_name, inputs, args, match, static", REFUSED)
def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static):
    T.test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static)


# -- second derivatives -------------------------------------------------------------------
def _second(op_name, inputs, args, vs_for, ws, module):
    """d<w, vjp(x, v)>/d(x, v) for gradcli (``module`` None) or torch, at ``inputs``."""
    if module is None:
        leaves, outs = _ours(op_name, inputs, args, False)
        vs = vs_for(outs)
        used = [k for k, v in enumerate(vs) if v is not None]
        vts = [Tensor(vs[k].copy(), requires_grad=True) for k in used]
        gs = grad([outs[k] for k in used], leaves, grad_outputs=vts, create_graph=True)
        got = grad(list(gs), leaves + vts, grad_outputs=ws, allow_unused=True)
        return [np.zeros(t.shape) if g is None else np.asarray(g) for g, t in zip(got, leaves + vts)]
    leaves, outs = _theirs(op_name, inputs, args, False)
    vs = vs_for(outs)
    used = [k for k, v in enumerate(vs) if v is not None]
    vts = [torch.tensor(vs[k], requires_grad=True) for k in used]
    gs = torch.autograd.grad([outs[k] for k in used], leaves, vts, create_graph=True)
    got = torch.autograd.grad(list(gs), leaves + vts, [torch.tensor(w) for w in ws], allow_unused=True)
    return [np.zeros(tuple(t.shape)) if g is None else g.detach().numpy() for g, t in zip(got, leaves + vts)]


def _ws(inputs):
    rng = np.random.default_rng(11)
    return [rng.standard_normal(np.shape(x)) for x in inputs]


@pytest.mark.parametrize(PARAMS, GRADGRAD)
def test_second_derivative_matches_finite_differences(op_name, inputs, args, nc, fd):
    _, outs = _ours(op_name, inputs, args, False)
    vs = _upstream(outs)
    ref = [o.data for o in outs]
    ws = _ws(inputs)
    got = _second(op_name, inputs, args, lambda _: vs, ws, None)
    used = [k for k, v in enumerate(vs) if v is not None]

    def first(xs, v_used):
        full = list(vs)
        for k, v in zip(used, v_used):
            full[k] = v
        leaves, outs = _ours(op_name, xs, args, False)
        signs = _signs(op_name, [o.data for o in outs], ref)
        gs = grad([outs[k] for k in used], leaves, grad_outputs=[_flip(op_name, k, full[k], signs) for k in used])
        return sum(float(np.sum(w * g)) for w, g in zip(ws, gs))

    xs, v_used = [np.array(x, dtype=np.float64) for x in inputs], [vs[k].copy() for k in used]
    eps = 1e-6
    for target, (holder, j) in enumerate([(xs, i) for i in range(len(xs))] + [(v_used, k) for k in range(len(used))]):
        num = np.zeros(holder[j].shape)
        for idx in np.ndindex(num.shape):
            orig = holder[j][idx]
            holder[j][idx] = orig + eps
            plus = first(xs, v_used)
            holder[j][idx] = orig - eps
            minus = first(xs, v_used)
            holder[j][idx] = orig
            num[idx] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(_one_triangle(op_name, args, target, got[target]), num, rtol=1e-4, atol=1e-6,
                                   err_msg=f"target {target}")


@needs_torch
@pytest.mark.parametrize(PARAMS, GRADGRAD)
def test_second_derivative_matches_torch_double_backward(op_name, inputs, args, nc, fd):
    _, outs = _ours(op_name, inputs, args, False)
    _, touts = _theirs(op_name, inputs, args, False)
    signs = _signs(op_name, [o.data for o in outs], [t.detach().numpy() for t in touts])
    vs = _upstream(outs)
    ws = _ws(inputs)
    ours = _second(op_name, inputs, args, lambda _: [None if v is None else _flip(op_name, k, v, signs)
                                                     for k, v in enumerate(vs)], ws, None)
    theirs = _second(op_name, inputs, args, lambda _: vs, ws, torch)
    used = [k for k, v in enumerate(vs) if v is not None]
    for t, (a, b) in enumerate(zip(ours, theirs)):
        if t >= len(inputs):       # d/dv: gradcli's v is torch's, its vectors flipped
            a = _flip(op_name, used[t - len(inputs)], a, signs)
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10, err_msg=f"target {t}")


# -- singular matrices, info, empty matrices ------------------------------------------------------
_SINGULAR = [np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]),
             np.zeros((2, 2))]


@needs_torch
@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("a", _SINGULAR, ids=["rank1-2x2", "rank2-3x3", "zero"])
def test_det_of_a_singular_matrix_has_pytorchs_gradient(a, create_graph):
    # without create_graph PyTorch solves with the LU, its zero pivot moved to eps: grad * det = 0
    # makes it zero; with create_graph it is the adjugate, from an SVD (Note [det's second derivative])
    t = Tensor(a.copy(), requires_grad=True)
    (g,) = grad([OPS[DET](t)[0]], [t], grad_outputs=[np.ones(())], create_graph=create_graph)
    tt = torch.tensor(a, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.linalg.det(tt), tt, create_graph=create_graph)
    np.testing.assert_allclose(_data(g), tg.detach().numpy(), rtol=1e-9, atol=1e-12)
    if create_graph:         # and it differentiates again, as PyTorch's
        w = R(*a.shape, seed=9)
        (h,) = grad([g], [t], grad_outputs=[w])
        (th,) = torch.autograd.grad(tg, tt, torch.tensor(w))
        if not a.any():
            # gradcli deliberately differs: the zero matrix's singular values repeat, and PyTorch's
            # svd_backward divides the zero gradient of U by S_i^2 - S_j^2 = 0 (NaN); gradcli takes
            # an output's gradient that is zero as none (svdvals' formula), which is finite
            assert np.isnan(th.numpy()).all() and np.isfinite(h).all()
            return
        np.testing.assert_allclose(h, th.numpy(), rtol=1e-8, atol=1e-10)


def test_det_gradient_of_a_batch_with_one_singular_matrix_differentiates_again():
    a = np.stack([_SINGULAR[0], well(2, 2)])
    t = Tensor(a.copy(), requires_grad=True)
    (g,) = grad([OPS[DET](t)[0]], [t], grad_outputs=[np.ones(2)], create_graph=True)
    np.testing.assert_allclose(_data(g)[0], [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)
    np.testing.assert_allclose(_data(g)[1], np.linalg.det(a[1]) * np.linalg.inv(a[1]).T, rtol=1e-12)
    (h,) = grad([g], [t], grad_outputs=[np.ones((2, 2, 2))])
    assert np.isfinite(h).all()


@needs_torch
@pytest.mark.parametrize("op_name, a, args", [
    (INV, _SINGULAR[0], {}), (INV, np.stack([_SINGULAR[1], well(3, 3)]), {}),
    (SOLVE, np.stack([well(2, 2), _SINGULAR[2]]), {}), (CHOL, -np.eye(3), {}),
    (CHOL, np.array([[1.0, 2.0], [2.0, 1.0]]), {}), (CHOL, np.stack([spd(3, 3), sym(3, 3, seed=4)]), {"upper": True}),
    (SLOGDET, _SINGULAR[0], {}), (DET, _SINGULAR[1], {}),
], ids=["inv", "inv-batch", "solve-batch", "chol-minus-eye", "chol-indefinite", "chol-batch-upper", "slogdet",
        "det"])
def test_singular_and_indefinite_matrices_give_info_not_an_error(op_name, a, args):
    inputs = [a] + ([R(*a.shape[:-1], seed=2)] if op_name == SOLVE else [])
    outs = [np.asarray(o) for o in OPS[op_name](*inputs, **args)]
    touts = [t.numpy() for t in T._torch_call(op_name, *[torch.tensor(x) for x in inputs], **args)]
    if op_name in (INV, SOLVE, CHOL):
        np.testing.assert_array_equal(outs[-1], touts[-1])          # info
        assert outs[-1].dtype == np.int32
    if op_name == CHOL:      # the factor as far as LAPACK's potf2 went
        np.testing.assert_allclose(outs[0], touts[0], rtol=1e-12, atol=1e-12)
    if op_name in (DET, SLOGDET):
        np.testing.assert_allclose(outs[:-2], touts[:-2], atol=1e-12)


def test_svd_and_eigh_refuse_a_backward_without_vectors():
    # torch.linalg.svdvals and eigvalsh ask for the vectors when the input requires grad;
    # without them PyTorch's backward fails an internal assert, gradcli says why
    for op_name, args, match in [(SVD, {"compute_uv": False}, "compute_uv=False"),
                                 (EIGH, {"compute_v": False}, "compute_v=False"),
                                 (QR, {"mode": "r"}, "mode='r'")]:
        t = Tensor(sym(3, 3), requires_grad=True)
        outs = OPS[op_name](t, **args)
        k = 0 if op_name == EIGH else 1
        with pytest.raises(RuntimeError, match=match):
            grad([outs[k]], [t], grad_outputs=[np.ones(outs[k].shape)])


def test_svdvals_of_repeated_singular_values_has_a_finite_gradient():
    # the gradient of S alone is U diag(gS) Vh (no division by S_i^2 - S_j^2), as PyTorch's
    t = Tensor(np.eye(3) * 2.0, requires_grad=True)
    (g,) = grad([OPS[SVD](t)[1]], [t], grad_outputs=[np.ones(3)])
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)


def test_det_and_slogdet_factor_the_transpose_of_a_row_major_matrix():
    # Note [PyTorch factors A transposed]: LU and pivots follow the input's layout
    a = R(3, 3)
    lu_c = np.asarray(OPS[DET](a)[1])
    lu_f = np.asarray(OPS[DET](np.asfortranarray(a))[1])
    from gradcli.ops.aten_kernels.linalg import lu_factor

    np.testing.assert_array_equal(lu_c, lu_factor(a.T)[0])
    np.testing.assert_array_equal(lu_f, lu_factor(a)[0])
    assert lu_c.flags.f_contiguous and lu_f.flags.f_contiguous


def table_ops():
    """The ops this table covers (the coverage checks of the other tables ask)."""
    return {c.values[0] for c in CASES}


def gradgrad_ops():
    return {c.values[0] for c in GRADGRAD}


def test_every_op_of_this_table_is_registered_with_torchs_schema():
    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            T.test_schema_is_torch_schema(name)
