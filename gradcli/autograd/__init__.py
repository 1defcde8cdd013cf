"""The autograd core: nodes, tensors and the engine. Knows nothing of files or the CLI."""
from .api import backward, grad, queue_callback
from .engine import (Engine, get_current_graph_task_execution_order, get_default_engine,
                     predicted_execution_order, set_default_engine)
from .graph_task import GraphTask
from .input_buffer import InputBuffer
from .node import AccumulateGrad, GraphRoot, InputMetadata, Node
from .ready_queue import ReadyQueue
from .state import (detect_anomaly, enable_grad, is_grad_enabled, no_grad, set_grad_enabled,
                    set_multithreading_enabled)
from .tensor import Tensor

# The custom-Function API (function.py) loads on first use: a graph without a
# ``custom`` op never needs it (start-up, issue 12).
_LAZY = {"BackwardCFunction": "function", "Function": "function", "as_function": "function"}


def __getattr__(name):
    if name in _LAZY:
        import importlib  # noqa: PLC0415 - only when a deferred module loads

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "AccumulateGrad", "BackwardCFunction", "Engine", "Function", "GraphRoot", "GraphTask",
    "InputBuffer", "InputMetadata", "Node", "ReadyQueue", "Tensor", "as_function", "backward", "detect_anomaly", "enable_grad",
    "get_current_graph_task_execution_order", "get_default_engine", "grad", "is_grad_enabled",
    "no_grad", "predicted_execution_order", "queue_callback", "set_default_engine",
    "set_grad_enabled", "set_multithreading_enabled",
]
