"""What the importer knows of one ONNX value (Note [Import runs the model] in convert.py)."""
from __future__ import annotations

import numpy as np

FLOATS = (np.float16, np.float32, np.float64)


class Value:
    """One ONNX value as the import knows it: its array, and its name in the file
    (None for a constant nothing written reads yet). ``dynamic``: it derives from a leaf."""

    __slots__ = ("array", "name", "dynamic", "onnx_name")

    def __init__(self, array, name=None, dynamic=False, onnx_name=None):
        self.array = array
        self.name = name
        self.dynamic = dynamic
        self.onnx_name = onnx_name

    @property
    def shape(self):
        return tuple(self.array.shape)

    @property
    def dtype(self):
        return self.array.dtype

    @property
    def rank(self):
        return self.array.ndim
