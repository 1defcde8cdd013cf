"""What a hook may return: the checks PyTorch's ``python_hook.cpp`` makes on hook results.

Note [Hook results]: a hook replaces a gradient only with one of the same size, dtype
and device, so a hook can never make a wrong gradient flow on silently (a float32
``.grad`` on a float64 leaf, a broadcast array of another shape). A tensor hook returns
None or one array (a gradcli ``Tensor`` counts as its array outside ``create_graph``);
a node's pre- and post-hooks return None or a tuple of exactly as many values as they
were given, and may not put a gradient where there was None. The messages are
PyTorch's, with gradcli's names for dtypes and devices.
"""
from __future__ import annotations

from ..devices import device_of
from . import dispatch


def hook_name(hook) -> str:
    """The name PyTorch's messages give a hook: its ``__name__``, else ``<unknown>``."""
    name = getattr(hook, "__name__", None)
    return name if isinstance(name, str) else "<unknown>"


def _describe(value) -> str:
    return f"{device_of(value)} {value.dtype}"


def check_variable_result(original, result, hook) -> None:
    """Raise unless ``result`` has ``original``'s dtype, device and shape."""
    if result.dtype != original.dtype or device_of(result) is not device_of(original):
        raise RuntimeError(f"hook '{hook_name(hook)}' has changed the type of value "
                           f"(was {_describe(original)} got {_describe(result)})")
    if tuple(result.shape) != tuple(original.shape):
        raise RuntimeError(f"hook '{hook_name(hook)}' has changed the size of value")


def _as_value(result, original, hook):
    """A hook's returned gradient, checked against ``original`` (a gradient, or None)."""
    Tensor = dispatch.Tensor
    if type(result) is Tensor:
        if type(original) is not Tensor:      # outside create_graph gradients are arrays
            result = result.data
    elif not (hasattr(result, "shape") and hasattr(result, "dtype")):
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
    if original is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    check_variable_result(original, result, hook)
    return result


def check_tensor_hook_result(original, result, hook):
    """A tensor hook's result (not None) as the gradient that replaces ``original``."""
    if original is None:
        # (a hook called on an undefined gradient: PyTorch's check_single_result)
        if type(result) is not dispatch.Tensor and not hasattr(result, "shape"):
            raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
        raise RuntimeError("can't replace a None gradient with a non-None value")
    return _as_value(result, original, hook)


def check_tuple_result(originals, result, hook) -> list:
    """A node pre- or post-hook's result (not None): a tuple of checked gradients."""
    if type(result) is not tuple:
        raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
    if len(result) != len(originals):
        raise RuntimeError(f"hook '{hook_name(hook)}' has returned an incorrect number of "
                           f"values (got {len(result)}, but expected {len(originals)})")
    out = []
    for original, value in zip(originals, result):
        out.append(None if value is None else _as_value(value, original, hook))
    return out
