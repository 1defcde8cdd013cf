"""The ``custom`` op: a user's class shaped like ``torch.autograd.Function``.

``{op: custom, function: "module:Name", inputs, outputs, args}``. The
registered ``custom`` op is declared (it has no forward of its own);
``for_entry`` resolves the entry's function (Note [Resolving user code] in
gradcli/ops/usercode.py; only with ``allow_code``: the loader refuses the entry
before that otherwise) and returns a ``CustomOp`` for it, which runs the
class through ``gradcli.autograd.Function`` (the ctx API, ``NameBackward``
nodes, reentrant backwards, saved tensors with ``create_graph``).

Note [custom op args]: ``args`` are passed to ``forward`` as keyword
arguments and do not count as inputs: ``needs_input_grad`` has one entry per
input tensor and ``backward`` returns one gradient (or None) per input
tensor; more gradients are accepted when the extra ones are None (as
PyTorch's rule), so a backward written for ``apply(x, scale=...)`` in
PyTorch 2.13, where keyword arguments count as inputs, also works. The args
a forward takes are read from its signature (the parameters after the
inputs): an unknown arg, or a missing one without a default, is refused at
load; a ``**kwargs`` forward takes any.

Errors: an exception raised by the user's ``forward`` (or by importing its
module) is a ``ForwardRaised`` naming the function, the op and the line (the
CLI exits 3); one raised by its ``backward`` is re-raised as
``CustomFunctionError`` naming the function, and the engine reports it with
the node and the op that created it, as any failing backward.
"""
from __future__ import annotations

import inspect

from ..autograd.function import Function, as_function
from ..autograd.tensor import Tensor
from .core import Arg, Op, declare


class CustomFunctionError(RuntimeError):
    """A custom op's ``backward`` raised (the user's exception is the cause)."""


class _AnyArgs(dict):
    """The args of a forward that takes ``**kwargs``: any name is accepted."""

    def get(self, key, default=None):
        return super().get(key, Arg(None))

    def __bool__(self):
        return True


def _args_of(forward, n_inputs):
    """``{name: Arg}`` for the parameters of ``forward(ctx, *inputs, **args)`` after the
    inputs (Note [custom op args])."""
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]   # ctx first
    except (TypeError, ValueError):
        return _AnyArgs()
    P = inspect.Parameter
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    named = [p for p in positional[n_inputs:] if p.kind is not P.POSITIONAL_ONLY]
    named += [p for p in params if p.kind is P.KEYWORD_ONLY]
    args = {p.name: Arg() if p.default is P.empty else Arg(p.default) for p in named}
    if any(p.kind is P.VAR_KEYWORD for p in params):
        return _AnyArgs(args)
    return args


class CustomOp(Op):
    """One ``custom`` entry of a graph file, bound to its user class."""

    __slots__ = ("function", "user_cls", "site")

    def __init__(self, function, user_cls, site, args):
        super().__init__("custom", self._forward_arrays, node_name=f"{user_cls.__name__}Backward",
                         saves=False, arity=(0, None), args=args, multi_output=True,
                         needs_code=True, doc=f"user code {function}")
        self.function = function
        self.user_cls = user_cls
        self.site = site

    def _where(self):
        site = self.site
        loc = f"{site.file}:{site.line}: " if site.file and site.line else ""
        return f"{loc}{site.label}: "

    def function_class(self, args):
        """A ``Function`` subclass named as the user's class (its node is
        ``NameBackward``) whose forward gets ``args`` as keywords."""
        user, function = self.user_cls, self.function
        user_forward, user_backward = user.forward, user.backward

        def forward(ctx, *arrays):
            return user_forward(ctx, *arrays, **args)

        def backward(ctx, *grads):
            try:
                return user_backward(ctx, *grads)
            except Exception as exc:  # noqa: BLE001 - user code: named in the error
                from .usercode import describe  # noqa: PLC0415

                raise CustomFunctionError(f"{function}.backward raised {describe(exc)}") from exc

        return type(user.__name__, (Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward),
                     "__qualname__": user.__qualname__, "__module__": user.__module__})

    def _forward_arrays(self, *arrays, **args):
        """The forward on raw arrays (gradcheck's replay): no node is recorded."""
        outs = self(*arrays, **args)
        return [o.data for o in outs]

    def __call__(self, *inputs, **args):
        from .usercode import ForwardRaised, describe  # noqa: PLC0415

        cls = self.function_class(args)
        try:
            out = cls.apply(*inputs)
        except Exception as exc:  # noqa: BLE001 - user code: named in the error
            raise ForwardRaised(f"{self._where()}{self.function}.forward raised "
                                f"{describe(exc)}", exc) from exc
        outs = list(out) if isinstance(out, tuple) else [out]
        for k, o in enumerate(outs):
            if type(o) is not Tensor:
                raise ForwardRaised(f"{self._where()}{self.function}.forward returned "
                                    f"{type(o).__name__} as output {k}, not an array")
        return outs


def _bind(op, entry, site):
    """``for_entry`` of the declared ``custom`` op: resolve the user's class."""
    from .usercode import ForwardRaised, NotFound, check_function_name, describe, resolve  # noqa: PLC0415

    if not site.allow_code:      # the loader refuses first; never import without the flag
        site.fail("op 'custom' runs user code: refused without --allow-code", "op")
    if "function" not in entry:
        site.fail("missing required key 'function' (\"module:Name\", the class to run)")
    function = entry["function"]
    try:
        check_function_name(function)
        obj = resolve(function, site.base_dir)
    except NotFound as exc:
        site.fail(f"cannot find {function!r}: {exc}" if isinstance(function, str) else str(exc),
                  "function")
    except Exception as exc:  # noqa: BLE001 - the module's own code raised on import
        loc = f"{site.file}:{site.line}: " if site.file and site.line else ""
        raise ForwardRaised(f"{loc}{site.label}: importing the module of {function} raised "
                            f"{describe(exc)}", exc) from exc
    try:
        cls = as_function(obj)
    except TypeError as exc:
        site.fail(f"{function}: {exc}", "function")
    inputs = entry.get("inputs")
    n_inputs = len(inputs) if isinstance(inputs, list) else 0
    return CustomOp(function, cls, site, _args_of(cls.forward, n_inputs))


declare("custom", "run user code: a class with forward and backward, as torch.autograd.Function "
        "(needs --allow-code)", node_name="<Name>Backward (Name: the class)", arity=(0, None),
        multi_output=True, needs_code=True, entry_binder=_bind)
