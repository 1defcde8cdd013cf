"""What every bridge shares: the names of the files it writes and its error."""
from __future__ import annotations

GRAPH_FILE = "graph.yaml"
WEIGHTS_FILE = "weights.npz"
SUM_LOSS = "sum"                # the loss that sums every floating output (import --loss)


class BridgeError(Exception):
    """A model a bridge cannot express as a graph file (one-line message)."""
