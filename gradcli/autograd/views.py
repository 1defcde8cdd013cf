"""A view's history regenerated after its base's changed (``AsStridedBackward0``).

Note [Views of a changed base]: a view (``_base`` set) records its own node when it is
made, leading to its base's history at that time. An in-place op on the base (or on
another view of it) rebases the base's history; the old view still shares the base's
memory, so its gradient must now flow into the base's *new* history, or it would skip
the in-place op and be wrong. As PyTorch's ``grad_fn`` of a view does, the view's
history is regenerated when next used (``Tensor.gradient_edge``): an
``AsStridedBackward0`` that places the view's gradient at the view's elements of a
zero gradient for the base (adding where elements repeat, as in a broadcast view).
The view's elements are found from its strides and offset in the base's memory; a
base that is not C-contiguous is refused with an error, never a wrong gradient.
"""
from __future__ import annotations

import numpy as np

from ..devices import CPU, on_device, to_host
from . import dispatch
from .node import InputMetadata, Node
from .state import STATE


class AsStridedBackward(Node):
    """The gradient of a view, scattered into its base's shape."""

    __slots__ = ("base_shape", "base_dtype", "view_shape", "view_strides", "offset", "itemsize")

    def __init__(self, base, view):
        if not base.data.flags.c_contiguous:
            raise RuntimeError("a view whose base was changed in place needs a C-contiguous "
                               "base to rebuild its history; clone() the base first")
        super().__init__("AsStridedBackward0", (base.gradient_edge(),),
                         [InputMetadata.of(view.data)])
        self.base_shape, self.base_dtype = base.data.shape, base.data.dtype
        self.view_shape, self.view_strides = view.data.shape, view.data.strides
        self.itemsize = base.data.itemsize
        self.offset = (view.data.__array_interface__["data"][0]
                       - base.data.__array_interface__["data"][0]) // self.itemsize

    def apply(self, grads):
        g = grads[0]
        if g is None:
            return [None]
        size = int(np.prod(self.base_shape))
        index = np.lib.stride_tricks.as_strided(
            np.arange(size)[self.offset:], self.view_shape,
            tuple(s // self.itemsize * np.dtype(np.int_).itemsize for s in self.view_strides))
        if STATE.grad_enabled:
            # create_graph: the same sum, as ops that record (Note [Core dispatch])
            return [dispatch.ops.scatter_to_base(g, index, self.base_shape, self.base_dtype)]
        g = getattr(g, "data", g) if not isinstance(g, np.ndarray) else g
        out = np.zeros(size, self.base_dtype)
        np.add.at(out, index, to_host(g))
        out = out.reshape(self.base_shape)
        device = self.next_edges[0][0].input_metadata[self.next_edges[0][1]].device \
            if self.next_edges[0] is not None else CPU
        return [out if device is CPU else on_device(out, device)]


def refresh_view(view):
    """Regenerate ``view``'s history if its base's changed since (Note [Views of a changed
    base])."""
    base = view._base
    fn = base.grad_fn
    if fn is None or getattr(view, "_view_of_fn", None) is fn or not base.requires_grad:
        return
    node = AsStridedBackward(base, view)
    view.requires_grad = True
    view.grad_fn, view.output_nr = node, 0
    view._view_of_fn = fn
