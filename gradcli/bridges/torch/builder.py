"""Find the function that builds a module: ``path/to/module.py:NAME`` or ``package.module:NAME``."""
from __future__ import annotations

import sys


def load_builder(spec):
    """The callable named by ``path/to/module.py:NAME`` or ``package.module:NAME``."""
    import importlib
    import importlib.util
    import os

    if ":" not in spec:
        raise ValueError(f"{spec!r}: expected MODULE.py:FUNCTION, e.g. model.py:build_model")
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise ValueError(f"{where}: no such file")
        folder = os.path.dirname(os.path.abspath(where))
        name = "_gradcli_export_" + os.path.splitext(os.path.basename(where))[0]
        module_spec = importlib.util.spec_from_file_location(name, where)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, folder)
        try:
            module_spec.loader.exec_module(module)
        finally:
            sys.path.remove(folder)
    else:
        module = importlib.import_module(where)
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"{where} has no attribute {attr!r}")
    return fn
