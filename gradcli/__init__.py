"""gradcli: load serialized computation graphs and run their backward pass.

``import gradcli`` stays light: the loader, the ops and NumPy-heavy parts are
imported on first use.
"""
from ._version import __version__

__all__ = ["load", "loads", "GraphError", "__version__"]


def __getattr__(name):
    if name in ("load", "loads"):
        from . import loader

        return getattr(loader, name)
    if name == "GraphError":
        from .errors import GraphError

        return GraphError
    if name in ("autograd", "ops", "devices"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gradcli' has no attribute {name!r}")
