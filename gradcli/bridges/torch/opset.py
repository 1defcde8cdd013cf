"""PyTorch's core ATen opset, read from torch itself: the overloads tagged ``torch.Tag.core``.

Example::

    >>> from gradcli.bridges.torch.opset import core_aten_overloads
    >>> "aten.add.Tensor" in core_aten_overloads()       # doctest: +SKIP (needs torch)
    True
"""
from __future__ import annotations


def core_aten_overloads():
    """The core ATen overloads of the installed torch, as ``aten.NAME.OVERLOAD`` (the names
    gradcli's ops take), sorted; raises ImportError without torch."""
    import torch  # noqa: PLC0415 - the optional dependency, imported only here

    names = []
    for packet_name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None or not hasattr(packet, "overloads"):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                names.append(str(op))
    return sorted(names)


def torch_version():
    """The installed torch's version without its local suffix (``2.13.0``)."""
    import torch  # noqa: PLC0415

    return torch.__version__.split("+")[0]
