"""The autograd core: nodes, tensors and the engine. Knows nothing of files or the CLI.

Its names load on first use (PEP 562), so that ``import gradcli`` can reach the core's
registration point (``gradcli.autograd.dispatch``, Note [Core dispatch]) without
importing the engine or NumPy.
"""
import importlib

# name -> the module of this package that defines it
_LAZY = {
    "backward": "api", "grad": "api", "queue_callback": "api",
    "Engine": "engine", "get_current_graph_task_execution_order": "engine",
    "get_default_engine": "engine", "predicted_execution_order": "engine",
    "set_default_engine": "engine",
    "GraphTask": "graph_task", "InputBuffer": "input_buffer",
    "AccumulateGrad": "node", "GraphRoot": "node", "InputMetadata": "node", "Node": "node",
    "ReadyQueue": "ready_queue",
    "detect_anomaly": "state", "enable_grad": "state", "is_grad_enabled": "state",
    "no_grad": "state", "set_grad_enabled": "state", "set_multithreading_enabled": "state",
    "is_multithreading_enabled": "state",
    "Tensor": "tensor",
    "checkpoint": "checkpoint",
    "disable_saved_tensors_hooks": "graph", "register_multi_grad_hook": "graph", "saved_tensors_hooks": "graph",
    # The custom-Function API: a graph without a ``custom`` op never needs it.
    "BackwardCFunction": "function", "Function": "function", "as_function": "function",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
