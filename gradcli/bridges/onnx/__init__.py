"""Import ONNX models as gradcli graph files (needs the ``gradcli[onnx]`` extra).

``from_onnx(path, ...)`` reads an ONNX file (untrusted input: sizes, external data and
attributes are checked before anything is allocated), maps every node onto gradcli's
ops (ATen or version 1) with the node's name as the op id, and returns an
``ExportedGraph``; its ``write(DIR)`` writes ``DIR/graph.yaml`` and ``DIR/weights.npz``.
With onnxruntime installed, ``expect.forward`` holds onnxruntime's outputs of the model
on the same inputs. Importing this package imports neither onnx nor NumPy.

>>> from gradcli.bridges.onnx import from_onnx       # doctest: +SKIP
>>> from_onnx("model.onnx", input_shapes={"x": (2, 3)}).write("out/")   # doctest: +SKIP
'out/graph.yaml'
"""
from __future__ import annotations

__all__ = ["from_onnx", "OnnxError", "LOSSES"]

from .errors import LOSSES, OnnxError  # noqa: F401


def from_onnx(path, *, inputs=None, input_shapes=None, loss="projection", dtype=None,
              requires_grad="all", seed=0, name=None, reference=True):
    """Import the ONNX model at ``path`` into an ``ExportedGraph`` (see ``convert``)."""
    from .convert import from_onnx as _from_onnx

    return _from_onnx(path, inputs=inputs, input_shapes=input_shapes, loss=loss, dtype=dtype,
                      requires_grad=requires_grad, seed=seed, name=name, reference=reference)
