"""``aten.view`` on inputs that are not contiguous: it aliases its input where PyTorch's
``computeStride`` finds strides for the new shape and refuses with PyTorch's message where
it does not (Note [view strides] in gradcli/ops/aten/shape.py). One line per case, each
checked against torch running the same chain of ATen ops: the same refusal, or a view of
the same memory with PyTorch's strides."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS

torch = pytest.importorskip("torch")

MESSAGE = "view size is not compatible with input tensor's size and stride"


def _call_torch(name, *tensors, **args):
    names = [p.name for p in ATEN_OPS[name].schema.tensors]
    args = {k: getattr(torch, v) if k == "memory_format" else v for k, v in args.items()}
    _, op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)(**dict(zip(names, tensors)), **args)


def _call_ours(name, *inputs, **args):
    return OPS[name](*inputs, **args)


def _attention(call, x):
    # q, k, v with the (B, L, H, E) layout a transformer's view + transpose gives
    q = call("aten.transpose.int", call("aten.view.default", x, size=[2, 3, 2, 2]), dim0=1, dim1=2)
    return call("aten._scaled_dot_product_flash_attention_for_cpu.default", q, q, q, None)[0]


T01 = lambda c, x: c("aten.transpose.int", x, dim0=0, dim1=1)  # noqa: E731
# (id, the chain of ATen ops that makes the viewed input from x (2, 3, 4), the view's size)
CASES = [
    ("transpose-flatten", T01, [-1]),
    ("transpose-split-inner", lambda c, x: c("aten.transpose.int", x, dim0=1, dim1=2), [2, 2, 2, 3]),
    ("transpose-split-outer", T01, [3, 2, 2, 2]),
    ("permute-merge-contiguous-pair", lambda c, x: c("aten.permute.default", x, dims=[2, 0, 1]), [4, 6]),
    ("permute-flatten", lambda c, x: c("aten.permute.default", x, dims=[2, 0, 1]), [24]),
    ("t-flatten", lambda c, x: c("aten.t.default", c("aten.view.default", x, size=[6, 4])), [24]),
    ("t-add-unit-dims", lambda c, x: c("aten.t.default", c("aten.view.default", x, size=[6, 4])), [4, 1, 6, 1]),
    ("strided-slice-merge", lambda c, x: c("aten.slice.Tensor", x, dim=1, step=2), [2, -1]),
    ("strided-slice-split", lambda c, x: c("aten.slice.Tensor", x, dim=2, step=2), [2, 3, 2, 1]),
    ("slice-merge-outer", lambda c, x: c("aten.slice.Tensor", x, dim=2, start=1, end=3), [6, 2]),
    ("slice-flatten", lambda c, x: c("aten.slice.Tensor", x, dim=2, start=1, end=3), [12]),
    ("select-inner-flatten", lambda c, x: c("aten.select.int", x, dim=2, index=1), [6]),
    ("select-outer-flatten", lambda c, x: c("aten.select.int", x, dim=0, index=1), [12]),
    ("expand-flatten", lambda c, x: c("aten.expand.default", c("aten.slice.Tensor", x, dim=2, end=1),
                                      size=[2, 3, 5]), [30]),
    ("expand-split-expanded", lambda c, x: c("aten.expand.default", c("aten.slice.Tensor", x, dim=2, end=1),
                                             size=[2, 3, 4]), [6, 2, 2]),
    ("unsqueeze-transpose", lambda c, x: c("aten.unsqueeze.default", T01(c, x), dim=1), [3, 8]),
    ("clone-keeps-layout", lambda c, x: c("aten.clone.default", T01(c, x)), [-1]),
    ("clone-contiguous", lambda c, x: c("aten.clone.default", T01(c, x), memory_format="contiguous_format"), [-1]),
    ("mul-keeps-layout", lambda c, x: c("aten.mul.Tensor", T01(c, x), 2.0), [-1]),
    ("add-broadcast-keeps-layout", lambda c, x: c("aten.add.Tensor", T01(c, x), c("aten.select.int", x, dim=1,
                                                                                      index=0)), [6, 4]),
    ("attention-output-merge-heads", lambda c, x: c("aten.transpose.int", _attention(c, x), dim0=1, dim1=2),
     [2, 3, 4]),
    ("attention-output-flatten", _attention, [2, -1]),
    ("empty-transpose", lambda c, x: T01(c, c("aten.slice.Tensor", x, dim=0, end=0)), [3, 0, 2, 2]),
]


@pytest.mark.parametrize("chain, size", [pytest.param(c, s, id=i) for i, c, s in CASES])
@pytest.mark.parametrize("op_name", ["aten.view.default", "aten._unsafe_view.default"])
def test_view_of_a_strided_input_aliases_or_refuses_like_torch(op_name, chain, size):
    x = np.arange(24.0).reshape(2, 3, 4)
    tx = torch.tensor(x)
    base = chain(_call_ours, x)
    tbase = chain(_call_torch, tx)
    assert tuple(s // base.itemsize for s in base.strides) == tbase.stride() or 1 in base.shape
    try:
        theirs = _call_torch(op_name, tbase, size=size)
    except RuntimeError as e:
        assert MESSAGE in str(e)
        with pytest.raises(ValueError, match=MESSAGE + r".*Use \.reshape\(\.\.\.\) instead"):
            _call_ours(op_name, base, size=size)
        return
    ours = _call_ours(op_name, base, size=size)
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12)
    # a view: same memory as its input (no copy), PyTorch's strides (size-1 dims aside)
    assert base.size == 0 or np.shares_memory(ours, base)
    strides = [s // ours.itemsize for s, n in zip(ours.strides, ours.shape) if n != 1]
    assert strides == [s for s, n in zip(theirs.stride(), theirs.shape) if n != 1] or ours.size == 0


def test_a_refused_view_on_a_recorded_tensor_names_reshape_and_a_viewed_one_has_the_gradient():
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    xt = OPS["aten.t.default"](x)
    with pytest.raises(ValueError, match=r"view: view size is not compatible.*Use \.reshape"):
        OPS["aten.view.default"](xt, size=[6])
    y = OPS["aten.view.default"](xt, size=[3, 1, 2])
    assert y.grad_fn.name == "ViewBackward0" and np.shares_memory(y.data, x.data)
    (gx,) = grad([y], [x], grad_outputs=[np.arange(6.0).reshape(3, 1, 2)])
    np.testing.assert_array_equal(gx, np.arange(6.0).reshape(3, 2).T)


def _matrices(inputs):
    """The flat positions of the inputs of two or more dims (those with a layout)."""
    from test_aten_ops import _rebuild

    found = []
    _rebuild(inputs, lambda i, x: found.append(i) if isinstance(x, np.ndarray) and x.ndim >= 2 else None)
    return found


def _table():
    """The op tables' rows, each with the layouts its inputs can take: row-major,
    column-major, and (with two inputs or more of 2+ dims) the first column-major and the
    others row-major, or the reverse."""
    from test_aten_core_pointwise import CASES as CORE
    from test_aten_ops import CASES

    rows = []
    for p in CASES + CORE:
        n = len(_matrices(p.values[1]))
        for layout in ["c"] + (["fortran"] if n else []) + (["fortran-first", "fortran-rest"] if n > 1 else []):
            rows.append(pytest.param(*p.values, layout, id=f"{p.id}-{layout}"))
    return rows


def _fortran(x):
    return np.asfortranarray(x) if isinstance(x, np.ndarray) and x.ndim >= 2 else x


@pytest.mark.parametrize("op_name, inputs, args, wrt, fd, layout", _table())
def test_outputs_have_torchs_strides(op_name, inputs, args, wrt, fd, layout):
    # what a later view sees (Note [view strides]): every op of the table, on row-major inputs,
    # on column-major ones (torch.from_numpy keeps the strides), and on inputs whose layouts
    # disagree (the first 2-D input column-major and the others row-major, or the reverse:
    # TensorIterator's rule, Note [TensorIterator's layout]), lays out its outputs as
    # PyTorch does (size-1 dims and empty outputs aside: no view depends on their strides)
    from test_aten_ops import _rebuild, _torch_call

    matrices = _matrices(inputs)
    pick = {"fortran": set(matrices), "fortran-first": set(matrices[:1]),
            "fortran-rest": set(matrices[1:])}.get(layout, set())
    inputs = _rebuild(inputs, lambda i, x: _fortran(x) if i in pick else x)
    try:
        theirs = _torch_call(op_name, *_rebuild(inputs, lambda i, x: torch.from_numpy(x)
                                                if isinstance(x, np.ndarray) else x), **args)
    except RuntimeError as e:                # a view of a column-major input: refused by both
        assert MESSAGE in str(e)
        with pytest.raises(ValueError, match=MESSAGE):
            OPS[op_name](*inputs, **args)
        return
    ours = OPS[op_name](*inputs, **args)
    ours = list(ours) if isinstance(ours, (list, tuple)) else [ours]
    theirs = list(theirs) if isinstance(theirs, (list, tuple)) else [theirs]
    for a, b in zip(ours, theirs):
        if a.size > 1:
            assert [s // a.itemsize for s, n in zip(a.strides, a.shape) if n != 1] == \
                [s for s, n in zip(b.stride(), b.shape) if n != 1], (a.shape, a.strides, b.stride())
