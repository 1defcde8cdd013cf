"""PyTorch operator schemas, parsed: which arguments are tensors, the others' types and defaults.

An ATen entry is declared with its schema exactly as ``str(op._schema)``
prints it (less the ``aten::`` prefix), e.g.
``add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor``. From
that one line come the tensor inputs in schema order (with ``?`` optional and
``[]`` list markers), the other arguments with their checkers and defaults,
and the number of outputs.
"""
from __future__ import annotations

import re

from .. import args as A
from ..core import Arg

# Note [schema defaults]: native_functions.yaml writes a few defaults by
# name: `int reduction=Mean` is at::Reduction::Mean (1); an `int[N]` default
# given as one int means that int N times (`int[2] padding=0` is [0, 0]).
# c10::ScalarType's numbers, as a schema prints a ScalarType default (``ScalarType? dtype=4``)
_SCALAR_TYPE_CODES = {3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64", 11: "bool"}
_NAMED_DEFAULTS = {"None": None, "True": True, "False": False, "Mean": 1, "Sum": 2,
                   "contiguous_format": "contiguous_format"}


class TensorParam:
    """A ``Tensor``, ``Tensor?``, ``Tensor[]`` or ``Tensor?[]`` argument."""

    __slots__ = ("name", "optional", "is_list")

    def __init__(self, name, optional, is_list):
        self.name, self.optional, self.is_list = name, optional, is_list


class Schema:
    """One parsed overload schema."""

    __slots__ = ("text", "name", "tensors", "args", "n_outputs", "list_output", "returns_view")

    def __init__(self, text):
        m = re.fullmatch(r"\s*([\w.]+)\((.*)\)\s*->\s*(.+?)\s*", text)
        if not m:
            raise ValueError(f"cannot parse schema {text!r}")
        self.text = text.strip()
        name = m.group(1)
        self.name = "aten." + (name if "." in name else name + ".default")
        self.tensors: list[TensorParam] = []
        self.args: dict[str, Arg] = {}
        for item in _split_top(m.group(2)):
            if item == "*":
                continue
            type_, _, rest = item.rpartition(" ") if "=" not in item else item.partition("=")[0].rpartition(" ")
            pname = rest.strip()
            default = item.partition("=")[2] if "=" in item else None
            type_ = re.sub(r"\([^)]*\)", "", type_).strip()   # alias annotations: Tensor(a!)
            base = type_.rstrip("?")
            if base.startswith("Tensor"):
                self.tensors.append(TensorParam(pname, type_.endswith("?") or base.startswith("Tensor?"),
                                                base.endswith("]")))
            else:
                self.args[pname] = _arg(type_, default)
        if sum(p.is_list for p in self.tensors) > 1:
            raise ValueError(f"schema {text!r}: at most one Tensor[] argument is supported")
        returns = m.group(3).strip()
        # Note [Views from the schema]: a return annotated with an input's alias set
        # and no `!` (`Tensor(a) self -> Tensor(a)`, `Tensor(a -> *)[]`) shares that
        # input's memory: the op allocates nothing (Op.view, the graph's memory budget).
        self.returns_view = bool(re.match(r"\(?Tensor\([a-z]\)", returns))
        self.list_output = returns.endswith("[]")
        self.n_outputs = len(_split_top(returns[1:-1])) if returns.startswith("(") else 1

    def __repr__(self):
        return f"<schema {self.text}>"


def _split_top(text):
    """Split on commas outside brackets, quotes and parentheses."""
    parts, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _arg(type_, default_text):
    optional = type_.endswith("?")
    base = type_.rstrip("?")
    check = _checker(base)
    if optional:
        inner = check
        check = lambda v, _c=inner: None if v is None else _c(v)  # noqa: E731
    if default_text is None:
        return Arg(check=check)
    value = _literal(default_text.strip())
    if base == "ScalarType" and isinstance(value, int):
        value = _SCALAR_TYPE_CODES[value]     # Note [schema defaults]: randperm's dtype=4 is Long
    return Arg(check(value) if default_text.strip() != "None" else None, check)


def _literal(text):
    if text in _NAMED_DEFAULTS:
        return _NAMED_DEFAULTS[text]
    if text[:1] in "'\"":
        return text[1:-1]
    if text.startswith("["):
        return [_literal(t) for t in _split_top(text[1:-1])]
    try:
        return int(text)
    except ValueError:
        return float(text)


def _checker(base):
    m = re.fullmatch(r"(int|SymInt|bool|float)\[(\d*)\]", base)
    if m:
        elem = _SCALAR_CHECKS[m.group(1)]
        size = int(m.group(2)) if m.group(2) else None

        def check_list(v, _elem=elem, _size=size, _type=base):
            if not isinstance(v, (list, tuple)):
                v = [v] * (_size or 1)        # one value stands for all: int[2] pad=1
            return tuple(_elem(x) for x in v)
        return check_list
    if base in _SCALAR_CHECKS:
        return _SCALAR_CHECKS[base]
    raise ValueError(f"unsupported argument type {base!r}")


_INT64 = (-2 ** 63, 2 ** 63 - 1)


def _int(v):
    # int and SymInt are int64 in PyTorch: a larger value is refused, not wrapped or overflowed
    if A.is_int(v):
        if not _INT64[0] <= int(v) <= _INT64[1]:
            raise ValueError(f"expected an int64, got {v!r} (out of range)")
        return int(v)
    raise ValueError(f"expected an int, got {v!r}")


def _float(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    raise ValueError(f"expected a number, got {v!r}")


def _scalar(v):
    # An int Scalar past int64 overflowed NumPy ("Python int too large to convert to C
    # long"). PyTorch takes one up to 2**64 - 1 as a uint64 Scalar (and wraps it into an
    # integer tensor's dtype); gradcli refuses it, a deliberate difference (tested in
    # tests/test_aten_loader.py): write a float (9.3e18) for a float tensor.
    if isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1]:
        raise ValueError(f"expected a number, got the int {v} past int64 (write it as a "
                         f"float, e.g. {float(v):.6g}, for a float tensor)")
    if isinstance(v, (int, float)):
        return v
    raise ValueError(f"expected a number, got {v!r}")


def _no_generator(v):
    # a graph file cannot name a generator: random ops draw from the graph's own
    # (Note [the graph's generator] in rng.py)
    if v is None:
        return v
    raise ValueError(f"expected null (random ops draw from the graph's generator), got {v!r}")


def _name(v):
    if isinstance(v, str):
        return v
    raise ValueError(f"expected a name, got {v!r}")


_SCALAR_CHECKS = {"int": _int, "SymInt": _int, "bool": A.boolean, "float": _float, "Scalar": _scalar,
                  "str": A.string, "ScalarType": A.dtype, "MemoryFormat": _name, "Layout": _name,
                  "Device": _name, "Generator": _no_generator}
