"""gradcli: load serialized computation graphs and run their backward pass.

``import gradcli`` stays light: the loader, the ops and NumPy-heavy parts are
imported on first use.
"""
from .autograd import dispatch as _dispatch
from ._version import __version__

__all__ = ["load", "loads", "GraphError", "__version__"]


def _load_ops():
    from . import ops  # noqa: F401 - installs Tensor's operators (Note [Core dispatch])


_dispatch.load_ops = _load_ops


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
