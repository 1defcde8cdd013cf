"""Core ATen ops, the shape, indexing and nn half: one table row per case, run through
the checks of ``tests/test_aten_ops.py`` (forward, dtypes, gradients and node names
against torch, gradients against finite differences, the load-time shape rule) and
``tests/test_aten_gradgrad.py`` (second derivatives), whose machinery this file reuses.

Rows cover float64 and float32 (every row runs in both), empty inputs, broadcasting
where the op broadcasts and non-contiguous inputs (``nc``: a transposed or strided view).
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
# create_graph gradients whose root node differs from PyTorch's (same values, checked by
# the second-derivative tests): PyTorch records one composite formula's last op there
NODE_NAME_DIFFERENCES = {}
# ops without a derivative in PyTorch (NotImplemented nodes): checked by their own tests
NOT_DIFFERENTIABLE = set()
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


# -- group norm ---------------------------------------------------------------------------
GN = "aten.native_group_norm.default"
case(GN, [R(2, 4, 3, 3), R(4, seed=1), R(4, seed=2)], {"N": 2, "C": 4, "HxW": 9, "group": 2, "eps": 1e-5})
case(GN, [R(3, 6, 5), None, None], {"N": 3, "C": 6, "HxW": 5, "group": 3, "eps": 1e-3})
case(GN, [R(2, 4, 5), nc(R(4, seed=1)), None], {"N": 2, "C": 4, "HxW": 5, "group": 4, "eps": 1e-5})
case(GN, [R(2, 6), R(6, seed=1), R(6, seed=2)], {"N": 2, "C": 6, "HxW": 1, "group": 1, "eps": 1e-5})
case(GN, [R(0, 4, 3), R(4, seed=1), R(4, seed=2)], {"N": 0, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5}, fd=False,
     id=GN + "-empty")
GRADGRAD[GN] = ([R(2, 4, 3), R(4, seed=1), R(4, seed=2)], {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5},
                None)
NODE_NAME_DIFFERENCES[GN] = "weight and bias gradients: SumBackward1 (PyTorch: ViewBackward0)"
refused(GN, [R(2, 4, 3), None, None], {"N": 2, "C": 4, "HxW": 3, "group": 3, "eps": 1e-5}, "divisible by num_groups")
refused(GN, [R(2, 4, 3), R(3), None], {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5}, "weight to be a vector")
refused(GN, [R(2, 4, 3), None, None], {"N": 2, "C": 4, "HxW": 4, "group": 2, "eps": 1e-5}, "elements")
refused(GN, [np.ones((2, 4, 3), np.int64), None, None], {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5},
        "not implemented for int64")
GNB = "aten.native_group_norm_backward.default"
NOT_DIFFERENTIABLE.add(GNB)
_gn_x = R(2, 4, 3)
_gn_mean = _gn_x.reshape(2, 2, 6).mean(-1)
_gn_rstd = 1 / np.sqrt(_gn_x.reshape(2, 2, 6).var(-1) + 1e-5)
case(GNB, [R(2, 4, 3, seed=3), _gn_x, _gn_mean, _gn_rstd, R(4, seed=1)],
     {"N": 2, "C": 4, "HxW": 3, "group": 2, "output_mask": [True, True, True]}, wrt=[])
refused(GNB, [R(2, 4, 3, seed=3), _gn_x, _gn_mean, _gn_rstd, None],
        {"N": 2, "C": 4, "HxW": 3, "group": 2, "output_mask": [True, False, True]}, "gradcli computes every output",
        id="native_group_norm_backward-partial-mask")
TORCH_CHANGED["native_group_norm_backward-partial-mask"] = "group_norm_backward_none_weight_accepted"


def test_group_norm_statistics_carry_gradients_like_torch():
    # mean and rstd are differentiable outputs (Note [group norm statistics carry gradients])
    x = R(2, 4, 3)
    args = {"N": 2, "C": 4, "HxW": 3, "group": 2, "eps": 1e-5}
    xt = Tensor(x.copy(), requires_grad=True)
    _, mean, rstd = OPS[GN](xt, None, None, **args)
    assert mean.grad_fn is rstd.grad_fn is not None
    v = R(2, 2, seed=5)
    ours = grad([mean, rstd], [xt], grad_outputs=[v, 2 * v])[0]
    if torch is not None:
        tx = torch.tensor(x, requires_grad=True)
        _, tm, tr = torch.ops.aten.native_group_norm(tx, None, None, **args)
        theirs = torch.autograd.grad([tm, tr], [tx], [torch.tensor(v), torch.tensor(2 * v)])[0]
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)
    assert np.abs(ours).sum() > 0


def test_group_norm_refuses_a_non_contiguous_input_like_torch():
    x = OPS["aten.transpose.int"](R(2, 5, 4), dim0=1, dim1=2)
    with pytest.raises(ValueError, match="contiguous"):
        OPS[GN](x, None, None, N=2, C=4, HxW=5, group=2, eps=1e-5)
    if torch is None:
        return
    tx = torch.tensor(R(2, 5, 4)).transpose(1, 2)
    if differs("group_norm_non_contiguous_accepted", torch.__version__):
        # torch 2.14 computes on a contiguous copy; gradcli keeps 2.13's refusal (above)
        out = torch.ops.aten.native_group_norm(tx, None, None, 2, 4, 5, 2, 1e-5)[0]
        ref = torch.ops.aten.native_group_norm(tx.contiguous(), None, None, 2, 4, 5, 2, 1e-5)[0]
        assert torch.equal(out, ref)
    else:
        with pytest.raises(RuntimeError, match="contiguous"):
            torch.ops.aten.native_group_norm(tx, None, None, 2, 4, 5, 2, 1e-5)


@pytest.mark.parametrize("op_name", sorted(NOT_DIFFERENTIABLE))
def test_ops_without_a_derivative_record_pytorchs_not_implemented_node(op_name):
    inputs, args = next((c.values[1], c.values[2]) for c in CASES if c.values[0] == op_name)
    wrt = T._wrt(inputs, None)
    flat, outs = T._ours(op_name, inputs, args, wrt)
    assert outs[0].grad_fn.name == "torch::autograd::NotImplemented"
    if torch is not None:
        _, touts = T._theirs(op_name, inputs, args, wrt)
        assert touts[0].grad_fn.name() == "torch::autograd::NotImplemented"
    with pytest.raises(RuntimeError, match=r"derivative for aten::\w+ is not implemented"):
        grad([outs[0]], [flat[wrt[0]]], grad_outputs=[np.ones(outs[0].shape)])


# -- indexing ------------------------------------------------------------------------------------
IDX = "aten.index.Tensor"
case(IDX, [R(4, 3), [I(0, 2, 2)]])
case(IDX, [R(4, 3), [I(-1, 0)]])
case(IDX, [R(4, 3, 5), [None, np.array([[0], [2]]), I(1, 4)]])
case(IDX, [R(3, 4, 5), [I(0, 2), None, I(1, 3)]])
case(IDX, [nc(R(4, 3)), [None, I(2, 2, 0)]])
case(IDX, [R(3, 4), [R(3, 4, seed=1) > 0]])
case(IDX, [R(3, 4), [None, np.array([True, False, True, True])]])
case(IDX, [R(4, 3), [np.zeros(0, np.int64)]], id=IDX + "-empty")
case(IDX, [R(4, 3), [I(1, 3).astype(np.int32)]])
GRADGRAD[IDX] = ([R(4, 3), [I(0, 2, 2)]], {}, [0])
NODE_NAME_DIFFERENCES[IDX] = "IndexPutBackward0 (PyTorch: IndexPutImplBackward0, of its internal _index_put_impl_)"
refused(IDX, [R(4, 3), [I(0, 4)]], {}, "index 4 is out of bounds for dimension 0 with size 4", static=False)
refused(IDX, [R(4, 3), [I(-5)]], {}, "index -5 is out of bounds for dimension 0 with size 4", static=False)
refused(IDX, [R(4, 3), [None, I(3)]], {}, "index 3 is out of bounds for dimension 1 with size 3", static=False)
refused(IDX, [R(4, 3), [np.zeros(2)]], {}, "must be long, int, byte or bool")
refused(IDX, [R(4, 3), [I(0), I(0), I(0)]], {}, "too many indices")
refused(IDX, [R(4, 3), [I(0, 1), I(0, 1, 2)]], {}, "shape mismatch")
refused(IDX, [R(4, 3), [np.ones(3, bool)]], {}, "does not match the shape of the indexed tensor", static=False)
IPUT = "aten.index_put.default"
case(IPUT, [R(5, 3), [I(0, 2)], R(2, 3, seed=1)])
case(IPUT, [R(5, 3), [I(1, 1, 4)], R(3, seed=1)], {"accumulate": True})
case(IPUT, [R(3, 4, 5), [None, I(0, 3)], R(3, 2, 5, seed=1)])
case(IPUT, [R(3, 4), [R(3, 4, seed=2) > 0], R(1, seed=1)])
case(IPUT, [R(3, 4), [R(3, 4, seed=2) > 0], R(1, seed=1)], {"accumulate": True})
case(IPUT, [nc(R(4, 3)), [None, I(2, 0)], R(1, seed=1)], {"accumulate": True})
case(IPUT, [R(4, 3), [np.zeros(0, np.int64)], R(0, 3, seed=1)], id=IPUT + "-empty")
GRADGRAD[IPUT] = ([R(5, 3), [I(1, 1, 4)], R(3, seed=1)], {"accumulate": True}, None)
refused(IPUT, [R(4, 3), [I(0, 7)], R(3, seed=1)], {}, "index 7 is out of bounds", static=False)
refused(IPUT, [R(4, 3), [I(0, 7)], R(3, seed=1)], {"accumulate": True}, "index 7 is out of bounds", static=False)
refused(IPUT, [R(4, 3), [I(0)], R(2, 3, seed=1)], {}, "cannot be broadcast")
refused(IPUT, [R(4, 3), [I(0)], R(3, seed=1).astype(np.float32)], {}, "dtypes match")
IPUT_ = "aten.index_put_.default"           # ``x[idx] = v``: run on a clone of self
case(IPUT_, [R(5, 3), [I(0, 2)], R(2, 3, seed=1)])
case(IPUT_, [R(3, 4), [R(3, 4, seed=2) > 0], R(1, seed=1)], {"accumulate": True})
GRADGRAD[IPUT_] = ([R(5, 3), [I(1, 1, 4)], R(3, seed=1)], {"accumulate": True}, None)
refused(IPUT_, [R(4, 3), [I(0)], R(2, 3, seed=1)], {}, "cannot be broadcast")
COPY_ = "aten.copy_.default"                # CopyBackwards (Note [copy_]): on a clone of self
case(COPY_, [R(3, 4), R(4, seed=1)])
case(COPY_, [R(2, 3), R(2, 3, seed=1)])
GRADGRAD[COPY_] = ([R(2, 3), R(3, seed=1)], {}, None)
refused(COPY_, [R(3, 4), R(3, seed=1)], {}, "does not broadcast")
ISEL = "aten.index_select.default"
case(ISEL, [R(4, 3), I(3, 0, 0)], {"dim": 0})
case(ISEL, [nc(R(2, 3, 4)), I(1)], {"dim": -1})
case(ISEL, [R(2, 3), np.array(2)], {"dim": 1})
case(ISEL, [R(2, 3), np.zeros(0, np.int64)], {"dim": 1}, id=ISEL + "-empty")
GRADGRAD[ISEL] = ([R(4, 3), I(3, 0, 0)], {"dim": 0}, [0])
NODE_NAME_DIFFERENCES[ISEL] = "IndexPutBackward0 (PyTorch: IndexAddBackward0; gradcli has no index_add yet)"
refused(ISEL, [R(4, 3), I(4)], {"dim": 0}, "index out of range in self", static=False)
refused(ISEL, [R(4, 3), I(-1)], {"dim": 0}, "index out of range in self", static=False)
refused(ISEL, [R(4, 3), np.zeros((2, 2), np.int64)], {"dim": 0}, "Index is supposed to be a vector")
refused(ISEL, [R(4, 3), np.zeros(2)], {"dim": 0}, "int32 or int64")
refused(ISEL, [R(4, 3), I(0)], {"dim": 2}, "Dimension out of range")
GATHER = "aten.gather.default"
case(GATHER, [R(3, 4), np.array([[0, 2], [1, 1], [3, 0]])], {"dim": 1})
case(GATHER, [R(2, 3), np.array([[0, 1], [1, 1], [0, 0], [1, 0]])], {"dim": 0})
case(GATHER, [nc(R(3, 4)), np.array([[2], [0]])], {"dim": -1})
case(GATHER, [R(3, 4), np.zeros((0, 4), np.int64)], {"dim": 0}, id=GATHER + "-empty")
GRADGRAD[GATHER] = ([R(3, 4), np.array([[0, 2], [1, 1], [3, 0]])], {"dim": 1}, [0])
refused(GATHER, [R(3, 4), np.array([[4]])], {"dim": 1}, "index 4 is out of bounds for dimension 1 with size 4",
        static=False)
refused(GATHER, [R(3, 4), np.array([[-1]])], {"dim": 0}, "index -1 is out of bounds", static=False)
refused(GATHER, [R(3, 4), I(0)], {"dim": 0}, "same number of dimensions")
refused(GATHER, [R(3, 4), np.zeros((1, 5), np.int64)], {"dim": 0}, "no larger than self")
_scat_index = np.array([[0, 1, 2], [3, 0, 1]])
SCATTER = "aten.scatter.src"
case(SCATTER, [R(4, 3), _scat_index, R(2, 3, seed=1)], {"dim": 0})
case(SCATTER, [R(3, 4), np.array([[1, 2], [3, 0]]), nc(R(2, 2, seed=1))], {"dim": 1})
case(SCATTER, [R(3, 4), np.zeros((0, 4), np.int64), R(0, 4, seed=1)], {"dim": 0}, id=SCATTER + "-empty")
GRADGRAD[SCATTER] = ([R(4, 3), _scat_index, R(2, 3, seed=1)], {"dim": 0}, None)
refused(SCATTER, [R(4, 3), np.array([[4]]), R(1, 1, seed=1)], {"dim": 0}, "index 4 is out of bounds", static=False)
refused(SCATTER, [R(4, 3), np.zeros((2, 2), np.int64), R(1, 3, seed=1)], {"dim": 0}, "no larger size than src")
refused(SCATTER, [R(4, 3), np.zeros((1, 1), np.int64), R(1, 3, seed=1).astype(np.float32)], {"dim": 0},
        "self.dtype to be equal to src.dtype")
SCATTER_V = "aten.scatter.value"
case(SCATTER_V, [R(4, 3), _scat_index], {"dim": 0, "value": 1.5})
case(SCATTER_V, [R(3, 4), np.array([[1], [3]])], {"dim": -1, "value": -2})
GRADGRAD[SCATTER_V] = ([R(4, 3), _scat_index], {"dim": 0, "value": 1.5}, None)
refused(SCATTER_V, [R(4, 3), np.array([[0], [-1]])], {"dim": 0, "value": 1.0}, "index -1 is out of bounds",
        static=False)
SCATTER_ADD = "aten.scatter_add.default"
case(SCATTER_ADD, [R(4, 3), np.array([[0, 1, 1], [0, 0, 3], [2, 1, 1]]), R(3, 3, seed=1)], {"dim": 0})
case(SCATTER_ADD, [R(3, 4), np.array([[1, 1], [3, 0]]), nc(R(2, 2, seed=1))], {"dim": 1})
case(SCATTER_ADD, [R(3, 4), np.zeros((0, 4), np.int64), R(0, 4, seed=1)], {"dim": 0}, id=SCATTER_ADD + "-empty")
GRADGRAD[SCATTER_ADD] = ([R(4, 3), np.array([[0, 1, 1], [0, 0, 3]]), R(2, 3, seed=1)], {"dim": 0}, None)
refused(SCATTER_ADD, [R(4, 3), np.array([[9]]), R(1, 1, seed=1)], {"dim": 0}, "index 9 is out of bounds",
        static=False)


SREDUCE = "aten.scatter_reduce.two"
_sr_index = np.array([[0, 1, 2, 0], [0, 0, 1, 1], [2, 0, 1, 1]])
_sr_self = R(3, 4)
_sr_src = R(3, 4, seed=1)
for _r in ("sum", "prod", "mean", "amax", "amin"):
    for _inc in (True, False):
        case(SREDUCE, [_sr_self, _sr_index, _sr_src], {"dim": 0, "reduce": _r, "include_self": _inc})
case(SREDUCE, [nc(R(3, 4)), np.array([[1, 1], [3, 0]]), R(2, 2, seed=1)], {"dim": 1, "reduce": "mean"})
case(SREDUCE, [R(3, 4), np.zeros((0, 4), np.int64), R(0, 4, seed=1)], {"dim": 0, "reduce": "amax"},
     id=SREDUCE + "-empty")
# prod with one zero scattered to a position (its gradient is the product of the others)
_sr_zero = _sr_src.copy()
_sr_zero[1, 0] = 0.0
case(SREDUCE, [_sr_self, _sr_index, _sr_zero], {"dim": 0, "reduce": "prod"}, id=SREDUCE + "-prod-one-zero")
# amax with ties: the gradient is shared equally (fd=False: no derivative at a tie)
_sr_tie = np.array([[1.0, 2.0], [3.0, 1.0]])
case(SREDUCE, [_sr_tie, np.array([[0, 1], [0, 1]]), np.array([[3.0, 2.0], [0.5, 2.0]])],
     {"dim": 0, "reduce": "amax"}, fd=False, id=SREDUCE + "-amax-ties")
case(SREDUCE, [np.arange(4).reshape(2, 2), np.array([[0, 0]]), np.array([[3, 4]])], {"dim": 0, "reduce": "mean"},
     wrt=[], id=SREDUCE + "-int-mean")
GRADGRAD[SREDUCE] = ([_sr_self, _sr_index, _sr_src], {"dim": 0, "reduce": "prod", "include_self": False}, None)
NODE_NAME_DIFFERENCES[SREDUCE] = "MaskedFillBackward0, AddBackward0 (PyTorch: ScatterBackward1, WhereBackward0)"
refused(SREDUCE, [R(3, 4), _sr_index, R(3, 4, seed=1)], {"dim": 0, "reduce": "median"}, "reduce argument")
refused(SREDUCE, [R(3, 4), np.array([[3]]), R(1, 1, seed=1)], {"dim": 0, "reduce": "sum"}, "index 3 is out of bounds",
        static=False)


MSCAT = "aten.masked_scatter.default"
case(MSCAT, [R(3, 4), R(3, 4, seed=2) > 0, R(12, seed=1)])
case(MSCAT, [R(1, 4), R(3, 4, seed=2) > 0, R(4, 5, seed=1)])
case(MSCAT, [nc(R(3, 4)), R(4, seed=2) > 0, R(3, 3, seed=1)])
case(MSCAT, [R(0, 4), R(4, seed=2) > 0, R(2, seed=1)], id=MSCAT + "-empty")
GRADGRAD[MSCAT] = ([R(3, 4), R(3, 4, seed=2) > 0, R(13, seed=1)], {}, [0, 2])
NODE_NAME_DIFFERENCES[MSCAT] = "source: ViewBackward0 (PyTorch: one MaskedScatterBackwardBackward0 node)"
refused(MSCAT, [R(3, 4), np.ones((3, 4), bool), R(5, seed=1)], {}, "Number of elements of source", static=False)
refused(MSCAT, [R(3, 4), R(3, 4, seed=2), R(12, seed=1)], {}, "boolean masks")
refused(MSCAT, [R(3, 4), R(3, 4, seed=2) > 0, R(12, seed=1).astype(np.float32)], {}, "same dtypes")


# -- padding ---------------------------------------------------------------------------------------
CPAD = "aten.constant_pad_nd.default"
case(CPAD, [R(2, 3, 4)], {"pad": [1, 2]})
case(CPAD, [R(2, 3, 4)], {"pad": [1, -2, 0, 1, 2, 0], "value": 1.5})
case(CPAD, [nc(R(3, 4))], {"pad": [-1, -1, 2, 2], "value": -3})
case(CPAD, [R(0, 3)], {"pad": [1, 1, 1, 1]}, id=CPAD + "-empty")
case(CPAD, [R(2, 3)], {"pad": []})
GRADGRAD[CPAD] = ([R(2, 3, 4)], {"pad": [1, -2, 0, 1]}, None)
refused(CPAD, [R(2, 3)], {"pad": [1, 1, 1]}, "must be even")
refused(CPAD, [R(2, 3)], {"pad": [1, 1, 1, 1, 1, 1]}, "no more than twice")
refused(CPAD, [R(2, 3)], {"pad": [-2, -2]}, "negative output size")
_pads = [("aten.reflection_pad1d.default", R(2, 3, 5), [2, 1]), ("aten.reflection_pad1d.default", R(3, 4), [3, -1]),
         ("aten.reflection_pad2d.default", R(1, 2, 4, 5), [1, 2, 3, 0]),
         ("aten.reflection_pad2d.default", nc(R(2, 3, 4)), [2, 2, 1, 1]),
         ("aten.reflection_pad3d.default", R(1, 2, 3, 3, 4), [1, 1, 2, 0, 1, 2]),
         ("aten.replication_pad2d.default", R(1, 2, 3, 4), [2, 3, 1, 4]),
         ("aten.replication_pad2d.default", nc(R(2, 3, 4)), [-1, 2, 0, 1]),
         ("aten.replication_pad3d.default", R(2, 2, 3, 2), [1, 2, 0, 1, 3, 1]),
         ("aten.reflection_pad2d.default", R(0, 2, 3, 3), [1, 1, 1, 1]),
         ("aten.replication_pad3d.default", R(0, 1, 2, 2, 2), [1, 1, 1, 1, 1, 1])]
for _op, _x, _p in _pads:
    case(_op, [_x], {"padding": _p}, id=f"{_op}-{'x'.join(map(str, _x.shape))}")
    GRADGRAD.setdefault(_op, ([_x[:1].copy()], {"padding": _p}, None))
    NODE_NAME_DIFFERENCES[_op] = ("IndexPutBackward0 (PyTorch: one " + _op.split(".")[1].title().replace("_", "")
                                  + "BackwardBackward0 node; gradcli writes the backward as an index_put)")
refused("aten.reflection_pad1d.default", [R(1, 2, 5)], {"padding": [5, 0]}, "Padding size should be less than")
refused("aten.reflection_pad2d.default", [R(1, 3, 3)], {"padding": [0, 0, 0, 3]}, "Padding size should be less than")
refused("aten.reflection_pad1d.default", [R(5)], {"padding": [1, 1]}, "Expected 2D or 3D")
refused("aten.reflection_pad1d.default", [R(2, 0, 5)], {"padding": [1, 1]}, "Expected 2D or 3D")
refused("aten.replication_pad2d.default", [R(2, 3, 0)], {"padding": [1, 1, 1, 1]}, "Expected 3D or 4D")
refused("aten.replication_pad3d.default", [R(2, 2, 2)], {"padding": [1, 1, 1, 1, 1, 1]}, "Expected 4D or 5D")
refused("aten.replication_pad2d.default", [R(1, 2, 2)], {"padding": [-3, 0, 0, 0]}, "too small")
refused("aten.reflection_pad1d.default", [R(1, 2, 2)], {"padding": [-2, 0]}, "too small")
case("aten.replication_pad2d.default", [R(1, 2, 2)], {"padding": [-2, 0, 0, 0]}, id="replication_pad2d-to-empty")
TORCH_CHANGED["replication_pad2d-to-empty"] = "replication_pad_empty_output_refused"


def test_replication_pad_to_an_empty_output_keeps_torch_2_13s_empty_tensor():
    _, outs = T._ours("aten.replication_pad2d.default", [R(1, 2, 2)], {"padding": [-2, 0, 0, 0]}, [])
    assert outs[0].shape == (1, 2, 0)
    if _torch_changed("replication_pad2d-to-empty"):   # torch 2.14 refuses what 2.13 returned
        with pytest.raises(RuntimeError, match="must be >= 1"):
            T._theirs("aten.replication_pad2d.default", [R(1, 2, 2)], {"padding": [-2, 0, 0, 0]}, [])


# -- upsampling ------------------------------------------------------------------------------------
NEAREST, BILINEAR = "aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec"
case(NEAREST, [R(1, 2, 3, 4)], {"output_size": [6, 8], "scale_factors": None})
case(NEAREST, [R(2, 1, 3, 4)], {"output_size": [5, 7], "scale_factors": None})
case(NEAREST, [R(1, 2, 3, 4)], {"output_size": None, "scale_factors": [2.5, 1.7]})
case(NEAREST, [nc(R(2, 2, 5, 4))], {"output_size": [3, 2], "scale_factors": None})
case(NEAREST, [R(0, 2, 3, 3)], {"output_size": [2, 2], "scale_factors": None}, id=NEAREST + "-empty")
GRADGRAD[NEAREST] = ([R(1, 2, 3, 4)], {"output_size": [5, 7], "scale_factors": None}, None)
NODE_NAME_DIFFERENCES[NEAREST] = "IndexPutBackward0 (PyTorch: UpsampleNearest2DBackwardBackward0)"
for _ac in (False, True):
    case(BILINEAR, [R(1, 2, 3, 4)], {"output_size": [5, 7], "align_corners": _ac, "scale_factors": None})
    case(BILINEAR, [R(2, 1, 4, 3)], {"output_size": None, "align_corners": _ac, "scale_factors": [2.0, 1.5]})
    case(BILINEAR, [R(1, 1, 3, 3)], {"output_size": None, "align_corners": _ac, "scale_factors": [2.5, 0.7]})
    case(BILINEAR, [nc(R(1, 2, 5, 6))], {"output_size": [2, 3], "align_corners": _ac, "scale_factors": None})
    case(BILINEAR, [R(1, 2, 1, 3)], {"output_size": [1, 5], "align_corners": _ac, "scale_factors": None})
case(BILINEAR, [R(0, 2, 3, 3)], {"output_size": [4, 4], "align_corners": False, "scale_factors": None},
     id=BILINEAR + "-empty")
GRADGRAD[BILINEAR] = ([R(1, 2, 3, 4)], {"output_size": [5, 7], "align_corners": False, "scale_factors": None}, None)
NODE_NAME_DIFFERENCES[BILINEAR] = "the matrix products' nodes (PyTorch: UpsampleBilinear2DBackwardBackward0)"
for _op, _extra in ((NEAREST, {}), (BILINEAR, {"align_corners": False})):
    refused(_op, [R(1, 2, 3, 4)], dict(_extra, output_size=[5, 7], scale_factors=[2.0, 2.0]), "exactly one of")
    refused(_op, [R(1, 2, 3, 4)], dict(_extra, output_size=None, scale_factors=None), "exactly one of")
    refused(_op, [R(1, 2, 3, 4)], dict(_extra, output_size=[0, 2], scale_factors=None), "greater than 0")
    refused(_op, [R(1, 2, 0, 4)], dict(_extra, output_size=[2, 2], scale_factors=None), "greater than 0")
    refused(_op, [R(1, 2, 3, 4)], dict(_extra, output_size=None, scale_factors=[0.3, 2.0]), "greater than 0")
    refused(_op, [R(2, 3)], dict(_extra, output_size=[2, 2], scale_factors=None), "4-D")
refused(BILINEAR, [np.ones((1, 1, 2, 2), np.int64)], {"output_size": [3, 3], "align_corners": False,
                                                      "scale_factors": None}, "not implemented for int64")


# -- layout -------------------------------------------------------------------------------------
FLIP = "aten.flip.default"
case(FLIP, [R(2, 3, 4)], {"dims": [0, 2]})
case(FLIP, [nc(R(3, 4))], {"dims": [-1]})
case(FLIP, [R(2, 3)], {"dims": []})
case(FLIP, [R(0, 3)], {"dims": [0, 1]}, id=FLIP + "-empty")
GRADGRAD[FLIP] = ([R(2, 3, 4)], {"dims": [0, 2]}, None)
refused(FLIP, [R(2, 3)], {"dims": [0, -2]}, "dim 0 appears multiple times")
REPEAT = "aten.repeat.default"
case(REPEAT, [R(2, 3)], {"repeats": [2, 3]})
case(REPEAT, [nc(R(2, 3))], {"repeats": [2, 1, 2]})
case(REPEAT, [R(3)], {"repeats": [0, 2]}, id=REPEAT + "-empty")
GRADGRAD[REPEAT] = ([R(2, 3)], {"repeats": [2, 1, 2]}, None)
refused(REPEAT, [R(2, 3)], {"repeats": [2]}, "can not be smaller")
refused(REPEAT, [R(2, 3)], {"repeats": [-1, 2]}, "negative dimension")
DIAG = "aten.diagonal.default"
case(DIAG, [R(3, 4)])
case(DIAG, [R(3, 4, 5)], {"offset": 1, "dim1": 0, "dim2": 2})
case(DIAG, [nc(R(4, 3, 2))], {"offset": -2, "dim1": -1, "dim2": 0})
case(DIAG, [R(3, 4)], {"offset": 7}, id=DIAG + "-empty")
GRADGRAD[DIAG] = ([R(3, 4, 5)], {"offset": 1, "dim1": 2, "dim2": 0}, None)
NODE_NAME_DIFFERENCES[DIAG] = "PermuteBackward0 (PyTorch: DiagonalBackwardBackward0; gradcli writes it as index_put)"
refused(DIAG, [R(3, 4)], {"dim1": 1, "dim2": -1}, "cannot be identical")
ASTRIDED = "aten.as_strided.default"
case(ASTRIDED, [R(3, 4)], {"size": [2, 2], "stride": [1, 2], "storage_offset": 1})
case(ASTRIDED, [R(2, 3, 4)], {"size": [2, 3, 2, 2], "stride": [12, 4, 2, 1]})
case(ASTRIDED, [R(4, 4)], {"size": [3, 3], "stride": [4, 1]}, id=ASTRIDED + "-overlapping-windows")
case(ASTRIDED, [R(4, 4)], {"size": [0, 3], "stride": [4, 1]}, id=ASTRIDED + "-empty")
GRADGRAD[ASTRIDED] = ([R(3, 4)], {"size": [2, 3], "stride": [2, 1], "storage_offset": 1}, None)
NODE_NAME_DIFFERENCES[ASTRIDED] = "ViewBackward0 (PyTorch: AsStridedBackward0 of its as_strided_scatter formula)"
refused(ASTRIDED, [R(3, 4)], {"size": [13], "stride": [1]}, "out of bounds")
refused(ASTRIDED, [R(3, 4)], {"size": [2], "stride": [1], "storage_offset": 11}, "out of bounds")
refused(ASTRIDED, [R(3, 4)], {"size": [2], "stride": [-1]}, "Negative strides")
ASTRIDED_ = "aten.as_strided_.default"      # run on a clone of self, as the in-place rows
case(ASTRIDED_, [R(3, 4)], {"size": [2, 2], "stride": [1, 2], "storage_offset": 1})
case(ASTRIDED_, [R(4, 4)], {"size": [3, 3], "stride": [4, 1]}, id=ASTRIDED_ + "-overlapping-windows")
GRADGRAD[ASTRIDED_] = ([R(3, 4)], {"size": [2, 3], "stride": [2, 1], "storage_offset": 1}, None)
NODE_NAME_DIFFERENCES[ASTRIDED_] = NODE_NAME_DIFFERENCES[ASTRIDED]
refused(ASTRIDED_, [R(3, 4)], {"size": [13], "stride": [1]}, "out of bounds")
SWS = "aten.split_with_sizes.default"
case(SWS, [R(5, 3)], {"split_sizes": [1, 4]})
case(SWS, [nc(R(3, 6))], {"split_sizes": [2, 0, 4], "dim": -1})
GRADGRAD[SWS] = ([R(5, 3)], {"split_sizes": [2, 3]}, None)
refused(SWS, [R(3, 4)], {"split_sizes": [1, 1]}, "sum exactly to 3")
refused(SWS, [R(3, 4)], {"split_sizes": [4, -1]}, "non-negative")
SLSC = "aten.slice_scatter.default"
case(SLSC, [R(3, 4, 5), R(3, 2, 5, seed=1)], {"dim": 1, "start": 0, "end": 2})
case(SLSC, [R(6, 3), nc(R(2, 3, seed=1))], {"start": 1, "end": 9223372036854775807, "step": 3})
case(SLSC, [R(4, 3), R(0, 3, seed=1)], {"start": 2, "end": 2}, id=SLSC + "-empty")
GRADGRAD[SLSC] = ([R(3, 4, 5), R(3, 2, 5, seed=1)], {"dim": 1, "start": 1, "end": 3}, None)
refused(SLSC, [R(3, 4, 5), R(3, 2, 5, seed=1)], {"dim": 1, "start": 0, "end": 3}, "size equal to the slice")
SESC = "aten.select_scatter.default"
case(SESC, [R(3, 4, 5), R(3, 5, seed=1)], {"dim": 1, "index": -1})
case(SESC, [R(3, 4), nc(R(2, 2, seed=1)).reshape(4)], {"dim": 0, "index": 2})
GRADGRAD[SESC] = ([R(3, 4, 5), R(3, 5, seed=1)], {"dim": 1, "index": 2}, None)
refused(SESC, [R(3, 4), R(3, seed=1)], {"dim": 0, "index": 0}, "size equal to the slice")
refused(SESC, [R(3, 4), R(4, seed=1)], {"dim": 0, "index": 3}, "out of range")
NONZERO = "aten.nonzero.default"
case(NONZERO, [np.where(R(3, 4) > 0, R(3, 4, seed=1), 0.0)], wrt=[])
case(NONZERO, [R(3, 4) > 0], wrt=[])
case(NONZERO, [np.arange(6).reshape(2, 3) - 2], wrt=[])
case(NONZERO, [np.array(3.0)], wrt=[])
case(NONZERO, [np.zeros((2, 0))], wrt=[], id=NONZERO + "-empty")


def test_diagonal_and_as_strided_are_writable_views_sharing_memory():
    x = R(3, 4)
    d = OPS[DIAG](x, offset=1)
    a = OPS[ASTRIDED](x, size=[2, 2], stride=[4, 1], storage_offset=1)
    assert np.shares_memory(d, x) and np.shares_memory(a, x) and d.flags.writeable
    np.testing.assert_array_equal(d, [x[0, 1], x[1, 2], x[2, 3]])


# -- the core opset's batch norms, layer-norm and convolution backwards ----------------------------
LEGIT = "aten._native_batch_norm_legit.default"
_bn = {"momentum": 0.1, "eps": 1e-5}
case(LEGIT, [R(2, 3, 4, 4), R(3, seed=1), R(3, seed=2), R(3, seed=7) * 0.1, R(3, seed=8, low=0.5, high=2)],
     dict(_bn, training=True), wrt=[0, 1, 2])
case(LEGIT, [nc(R(4, 3)), None, R(3, seed=2), R(3, seed=7) * 0.1, R(3, seed=8, low=0.5, high=2)],
     dict(_bn, training=False), wrt=[0, 2])
GRADGRAD[LEGIT] = ([R(3, 2, 2), R(2, seed=1), R(2, seed=2), R(2, seed=3), R(2, seed=4, low=0.5, high=2)],
                   dict(_bn, training=True), [0, 1, 2])
NO_STATS = "aten._native_batch_norm_legit.no_stats"
case(NO_STATS, [R(2, 3, 5), R(3, seed=1), None], dict(_bn, training=True))
case(NO_STATS, [nc(R(4, 3)), None, None], dict(_bn, training=True, eps=1e-3))
GRADGRAD[NO_STATS] = ([R(3, 2, 2), R(2, seed=1), R(2, seed=2)], dict(_bn, training=True), None)
NO_TRAINING = "aten._native_batch_norm_legit_no_training.default"
case(NO_TRAINING, [R(2, 3, 4), R(3, seed=1), R(3, seed=2), R(3, seed=7) * 0.1, R(3, seed=8, low=0.5, high=2)],
     _bn, wrt=[0, 1, 2])
case(NO_TRAINING, [nc(R(4, 3)), None, None, R(3, seed=7) * 0.1, R(3, seed=8, low=0.5, high=2)], _bn, wrt=[0])
GRADGRAD[NO_TRAINING] = ([R(3, 2, 2), R(2, seed=1), R(2, seed=2), R(2, seed=3), R(2, seed=4, low=0.5, high=2)],
                         _bn, [0, 1, 2])
refused(LEGIT, [R(2, 3), R(3, seed=1).astype(np.float32), None, R(3), R(3, low=0.5, high=1)],
        dict(_bn, training=True), "mixed dtype")
refused(NO_TRAINING, [np.ones((2, 3), np.int64), None, None, R(3), R(3, low=0.5, high=1)], _bn,
        "not implemented for int64")


def test_batch_norm_without_statistics_or_training_is_refused():
    # Note [batch norm without statistics or training]: PyTorch 2.13 crashes the process on
    # this input (so torch is not called here); gradcli refuses it, at load and at run
    args = dict(_bn, training=False)
    with pytest.raises(ValueError, match="training must be true"):
        OPS[NO_STATS](R(2, 3), None, None, **args)
    with pytest.raises(ValueError, match="training must be true"):
        T._inferred(NO_STATS, [R(2, 3), None, None], args)


def test_legit_batch_norm_updates_the_running_statistics_in_place_like_torch():
    rm, rv = R(3, seed=7) * 0.1, R(3, seed=8, low=0.5, high=2)
    x = R(4, 3, 2)
    ours_m, ours_v = rm.copy(), rv.copy()
    OPS[LEGIT](x, None, None, ours_m, ours_v, training=True, **_bn)
    assert not np.array_equal(ours_m, rm)
    if torch is not None:
        tm, tv = torch.tensor(rm), torch.tensor(rv)
        torch.ops.aten._native_batch_norm_legit(torch.tensor(x), None, None, tm, tv, True, 0.1, 1e-5)
        np.testing.assert_allclose(ours_m, tm.numpy(), rtol=1e-12)
        np.testing.assert_allclose(ours_v, tv.numpy(), rtol=1e-12)


LNB = "aten.native_layer_norm_backward.default"
_ln_x = R(2, 3, 4)
_ln_mean = _ln_x.mean(-1, keepdims=True)
_ln_rstd = 1 / np.sqrt(_ln_x.var(-1, keepdims=True) + 1e-5)
# fd=False: derivatives.yaml's formula takes mean and rstd as functions of the input (not
# the partial derivative at fixed statistics); checked against torch
case(LNB, [R(2, 3, 4, seed=3), _ln_x, _ln_mean, _ln_rstd, R(4, seed=1), R(4, seed=2)],
     {"normalized_shape": [4], "output_mask": [True, True, True]}, wrt=[0, 1, 4], fd=False)
case(LNB, [R(2, 3, 4, seed=3), _ln_x, _ln_x.reshape(2, 12).mean(-1, keepdims=True)[:, :, None],
           1 / np.sqrt(_ln_x.reshape(2, 12).var(-1, keepdims=True) + 1e-3)[:, :, None], R(3, 4, seed=1),
           R(3, 4, seed=2)],
     {"normalized_shape": [3, 4], "output_mask": [True, True, True]}, wrt=[0, 1, 4], fd=False)
GRADGRAD[LNB] = ([R(2, 3, 4, seed=3), _ln_x, _ln_mean, _ln_rstd, R(4, seed=1), R(4, seed=2)],
                 {"normalized_shape": [4], "output_mask": [True, True, True]}, [0, 4])
refused(LNB, [R(2, 3, 4), _ln_x, _ln_mean, _ln_rstd, None, R(4, seed=2)],
        {"normalized_shape": [4], "output_mask": [True, True, True]}, "weight and bias must be given")
CONVB = "aten.convolution_backward.default"
_cb = {"bias_sizes": [4], "stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "transposed": False,
       "output_padding": [0, 0], "groups": 1, "output_mask": [True, True, True]}
case(CONVB, [R(2, 4, 3, 3, seed=3), R(2, 3, 5, 5), R(4, 3, 3, 3, seed=1)], _cb)
case(CONVB, [R(1, 4, 3, 2, seed=3), R(1, 4, 5, 4), R(4, 2, 2, 3, seed=1)],
     dict(_cb, stride=[2, 1], padding=[1, 0], dilation=[1, 1], groups=2, bias_sizes=None))
case(CONVB, [nc(R(2, 4, 6, seed=3)), R(2, 3, 8), R(4, 3, 3, seed=1)],
     dict(_cb, stride=[1], padding=[0], dilation=[1], output_padding=[0]))
GRADGRAD[CONVB] = ([R(1, 3, 2, 2, seed=3), R(1, 2, 4, 4), R(3, 2, 3, 3, seed=1)], dict(_cb, bias_sizes=[3]), None)
refused(CONVB, [R(2, 4, 2, 2, seed=3), R(2, 3, 5, 5), R(4, 3, 3, 3, seed=1)], _cb, "does not match")
NODE_NAME_DIFFERENCES[CONVB] = ("input and weight: ConvolutionBackwardBackward0 (PyTorch: ConvolutionBackward0 and "
                                 "TransposeBackward0 of its composite _convolution_double_backward)")
NODE_NAME_DIFFERENCES[LNB] = "AddBackward0, SumBackward1 (PyTorch: ViewBackward0 of its composite formula)"


@pytest.mark.parametrize("op_name, inputs, args, match", [
    # PyTorch does not check the statistics' size (its kernel reads one value per row)
    (LNB, [R(2, 3, 4), _ln_x, _ln_mean[:1], _ln_rstd, R(4, seed=1), R(4, seed=2)],
     {"normalized_shape": [4], "output_mask": [True, True, True]}, "must hold 6 values"),
    # PyTorch leaves a masked-off output undefined (None); gradcli's outputs are all arrays
    (CONVB, [R(2, 4, 3, 3, seed=3), R(2, 3, 5, 5), R(4, 3, 3, 3, seed=1)], dict(_cb, output_mask=[True, False, True]),
     "gradcli computes every output"),
    (LNB, [R(2, 3, 4), _ln_x, _ln_mean, _ln_rstd, R(4, seed=1), R(4, seed=2)],
     {"normalized_shape": [4], "output_mask": [True, True, False]}, "gradcli computes every output"),
])
def test_backward_ops_refuse_what_gradcli_cannot_honour_where_torch_differs(op_name, inputs, args, match):
    # deliberate differences from PyTorch, refused at load (the shape rule) and at run
    with pytest.raises(ValueError, match=match):
        OPS[op_name](*inputs, **args)
    with pytest.raises(ValueError, match=match):
        T._inferred(op_name, inputs, args)


# -- 3-D pooling ---------------------------------------------------------------------------------
MAXPOOL3D, AVGPOOL3D, ADAPTIVE3D = ("aten.max_pool3d_with_indices.default", "aten.avg_pool3d.default",
                                    "aten._adaptive_avg_pool3d.default")


def distinct(*shape, seed=0):
    """Values far apart (no ties in max pooling)."""
    return GG.distinct(*shape, seed=seed)


case(MAXPOOL3D, [distinct(1, 2, 4, 5, 6)], {"kernel_size": [2, 2, 2]})
case(MAXPOOL3D, [distinct(2, 5, 5, 4)], {"kernel_size": [3, 3, 2], "stride": [2, 2, 1], "padding": [1, 1, 1]})
case(MAXPOOL3D, [distinct(1, 1, 5, 6, 5)], {"kernel_size": [2, 3, 2], "stride": [2, 2, 2], "dilation": [2, 1, 1],
                                            "ceil_mode": True})
case(MAXPOOL3D, [nc(distinct(2, 4, 4, 3))], {"kernel_size": [2, 2, 2], "stride": [1, 2, 1]})
case(MAXPOOL3D, [R(0, 2, 3, 3, 3)], {"kernel_size": [2, 2, 2]}, id=MAXPOOL3D + "-empty")
GRADGRAD[MAXPOOL3D] = ([distinct(1, 2, 4, 4, 3)], {"kernel_size": [2, 2, 2], "stride": [1, 2, 1]}, None)
NODE_NAME_DIFFERENCES[MAXPOOL3D] = "ViewBackward0 (PyTorch: MaxPool3DWithIndicesBackwardBackward0)"
case(AVGPOOL3D, [R(1, 2, 4, 5, 6)], {"kernel_size": [2, 2, 2]})
case(AVGPOOL3D, [R(2, 5, 5, 4)], {"kernel_size": [3, 3, 2], "stride": [2, 2, 1], "padding": [1, 1, 1],
                                  "count_include_pad": False})
case(AVGPOOL3D, [R(1, 1, 5, 6, 5)], {"kernel_size": [2, 3, 2], "stride": [2, 2, 2], "padding": [1, 1, 0],
                                     "ceil_mode": True})
case(AVGPOOL3D, [nc(R(2, 4, 4, 3))], {"kernel_size": [2, 2, 2], "divisor_override": 3})
case(AVGPOOL3D, [R(0, 2, 3, 3, 3)], {"kernel_size": [2, 2, 2]}, id=AVGPOOL3D + "-empty")
GRADGRAD[AVGPOOL3D] = ([R(1, 2, 4, 4, 3)], {"kernel_size": [2, 2, 2], "stride": [1, 2, 1], "padding": [1, 0, 1]},
                       None)
NODE_NAME_DIFFERENCES[AVGPOOL3D] = "ViewBackward0 (PyTorch: AvgPool3DBackwardBackward0)"
case(ADAPTIVE3D, [R(1, 2, 4, 5, 6)], {"output_size": [2, 3, 3]})
case(ADAPTIVE3D, [nc(R(2, 3, 5, 4))], {"output_size": [1, 1, 1]})
case(ADAPTIVE3D, [R(1, 1, 3, 4, 5)], {"output_size": [4, 5, 2]})
GRADGRAD[ADAPTIVE3D] = ([R(1, 2, 3, 4, 5)], {"output_size": [2, 3, 2]}, None)
NODE_NAME_DIFFERENCES[ADAPTIVE3D] = "ViewBackward0 (PyTorch: AdaptiveAvgPool3DBackwardBackward0)"
for _op in (MAXPOOL3D, AVGPOOL3D):
    refused(_op, [R(2, 3, 4)], {"kernel_size": [2, 2, 2]}, "4-D or 5-D")
    refused(_op, [R(1, 2, 3, 3, 3)], {"kernel_size": [2, 2, 2], "padding": [2, 0, 0]}, "at most half")
    refused(_op, [R(1, 2, 1, 3, 3)], {"kernel_size": [2, 2, 2]}, "too small")
refused(AVGPOOL3D, [np.ones((1, 1, 4, 4, 4), np.int32)], {"kernel_size": [2, 2, 2]}, "not implemented for int32")
refused(ADAPTIVE3D, [R(1, 2, 3, 3)], {"output_size": [1, 1]}, "output_size must be 3")
refused(ADAPTIVE3D, [np.ones((1, 1, 2, 2, 2), np.int64)], {"output_size": [1, 1, 1]}, "not implemented for int64")


# -- fold ------------------------------------------------------------------------------------------
COL2IM = "aten.col2im.default"
case(COL2IM, [R(2, 12, 12)], {"output_size": [4, 5], "kernel_size": [2, 2], "dilation": [1, 1], "padding": [0, 0],
                              "stride": [1, 1]})
case(COL2IM, [R(12, 6)], {"output_size": [4, 5], "kernel_size": [2, 2], "dilation": [1, 1], "padding": [1, 0],
                          "stride": [2, 2]})
case(COL2IM, [nc(R(1, 6, 12))], {"output_size": [5, 6], "kernel_size": [3, 2], "dilation": [2, 1],
                                "padding": [1, 1], "stride": [1, 2]})
case(COL2IM, [R(0, 4, 9)], {"output_size": [4, 4], "kernel_size": [2, 2], "dilation": [1, 1], "padding": [0, 0],
                            "stride": [1, 1]}, id=COL2IM + "-empty")
GRADGRAD[COL2IM] = ([R(1, 8, 12)], {"output_size": [4, 5], "kernel_size": [2, 2], "dilation": [1, 1],
                                    "padding": [0, 0], "stride": [1, 1]}, None)
NODE_NAME_DIFFERENCES[COL2IM] = "ViewBackward0 (PyTorch: Im2ColBackward0)"
refused(COL2IM, [R(2, 12, 6)], {"output_size": [4, 5], "kernel_size": [2, 2], "dilation": [1, 1],
                                "padding": [0, 0], "stride": [1, 1]}, "sliding blocks")
refused(COL2IM, [R(2, 5, 12)], {"output_size": [4, 5], "kernel_size": [2, 2], "dilation": [1, 1],
                                "padding": [0, 0], "stride": [1, 1]}, "divisible by the product")


# -- distances -------------------------------------------------------------------------------------
CDIST = "aten._cdist_forward.default"
for _p in (1.0, 2.0, 3.0, 0.5, float("inf")):
    case(CDIST, [R(2, 3, 4), R(2, 5, 4, seed=1)], {"p": _p, "compute_mode": None})
case(CDIST, [R(2, 3, 4), R(2, 5, 4, seed=1)], {"p": 0.0, "compute_mode": None}, fd=False)
case(CDIST, [R(3, 4), R(2, 5, 4, seed=1)], {"p": 2.0, "compute_mode": None})
case(CDIST, [nc(R(3, 4)), R(1, 5, 4, seed=1)], {"p": 1.5, "compute_mode": None})
case(CDIST, [R(0, 4), R(5, 4, seed=1)], {"p": 2.0, "compute_mode": None}, id=CDIST + "-empty")
# p = inf with a tie at the maximum: both entries get the whole gradient, as PyTorch's
case(CDIST, [np.array([[0.0, 0.0]]), np.array([[2.0, -2.0]])], {"p": float("inf"), "compute_mode": None}, fd=False,
     id=CDIST + "-inf-tie")
EXCLUDED_GRADGRAD = {CDIST: "PyTorch 2.13 has no derivative for _cdist_backward"}
refused(CDIST, [R(3, 4), R(5, 3, seed=1)], {"p": 2.0, "compute_mode": None}, "same number of columns")
refused(CDIST, [R(3, 4), R(5, 4, seed=1)], {"p": -1.0, "compute_mode": None}, "non-negative p")
refused(CDIST, [R(4), R(5, 4, seed=1)], {"p": 2.0, "compute_mode": None}, "at least 2D")


def test_cdist_refuses_a_second_derivative_like_torch():
    x1, x2 = Tensor(R(2, 3), requires_grad=True), Tensor(R(4, 3, seed=1), requires_grad=True)
    y = OPS[CDIST](x1, x2, p=2.0, compute_mode=None)
    (g,) = grad([y], [x1], grad_outputs=[Tensor(np.ones((2, 4)), requires_grad=True)], create_graph=True)
    assert g.grad_fn.name == "torch::autograd::NotImplemented"
    with pytest.raises(RuntimeError, match="derivative for aten::_cdist_backward is not implemented"):
        grad([g], [x1], grad_outputs=[np.ones((2, 3))])


def _shape_depends_on_values(op_name, inputs):
    """Rows whose result shape the loader cannot know: bool-mask indexing."""
    return op_name == NONZERO or op_name == IDX and any(i is not None and i.dtype == bool for i in inputs[1])


def test_index_tensor_from_a_file_is_checked_before_use():
    # a hostile index: huge, negative and past the end; refused with PyTorch's message and never
    # wrapped (NumPy would read x[-1] for -1 in gather)
    x = R(4, 3)
    for bad in (I(2 ** 62), I(-(2 ** 62)), I(-1)):
        with pytest.raises((IndexError, ValueError), match="out of bounds"):
            OPS[GATHER](x, bad.reshape(1, 1), dim=0)
        with pytest.raises((IndexError, ValueError), match="out of bounds"):
            OPS[SCATTER_ADD](x, bad.reshape(1, 1), R(1, 1), dim=0)
    with pytest.raises(IndexError, match="out of bounds"):
        OPS[IDX](x, [I(2 ** 62)])


def test_a_scatter_src_larger_than_its_index_has_no_gradient_like_torch():
    # derivatives.yaml's src gradient is grad.gather(dim, index), index-shaped: PyTorch's
    # engine refuses it for a larger src, and so does gradcli's
    x, s = Tensor(R(3, 4), requires_grad=True), Tensor(R(3, 5, seed=1), requires_grad=True)
    y = OPS[SCATTER](x, np.array([[1], [3]]), s, dim=1)
    with pytest.raises(RuntimeError, match=r"ScatterBackward0 returned an invalid gradient at index 1 - got "
                                           r"\[2, 1\] but expected shape compatible with \[3, 5\]"):
        grad([y], [s], grad_outputs=[np.ones((3, 4))])


def test_accumulating_index_put_adds_repeated_indices_like_torch():
    x, v = R(5, 3), R(4, 3, seed=1)
    ours = np.asarray(OPS[IPUT](x, [I(1, 1, 1, 4)], v, accumulate=True))
    np.testing.assert_allclose(ours[1], x[1] + v[0] + v[1] + v[2])
    np.testing.assert_allclose(ours[4], x[4] + v[3])


# -- the checks of tests/test_aten_ops.py, on this table ----------------------------------------
PARAMS = T.PARAMS


def _changed_row_refused_by_torch(request, op_name, inputs, args):
    """True (after checking that torch refuses the row) where the installed torch refuses a
    row that 2.13 computed; the row's gradcli checks run in every release."""
    if not _torch_changed(request.node.callspec.id):
        return False
    with pytest.raises(RuntimeError):
        T._theirs(op_name, inputs, args, [])
    return True


