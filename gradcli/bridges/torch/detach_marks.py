"""Which traced nodes are the module's ``detach()`` calls.

Note [detach traced as alias] (exporter.py): from torch 2.14 ``make_fx`` records
``x.detach()`` as ``aten.alias``, the op it also records for a slice that spans a
whole dim (``q[..., :rotary_dim]`` with ``rotary_dim`` the full head size, as Phi-3's
partial rotary embedding takes it). The first stops the gradient, the second passes
it on. ``DetachMarks`` is a torch function mode active while the module is traced:
it sees the Python-level ``detach`` calls and marks the node each one traced as
(``node.meta[MARK]``), so the exporter writes exactly those as ``aten.detach``. It also
marks the nodes whose tensor the module makes require grad (``node.meta[LEAF]``, Note
[Leaves made in the forward] in exporter.py).

``NoGradMarks`` marks the nodes traced while grad mode was off (``node.meta[NO_GRAD]``,
Note [Ops run with grad mode off] in gradcli/loader/bound_op.py): a module's ``with
torch.no_grad():`` block, and the ops PyTorch's own composite ops run under a
NoGradGuard (cosine_similarity clamps its norms in place so). ``make_fx`` records
them like any other op; PyTorch's autograd did not.

Example::

    with DetachMarks() as marks:
        gm = make_fx(fn)(x)
    marks.working and [n for n in gm.graph.nodes if n.meta.get(MARK)]
"""
from __future__ import annotations

import operator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

MARK = "gradcli_detach"
LEAF = "gradcli_made_leaf"      # Note [Leaves made in the forward] (exporter.py)
NO_GRAD = "gradcli_no_grad"     # traced with grad mode off


def _proxy_api():
    try:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
    except ImportError:             # a release without them: the exporter keeps its rule
        return None
    return get_proxy_mode, get_proxy_slot


class DetachMarks(TorchFunctionMode):
    """Marks the traced node of every ``Tensor.detach`` / ``torch.detach`` result.
    ``working``: this release lets the mode find the nodes (else nothing is marked
    and the exporter falls back to taking every traced alias as a detach)."""

    def __init__(self):
        super().__init__()
        self.api = _proxy_api()
        self.working = self.api is not None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.working and func in (torch.Tensor.detach, torch.detach):
            proxy = self._proxy(out)
            if proxy is None:
                self.working = False    # cannot tell: the exporter's fallback rule decides
            else:
                proxy.node.meta[MARK] = True
        elif self.api is not None and _sets_requires_grad(func, args, kwargs):
            proxy = self._proxy(args[0])
            if proxy is not None:
                proxy.node.meta[LEAF] = True
        return out

    def _proxy(self, tensor):
        return _proxy(self.api, tensor)


def _sets_requires_grad(func, args, kwargs):
    """``t.requires_grad = True`` or ``t.requires_grad_()`` (``_(True)``) on a tensor."""
    if not args or not isinstance(args[0], torch.Tensor):
        return False
    if getattr(func, "__self__", None) is torch._C.TensorBase.requires_grad:     # the setter
        return len(args) > 1 and bool(args[1])
    if func is torch.Tensor.requires_grad_:
        flag = args[1] if len(args) > 1 else (kwargs or {}).get("requires_grad", True)
        return bool(flag)
    return False


class NoGradMarks(TorchDispatchMode):
    """Marks the traced node of every op dispatched while grad mode is off. Entered inside
    the traced function (above ``make_fx``'s own mode), it sees each ATen call before the
    tracer and finds the node the tracer made for its result."""

    def __init__(self):
        super().__init__()
        self.api = _proxy_api()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        enabled = torch.is_grad_enabled()
        out = func(*args, **(kwargs or {}))
        if not enabled and self.api is not None:
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                proxy = _proxy(self.api, t) if isinstance(t, torch.Tensor) else None
                if proxy is not None:
                    node = proxy.node
                    node.meta[NO_GRAD] = True
                    if node.target is operator.getitem:     # one output of several
                        node.args[0].meta[NO_GRAD] = True
        return out


def _proxy(api, tensor):
    get_proxy_mode, get_proxy_slot = api
    mode = get_proxy_mode()
    slot = None if mode is None else get_proxy_slot(tensor, mode.tracer, None)
    return getattr(slot, "proxy", None)
