"""The op test table and gradient checks for every op in ``gradcli.ops.OPS``.

Adding an op is one place in ``gradcli/ops/`` plus its row here: ``CASES``
(gradient-checked) or ``FORWARD_CASES`` (ops whose backward is not a
derivative); ``test_every_public_op_has_a_row`` fails for an op without one.
Every row also checks the op's ``infer`` against what its forward makes.

Each case runs the op on float64 ``Tensor``s, draws a random upstream
gradient ``v`` for every output, asks the engine for the vector-Jacobian
product ``grad(outs, inputs, grad_outputs=vs)`` and compares it with central
finite differences of ``sum(v * f(x))`` taken element by element on every
input. Separate tests pin PyTorch's conventions at non-differentiable points
(ties, kinks) and the names of recorded nodes.
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.args import parse_index
from gradcli.ops.aten import AtenOp

EPS = 1e-6
ATOL = 1e-5
RTOL = 1e-3

# Ops declared for the loader to build (no forward of their own): the test
# module that covers each.
DECLARED = {"checkpoint": "test_checkpoint.py", "custom": "test_custom_op.py", "grad": "test_grad_op.py"}


# -- helpers ------------------------------------------------------------------------
def _checked_args(op, args):
    """Run each attribute through the op's own checker, as the loader does."""
    return {k: op.args[k].check(v) for k, v in (args or {}).items()}


def _as_list(out, op):
    return list(out) if op.multi_output else [out]


def _numeric_vjp(op, arrays, args, vs, i, eps):
    """d/dx_i sum_k sum(v_k * f_k(x)) by central differences, element by element."""
    base = [np.array(a, copy=True) for a in arrays]
    x = base[i]
    g = np.zeros(x.shape, dtype=np.float64)
    flat = x.reshape(-1)  # a view of base[i]
    gflat = g.reshape(-1)

    def objective():
        outs = _as_list(op.fn(*base, **args), op)
        return sum(float(np.sum(np.asarray(v, np.float64) * np.asarray(o, np.float64)))
                   for v, o in zip(vs, outs))

    for j in range(flat.size):
        orig = flat[j]
        flat[j] = orig + eps
        plus = objective()
        flat[j] = orig - eps
        minus = objective()
        flat[j] = orig
        gflat[j] = (plus - minus) / (2 * eps)
    return g


def _record(op_name, arrays, args, wrt):
    """Run ``op_name`` on Tensors of ``arrays`` (those in ``wrt`` require grad,
    all floating ones by default): (op, checked args, arrays, wrt, tensors, outputs)."""
    op = OPS[op_name]
    args = _checked_args(op, args)
    arrays = [np.asarray(a) for a in arrays]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    tensors = [Tensor(np.array(a, copy=True), requires_grad=i in wrt)
               for i, a in enumerate(arrays)]
    return op, args, arrays, wrt, tensors, _as_list(op(*tensors, **args), op)


def check_vjp(op_name, arrays, args=None, wrt=None, seed=0, eps=EPS, atol=ATOL, rtol=RTOL):
    """Compare the engine's VJP of ``op_name`` with finite differences."""
    op, args, arrays, wrt, tensors, outs = _record(op_name, arrays, args, wrt)
    rng = np.random.default_rng(seed + 12345)
    vs = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]

    # The forward through Tensors must equal the raw forward.
    raw = _as_list(op.fn(*[np.array(a, copy=True) for a in arrays], **args), op)
    assert len(raw) == len(outs)
    for r, o in zip(raw, outs):
        assert o.shape == np.shape(r)
        np.testing.assert_array_equal(o.data, r)

    analytic = grad(outs, [tensors[i] for i in wrt], grad_outputs=vs)
    assert len(analytic) == len(wrt)
    for k, i in enumerate(wrt):
        ga = analytic[k]
        assert ga.shape == arrays[i].shape, (op_name, i, ga.shape, arrays[i].shape)
        assert ga.dtype == arrays[i].dtype, (op_name, i, ga.dtype, arrays[i].dtype)
        gn = _numeric_vjp(op, arrays, args, vs, i, eps)
        np.testing.assert_allclose(ga, gn, rtol=rtol, atol=atol,
                                   err_msg=f"{op_name} input {i} args={args}")
    return outs


def check_raw_vjp_shapes(op_name, arrays, args=None, wrt=None, seed=0):
    """The node's own VJPs (before the engine's sum_to/cast fix-ups) return
    gradients with exactly each input's shape and dtype."""
    op, args, arrays, wrt, tensors, outs = _record(op_name, arrays, args, wrt)
    rng = np.random.default_rng(seed)
    vs = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
    node = outs[0].grad_fn
    assert node is not None
    got = node.apply(vs)
    for i in wrt:
        assert got[i] is not None
        assert np.shape(got[i]) == arrays[i].shape, (op_name, i, np.shape(got[i]))
        assert got[i].dtype == arrays[i].dtype, (op_name, i, got[i].dtype)


def R(*shape, seed=0, low=None, high=None, away=None):
    """A seeded float64 array; uniform in [low, high) if given, else normal.

    ``away``: push entries at least this far from 0 (keeps kinks out of FD).
    """
    rng = np.random.default_rng(zlib.crc32(repr((shape, seed, low, high)).encode()))
    if low is not None:
        x = rng.uniform(low, high, size=shape)
    else:
        x = rng.standard_normal(shape)
    if away is not None:
        x = np.where(np.abs(x) < away, np.where(x < 0, -away, away), x)
    return np.asarray(x, dtype=np.float64)


