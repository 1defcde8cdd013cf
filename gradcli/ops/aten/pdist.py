"""``_pdist_forward`` (what ``torch.pdist`` records) and its backward op ``_pdist_backward``
(arithmetic in ``gradcli.ops.aten_kernels.pdist``).

The gradient is computed by the ``_pdist_backward`` op, so a create_graph gradient carries
PyTorch's node for it, ``PdistBackwardBackward0``; derivatives.yaml gives that op no
derivative (``not_implemented("_pdist_backward")``), so differentiating it raises PyTorch's
error (Note [a backward without a derivative]).

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten._pdist_forward.default"](np.array([[0.0, 0.0], [3.0, 4.0]])).tolist()
    [5.0]
"""
from __future__ import annotations

from ..aten_kernels import pdist as K
from ..aten_kernels._common import check_dtype
from .registry import aten, defvjp, not_implemented


def _meta(self, p=2.0):
    check_dtype("pdist", self, "f")
    return [(K.pdist_shape(tuple(self.shape), p), self.dtype)]


@aten("_pdist_forward(Tensor self, float p=2.) -> Tensor", "PdistBackward0", meta=_meta)
def pdist_forward(self, p=2.0):
    return K.pdist_forward(self, p)


def _backward_meta(grad, self, pdist, p):
    return [(tuple(self.shape), self.dtype)]


@aten("_pdist_backward(Tensor grad, Tensor self, float p, Tensor pdist) -> Tensor", "PdistBackwardBackward0",
      meta=_backward_meta)
def pdist_backward(grad, self, pdist, p):  # tensors first, then the args (registry.py)
    check_dtype("_pdist_backward", self, "f")
    return K.pdist_backward(grad, self, p, pdist)


# self: _pdist_backward(grad, self, p, result)
defvjp(pdist_forward, lambda g, ans, self, p=2.0: pdist_backward(g, self, ans, p=p))
# grad, self, pdist: not_implemented("_pdist_backward")
defvjp(pdist_backward, *[not_implemented("_pdist_backward")] * 3)
