"""User code named by a graph file (``custom`` ops): finding it, and its errors.

Note [Resolving user code]: ``function: "pkg.mod:Name"`` imports ``pkg.mod``
from the graph file's folder first, then from ``sys.path``, and takes
``Name`` from it (a dotted ``Outer.Inner`` is followed attribute by
attribute). Nothing is imported unless the load was given ``allow_code``
(the loader refuses the entry before it asks for the function). A module
found in the graph's folder is imported with that folder first on
``sys.path``; if a module of the same name was imported before from
somewhere else, it is imported again from the graph's folder (two graphs in
two folders may each bring their own ``ops.py``), and a module imported
from a graph's folder is not what a graph elsewhere gets from ``sys.path``.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys
import threading

from ..errors import BackwardError, GradcliError

_FUNCTION_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                          r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IMPORT_LOCK = threading.Lock()
_FROM_GRAPH_FOLDERS: set = set()     # top-level modules imported from a graph's folder


class ForwardRaised(BackwardError):
    """Code run during the forward raised: a ``custom`` op's user code, or the
    backward a ``grad`` op runs. One line naming the file, line, op and what
    raised; the CLI exits 3 (as for a failed backward), not 2: the file is
    valid, the code it runs failed."""

    def __init__(self, message, cause=None, node=None):
        GradcliError.__init__(self, message)
        self.message = message
        self.cause = cause if cause is not None else self
        self.node = node
        self.graph = None
        self.file = None

    def __str__(self):
        return " ".join(self.message.splitlines())


class NotFound(ValueError):
    """The function named by a graph file cannot be found (invalid input: exit 2)."""


def first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


def describe(exc) -> str:
    """``ValueError: boom`` for messages."""
    text = first_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_function_name(function) -> str:
    if not isinstance(function, str) or not _FUNCTION_RE.match(function):
        raise NotFound(f"function must be 'module:Name' (a module path, a colon, a class), "
                       f"got {function!r}")
    return function


def resolve(function, base_dir):
    """The object ``function`` (``"pkg.mod:Name"``) names (Note [Resolving user code]).

    Raises NotFound when the module or the name does not exist; any other
    exception raised by the module's own code while it is imported propagates
    (the caller reports it as user code that raised).
    """
    check_function_name(function)
    module_name, _, qualname = function.partition(":")
    module = _import(module_name, base_dir)
    obj = module
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise NotFound(f"module {module_name!r} ({_where(module)}) has no {qualname!r}") from None
    return obj


def _where(module):
    return getattr(module, "__file__", None) or "built in"


def _import(module_name, base_dir):
    top = module_name.split(".")[0]
    with _IMPORT_LOCK:
        local = importlib.machinery.PathFinder.find_spec(top, [base_dir]) is not None
        cached = sys.modules.get(top)
        if cached is not None and (
                not _inside(cached, base_dir) if local else top in _FROM_GRAPH_FOLDERS):
            # imported before from elsewhere: from another graph's folder, or (for a
            # module in this graph's folder) from sys.path
            for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
                del sys.modules[name]
        _FROM_GRAPH_FOLDERS.discard(top)
        if local:
            _FROM_GRAPH_FOLDERS.add(top)
            sys.path.insert(0, base_dir)
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name) and (
                    len(exc.name) == len(module_name) or module_name[len(exc.name)] == "."):
                where = "the graph's folder or sys.path"
                raise NotFound(f"no module named {exc.name!r} (looked in {where})") from None
            raise
        finally:
            if local:
                try:
                    sys.path.remove(base_dir)
                except ValueError:
                    pass


def _inside(module, folder):
    paths = [getattr(module, "__file__", None) or ""]
    paths += list(getattr(module, "__path__", []) or [])
    folder = os.path.realpath(folder)
    for p in paths:
        if p and os.path.realpath(p).startswith(folder + os.sep):
            return True
    return False