def distinct(*shape, seed=0):
    """Entries with no ties and gaps much larger than EPS (for max/min)."""
    n = int(np.prod(shape)) if shape else 1
    rng = np.random.default_rng(seed + 777)
    vals = rng.permutation(n).astype(np.float64) * 0.37 - n * 0.15
    vals += rng.uniform(-0.05, 0.05, size=n)
    return vals.reshape(shape)


# -- case table ---------------------------------------------------------------------
CASES = []  # (id, op_name, arrays, args, wrt)


def case(id_, op_name, arrays, args=None, wrt=None, marks=()):
    CASES.append(pytest.param(op_name, arrays, args, wrt, id=id_, marks=marks))


# unary elementwise
UNARY = {
    "neg": lambda s: R(*s),
    "exp": lambda s: R(*s),
    "log": lambda s: R(*s, low=0.3, high=3.0),
    "sin": lambda s: R(*s),
    "cos": lambda s: R(*s),
    "tanh": lambda s: R(*s),
    "sigmoid": lambda s: R(*s),
    "relu": lambda s: R(*s, away=0.05),
    "abs": lambda s: R(*s, away=0.05),
    "sqrt": lambda s: R(*s, low=0.3, high=3.0),
    "square": lambda s: R(*s),
    "clone": lambda s: R(*s),
}
for name, make in UNARY.items():
    for shape in [(3, 4), (), (2, 1, 3)]:
        case(f"{name}-{shape}", name, [make(shape)])


def _clamp_input(shape, lo=-0.5, hi=0.5, seed=0):
    x = R(*shape, seed=seed) * 1.2
    for b in (lo, hi):
        x = np.where(np.abs(x - b) < 1e-2, x + 0.05, x)
    return x


case("clamp-min", "clamp", [_clamp_input((3, 5))], {"min": -0.5})
case("clamp-max", "clamp", [_clamp_input((3, 5))], {"max": 0.5})
case("clamp-both", "clamp", [_clamp_input((3, 5))], {"min": -0.5, "max": 0.5})
case("clamp-both-int-bounds", "clamp", [_clamp_input((4, 3), -1, 1) * 2], {"min": -1, "max": 1})
case("clamp-0d", "clamp", [np.array(0.25)], {"min": 0.0, "max": 1.0})

case("cast-f64-f64", "cast", [R(3, 4)], {"dtype": "float64"})

# binary elementwise, with broadcasting
BIN_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 1, 4), (2, 4)),
    ((2, 4), (3, 1, 4)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((), ()),
    ((4,), (3, 4)),
    ((3, 1), (1, 4)),
]


def _binary_inputs(name, sx, sy, seed):
    if name == "div":
        return [R(*sx, seed=seed), R(*sy, seed=seed + 1, low=0.5, high=2.0)
                * np.where(R(*sy, seed=seed + 2) < 0, -1.0, 1.0)]
    if name == "pow":
        return [R(*sx, seed=seed, low=0.4, high=2.5), R(*sy, seed=seed + 1, low=-1.5, high=2.5)]
    if name in ("maximum", "minimum"):
        # disjoint interleaved grids: no ties between any broadcast pair
        n = max(1, int(np.prod(sx))) + max(1, int(np.prod(sy)))
        vals = np.random.default_rng(seed).permutation(n) * 0.1
        nx = max(1, int(np.prod(sx)))
        return [vals[:nx].reshape(sx).astype(np.float64),
                vals[nx:nx + max(1, int(np.prod(sy)))].reshape(sy).astype(np.float64) + 0.05]
    return [R(*sx, seed=seed), R(*sy, seed=seed + 1)]


for name in ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "mse_loss"]:
    for k, (sx, sy) in enumerate(BIN_SHAPES):
        case(f"{name}-{sx}-{sy}", name, _binary_inputs(name, sx, sy, seed=k))
case("mse_loss-3d-1d", "mse_loss", [R(2, 3, 4), R(4, seed=3)])


def _cond(shape, seed=0):
    return np.random.default_rng(seed).random(shape) < 0.5


case("where-same", "where", [_cond((3, 4)), R(3, 4), R(3, 4, seed=1)], wrt=[1, 2])
case("where-bcast", "where", [_cond((3, 1, 4)), R(2, 4), R()], wrt=[1, 2])
case("where-bcast-cond", "where", [_cond((4,)), R(3, 1), R(3, 4, seed=2)], wrt=[1, 2])
case("where-only-x", "where", [_cond((2, 3)), R(2, 3), R(2, 3, seed=1)], wrt=[1])

# reductions
AXES = [None, 0, 1, -1, (0, 2), [-1, 0], (1,)]
for name in ["sum", "mean", "max", "min", "logsumexp"]:
    for axis in AXES:
        for keepdims in (False, True):
            x = distinct(2, 3, 4, seed=3) if name in ("max", "min") else R(2, 3, 4)
            args = {"keepdims": keepdims}
            if axis is not None:
                args["axis"] = list(axis) if isinstance(axis, tuple) else axis
            case(f"{name}-axis{axis}-keep{keepdims}", name, [x], args)
    case(f"{name}-default", name, [distinct(3, 2) if name in ("max", "min") else R(3, 2)])
    case(f"{name}-0d", name, [R()])
    case(f"{name}-1d-axis0", name, [distinct(5) if name in ("max", "min") else R(5)], {"axis": 0})

