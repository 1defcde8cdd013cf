"""Core ATen random ops: ``rand``, ``randn``, ``randperm``, ``native_dropout``.

They draw from the running graph's generator (Note [the graph's generator] in rng.py): the
same numbers on every forward of one file, different ones for another ``seed``. Their values
can never equal PyTorch's for the same seed (another generator); what matches PyTorch is the
distribution, the shapes, the dtypes, the node and its gradient given the drawn mask.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.native_dropout.default"](np.ones(4), p=0.0, train=True)
    [array([1., 1., 1., 1.]), array([ True,  True,  True,  True])]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels._common import check_dtype
from ..library import _value
from ..rng import generator
from .factory import _FACTORY_ARGS, _check_size
from .promotion import DEFAULT_FLOAT
from .registry import aten, defvjp, not_differentiable
from .tensor_iterator import lay_out

_LONG = np.dtype(np.int64)


def _float_dtype(name, dtype):
    dt = np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT
    check_dtype(name, np.empty(0, dt))
    return dt


def _size_rule(name):
    def rule(size, dtype=None, **_):
        return [(_check_size(name, size), _float_dtype(name, dtype))]
    return rule


@aten(f"rand(SymInt[] size, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_size_rule("rand"))
def rand(size, dtype=None, layout=None, device=None, pin_memory=None):
    (shape, dt), = _size_rule("rand")(size, dtype)
    return generator().random(shape).astype(dt)           # uniform on [0, 1)


@aten(f"randn(SymInt[] size, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_size_rule("randn"))
def randn(size, dtype=None, layout=None, device=None, pin_memory=None):
    (shape, dt), = _size_rule("randn")(size, dtype)
    return generator().standard_normal(shape).astype(dt)


def _randperm_rule(n, dtype="int64", **_):
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    dt = np.dtype(dtype)
    if dt.kind == "b" or (dt.kind == "f" and n > 2 ** np.finfo(dt).nmant + 1):
        raise ValueError(f"randperm: n is too large for result tensor type {dt} (n={n})")
    return [((n,), dt)]


@aten(f"randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, "
      "bool? pin_memory=None) -> Tensor", None, saves=False, meta=_randperm_rule)
def randperm(n, dtype="int64", layout=None, device=None, pin_memory=None):
    (_, dt), = _randperm_rule(n, dtype)
    return generator().permutation(n).astype(dt)


for _op in (rand, randn, randperm):
    not_differentiable(_op)


def _dropout_rule(input, p, train):  # noqa: A002 - PyTorch's name
    check_dtype("native_dropout", input)
    if not 0 <= p <= 1:
        raise ValueError(f"native_dropout: dropout probability has to be between 0 and 1, but got {p}")
    shape = tuple(input.shape)
    # Note [dropout of an empty tensor]: PyTorch returns (input, empty_like(input)), so the mask
    # of an empty input has the input's dtype, not bool
    empty = 0 in shape
    return [(shape, np.dtype(input.dtype)), (shape, np.dtype(input.dtype) if empty else np.dtype(bool))]


@aten("native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)", "NativeDropoutBackward0",
      differentiable_outputs=[True, False], meta=_dropout_rule)
def native_dropout(input, p, train):  # noqa: A002
    _dropout_rule(input, p, train)
    if input.size == 0:                # Note [dropout of an empty tensor]
        return [np.array(input, copy=True), np.empty(np.shape(input), input.dtype)]
    if train is False:                # eval: clone and ones_like, both in the input's layout
        return [np.array(input, copy=True), np.ones_like(input, dtype=bool)]
    keep = generator().random(np.shape(input)) < (1.0 - p)       # bernoulli(1 - p)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    # PyTorch: the mask empty_like(input), and input.mul(mask): both in the input's layout
    return [lay_out(np.asarray(input * keep * scale, dtype=input.dtype), [input]), lay_out(keep, [input])]


def _dropout_vjp(g, ans, input, p, train):  # noqa: A002
    # input: native_dropout_backward(grad, result1, scale) = grad * (mask * scale), with
    # scale = (!train.has_value() || !train.value()) ? 1 : (p == 1 ? 0.0 : 1.0 / (1.0 - p)).
    # Note [dropout with train unset]: with train=None the forward drops and scales by 1 / (1 - p)
    # but the backward scales by 1, exactly as PyTorch 2.13's formula (a quirk kept, not fixed)
    scale = 1.0 if train is not True else (0.0 if p == 1 else 1.0 / (1.0 - p))
    gv = _value(g[0])
    mask = np.asarray(_value(ans[1])).astype(gv.dtype) * gv.dtype.type(scale)
    return L.mul(g[0], mask)


defvjp(native_dropout, _dropout_vjp)

for _op in (rand, randn, randperm, native_dropout):
    _op.draws_random = True       # the graph runs its forward under its seed (ops/rng.py)