@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[4] and c.values[3] != []])
def test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd):
    T.test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, [c for c in CASES if c.values[3] != []])
def test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd, request):
    if _changed_row_refused_by_torch(request, op_name, inputs, args):
        return
    T.test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd)


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float64_forward_matches_torch_without_gradients(op_name, inputs, args, wrt, fd, request):
    if _changed_row_refused_by_torch(request, op_name, inputs, args):
        return
    _, outs = T._ours(op_name, inputs, args, [])
    _, touts = T._theirs(op_name, inputs, args, [])
    assert len(outs) == len(touts)
    for o, t in zip(outs, touts):
        assert o.shape == tuple(t.shape) and o.dtype == np.dtype(str(t.dtype).removeprefix("torch."))
        np.testing.assert_allclose(o.data, t.numpy(), rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.parametrize(PARAMS, CASES)
def test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd, request):
    if _changed_row_refused_by_torch(request, op_name, inputs, args):
        return
    T.test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd)


@pytest.mark.parametrize(PARAMS, CASES)
def test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd):
    if _shape_depends_on_values(op_name, inputs):     # the loader says "unknown", never a guess
        assert T._inferred(op_name, inputs, args) is None
        return
    T.test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd)


@pytest.mark.parametrize(PARAMS, [c for c in CASES if not _shape_depends_on_values(c.values[0], c.values[1])])
def test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch):
    T.test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch)


@pytest.mark.parametrize("op_name, inputs, args, match, static", REFUSED)
def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static, request, monkeypatch):
    if _torch_changed(request.node.callspec.id):
        # torch now accepts the row: gradcli still refuses it, and torch returns a result
        monkeypatch.setattr(T, "torch", None)
        T.test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static)
        monkeypatch.undo()
        _, touts = T._theirs(op_name, inputs, args, [])
        assert touts[0] is not None and tuple(touts[0].shape) == inputs[0].shape
        return
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
    return {c.values[0] for c in CASES}


def gradgrad_ops():
    """The ops with a second-derivative row here, or none because PyTorch has none."""
    return set(GRADGRAD) | NOT_DIFFERENTIABLE | set(EXCLUDED_GRADGRAD)


def test_every_op_of_this_table_is_registered_with_torchs_schema():
    for name in table_ops():
        assert name in ATEN_OPS
        if torch is not None:
            assert ATEN_OPS[name].schema.text == str(T._torch_op(name)._schema).removeprefix("aten::")
