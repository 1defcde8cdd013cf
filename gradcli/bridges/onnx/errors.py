"""The ONNX bridge's error and names, importable without onnx."""
from __future__ import annotations

from ..errors import SUM_LOSS, BridgeError

# The losses an import can end in: the projection of Note [Projection loss] in
# bridges/torch/exporter.py, or the plain sum of every graph output.
PROJECTION, SUM = "projection", SUM_LOSS
LOSSES = (PROJECTION, SUM)


class OnnxError(BridgeError):
    """An ONNX model gradcli cannot import (one-line message naming the file and node)."""