# matmul
MATMUL = [
    ((4,), (4,)),
    ((3, 4), (4,)),
    ((4,), (4, 5)),
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((1, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (3, 4, 2)),
    ((4,), (2, 4, 5)),
    ((2, 3, 4), (4,)),
]
for sa, sb in MATMUL:
    case(f"matmul-{sa}-{sb}", "matmul", [R(*sa), R(*sb, seed=1)])

# joining and splitting
case("concat-axis0", "concat", [R(1, 3), R(2, 3, seed=1), R(3, 3, seed=2)], {"axis": 0})
case("concat-axis-1", "concat", [R(2, 1), R(2, 2, seed=1), R(2, 3, seed=2)], {"axis": -1})
case("concat-3d-axis1", "concat", [R(2, 1, 2), R(2, 3, 2, seed=1), R(2, 2, 2, seed=2)], {"axis": 1})
case("concat-single", "concat", [R(2, 3)], {"axis": 0})
case("stack-axis0", "stack", [R(2, 3), R(2, 3, seed=1), R(2, 3, seed=2)], {"axis": 0})
case("stack-axis-1", "stack", [R(2, 3), R(2, 3, seed=1), R(2, 3, seed=2)], {"axis": -1})
case("stack-axis1", "stack", [R(2, 3), R(2, 3, seed=1), R(2, 3, seed=2)], {"axis": 1})
case("stack-0d", "stack", [R(), R(seed=1), R(seed=2)], {"axis": 0})
case("split-sections-axis0", "split", [R(6, 4)], {"sections": 3, "axis": 0})
case("split-sections-axis1", "split", [R(3, 6)], {"sections": 2, "axis": 1})
case("split-sections-axis-1", "split", [R(2, 2, 4)], {"sections": 4, "axis": -1})
case("split-indices-axis0", "split", [R(5, 2)], {"indices": [1, 3], "axis": 0})
case("split-indices-axis-1", "split", [R(2, 5)], {"indices": [2], "axis": -1})
case("split-indices-empty-piece", "split", [R(5, 2)], {"indices": [2, 2, 4], "axis": 0})

# indexing and shape
SLICES = [
    ((5, 6), "1:4, ::2"),
    ((5, 6), "::-1, -3:"),
    ((5, 6), "-1, 1:5:2"),
    ((4, 5, 3), "..., ::-2"),
    ((5, 6), "None, 4:0:-2, 3"),
    ((5, 6), "-4:-1, -1::-3"),
    ((3, 4), "1"),
]
for shape, idx in SLICES:
    case(f"slice-{shape}-[{idx}]", "slice", [R(*shape)], {"index": idx})

case("transpose-default", "transpose", [R(2, 3, 4)])
case("transpose-2d", "transpose", [R(3, 5)])
case("transpose-102", "transpose", [R(2, 3, 4)], {"axes": [1, 0, 2]})
case("transpose-201", "transpose", [R(2, 3, 4)], {"axes": [2, 0, 1]})
case("transpose-neg", "transpose", [R(2, 3, 4)], {"axes": [-1, 0, 1]})
case("expand-(3,1)-(2,3,4)", "expand", [R(3, 1)], {"shape": [2, 3, 4]})
case("expand-()-(2,2)", "expand", [R()], {"shape": [2, 2]})
case("expand-(1,4)-(3,4)", "expand", [R(1, 4)], {"shape": [3, 4]})
case("expand-(2,1,1)-(2,3,4)", "expand", [R(2, 1, 1)], {"shape": [2, 3, 4]})
case("squeeze-all", "squeeze", [R(1, 3, 1, 2)])
case("squeeze-axis0", "squeeze", [R(1, 3, 1, 2)], {"axis": 0})
case("squeeze-axis-2", "squeeze", [R(1, 3, 1, 2)], {"axis": -2})
case("squeeze-axes", "squeeze", [R(1, 3, 1, 2)], {"axis": [0, 2]})
case("unsqueeze-0", "unsqueeze", [R(2, 3)], {"axis": 0})
case("unsqueeze-1", "unsqueeze", [R(2, 3)], {"axis": 1})
case("unsqueeze-neg", "unsqueeze", [R(2, 3)], {"axis": -1})
case("reshape-6x-1", "reshape", [R(2, 3, 4)], {"shape": [6, -1]})
case("reshape--1", "reshape", [R(2, 3, 4)], {"shape": [-1]})
case("reshape-4x-1x2", "reshape", [R(2, 3, 4)], {"shape": [4, -1, 2]})
case("reshape-0d", "reshape", [R()], {"shape": [1, 1]})

# neural-net ops
for name in ["softmax", "log_softmax"]:
    case(f"{name}-axis0", name, [R(3, 4)], {"axis": 0})
    case(f"{name}-axis-1", name, [R(3, 4)], {"axis": -1})
    case(f"{name}-3d-axis1", name, [R(2, 3, 4)], {"axis": 1})
    case(f"{name}-default", name, [R(2, 5)])
    case(f"{name}-1d", name, [R(5)], {"axis": 0})

case("cross_entropy", "cross_entropy",
     [R(4, 5), np.array([0, 3, 4, 1], dtype=np.int64)], wrt=[0])
case("cross_entropy-repeat-class", "cross_entropy",
     [R(6, 3, seed=2) * 3, np.array([2, 2, 0, 1, 2, 0], dtype=np.int64)], wrt=[0])
case("cross_entropy-int32", "cross_entropy",
     [R(3, 4, seed=1), np.array([1, 0, 3], dtype=np.int32)], wrt=[0])

case("layer_norm-axis-1", "layer_norm", [R(3, 4)], {"axis": -1})
case("layer_norm-default", "layer_norm", [R(2, 5)])
case("layer_norm-axes12", "layer_norm", [R(2, 3, 4)], {"axis": [1, 2]})
case("layer_norm-axes-1-2", "layer_norm", [R(2, 3, 4)], {"axis": [-1, -2]})
case("layer_norm-axis0", "layer_norm", [R(3, 4)], {"axis": 0})
case("layer_norm-eps", "layer_norm", [R(3, 4) * 0.1], {"axis": -1, "eps": 0.01})


# engine exercisers that are identities in forward and pass the gradient through
for depth in (0, 1, 3):
    case(f"reenter-depth{depth}", "reenter", [R(2, 3)], {"depth": depth})
case("delay-0ms", "delay", [R(2, 3)], {"ms": 0})
case("delay-jitter", "delay", [R(3)], {"ms": 1, "jitter_ms": 1, "seed": 4})
case("to-cpu", "to", [R(2, 3)], {"device": "cpu"})
# the gradient of slice, itself differentiable (internal: not loadable from files)
case("slice_backward", "slice_backward", [R(2, 2)], {"shape": [4, 3], "index": "1:3, ::2"})
# the recorded masks of relu and abs (internal; their gradient w.r.t. the mask is zero)
case("threshold_backward", "threshold_backward", [R(3, 4), R(3, 4, seed=1, away=0.05)])
case("sgn", "sgn", [R(3, 4, away=0.05)])
# the first .grad of a leaf under create_graph (internal; the empty destination has no
# gradient: Note [Differentiable .grad, PyTorch's copy])
case("grad_copy", "grad_copy", [R(3, 4), R(3, 4, seed=1)], wrt=[1])

# Ops whose backward is not a derivative (fails on purpose, returns NaN): forward only.
FORWARD_CASES = [
    pytest.param("fail", [R(2, 3)], {"message": "boom"}, id="fail"),
    pytest.param("nan", [R(2, 3)], None, id="nan"),
]


# -- the checks -----------------------------------------------------------------------
@pytest.mark.parametrize("op_name, arrays, args, wrt", CASES)
def test_vjp_matches_finite_differences(op_name, arrays, args, wrt):
    check_vjp(op_name, arrays, args, wrt)


@pytest.mark.parametrize("op_name, arrays, args, wrt", CASES)
def test_raw_vjp_shape_and_dtype(op_name, arrays, args, wrt):
    check_raw_vjp_shapes(op_name, arrays, args, wrt)


def test_every_public_op_has_a_row():
    rows = {p.values[0] for p in CASES} | {p.values[0] for p in FORWARD_CASES}
    with_forward = {name for name, op in OPS.items()   # ATen ops: tests/test_aten_ops.py
                    if op.fn is not None and not isinstance(op, AtenOp)}
    assert with_forward == rows, ("ops without a row", sorted(with_forward - rows),
                                  "rows for unknown ops", sorted(rows - with_forward))
    declared = {name for name, op in OPS.items() if op.fn is None}
    assert declared == set(DECLARED), sorted(declared ^ set(DECLARED))
    here = Path(__file__).parent
    for name, module in DECLARED.items():
        assert f"op: {name}" in (here / module).read_text(), (name, module)


def _infer_matches_forward(op_name, arrays, args):
    op = OPS[op_name]
    args = _checked_args(op, args)
    arrays = [np.asarray(a) for a in arrays]
    with np.errstate(all="ignore"):
        outs = _as_list(op.fn(*[a.copy() for a in arrays], **args), op)
    inferred = op.infer_outputs([a.shape for a in arrays], [a.dtype for a in arrays], args)
    assert inferred == [(np.shape(o), np.asarray(o).dtype) for o in outs], (op_name, args)
    n = op.num_outputs(args)
    assert n is None or n == len(outs)


@pytest.mark.parametrize("op_name, arrays, args, wrt", CASES)
def test_infer_matches_forward(op_name, arrays, args, wrt):
    _infer_matches_forward(op_name, arrays, args)
    # float32, and float32 mixed with float64 (dtype promotion)
    f32 = [np.asarray(a).astype(np.float32) if np.asarray(a).dtype.kind == "f" else a
           for a in arrays]
    _infer_matches_forward(op_name, f32, args)
    first = next((i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"), None)
    mixed = [f32[i] if i == first else a for i, a in enumerate(arrays)]
    _infer_matches_forward(op_name, mixed, args)


@pytest.mark.parametrize("op_name, arrays, args", FORWARD_CASES)
def test_forward_only_ops(op_name, arrays, args):
    _infer_matches_forward(op_name, arrays, args)
    op = OPS[op_name]
    x = Tensor(np.array(arrays[0]), requires_grad=True)
    out = op(x, **_checked_args(op, args))
    np.testing.assert_array_equal(out.data, arrays[0])      # identities in forward
    assert out.grad_fn.name == op.node_name
    if op_name == "fail":
        with pytest.raises(Exception, match="boom"):
            grad(out, x, grad_outputs=[np.ones(out.shape)])
    else:
        (g,) = grad(out, x, grad_outputs=[np.ones(out.shape)])
        assert np.isnan(g).all()


@pytest.mark.parametrize("op_name, arrays, args, dtype", [
    ("sum", [np.arange(6, dtype=np.int32).reshape(2, 3)], {"axis": 0}, np.int64),
    ("mean", [np.arange(6).reshape(2, 3)], None, np.float64),
    ("exp", [np.arange(3, dtype=np.int32)], None, np.float64),
    ("concat", [np.arange(3), np.ones(2, np.float32)], None, np.float64),
    ("stack", [np.arange(2, dtype=np.int8), np.ones(2, np.float16)], None, np.float16),
    ("add", [np.ones(2, bool), np.ones((3, 1), bool)], None, np.bool_),
    ("max", [np.arange(4, dtype=np.int32)], None, np.int32),
    ("cast", [np.ones(2)], {"dtype": "int32"}, np.int32),
    ("matmul", [np.ones((2, 3), np.int64), np.ones(3, np.float32)], None, np.float64),
], ids=lambda p: p if isinstance(p, str) else None)
def test_infer_dtypes_follow_numpy(op_name, arrays, args, dtype):
    _infer_matches_forward(op_name, arrays, args)
    (shape, got), = OPS[op_name].infer_outputs([np.shape(a) for a in arrays],
                                                [np.asarray(a).dtype for a in arrays],
                                                _checked_args(OPS[op_name], args))
    assert got == dtype


# -- cast (float -> float) ----------------------------------------------------------
def test_cast_float64_to_float32():
    x = R(3, 4)
    t = Tensor(x.copy(), requires_grad=True)
    out = OPS["cast"](t, dtype=OPS["cast"].args["dtype"].check("float32"))
    assert out.dtype == np.float32
    assert out.grad_fn.name == "ToCopyBackward0"
    v = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    (g,) = grad(out, t, grad_outputs=[v])
    assert g.dtype == np.float64 and g.shape == (3, 4)
    np.testing.assert_array_equal(g, v.astype(np.float64))
    # finite differences with a step float32 can resolve (the map is linear)
    h = 1e-2
    numeric = np.empty_like(x)
    for j in range(x.size):
        xp, xm = x.copy().reshape(-1), x.copy().reshape(-1)
        xp[j] += h
        xm[j] -= h
        fp = np.sum(v.astype(np.float64) * xp.reshape(x.shape).astype(np.float32))
        fm = np.sum(v.astype(np.float64) * xm.reshape(x.shape).astype(np.float32))
        numeric.reshape(-1)[j] = (fp - fm) / (2 * h)
    np.testing.assert_allclose(g, numeric, rtol=1e-3, atol=1e-4)


def test_cast_float32_to_float64_to_float32_chain():
    x = R(2, 3).astype(np.float32)
    t = Tensor(x.copy(), requires_grad=True)
    y = OPS["cast"](t, dtype="float64")
    z = OPS["mul"](y, Tensor(np.full((2, 3), 3.0)))
    w = OPS["cast"](z, dtype="float32")
    v = np.arange(6, dtype=np.float32).reshape(2, 3)
    (g,) = grad(w, t, grad_outputs=[v])
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 3 * v)


def test_cast_to_int_does_not_require_grad():
    t = Tensor(R(3), requires_grad=True)
    out = OPS["cast"](t, dtype="int64")
    assert out.dtype == np.int64
    assert not out.requires_grad and out.grad_fn is None


# -- multi-output: split with only some outputs used ------------------------------------
def test_split_unused_outputs_get_zero_gradient():
    x = R(6, 2)
    t = Tensor(x.copy(), requires_grad=True)
    parts = OPS["split"](t, sections=3, axis=0)
    assert len(parts) == 3
    v = np.random.default_rng(1).standard_normal(parts[1].shape)
    (g,) = grad(parts[1], t, grad_outputs=[v])
    expected = np.zeros_like(x)
    expected[2:4] = v
    np.testing.assert_array_equal(g, expected)


def test_split_indices_unused_outputs():
    t = Tensor(R(2, 7), requires_grad=True)
    a, b, c = OPS["split"](t, indices=OPS["split"].args["indices"].check([2, 5]), axis=1)
    va = np.ones(a.shape)
    vc = np.full(c.shape, 2.0)
    g_a, = grad([a, c], t, grad_outputs=[va, vc])
    expected = np.zeros((2, 7))
    expected[:, :2] = 1.0
    expected[:, 5:] = 2.0
    np.testing.assert_array_equal(g_a, expected)


# -- PyTorch conventions at non-differentiable points ------------------------------------
def _grads(op_name, arrays, args=None, v=None, wrt=None):
    op = OPS[op_name]
    args = _checked_args(op, args)
    wrt = list(range(len(arrays))) if wrt is None else wrt
    ts = [Tensor(np.asarray(a, dtype=np.float64), requires_grad=i in wrt)
          for i, a in enumerate(arrays)]
    out = op(*ts, **args)
    if v is None:
        v = np.ones(out.shape)
    return grad(out, [ts[i] for i in wrt], grad_outputs=[v])


def test_maximum_tie_splits_gradient():
    gx, gy = _grads("maximum", [[1.0, 2.0, 3.0], [1.0, 0.0, 5.0]])
    np.testing.assert_array_equal(gx, [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(gy, [0.5, 0.0, 1.0])


def test_minimum_tie_splits_gradient():
    gx, gy = _grads("minimum", [[1.0, 2.0, 3.0], [1.0, 0.0, 5.0]])
    np.testing.assert_array_equal(gx, [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(gy, [0.5, 1.0, 0.0])


def test_maximum_tie_with_broadcast_scalar():
    # y = () broadcast against x: y collects 1 per win and 0.5 per tie
    gx, gy = _grads("maximum", [[0.0, 1.0, 2.0, 1.0], 1.0])
    np.testing.assert_array_equal(gx, [0.0, 0.5, 1.0, 0.5])
    np.testing.assert_array_equal(gy, 2.0)


def test_relu_gradient_at_zero_is_zero():
    (g,) = _grads("relu", [[0.0, -1.0, 2.0, -0.0]])
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0, 0.0])


def test_abs_gradient_at_zero_is_zero():
    (g,) = _grads("abs", [[0.0, -2.0, 3.0, -0.0]], v=np.array([5.0, 5.0, 5.0, 5.0]))
    np.testing.assert_array_equal(g, [0.0, -5.0, 5.0, 0.0])


def test_clamp_gradient_passes_at_bounds():
    # PyTorch: gradient flows where min <= x <= max (bounds included)
    (g,) = _grads("clamp", [[-1.0, -0.5, 0.0, 0.5, 1.0]], {"min": -0.5, "max": 0.5})
    np.testing.assert_array_equal(g, [0.0, 1.0, 1.0, 1.0, 0.0])


@pytest.mark.parametrize("name", ["max", "min"])
def test_full_reduction_shares_gradient_among_ties(name):
    x = np.array([[1.0, 3.0, 0.0], [3.0, 2.0, 3.0]])
    if name == "min":
        x = -x
    (g,) = _grads(name, [x], v=np.array(6.0))
    np.testing.assert_allclose(g, [[0, 2, 0], [2, 0, 2]])


@pytest.mark.parametrize("name", ["max", "min"])
def test_full_reduction_keepdims_shares_gradient_among_ties(name):
    x = np.array([[1.0, 3.0], [3.0, 2.0]])
    if name == "min":
        x = -x
    (g,) = _grads(name, [x], {"keepdims": True}, v=np.array([[1.0]]))
    np.testing.assert_allclose(g, [[0, 0.5], [0.5, 0]])


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("axis, keepdims", [(1, False), (-1, True), (1, True)])
def test_int_axis_reduction_gives_gradient_to_first_extreme(name, axis, keepdims):
    x = np.array([[3.0, 1.0, 3.0, 3.0], [2.0, 2.0, 0.0, 2.0], [0.0, 5.0, 1.0, 5.0]])
    if name == "min":
        x = -x
    v = np.array([1.0, 2.0, 3.0])
    if keepdims:
        v = v[:, None]
    (g,) = _grads(name, [x], {"axis": axis, "keepdims": keepdims}, v=v)
    np.testing.assert_array_equal(g, [[1, 0, 0, 0], [2, 0, 0, 0], [0, 3, 0, 0]])


@pytest.mark.parametrize("name", ["max", "min"])
def test_int_axis0_reduction_gives_gradient_to_first_extreme(name):
    x = np.array([[1.0, 4.0], [1.0, 2.0], [0.0, 4.0]])
    if name == "min":
        x = -x
    (g,) = _grads(name, [x], {"axis": 0}, v=np.array([1.0, 1.0]))
    np.testing.assert_array_equal(g, [[1, 1], [0, 0], [0, 0]])


@pytest.mark.parametrize("name", ["max", "min"])
def test_list_axis_reduction_shares_gradient_among_ties(name):
    # axis given as a list behaves like amax/amin: ties in a slice share evenly
    x = np.array([[3.0, 1.0, 3.0], [2.0, 2.0, 0.0]])
    if name == "min":
        x = -x
    (g,) = _grads(name, [x], {"axis": [1]}, v=np.array([1.0, 4.0]))
    np.testing.assert_allclose(g, [[0.5, 0, 0.5], [2, 2, 0]])


# -- recorded node names ------------------------------------------------------------------
def _node_name(op_name, arrays, args=None):
    op = OPS[op_name]
    args = _checked_args(op, args)
    ts = [Tensor(np.asarray(a), requires_grad=np.asarray(a).dtype.kind == "f") for a in arrays]
    out = op(*ts, **args)
    out = out[0] if op.multi_output else out
    return out.grad_fn.name


@pytest.mark.parametrize("op_name, arrays, args, expected", [
    ("add", [R(2, 3), R(3)], None, "AddBackward0"),
    ("matmul", [R(2, 3), R(3, 4)], None, "MmBackward0"),
    ("matmul", [R(3), R(3)], None, "DotBackward0"),
    ("matmul", [R(2, 3), R(3)], None, "MvBackward0"),
    ("matmul", [R(2, 2, 3), R(2, 3, 4)], None, "BmmBackward0"),
    ("matmul", [R(2, 3, 4), R(4, 5)], None, "MatmulBackward0"),
    ("sum", [R(2, 3)], None, "SumBackward0"),
    ("sum", [R(2, 3)], {"axis": 1}, "SumBackward1"),
    ("mean", [R(2, 3)], None, "MeanBackward0"),
    ("mean", [R(2, 3)], {"axis": 1}, "MeanBackward1"),
    ("max", [distinct(2, 3)], None, "MaxBackward1"),
    ("max", [distinct(2, 3)], {"axis": 1}, "MaxBackward0"),
    ("max", [distinct(2, 3)], {"axis": [0, 1]}, "AmaxBackward0"),
    ("min", [distinct(2, 3)], {"axis": [1]}, "AminBackward0"),
    ("relu", [R(2, 3)], None, "ReluBackward0"),
    ("square", [R(2, 3)], None, "PowBackward0"),
    ("pow", [R(2, 3, low=0.5, high=1.5), R(2, 3)], None, "PowBackward1"),
    ("reshape", [R(2, 3)], {"shape": [-1]}, "ViewBackward0"),
    ("transpose", [R(2, 3)], None, "PermuteBackward0"),
    ("squeeze", [R(1, 3)], None, "SqueezeBackward0"),
    ("squeeze", [R(1, 3)], {"axis": 0}, "SqueezeBackward1"),
    ("concat", [R(2), R(3)], {"axis": 0}, "CatBackward0"),
    ("split", [R(4)], {"sections": 2}, "SplitBackward0"),
    ("split", [R(4)], {"indices": [1]}, "SplitWithSizesBackward0"),
    ("slice", [R(4)], {"index": "1:3"}, "SliceBackward0"),
    ("cross_entropy", [R(2, 3), np.array([0, 2])], None, "CrossEntropyBackward0"),
    ("layer_norm", [R(2, 3)], None, "NativeLayerNormBackward0"),
    ("cast", [R(2)], {"dtype": "float32"}, "ToCopyBackward0"),
], ids=lambda p: p if isinstance(p, str) else None)
def test_node_name(op_name, arrays, args, expected):
    assert _node_name(op_name, arrays, args) == expected


def test_slice_index_parses_like_numpy():
    x = R(5, 6)
    for text, index in [("1:4, ::2", np.s_[1:4, ::2]), ("::-1, -3:", np.s_[::-1, -3:]),
                        ("None, 4:0:-2, 3", np.s_[None, 4:0:-2, 3]), ("..., 1", np.s_[..., 1])]:
        parsed = OPS["slice"].args["index"].check(text)
        assert parsed == parse_index(text)
        np.testing.assert_array_equal(OPS["slice"](x, index=parsed), x[index])


# -- float32: VJPs keep the input dtype without the engine's cast ----------------------------
@pytest.mark.parametrize("op_name, arrays, args, wrt", CASES)
def test_raw_vjp_float32_dtype(op_name, arrays, args, wrt):
    arrays = [np.asarray(a).astype(np.float32) if np.asarray(a).dtype.kind == "f" else a
              for a in arrays]
    check_raw_vjp_shapes(op_name, arrays, args, wrt)


# -- edge cases once wrong, now as PyTorch (regression tests) --------------------------------
def test_pow_zero_to_zero_base_gradient_is_zero():
    with np.errstate(all="ignore"):
        gx, gy = _grads("pow", [[0.0, 0.0, 2.0], [0.0, 2.0, 0.0]])
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0])
    np.testing.assert_allclose(gy, [0.0, 0.0, np.log(2.0)])


def test_pow_zero_base_exponent_gradient_is_zero():
    # PyTorch pow_backward_exponent: 0 where base == 0 and exponent >= 0
    with np.errstate(all="ignore"):
        _, gy = _grads("pow", [[0.0, 0.0], [0.5, 3.0]])
    np.testing.assert_array_equal(gy, [0.0, 0.0])


def test_split_non_monotonic_indices_are_refused():
    """Overlapping pieces (indices not increasing) would have no well-defined
    backward as a concat; the op refuses them with a message naming the indices."""
    with pytest.raises(ValueError, match=r"indices \[4, 2\] must be increasing"):
        OPS["split"](Tensor(R(5, 2), requires_grad=True), indices=(4, 2), axis=0)


def test_expand_minus_one_keeps_size():
    check_vjp("expand", [R(3, 1)], {"shape": [2, -1, 4]})


def test_full_max_with_nan_sends_gradient_to_nan():
    with np.errstate(all="ignore"):
        (g,) = _grads("max", [[1.0, np.nan, 2.0, np.nan]], v=np.array(1.0))
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.0, 0.5])


