"""Torch's prims in a decomposition's body, as the ATen ops that implement them.

Note [Prims as ATen]: PyTorch decomposes some non-core ATen ops through
``torch._refs``, whose bodies call ``torch.ops.prims`` (``std_mean`` and ``var_mean``
trace as ``prims.var``, ``prims.sum`` and ``prims.div``; ``cumprod`` as
``prims.prod``). A prim is no ATen op and PyTorch records no autograd node for one;
each carries ``impl_aten``, the ATen call that implements it (``prims.var`` is
``torch.var``). A composite's body is gradcli's ops, run for their values and
VJPs under the composite's own node name (Note [Composites] in exporter.py), so a
prim there may as well be its ATen implementation: ``decompositions()`` maps every
prim to it while a composite body is traced. Where that implementation is an ATen op
gradcli has no kernel for whose own decomposition comes back to the same prim
(``prims.hypot`` is ``torch.hypot``, decomposed by ``torch._refs`` into
``prims.hypot``), the trace raises ``PrimLoop`` and the export names the prim among
the missing ops, as before.
"""
from __future__ import annotations

import threading

import torch

_STATE = threading.local()


class PrimLoop(Exception):
    """A prim's ATen implementation decomposed back into the prim (no kernel for either)."""

    def __init__(self, prim):
        super().__init__(f"{prim} (its ATen implementation decomposes back into it)")
        self.prim = prim


def _as_aten(prim):
    impl = prim.impl_aten

    def run(*args, **kwargs):
        expanding = getattr(_STATE, "expanding", None)
        if expanding is None:
            expanding = _STATE.expanding = set()
        if prim in expanding:
            raise PrimLoop(prim)
        expanding.add(prim)
        try:
            return impl(*args, **kwargs)
        finally:
            expanding.discard(prim)

    return run


_TABLE = None


def decompositions() -> dict:
    """``{prims overload: its ATen implementation}`` for every prim that has one."""
    global _TABLE
    if _TABLE is None:
        import torch._prims  # noqa: F401,PLC0415 - registers the prims

        table = {}
        for name in dir(torch.ops.prims):
            packet = getattr(torch.ops.prims, name, None)
            if not isinstance(packet, torch._ops.OpOverloadPacket):
                continue
            for overload_name in packet.overloads():
                overload = getattr(packet, overload_name)
                if getattr(overload, "impl_aten", None) is not None:
                    table[overload] = _as_aten(overload)
        _TABLE = table
    return _TABLE
