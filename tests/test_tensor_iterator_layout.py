"""Elementwise ops lay out their outputs as PyTorch's TensorIterator does (Note
[TensorIterator's layout] in gradcli/ops/aten/tensor_iterator.py): the inputs' stride
order when they agree, the first deciding input's when they do not, where NumPy's
ufuncs fall back to row-major. A later ``view`` then accepts exactly what PyTorch's
accepts. Each case runs the same ATen ops in torch and compares the strides, torch's
``is_contiguous`` and the view's verdict."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.autograd import Tensor
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from gradcli.ops.aten.tensor_iterator import iterator_strides

torch = pytest.importorskip("torch")

VIEW_REFUSED = "view size is not compatible with input tensor's size and stride"


def laid(shape, order, seed=0):
    """An array of ``shape`` whose memory holds its dims in ``order`` (slowest first)."""
    rng = np.random.default_rng(seed)
    return np.ascontiguousarray(rng.standard_normal([shape[d] for d in order])).transpose(np.argsort(order))


def sliced(shape, seed=0):
    """A non-dense array of ``shape``: every other column of a permuted one."""
    wide = laid(shape[:-1] + (2 * shape[-1],), (len(shape) - 1,) + tuple(range(len(shape) - 1)), seed)
    return wide[..., ::2]


def _torch(name, *tensors, **args):
    names = [p.name for p in ATEN_OPS[name].schema.tensors]
    _, op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)(**dict(zip(names, tensors)), **args)


def _strides(a):
    return [s // a.itemsize for s, n in zip(a.strides, a.shape) if n != 1]


def _torch_strides(t):
    return [s for s, n in zip(t.stride(), t.shape) if n != 1]


# (id, the inputs: arrays in the op's input order)
OPERANDS = [
    ("permuted-then-row-major", lambda: [laid((2, 3, 4), (0, 2, 1)), laid((2, 3, 4), (0, 1, 2), 1)]),
    ("row-major-then-permuted", lambda: [laid((2, 3, 4), (0, 1, 2)), laid((2, 3, 4), (0, 2, 1), 1)]),
    ("two-permutations", lambda: [laid((2, 3, 4), (2, 0, 1)), laid((2, 3, 4), (1, 0, 2), 1)]),
    ("permuted-then-broadcast-row", lambda: [laid((2, 3, 4), (1, 0, 2)), laid((4,), (0,), 1)]),
    ("broadcast-column-then-permuted", lambda: [laid((3, 1), (0, 1)), laid((2, 3, 4), (2, 1, 0), 1)]),
    ("broadcast-decides-nothing", lambda: [laid((1, 3, 1), (2, 1, 0)), laid((2, 3, 4), (1, 2, 0), 1)]),
    ("size-one-dims", lambda: [laid((2, 1, 4), (1, 2, 0)), laid((2, 1, 4), (0, 1, 2), 1)]),
    ("zero-dim-then-permuted", lambda: [np.array(2.0), laid((2, 3, 4), (2, 1, 0), 1)]),
    ("non-dense-then-row-major", lambda: [sliced((2, 3, 4)), laid((2, 3, 4), (0, 1, 2), 1)]),
    ("row-major-then-non-dense", lambda: [laid((2, 3, 4), (0, 1, 2)), sliced((2, 3, 4), 1)]),
    ("equal-strides-tie", lambda: [laid((4, 1, 3), (1, 2, 0)), laid((4, 1, 3), (2, 1, 0), 1)]),
]


def _check_like_torch(ours, theirs):
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12)
    assert _strides(ours) == _torch_strides(theirs)
    # what a later view sees: the flattening view is accepted or refused as in torch
    try:
        expected = theirs.view(-1)
    except RuntimeError as e:
        assert VIEW_REFUSED in str(e) and not theirs.is_contiguous()
        with pytest.raises(ValueError, match=VIEW_REFUSED):
            OPS["aten.view.default"](ours, size=[-1])
        return
    assert theirs.is_contiguous()
    np.testing.assert_array_equal(OPS["aten.view.default"](ours, size=[-1]), expected.numpy())


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in OPERANDS])
@pytest.mark.parametrize("op_name", ["aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor",
                                     "aten.maximum.default", "aten.atan2.default"])
def test_binary_ops_lay_out_their_output_as_tensoriterator(op_name, make):
    a, b = make()
    ours = OPS[op_name](a, b)
    theirs = _torch(op_name, torch.from_numpy(a), torch.from_numpy(b))
    _check_like_torch(ours, theirs)
    assert iterator_strides(ours.shape, [a, b]) == tuple(s // ours.itemsize for s in ours.strides) \
        or 1 in ours.shape


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in OPERANDS])
def test_where_votes_with_the_condition_first(make):
    a, b = make()
    cond = np.asarray(b > 0)                  # the second operand's layout (or row-major)
    ours = OPS["aten.where.self"](cond, a, b)
    theirs = _torch("aten.where.self", torch.from_numpy(cond), torch.from_numpy(a), torch.from_numpy(b))
    _check_like_torch(ours, theirs)


@pytest.mark.parametrize("op_name, args", [("aten.threshold_backward.default", {"threshold": 0.0}),
                                           ("aten.leaky_relu_backward.default",
                                            {"negative_slope": 0.1, "self_is_result": False})])
def test_backward_kernels_that_iterate_self_before_the_gradient(op_name, args):
    # PyTorch hands these kernels' inputs to TensorIterator as (self, grad_output): self's
    # layout decides where the two disagree, not the schema's first input
    grad_output, self = laid((3, 4), (0, 1)), laid((3, 4), (1, 0), 1)
    for g, s in [(grad_output, self), (self, grad_output)]:
        ours = OPS[op_name](g, s, **args)
        theirs = _torch(op_name, torch.from_numpy(g), torch.from_numpy(s), **args)
        _check_like_torch(ours, theirs)


@pytest.mark.parametrize("op_name, inputs, args", [
    ("aten.masked_fill.Scalar", lambda a: [a, np.asarray(a > 0)], {"value": 0.0}),
    ("aten.pow.Scalar", lambda a: [a], {"self": 2.5}),
    ("aten.cumsum.default", lambda a: [a], {"dim": 1}),
])
def test_kernels_that_write_a_row_major_result_whatever_the_layout(op_name, inputs, args):
    a = laid((2, 3, 4), (2, 0, 1))
    ins = inputs(a)
    ours = OPS[op_name](*ins, **args)
    theirs = _torch(op_name, *[torch.from_numpy(x) for x in ins], **args)
    assert theirs.is_contiguous()
    _check_like_torch(ours, theirs)


def test_a_recorded_elementwise_op_keeps_the_layout_and_its_gradient():
    a = Tensor(laid((2, 3, 4), (0, 2, 1)), requires_grad=True)
    b = Tensor(laid((2, 3, 4), (0, 1, 2), 1), requires_grad=True)
    y = OPS["aten.add.Tensor"](a, b)
    ta = torch.from_numpy(a.data.copy(order="K"))
    assert _strides(y.data) == _torch_strides(ta + torch.from_numpy(b.data))
    y.backward(np.ones((2, 3, 4)))
    np.testing.assert_array_equal(a.grad, np.ones((2, 3, 4)))


def _rotary_attention(call, x, cos, sin, kv):
    # a transformer layer's query path: split heads (view + transpose), the rotary embedding
    # (q * cos + rotate_half(q) * sin), attention, then merge the heads again with
    # transpose + view, as HF's Mistral with SDPA does: torch's view accepts this because
    # the rotary sum keeps q's permuted layout and the attention output is laid out like q
    q = call("aten.transpose.int", call("aten.view.default", x, size=[2, 8, 4, 8]), dim0=1, dim1=2)
    half = call("aten.cat.default", [call("aten.neg.default", call("aten.slice.Tensor", q, dim=3, start=4)),
                                     call("aten.slice.Tensor", q, dim=3, start=0, end=4)], dim=-1)
    q = call("aten.add.Tensor", call("aten.mul.Tensor", q, cos), call("aten.mul.Tensor", half, sin))
    out = call("aten._scaled_dot_product_flash_attention_for_cpu.default", q, kv, kv, None)[0]
    return call("aten.view.default", call("aten.transpose.int", out, dim0=1, dim1=2), size=[2, 8, -1])


def test_rotary_embedding_then_attention_merges_heads_with_a_view_as_torch():
    arrays = [laid((2, 8, 32), (0, 1, 2)), laid((1, 1, 8, 8), (0, 1, 2, 3), 1),
              laid((1, 1, 8, 8), (0, 1, 2, 3), 2), laid((2, 4, 8, 8), (0, 1, 2, 3), 3)]

    def torch_call(name, *inputs, **args):
        if name == "aten.cat.default":
            return torch.cat(inputs[0], **args)
        return _torch(name, *inputs, **args)

    ours = _rotary_attention(lambda name, *i, **a: OPS[name](*i, **a), *arrays)
    theirs = _rotary_attention(torch_call, *[torch.from_numpy(v) for v in arrays])
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10)
    assert _strides(ours) == _torch_strides(theirs)


# -- convolution: Note [channels-last outputs] ---------------------------------------------------
def _conv_args(transposed=False, groups=1):
    return {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "transposed": transposed,
            "output_padding": [0, 0], "groups": groups}


@pytest.mark.parametrize("x_order, w_order", [
    ((0, 1, 2, 3), (0, 1, 2, 3)),          # contiguous: contiguous output
    ((0, 2, 3, 1), (0, 1, 2, 3)),          # a channels-last input
    ((0, 1, 2, 3), (0, 2, 3, 1)),          # a channels-last weight
    ((0, 3, 2, 1), (0, 1, 2, 3)),          # another permutation: not channels-last
    ((0, 2, 3, 1), (0, 2, 3, 1)),
])
@pytest.mark.parametrize("transposed, groups", [(False, 1), (False, 4), (True, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_convolution_output_takes_the_memory_format_pytorch_suggests(x_order, w_order, transposed,
                                                                     groups, dtype):
    x = laid((2, 4, 5, 6), x_order).astype(dtype)
    w = laid((4, 4 // groups, 3, 3), w_order, 1).astype(dtype)
    args = _conv_args(transposed, groups)
    got = OPS["aten.convolution.default"](Tensor(x), Tensor(w), None, **args).data
    want = _torch("aten.convolution.default", torch.from_numpy(x), torch.from_numpy(w), None, **args)
    assert _strides(got) == _torch_strides(want)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want.numpy(), rtol=tol, atol=tol)


def test_segformers_mix_ffn_views_what_pytorch_views(tmp_path):
    """transpose(1, 2).view(B, C, H, W) into a depthwise convolution, then
    flatten(2).transpose(1, 2), gelu and view: PyTorch's channels-last convolution output
    makes that last view valid, and gradcli's must too."""
    from click.testing import CliRunner

    from gradcli.bridges.torch import from_module
    from gradcli.cli import main as gradcli_main

    class MixFFN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.dwconv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):                               # x: (B, H*W, C)
            b, n, c = x.shape
            h = self.dwconv(x.transpose(1, 2).view(b, c, 4, 4))
            h = torch.nn.functional.gelu(h.flatten(2).transpose(1, 2))
            return self.fc(h.view(b * n, c))

    graph = from_module(MixFFN(), (torch.randn(2, 16, 8),), dtype="float64")
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