def test_axis_max_with_nan_sends_gradient_to_first_nan():
    (g,) = _grads("max", [[[1.0, np.nan, 2.0, np.nan], [1.0, 4.0, 3.0, 0.0]]], {"axis": 1},
                  v=np.array([1.0, 1.0]))
    np.testing.assert_array_equal(g, [[0, 1, 0, 0], [0, 1, 0, 0]])


def test_maximum_with_nan_passes_gradient_to_both():
    gx, gy = _grads("maximum", [[np.nan, 1.0], [0.0, np.nan]])
    np.testing.assert_array_equal(gx, [1.0, 1.0])
    np.testing.assert_array_equal(gy, [1.0, 1.0])


def test_relu_nan_passes_gradient():
    (g,) = _grads("relu", [[np.nan, 1.0, -1.0]])
    np.testing.assert_array_equal(g, [1.0, 1.0, 0.0])


# -- empty inputs (found by scripts/fuzz_cli.py: NumPy's "zero-size array to reduction
# operation maximum which has no identity" refused them, exit 2) ---------------------------
def _empty_graph(op, shape, args=""):
    return (f"version: 1\ntensors:\n  x: {{shape: {shape}, init: normal, requires_grad: true}}\n"
            f"ops:\n  - {{op: {op}, inputs: [x], output: y{args}}}\n"
            "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n")


