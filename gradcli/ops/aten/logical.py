"""Core ATen comparisons, bitwise and logical ops, ``isinf``/``isnan``: none is differentiable.

Their results are bool (comparisons, logical ops, ``isinf``/``isnan``) or integer (bitwise
ops), so a call on Tensors that require grad records no node, as in PyTorch, where
derivatives.yaml marks them ``output_differentiability: [False]``. Comparisons compute in
the operands' promoted dtype (``at::result_type``), as PyTorch's kernels do.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.ne.Scalar"](np.array([1, 2, 3]), other=2)
    array([ True, False,  True])
"""
from __future__ import annotations

import numpy as np

from ..aten_kernels._common import check_dtype
from .pointwise import as_dtype
from .promotion import cast, result_type
from .registry import ELEMENTWISE, aten, not_differentiable

_BOOL = np.dtype(bool)


def _operand(x, dt):
    """An operand in the computing dtype: an array cast, a Python number kept (weak)."""
    return cast(x, dt) if hasattr(x, "dtype") else np.asarray(x, dt)


def _comparison(name, overload, fn):
    kind = "Tensor other" if overload == "Tensor" else "Scalar other"

    def forward(self, other):
        dt = result_type(self, other)
        with np.errstate(invalid="ignore"):
            return as_dtype(fn(_operand(self, dt), _operand(other, dt)), _BOOL)
    forward.__name__ = name
    return not_differentiable(aten(f"{name}.{overload}(Tensor self, {kind}) -> Tensor", None, saves=False,
                                   meta=ELEMENTWISE)(forward))


COMPARISONS = {}
for _name, _fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal)):
    for _overload in ("Tensor", "Scalar"):
        COMPARISONS[f"{_name}.{_overload}"] = _comparison(_name, _overload, _fn)


def _bitwise(name, overload, fn):
    kind = "Tensor other" if overload == "Tensor" else "Scalar other"

    def forward(self, other):
        dt = result_type(self, other)
        check_dtype(f"{name}", np.empty(0, dt), "biu", "an integer or bool")
        return as_dtype(fn(_operand(self, dt), _operand(other, dt)), dt)
    forward.__name__ = name
    return not_differentiable(aten(f"{name}.{overload}(Tensor self, {kind}) -> Tensor", None, saves=False,
                                   meta=ELEMENTWISE)(forward))


BITWISE = {}
for _name, _fn in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                   ("bitwise_xor", np.bitwise_xor)):
    for _overload in ("Tensor", "Scalar"):
        BITWISE[f"{_name}.{_overload}"] = _bitwise(_name, _overload, _fn)


@aten("bitwise_not(Tensor self) -> Tensor", None, saves=False, meta=ELEMENTWISE)
def bitwise_not(self):
    check_dtype("bitwise_not", self, "biu", "an integer or bool")
    return np.invert(self)


not_differentiable(bitwise_not)


def _logical(name, fn):
    def forward(self, other):
        return as_dtype(fn(np.asarray(self) != 0, np.asarray(other) != 0), _BOOL)   # NaN counts as true
    forward.__name__ = name
    return not_differentiable(aten(f"{name}(Tensor self, Tensor other) -> Tensor", None, saves=False,
                                   meta=ELEMENTWISE)(forward))


logical_and = _logical("logical_and", np.logical_and)
logical_or = _logical("logical_or", np.logical_or)
logical_xor = _logical("logical_xor", np.logical_xor)


@aten("logical_not(Tensor self) -> Tensor", None, saves=False, meta=ELEMENTWISE)
def logical_not(self):
    return as_dtype(np.asarray(self) == 0, _BOOL)


@aten("isinf(Tensor self) -> Tensor", None, saves=False, meta=ELEMENTWISE)
def isinf(self):
    return as_dtype(np.isinf(self) if np.dtype(self.dtype).kind in "fc" else np.zeros(np.shape(self), bool), _BOOL)


@aten("isnan(Tensor self) -> Tensor", None, saves=False, meta=ELEMENTWISE)
def isnan(self):
    return as_dtype(np.isnan(self) if np.dtype(self.dtype).kind in "fc" else np.zeros(np.shape(self), bool), _BOOL)


for _op in (logical_not, isinf, isnan):
    not_differentiable(_op)
