"""The op of an entry as a run calls it: before running it checks its inputs against
what the check inferred (or, on other inputs, against the op's ``infer`` and the
memory budget); a failure of the op on the user's input becomes a one-line
GraphError naming the file, the line and the op, any other failure an OpBugError
(a bug in gradcli). An ATen op's args are bound at load (Note [ATen calls bound at
load]), so a run calls its kernel without schema work."""
from __future__ import annotations

import numpy as np

from ..errors import BackwardError, GraphError, OpBugError
from ..errors import first_line as _first_line
from ..graph import LineOnDemand
from .budget import nbytes

# The failures of an op that are its input's fault (numpy's AxisError subclasses
# ValueError and IndexError, so it is covered); any other is a bug.
INPUT_ERRORS = (ValueError, TypeError, IndexError, ArithmeticError, KeyError)


class BoundOp(LineOnDemand):
    """An op as the loader hands it to the Graph: before running, it checks the size of
    its outputs (its ``infer`` on the inputs' actual shapes) against the memory budget;
    a failure of the op on the user's input becomes a one-line GraphError naming the op
    and its inputs' shapes, any other failure an OpBugError (a bug in gradcli). Other
    attributes are the op's."""

    __slots__ = ("op", "label", "file", "lineno", "input_names", "max_bytes", "checked",
                 "find_line", "index", "bound", "args")

    def __init__(self, op, label, file, line, input_names, max_bytes, find_line=None, index=None):
        self.op = op
        self.label = label
        self.file = file
        self.lineno = line
        self.input_names = input_names
        self.max_bytes = max_bytes
        self.checked = None      # [(shape, dtype)] of inputs the loader already inferred on
        self.find_line = find_line   # with ``index``: the line on demand (LineOnDemand)
        self.index = index
        self.bound = None        # the op with the entry's args bound at load, or None
        self.args = None         # those args (``run`` is for them only)

    def __getattr__(self, name):
        return getattr(self.op, name)

    def __repr__(self):
        return repr(self.op)

    def fail(self, message):
        raise GraphError(message, self.file, self.line, self.label)

    def describe(self, inputs):
        return ", ".join(f"{n} {list(getattr(t, 'shape', ()))} {getattr(t, 'dtype', '?')}"
                         for n, t in zip(self.input_names, inputs))

    def __call__(self, *inputs, **args):
        self.check_inputs(inputs, args)
        try:
            return self.op(*inputs, **args)
        except Exception as exc:  # noqa: BLE001 - sorted by ``failed``
            self.failed(exc, inputs)

    # Note [Checks proved at load]: a graph run on the leaves it was loaded with (the
    # Graph checks their shapes and dtypes, ``proved``) gives every op the inputs the
    # loader inferred its outputs from (``checked``): the op's shape rules are exact
    # (every op's row in the op tables checks ``infer`` against the forward), so the
    # check of the inputs' shapes and dtypes against the memory budget is not repeated
    # at every call. Any other run (other leaves, another precision, an op the loader
    # could not infer) checks every call, as before.
    def run(self, inputs, proved):
        """The entry's op on ``inputs`` with its args bound at load (``bound``; the
        Graph calls it for the args the entry was loaded with)."""
        if not proved or self.checked is None:
            self.check_inputs(inputs, self.args)
        try:
            return self.bound(*inputs)
        except Exception as exc:  # noqa: BLE001 - sorted by ``failed``
            self.failed(exc, inputs)

    def check_inputs(self, inputs, args):
        checked = self.checked
        if checked is None or len(checked) != len(inputs):
            self.precheck(inputs, args)
        else:
            # precheck's common case inline: the inputs the loader inferred on
            for t, (shape, dtype) in zip(inputs, checked):
                data = t.data if type(t) is _Tensor else t     # (a Tensor's shape and dtype)
                if getattr(data, "shape", None) != shape or (
                        getattr(data, "dtype", None) is not dtype
                        and getattr(data, "dtype", None) != dtype):
                    self.precheck(inputs, args)
                    break

    def failed(self, exc, inputs):
        """Raise what a failure of the op on ``inputs`` means (see the class)."""
        try:
            raise exc
        except (GraphError, BackwardError):   # BackwardError: user code or a grad op's backward
            raise
        except MemoryError:
            self.fail(f"out of memory (inputs: {self.describe(inputs)})")
        except Exception as exc:  # noqa: BLE001 - sorted below, in this order
            from ..ops.core import DeviceMismatch  # noqa: PLC0415 - only when an op failed

            if isinstance(exc, DeviceMismatch):
                self.fail(_first_line(exc))
            if isinstance(exc, INPUT_ERRORS):
                self.fail(f"{_first_line(exc)} (inputs: {self.describe(inputs)})")
            # not the file's fault: a bug, named as one
            raise OpBugError(self.op.name, exc, self.file, self.line, self.label) from exc

    def precheck(self, inputs, args):
        """Refuse, before running, inputs that do not fit and results over the memory
        budget (the op's ``infer`` on the actual shapes and dtypes: a graph run again in
        another precision, as gradcheck does, is checked again)."""
        checked = self.checked
        if checked is not None and len(checked) == len(inputs):
            # The common case, without building lists: the inputs the loader inferred on.
            for t, (shape, dtype) in zip(inputs, checked):
                if getattr(t, "shape", None) != shape or getattr(t, "dtype", None) != dtype:
                    break
            else:
                return
        from ..ops.core import ShapeMismatch  # noqa: PLC0415

        shapes = [tuple(getattr(t, "shape", ())) for t in inputs]
        dtypes = [t.dtype if hasattr(t, "dtype") else np.asarray(t).dtype for t in inputs]
        if self.checked is not None and self.checked == list(zip(shapes, dtypes)):
            return
        try:
            results = self.op.infer_outputs(shapes, dtypes, args)
        except ShapeMismatch as exc:
            self.fail(exc.message(self.input_names))
        except INPUT_ERRORS as exc:
            self.fail(f"{_first_line(exc)} (inputs: {self.describe(inputs)})")
        except Exception as exc:  # noqa: BLE001 - the op library's fault
            raise OpBugError(self.op.name, exc, self.file, self.line, self.label) from exc
        for shape, dtype in results or ():
            size = nbytes(shape, dtype.itemsize)
            if size > self.max_bytes:
                self.fail(f"the result of shape {list(shape)} needs {size} bytes, over the "
                          f"memory budget of {self.max_bytes} bytes (--max-tensor-bytes) "
                          f"(inputs: {self.describe(inputs)})")