@pytest.mark.parametrize("op, shape, axis, expected", [
    ("softmax", [1, 0], -1, np.zeros((1, 0))),
    ("log_softmax", [0], 0, np.zeros((0,))),
    ("logsumexp", [2, 0], 1, np.array([-np.inf, -np.inf])),     # torch.logsumexp: -inf
    ("logsumexp", [2, 0], None, np.array(-np.inf)),
    ("logsumexp", [0, 3], 1, np.zeros((0,))),
])
def test_softmaxes_of_empty_tensors_are_pytorchs(op, shape, axis, expected):
    from gradcli.loader import loads

    graph = loads(_empty_graph(op, shape, f", args: {{axis: {'null' if axis is None else axis}}}"))
    result = graph.run()
    y = np.asarray(graph.values["y"].data)
    assert y.shape == expected.shape and np.array_equal(y, expected)
    assert result.grads["x"].shape == tuple(shape)
    torch = pytest.importorskip("torch")
    t = torch.empty(shape, dtype=torch.float64)
    ref = {"softmax": lambda: torch.softmax(t, axis), "log_softmax": lambda: torch.log_softmax(t, axis),
           "logsumexp": lambda: torch.logsumexp(t, axis if axis is not None else tuple(range(t.ndim)))}
    assert np.array_equal(ref[op]().numpy(), expected)


