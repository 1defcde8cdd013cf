"""ATen schemas and graph files: which arguments are tensors, and how values are written.

Shared by the exporter (ATen call -> ``inputs``/``args``) and the PyTorch
replay in ``gradcli.bridges.torch.compare`` (``inputs``/``args`` -> ATen call), so the
two directions read one rule. Imports torch.
"""
from __future__ import annotations

import torch

# Arguments whose values are written by name (spec: "MemoryFormat, Layout and
# Device are written by name without torch.; a ScalarType is a dtype name").
# TorchScript types report ScalarType/Layout/MemoryFormat as int, so the
# argument's name is what tells them apart; ATen names them consistently.
ENUM_ARGS = {"dtype": "dtype", "memory_format": "memory_format", "layout": "layout",
             "device": "device"}


def tensor_kind(arg) -> str | None:
    """``tensor``, ``optional``, ``list`` for the schema's tensor arguments, else None."""
    t = arg.type
    if isinstance(t, torch.TensorType):
        return "tensor"
    if isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType):
        return "optional"
    if isinstance(t, torch.ListType):
        el = t.getElementType()
        if isinstance(el, torch.TensorType) or (
                isinstance(el, torch.OptionalType) and isinstance(el.getElementType(), torch.TensorType)):
            return "list"
    return None


def bind(schema, args, kwargs):
    """[(argument, value or MISSING)] in schema order for a call's args and kwargs."""
    bound = []
    for i, a in enumerate(schema.arguments):
        if not a.kwarg_only and i < len(args):
            bound.append((a, args[i]))
        elif a.name in kwargs:
            bound.append((a, kwargs[a.name]))
        else:
            bound.append((a, MISSING))
    return bound


class _Missing:
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()


def is_default(arg, value) -> bool:
    if not arg.has_default_value():
        return False
    try:
        return bool(arg.default_value == value) and type(arg.default_value) is type(value)
    except Exception:  # noqa: BLE001 - an incomparable default is simply written out
        return False


def write_value(value):
    """A non-tensor argument as plain YAML data, or raise TypeError."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, torch.Size)):
        return [write_value(v) for v in value]
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.device):
        return str(value)
    raise TypeError(f"an argument of type {type(value).__name__} ({value!r})")


# Argument.real_type names the enum TorchScript's ``type`` reports as int
# (``_softmax_backward_data``'s ``input_dtype`` is a ScalarType by type, not by name)
REAL_TYPES = {"ScalarType": "dtype", "ScalarType?": "dtype", "MemoryFormat": "memory_format",
              "MemoryFormat?": "memory_format", "Layout": "layout", "Layout?": "layout",
              "Device": "device", "Device?": "device"}


def read_value(name, value, arg=None):
    """The Python value to pass to an ATen op for the written argument ``name`` (``arg``:
    its schema Argument, whose ``real_type`` says what an enum argument holds)."""
    kind = ENUM_ARGS.get(name)
    if kind is None and arg is not None:
        kind = REAL_TYPES.get(str(getattr(arg, "real_type", "")))
    if kind is None or value is None:
        return value
    if kind == "device":
        return torch.device(value)
    obj = getattr(torch, str(value), None)
    wanted = {"dtype": torch.dtype, "memory_format": torch.memory_format,
              "layout": torch.layout}[kind]
    if not isinstance(obj, wanted):
        raise ValueError(f"{name}: unknown {kind} {value!r}")
    return obj


def out_of_place(overload):
    """The functional overload of an in-place ATen overload (``relu_`` -> ``relu.default``)."""
    schema = overload._schema
    base = schema.name.split("::", 1)[1]
    if not base.endswith("_") or base.endswith("__"):
        return None
    packet = getattr(torch.ops.aten, base[:-1], None)
    if packet is None:
        return None
    want = [(a.name, str(a.type), a.kwarg_only) for a in schema.arguments]
    for name in packet.overloads():
        cand = getattr(packet, name)
        got = [(a.name, str(a.type), a.kwarg_only) for a in cand._schema.arguments]
        if got == want and not mutated_arguments(cand._schema) and \
                len(cand._schema.returns) == len(schema.returns):
            return cand
    return None


def mutated_arguments(schema):
    """Indices of the arguments the schema declares as written (``Tensor(a!)``)."""
    return [i for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


def is_view(schema) -> bool:
    """Whether the op's first result aliases an input without writing it (a view)."""
    return bool(schema.returns) and schema.returns[0].alias_info is not None and \
        not schema.returns[0].alias_info.is_write


def op_name(overload) -> str:
    """``aten.NAME.OVERLOAD`` as ``str(torch.ops.aten.NAME.OVERLOAD)`` prints it."""
    return str(overload)
