"""PyTorch's ATen ops (``aten.NAME.OVERLOAD``), one table entry per overload.

``registry`` turns entries into ops registered in ``OPS``; the entries live in
``pointwise``, ``shape``, ``nn``, ``conv_pool``, ``norm_attention``, the core-opset
modules (``group_norm``, ``index``, ...), which carry their own shape rules, and ``inplace``;
``meta`` holds the others' (what the loader infers without computing).
"""
from . import conv_pool, nn, norm_attention, pointwise, shape  # noqa: F401 - registers the entries
from . import cdist, fold, group_norm, index, layout, pad, pool3d, upsample  # noqa: F401 - core ATen entries, each with its shape rule
from . import meta  # noqa: F401 - their shape rules (after the entries)
from . import conv_backward, norm_legit  # noqa: F401 - core entries reusing the rules above
from . import inplace  # noqa: F401 - the in-place overloads (after the out-of-place ones)
from .registry import ATEN_OPS, AtenOp

__all__ = ["ATEN_OPS", "AtenOp"]
