"""PyTorch's ATen ops (``aten.NAME.OVERLOAD``), one table entry per overload.

``registry`` turns entries into ops registered in ``OPS``; the entries live in
``pointwise``, ``shape``, ``nn``, ``conv_pool`` and ``norm_attention``, and the core
opset's families in ``pointwise_core`` (elementwise math), ``logical`` (comparisons,
bitwise, logical), ``reduce_core`` (reductions, sort, topk), ``factory`` (factories and
tensor queries) and ``sampling`` (random ops); ``meta`` holds the shape rules of the
first five (the others carry theirs). ``core_opset`` lists PyTorch's core opset
(``gradcli ops --missing``).
"""
from . import conv_pool, factory, logical, nn, norm_attention, pointwise, pointwise_core, reduce_core, sampling, shape  # noqa: F401 - registers the entries
from . import meta  # noqa: F401 - their shape rules (after the entries)
from .registry import ATEN_OPS, AtenOp

__all__ = ["ATEN_OPS", "AtenOp"]