_Tensor = None           # autograd's Tensor, imported with the first bound op


def bind(spec, checked, max_bytes, file):
    """Wrap ``spec.op`` (an entry's op, checked) in the BoundOp a run calls, with an
    ATen op's args bound (``spec.call``); ``checked``: the inputs' (shape, dtype) the
    check inferred on, or None.

    >>> from gradcli.loader import loads
    >>> graph = loads("version: 1\\ntensors: {x: {value: 2.0}}\\n"
    ...               "ops: [{op: mul, inputs: [x, x], output: y}]\\nbackward: {roots: [y]}\\n")
    >>> type(graph.ops[0].op).__name__, graph.ops[0].op.name
    ('BoundOp', 'mul')
    """
    global _Tensor
    if _Tensor is None:
        from ..autograd.tensor import Tensor as _Tensor  # noqa: PLC0415
    op = spec.op
    bound = BoundOp(op, spec.label, file, spec.lineno, spec.inputs, max_bytes, spec.find_line,
                    spec.index)
    bound.checked = checked
    spec.op = bound
    bind_args = getattr(op, "bind_args", None)
    if bind_args is not None:      # Note [ATen calls bound at load]
        bound.bound = bind_args(spec.args)
        bound.args = spec.args
        spec.call = bound.run
        if checked is not None:      # (what ``run`` calls on proved inputs)
            spec.call_proved = bound.bound
    if spec.no_grad:               # (through ``call`` alone: the direct call would skip it)
        spec.call = NoGradCall(spec.call, bound, spec.args)
        spec.call_proved = None


class NoGradCall:
    """Note [Ops run with grad mode off]: an entry with ``no_grad: true`` runs as under
    ``torch.no_grad()``. PyTorch's own composite ops do so inside (cosine_similarity
    clamps its norms in place under a NoGradGuard) and modules do in Python
    (``with torch.no_grad():`` on activations): the outputs of an op run so do not require
    grad and it records no node; an in-place op run so changes its input's values and
    version, not its history (the input keeps its ``grad_fn``). ``gradcli export`` writes
    the flag on the ops the module ran with grad mode off; only the entries that carry it
    pay for the wrapper."""

    __slots__ = ("call", "op", "args")

    def __init__(self, call, op, args):
        self.call, self.op, self.args = call, op, args

    def __call__(self, inputs, proved):
        from ..autograd import set_grad_enabled  # noqa: PLC0415

        with set_grad_enabled(False):
            if self.call is not None:
                return self.call(inputs, proved)
            return self.op(*inputs, **self.args)
