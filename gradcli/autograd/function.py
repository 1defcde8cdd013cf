"""``Function``: user-defined ops with their own backward (``torch.autograd.Function``).

A subclass defines ``forward(ctx, *args, **kwargs)`` and ``backward(ctx,
*grads)`` as static methods and is called through ``apply``::

    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = np.exp(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return mul(g, y)

Note [Function arrays and Tensors]: gradcli's ops compute on raw arrays and
record on Tensors, and a Function follows the same rule. ``forward`` runs
with grad mode off and receives raw arrays (a Tensor argument's ``.data``;
other arguments as passed); the arrays it returns become the Tensors
``apply`` returns. ``backward`` runs with the engine's grad mode: without
``create_graph`` it receives raw gradients and ``ctx.saved_tensors`` gives
raw arrays; with ``create_graph`` (grad mode on) ``saved_tensors`` gives
Tensors (inputs as they were passed, outputs with this node as their
``grad_fn``, Note [Saved tensors]) and the gradients may be Tensors, so a
backward written with gradcli's ops records itself and can be
differentiated again.

As in PyTorch 2.13, keyword arguments of ``apply`` are passed to
``forward`` as keywords but count as inputs after the positional ones (in
``needs_input_grad`` and in the gradients ``backward`` returns), and the
context ``ctx`` *is* the backward node, named ``<Name>Backward``.
"""
from __future__ import annotations

from ..devices import CPU, on_device, xp_of
from .node import ERR_BACKWARD_TWICE, InputMetadata, Node
from .saved import SavedVariable
from .state import STATE, next_sequence_nr, set_grad_enabled
from .tensor import Tensor


def _is_array(x):
    return hasattr(x, "shape") and hasattr(x, "dtype") and type(x) is not Tensor


class BackwardCFunction(Node):
    """The backward node of one ``Function.apply`` call, and its ``ctx``.

    It has a ``__dict__`` (no ``__slots__``): ``forward`` may store any
    attribute on ``ctx`` for ``backward``.
    """

    _forward_cls = None

    def _begin(self, needs_input_grad, is_tensor_input):
        self.needs_input_grad = needs_input_grad
        self._is_tensor_input = is_tensor_input
        self._to_save = None
        self._saved = ()
        self._non_differentiable = ()
        self._materialize_grads = True
        self._output_is_array = ()

    # -- the ctx API used by forward ---------------------------------------------
    def save_for_backward(self, *values):
        """Keep ``values`` (inputs, outputs, other arrays or None) for ``backward``."""
        self._to_save = values

    def mark_non_differentiable(self, *outputs):
        """These outputs do not require grad; ``backward`` gets zeros (or None) for them."""
        self._non_differentiable = tuple(o.data if type(o) is Tensor else o for o in outputs)

    def set_materialize_grads(self, value):
        """With False, an output's missing gradient reaches ``backward`` as None, not zeros."""
        self._materialize_grads = bool(value)

    @property
    def saved_tensors(self):
        saved = self._saved
        if saved is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        as_tensor = STATE.grad_enabled
        return tuple(None if s is None else s.unpack(self, as_tensor) for s in saved)

    # -- the node ----------------------------------------------------------------
    def apply(self, grads):
        cls = self._forward_cls
        grads = list(grads)
        if self._materialize_grads:
            for i, g in enumerate(grads):
                if g is None and self._output_is_array[i]:
                    meta = self.input_metadata[i]
                    zeros = xp_of(meta.device).zeros(meta.shape, meta.dtype)
                    grads[i] = on_device(zeros, meta.device)
        try:
            result = cls.backward(self, *grads)
        except Exception as exc:
            exc.add_note(f"raised in {self.name} (the backward of {cls.__qualname__})")
            raise
        if not isinstance(result, tuple):
            result = (result,)
        expected = len(self._is_tensor_input)
        # Returning too many gradients is fine as long as the extra ones are None.
        if len(result) > expected and all(r is None for r in result[expected:]):
            result = result[:expected]
        if len(result) != expected:
            raise RuntimeError(f"function {self.name} returned an incorrect number of gradients "
                               f"(expected {expected}, got {len(result)})")
        out = []
        for i, r in enumerate(result):
            if not self._is_tensor_input[i]:
                if r is not None:
                    raise RuntimeError(
                        f"function {self.name} returned a gradient different than None at "
                        f"position {i + 1}, but the corresponding forward input was not a "
                        f"Variable")
                continue
            out.append(r)
        return out

    def release_variables(self):
        self._saved = None