@pytest.mark.parametrize("op, shape, axis, message", [
    ("max", [0], None, r"max\(\): Expected reduction dim to be specified for input.numel\(\) == 0"),
    ("min", [0, 3], 0, r"min\(\): Expected reduction dim 0 to have non-zero size"),
    ("max", [2, 0], [0, 1], r"max\(\): Expected reduction dim 1 to have non-zero size"),
])
def test_max_min_over_no_element_give_pytorchs_error(op, shape, axis, message):
    from gradcli.errors import GraphError
    from gradcli.loader import loads

    args = f", args: {{axis: {'null' if axis is None else axis}}}"
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \({op}\): {message}"):
        loads(_empty_graph(op, shape, args)).run()
    # over a non-empty dim of an empty tensor: an empty result, as torch.amax
    assert loads(_empty_graph(op, "[0, 3]", ", args: {axis: 1}")).run().grads["x"].shape == (0, 3)


@pytest.mark.parametrize("axes, message", [
    ("[0, 1]", r"transpose: axes \[0, 1\] has 2 entries for an input of 3 dims"),
    ("[0, 1, 1]", r"transpose: axes \[0, 1, 1\] repeat a dim"),
    ("[0, 1, 3]", r"transpose: axis 3 is out of range for an input of 3 dims"),
])
def test_transpose_axes_are_checked_as_permute(axes, message):
    # Found by scripts/fuzz_cli.py: NumPy's "axes don't match array"
    from gradcli.errors import GraphError
    from gradcli.loader import loads

    text = ("version: 1\ntensors:\n  x: {shape: [2, 3, 4], init: normal, requires_grad: true}\n"
            f"ops:\n  - {{op: transpose, inputs: [x], output: y, args: {{axes: {axes}}}}}\n"
            "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \(transpose\): {message}"):
        loads(text).run()
    assert loads(text.replace(axes, "[2, -3, 1]")).run().grads["x"].shape == (2, 3, 4)


