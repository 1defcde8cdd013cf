"""Export PyTorch modules as gradcli graph files (needs the ``gradcli[torch]`` extra).

``from_module(module, example_inputs, ...)`` traces the module with
``make_fx`` into ATen ops and returns an ``ExportedGraph``; its ``write(DIR)``
writes ``DIR/graph.yaml`` and ``DIR/weights.npz``. Importing this package does
not import torch: the tracer is imported on the first call.
"""
from __future__ import annotations

__all__ = ["from_module", "ExportError", "ExportMismatch", "ExportedGraph", "GRAPH_FILE",
           "WEIGHTS_FILE"]

from .errors import (CROSS_ENTROPY, GRAPH_FILE, LOSSES, PROJECTION, WEIGHTS_FILE,  # noqa: F401
                     ExportError, ExportMismatch)


def from_module(module, example_inputs, *, loss=None, target=None, dtype=None, train=True,
                seed=0, name=None, keyword_inputs=None):
    """Trace ``module`` on ``example_inputs`` (and ``keyword_inputs``, by name) into an
    ``ExportedGraph`` (see ``exporter``)."""
    from .exporter import from_module as _from_module

    return _from_module(module, example_inputs, loss=loss, target=target, dtype=dtype,
                        train=train, seed=seed, name=name, keyword_inputs=keyword_inputs)


def __getattr__(name):
    if name == "ExportedGraph":
        from ..graphfile import ExportedGraph

        return ExportedGraph
    raise AttributeError(f"module 'gradcli.bridges.torch' has no attribute {name!r}")
