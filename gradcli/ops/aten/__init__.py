"""PyTorch's ATen ops (``aten.NAME.OVERLOAD``), one table entry per overload.

``registry`` turns entries into ops registered in ``OPS``; the entries live in
``pointwise``, ``shape``, ``nn``, ``conv_pool``, ``norm_attention`` and ``inplace``; ``meta`` holds
their shape rules (what the loader infers without computing).
"""
from . import conv_pool, nn, norm_attention, pointwise, shape  # noqa: F401 - registers the entries
from . import meta  # noqa: F401 - their shape rules (after the entries)
from . import inplace  # noqa: F401 - the in-place overloads (after the out-of-place ones)
from .registry import ATEN_OPS, AtenOp

__all__ = ["ATEN_OPS", "AtenOp"]
