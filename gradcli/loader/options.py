"""What a load may spend (the memory budgets), which devices a file's tensors land
on, and whether user code and paths outside the graph's folder are allowed: the
options of ``load`` and ``loads``, as one object."""
from __future__ import annotations

from .. import devices as D
from .budget import default_max_graph_bytes, default_max_tensor_bytes


class LoadOptions:
    """The options of one load (``None`` budgets: the defaults of ``budget.py``).

    >>> LoadOptions(device_map={"cuda": "sim"}, max_tensor_bytes=2**20).max_tensor_bytes
    1048576
    """

    def __init__(self, device_map=None, allow_code=False, allow_outside_paths=False,
                 max_tensor_bytes=None, max_document_bytes=None, max_graph_bytes=None):
        self.device_map = dict(device_map or {})
        self.allow_code = allow_code
        self.allow_outside_paths = allow_outside_paths
        self.max_tensor_bytes = max_tensor_bytes or default_max_tensor_bytes()
        self.max_document_bytes = max_document_bytes    # None: the reader's default budget
        self.max_graph_bytes = max_graph_bytes or default_max_graph_bytes()


def parse_device_map(text) -> dict:
    """``cuda=sim`` (comma-separated pairs) -> {"cuda": "sim"}.

    >>> parse_device_map("cuda=sim")
    {'cuda': 'sim'}
    """
    mapping = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        src, sep, dst = part.partition("=")
        src, dst = src.strip(), dst.strip()
        if not sep or src not in D.DEVICE_TYPES or dst not in D.DEVICE_TYPES:
            raise ValueError(f"bad device map {part!r} (expected e.g. cuda=sim)")
        mapping[src] = dst
    return mapping
