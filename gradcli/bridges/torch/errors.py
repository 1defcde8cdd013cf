"""The export package's errors and names, importable without torch."""
from __future__ import annotations

# The losses an export can end in (Note [Projection loss] in exporter.py).
PROJECTION, CROSS_ENTROPY = "projection", "cross_entropy"
LOSSES = (PROJECTION, CROSS_ENTROPY)

GRAPH_FILE = "graph.yaml"
WEIGHTS_FILE = "weights.npz"


class ExportError(Exception):
    """A module the exporter cannot express as a graph file (one-line message)."""


class ExportMismatch(ExportError):
    """The written graph does not replay as the module did: a bug in the exporter."""
