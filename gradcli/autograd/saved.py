"""SavedVariable: what a backward node keeps of a tensor it needs later.

Note [Saved tensors]: a node recorded while its inputs are Tensors keeps the
Tensors themselves (not only their arrays), so that a backward run with
``create_graph`` can hand its formulas Tensors that carry ``grad_fn``s and
the formulas record the graph of the backward (higher-order gradients). A
backward without ``create_graph`` unpacks the raw arrays: the hot path never
builds a Tensor.

An *output* of the node is not kept as its Tensor: that Tensor points at the
node (``grad_fn``), and the node would point back at it, a reference cycle.
As PyTorch's ``SavedVariable`` does, the node keeps the output's array and
``output_nr``, and unpacking makes a fresh Tensor whose ``grad_fn`` is the
node itself. Released with the graph (``release_variables``): a second
backward then fails with "Trying to backward through the graph a second
time".
"""
from __future__ import annotations

from .tensor import Tensor


def unpack_output(data, node, output_nr):
    """A Tensor for output ``output_nr`` of ``node`` (whose array is ``data``)."""
    if data.dtype.kind != "f":
        return Tensor(data)
    t = Tensor(data, requires_grad=True)
    t.grad_fn = node
    t.output_nr = output_nr
    return t


class SavedVariable:
    """One saved value: a Tensor input (kept), a Tensor output (array + number), or a raw array."""

    __slots__ = ("data", "tensor", "output_nr", "is_output")

    def __init__(self, value, is_output=False, output_nr=0):
        self.is_output = is_output and type(value) is Tensor and value.requires_grad
        self.output_nr = output_nr
        if type(value) is Tensor:
            self.data = value.data
            self.tensor = None if self.is_output else value
        else:
            self.data = value
            self.tensor = None

    def unpack(self, node=None, as_tensor=False):
        """The raw array, or with ``as_tensor`` the Tensor (outputs get ``grad_fn=node``)."""
        if not as_tensor:
            return self.data
        if self.is_output:
            return unpack_output(self.data, node, self.output_nr)
        return self.tensor if self.tensor is not None else self.data