@pytest.mark.parametrize("op", ["expand", "aten.expand.default"])
def test_expand_to_an_incompatible_size_gives_pytorchs_error(op):
    # Found by scripts/fuzz_cli.py: NumPy's "operands could not be broadcast together
    # with remapped shapes [original->remapped]"
    from gradcli.errors import GraphError
    from gradcli.loader import loads

    key = "shape" if op == "expand" else "size"
    text = ("version: 1\ntensors:\n  x: {shape: [3], init: normal, requires_grad: true}\n"
            f"ops:\n  - {{op: {op}, inputs: [x], output: y, args: {{{key}: [3, 2, 1]}}}}\n"
            "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n")
    message = (r"expand: the expanded size of the tensor \(1\) must match the existing size \(3\) "
               r"at non-singleton dimension 2.  Target sizes: \[3, 2, 1\].  Tensor sizes: \[3\]")
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \({op}\): {message}"):
        loads(text).run()
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match=message.replace("expand: the", "The")):
        torch.ones(3).expand(3, 2, 1)
    assert loads(text.replace("[3, 2, 1]", "[2, 3]")).run().grads["x"].tolist() == [2.0] * 3


@pytest.mark.parametrize("op", ["expand", "aten.expand.default"])
def test_expand_past_what_an_array_can_address_is_refused_with_its_shape(op):
    # Found by scripts/fuzz_cli.py: NumPy's "array is too big; `arr.size *
    # arr.dtype.itemsize` is larger than the maximum possible size."
    from gradcli.errors import GraphError
    from gradcli.loader import loads

    key = "shape" if op == "expand" else "size"
    text = ("version: 1\ntensors:\n  x: {shape: [1], init: normal, requires_grad: true}\n"
            f"ops:\n  - {{op: {op}, inputs: [x], output: y, args: {{{key}: [2147483648, 2147483648]}}}}\n"
            "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \({op}\): expand: the result of "
                                         r"shape \[2147483648, 2147483648\] would span "
                                         r"4611686018427387904 elements, more than an array can "
                                         r"address"):
        loads(text)


