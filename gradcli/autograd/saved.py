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

from . import dispatch
from .tensor import Tensor, version_counter


def unpack_output(data, node, output_nr, differentiable=True):
    """A Tensor for output ``output_nr`` of ``node`` (whose array is ``data``). An output the
    op marks non-differentiable (derivatives.yaml's ``output_differentiability``: layer
    norm's mean and rstd, pooling's indices) comes back without a history, as PyTorch's
    SavedVariable of an output that did not require grad: a formula that records with it
    under create_graph treats it as a constant."""
    if not differentiable or data.dtype.kind != "f":
        return Tensor(data)
    t = Tensor(data, requires_grad=True)
    t.grad_fn = node
    t.output_nr = output_nr
    return t


class SavedVariable:
    """One saved value: a Tensor input (kept), a Tensor output (array + number), or a raw
    array; packed instead when saved-tensor hooks are active (Note [Saved-tensor hooks]),
    and checked against its version counter when unpacked (Note [Version counters])."""

    __slots__ = ("data", "tensor", "output_nr", "is_output", "version", "packed")

    def __init__(self, value, is_output=False, output_nr=0):
        self.is_output = is_output and type(value) is Tensor and value.requires_grad
        self.output_nr = output_nr
        self.packed = None
        self.version = None
        if type(value) is Tensor:
            self.data = value.data
            self.tensor = None if self.is_output else value
            if dispatch.SAVED_CHECKS:
                from .graph import Packed, current_hooks  # noqa: PLC0415

                hooks = current_hooks()
                if hooks is not None:
                    self.packed = Packed(value, hooks, is_output=self.is_output)
                    self.data = self.tensor = None
                else:
                    self.version = (value._version, version_counter(value),
                                    None if self.is_output else value)
        else:
            self.data = value
            self.tensor = None

    def unpack(self, node=None, as_tensor=False):
        """The raw array, or with ``as_tensor`` the Tensor (outputs get ``grad_fn=node``)."""
        if self.packed is not None:
            t = self.packed.unpack()
            if self.is_output:
                t.requires_grad, t.grad_fn, t.output_nr = True, node, self.output_nr
            return t if as_tensor else t.data
        if self.version is not None:
            expected, vc, value = self.version
            if vc[0] != expected:
                output_of = (self.output_nr, node.name) if self.is_output else None
                if self.is_output:
                    raise RuntimeError(modified_message(self.data, vc[0], expected, output_of,
                                                        node.name if node else None))
                check_saved_version(value, expected, node)
        elif self.tensor is not None and dispatch.SAVED_CHECKS and \
                (self.tensor._vc is not None or self.tensor._base is not None):
            # saved before any in-place op ran (no version was taken): it was at version 0
            check_saved_version(self.tensor, 0, node)
        if not as_tensor:
            return self.data
        if self.is_output:
            return unpack_output(self.data, node, self.output_nr)
        return self.tensor if self.tensor is not None else self.data


def modified_message(data, version, expected, output_of=None, saved_by=None) -> str:
    """PyTorch's error for a saved tensor an in-place op changed (Note [Version counters])."""
    shape = ", ".join(str(int(n)) for n in data.shape)
    from ..devices import device_of  # noqa: PLC0415

    what = f"[{device_of(data)} {data.dtype} [{shape}]]"
    if output_of is not None:
        output_nr, fn_name = output_of
        what += f", which is output {output_nr} of {_forward_name(fn_name)},"
    hint = f" Hint: the tensor was saved by {saved_by}." if saved_by else ""
    return (f"one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: {what} is at version {version}; expected version "
            f"{expected} instead.{hint}")


def _forward_name(fn_name) -> str:
    """``ExpBackward0`` -> ``Exp``: PyTorch 2.13 names the op, not its node."""
    import re  # noqa: PLC0415

    return re.sub(r"Backward\d*$", "", fn_name) or fn_name


def check_saved_version(tensor, expected, node, vc=None, data=None, output_of=None):
    """Raise when ``tensor`` (or the counter ``vc``) moved past ``expected``."""
    if vc is None:
        vc = tensor._vc
        if vc is None and tensor._base is not None:
            vc = tensor._base._vc
        if vc is None:
            return
    if vc[0] == expected:
        return
    if tensor is not None:
        data = tensor.data
        if tensor.grad_fn is not None:
            output_of = (tensor.output_nr, tensor.grad_fn.name)
    raise RuntimeError(modified_message(data, vc[0], expected, output_of, node.name))
