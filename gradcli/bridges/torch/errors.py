"""The export package's errors and names, importable without torch."""
from __future__ import annotations

# The losses an export can end in (Note [Projection loss] in exporter.py).
PROJECTION, CROSS_ENTROPY = "projection", "cross_entropy"
LOSSES = (PROJECTION, CROSS_ENTROPY)

from ..errors import GRAPH_FILE, WEIGHTS_FILE, BridgeError  # noqa: F401 - re-exported

# A module the exporter cannot express as a graph file (one-line message): the error
# every bridge raises, so that the shared graph-file writer's errors are export errors.
ExportError = BridgeError


class ExportMismatch(ExportError):
    """The written graph does not replay as the module did: a bug in the exporter."""