class Function:
    """Base class of user-defined differentiable functions (``torch.autograd.Function``)."""

    _backward_cls = BackwardCFunction

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(f"{cls.__name__}Backward", (BackwardCFunction,),
                                 {"_forward_cls": cls})

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` and, when an input requires grad, record a ``<Name>Backward`` node."""
        if cls is Function:
            raise RuntimeError("apply() must be called on a subclass of Function")
        inputs = list(args) + list(kwargs.values())
        is_tensor_input = tuple(type(a) is Tensor for a in inputs)
        needs_input_grad = tuple(t and a.requires_grad for a, t in zip(inputs, is_tensor_input))
        is_executable = STATE.grad_enabled and any(needs_input_grad)

        node_cls = cls._backward_cls
        ctx = node_cls.__new__(node_cls)
        ctx._begin(needs_input_grad, is_tensor_input)
        sequence_nr = next_sequence_nr()      # every node takes one, as PyTorch's
        raw = [a.data if t else a for a, t in zip(inputs, is_tensor_input)]
        n_args = len(args)
        try:
            with set_grad_enabled(False):
                out = cls.forward(ctx, *raw[:n_args], **dict(zip(kwargs, raw[n_args:])))
        except Exception as exc:
            exc.add_note(f"raised in {cls.__qualname__}.forward")
            raise

        is_tuple = isinstance(out, tuple)
        outs = [o.data if type(o) is Tensor else o for o in (out if is_tuple else (out,))]
        output_is_array = tuple(_is_array(o) for o in outs)
        non_diff = ctx._non_differentiable
        results = []
        for i, o in enumerate(outs):
            if not output_is_array[i]:
                results.append(o)
                continue
            differentiable = (is_executable and o.dtype.kind == "f"
                              and not any(o is n for n in non_diff))
            t = Tensor(o, requires_grad=differentiable)
            if differentiable:
                t.grad_fn = ctx
                t.output_nr = i
            results.append(t)

        # One edge per Tensor input (an invalid one where it needs no grad).
        edges = [a.gradient_edge() if need and is_executable else None
                 for a, t, need in zip(inputs, is_tensor_input, needs_input_grad) if t]
        metas = [InputMetadata.of(o) if output_is_array[i] else InputMetadata((), "float64", CPU)
                 for i, o in enumerate(outs)]
        Node.__init__(ctx, node_cls.__name__, edges, metas, sequence_nr=sequence_nr)
        ctx._output_is_array = output_is_array
        if is_executable:
            ctx._saved = _save(ctx._to_save, inputs, is_tensor_input, outs, results)
        ctx._to_save = None
        return tuple(results) if is_tuple else results[0]


def _save(to_save, inputs, is_tensor_input, outs, results):
    """Match each value given to ``save_for_backward`` to an output or input Tensor."""
    if not to_save:
        return ()
    saved = []
    for v in to_save:
        if v is None:
            saved.append(None)
            continue
        data = v.data if type(v) is Tensor else v
        entry = None
        for a, t in zip(inputs, is_tensor_input):
            if t and a.data is data:
                entry = SavedVariable(a)
                break
        if entry is None:
            for i, o in enumerate(outs):
                if o is data and type(results[i]) is Tensor:
                    entry = SavedVariable(results[i], is_output=True, output_nr=i)
                    break
        if entry is None:
            entry = SavedVariable(v)
        saved.append(entry)
    return saved


def as_function(user_cls):
    """A ``Function`` subclass running ``user_cls``'s static ``forward``/``backward``.

    For classes shaped like ``torch.autograd.Function`` that do not subclass
    gradcli's (a graph file's ``custom`` op): the wrapper keeps the class's
    name, so its node is ``<Name>Backward``. A Function subclass is returned
    as it is.
    """
    if isinstance(user_cls, type) and issubclass(user_cls, Function):
        return user_cls
    missing = [m for m in ("forward", "backward") if not callable(getattr(user_cls, m, None))]
    if missing:
        raise TypeError(f"{getattr(user_cls, '__qualname__', user_cls)!r} is not shaped like "
                        f"torch.autograd.Function: no {' or '.join(missing)} method")
    return type(user_cls.__name__, (Function,),
                {"forward": staticmethod(user_cls.forward),
                 "backward": staticmethod(user_cls.backward),
                 "__qualname__": user_cls.__qualname__, "__module__": user_cls.__module__,
                 "__doc__": user_cls.__doc__})
