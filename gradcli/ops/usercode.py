"""User code named by a graph file (``custom`` ops): finding it, and its errors.

Note [Resolving user code]: ``function: "pkg.mod:Name"`` imports ``pkg.mod``
from the graph file's folder first, then from ``sys.path``, and takes
``Name`` from it (a dotted ``Outer.Inner`` is followed attribute by
attribute). Nothing is imported unless the load was given ``allow_code``
(the loader refuses the entry before it asks for the function). A module
found in the graph's folder is imported under a private name,
``_gradcli_user_<hash of the folder>.pkg.mod`` (a package whose ``__path__``
is the folder): it never evicts or shadows a module of the process
(``copy.py`` next to a graph leaves ``import copy`` the standard library's),
two graphs in two folders each get their own ``ops.py``, and the folder is
not put on ``sys.path`` (its modules import each other relatively: ``from .
import helpers``). A module not in the folder is imported normally.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading

from ..errors import BackwardError, GradcliError

_FUNCTION_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
                          r":[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IMPORT_LOCK = threading.Lock()
_PRIVATE_PREFIX = "_gradcli_user_"   # + a hash of the graph's folder


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
        full = f"{_folder_package(base_dir)}.{module_name}" if local else module_name
        try:
            return importlib.import_module(full)
        except ModuleNotFoundError as exc:
            missing = exc.name
            if local and missing is not None and missing.startswith(full[:-len(module_name)]):
                missing = missing[len(full) - len(module_name):]
            if missing is not None and module_name.startswith(missing) and (
                    len(missing) == len(module_name) or module_name[len(missing)] == "."):
                where = "the graph's folder or sys.path"
                raise NotFound(f"no module named {missing!r} (looked in {where})") from None
            raise


def _folder_package(base_dir):
    """The private package whose ``__path__`` is ``base_dir`` (Note [Resolving user code])."""
    folder = os.path.realpath(base_dir)
    name = f"{_PRIVATE_PREFIX}{hashlib.sha256(folder.encode()).hexdigest()[:16]}"
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [folder]
        package = importlib.util.module_from_spec(spec)
        package.__doc__ = f"modules of the graph folder {folder} (gradcli custom ops)"
        sys.modules[name] = package
    return name