@pytest.mark.parametrize("dtype", ["bool", "int64", "int32", "float16", "float32", "float64"])
@pytest.mark.parametrize("bounds", [{"min": 0}, {"min": 0.5}, {"min": -1, "max": 1.5}, {"max": 3}])
def test_clamp_promotes_as_torch_clamp(dtype, bounds):
    # Found by scripts/fuzz_cli.py (clamp of a bool tensor with a bound past int64:
    # NumPy's "Python int too large"); gradcli kept the input's dtype where
    # torch.clamp promotes with its bounds (Note [clamp promotes])
    torch = pytest.importorskip("torch")
    x = np.array([0, 1, 2, 5]).astype(dtype)
    ours = OPS["clamp"].fn(x, **bounds)
    ref = torch.clamp(torch.from_numpy(x.copy()), **bounds)
    assert str(ours.dtype) == str(ref.dtype).replace("torch.", "")
    np.testing.assert_array_equal(ours, ref.numpy())


def test_clamp_bound_that_overflows_the_result_dtype_is_refused():
    from gradcli.errors import GraphError
    from gradcli.loader import loads

    text = ("version: 1\ntensors:\n  x: {shape: [3], init: ones, dtype: bool}\n"
            "  w: {shape: [3], init: ones, requires_grad: true}\nops:\n"
            "  - {op: clamp, inputs: [x], output: y, args: {min: 0, max: 9223372036854775808}}\n"
            "  - {op: cast, inputs: [y], output: yf, args: {dtype: float64}}\n"
            "  - {op: mul, inputs: [yf, w], output: z}\n  - {op: sum, inputs: [z], output: loss}\n"
            "backward: {roots: [loss]}\n")
    with pytest.raises(GraphError, match=r"<graph>:6: ops\[0\] \(clamp\): clamp: bound "
                                         r"9223372036854775808 cannot be converted to type int64 "
                                         r"without overflow"):
        loads(text).run()
    g = loads(text.replace("9223372036854775808", "3"))
    assert g.run().grads["w"].tolist() == [1.0] * 3 and g.values["y"].dtype == np.int64
