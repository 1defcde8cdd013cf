"""Every ONNX operator gradcli maps: importing this module registers them all.

>>> from gradcli.bridges.onnx.table import OPERATORS    # doctest: +SKIP
>>> sorted(OPERATORS)[:3]                               # doctest: +SKIP
['Abs', 'Add', 'And']
"""
from __future__ import annotations

from . import control, operators, recurrent  # noqa: F401 - each registers its operators
from .registry import OPERATORS, attributes_of, unsupported  # noqa: F401
