"""Where an op entry is in its graph file: what ``Op.for_entry`` is told."""
from __future__ import annotations

from typing import NamedTuple


class EntrySite(NamedTuple):
    """An op entry of a graph file, for ``Op.for_entry``: ``fail(message, key=None)``
    raises the loader's one-line GraphError at the entry (or at its ``key``)."""
    file: str | None
    line: int | None
    label: str              # "ops[3] 'id' (custom)"
    op_id: str
    base_dir: str
    allow_code: bool
    fail: object
