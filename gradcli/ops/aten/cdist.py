"""``_cdist_forward`` (what ``torch.cdist`` records; arithmetic in
``gradcli.ops.aten_kernels.cdist``). PyTorch has no derivative for ``_cdist_backward``,
so the VJP is first order only (Note [no double backward])."""
from __future__ import annotations

from ..aten_kernels import cdist as K
from ..aten_kernels._common import check_dtype
from .registry import aten, defvjp


def _meta(x1, x2, p, compute_mode=None):
    check_dtype("cdist", x1, "f")
    if x1.dtype != x2.dtype:
        raise TypeError(f"cdist: X1 and X2 must have the same dtype, got {x1.dtype} and {x2.dtype}")
    return [(K.cdist_shape(tuple(x1.shape), tuple(x2.shape), p), x1.dtype)]


@aten("_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor", "CdistBackward0", meta=_meta)
def cdist_forward(x1, x2, p, compute_mode=None):
    return K.cdist_forward(x1, x2, p, compute_mode)


# x1: _cdist_backward(grad.contiguous(), x1, x2, p, result);
# x2: _cdist_backward(grad.mT().contiguous(), x2, x1, p, result.mT().contiguous())
defvjp(cdist_forward,
       lambda g, ans, x1, x2, p, compute_mode=None: K.cdist_backward(g, x1, x2, p, ans),
       lambda g, ans, x1, x2, p, compute_mode=None: K.cdist_backward(
           g.swapaxes(-1, -2), x2, x1, p, ans.swapaxes(-1, -2)),
       first_order_only="_cdist_backward")
