"""Errors that reach users as one line: file, line, op and problem."""
from __future__ import annotations


class GradcliError(Exception):
    """Base class of gradcli's own errors."""


class GraphError(GradcliError):
    """A graph file is invalid: ``file:line: where: problem``."""

    def __init__(self, message, file=None, line=None, where=None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.where = where

    def __str__(self):
        loc = ""
        if self.file:
            loc = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        where = f"{self.where}: " if self.where else ""
        return _one_line(f"{loc}{where}{self.message}")


class OpBugError(GradcliError):
    """An op of the library failed in a way that is not the input's fault: a bug in
    gradcli. One line naming the file, line and op; the CLI exits 3, not 2."""

    def __init__(self, op, cause, file=None, line=None, where=None):
        self.op = op
        self.cause = cause
        self.location = GraphError(f"internal error in op {op!r} (a bug in gradcli, please "
                                   f"report it): {type(cause).__name__}: {cause}",
                                   file, line, where)
        super().__init__(str(self.location))

    def __str__(self):
        return str(self.location)


def first_line(exc) -> str:
    """The first line of an exception's message (its type's name if it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _one_line(text):
    """Messages reach users as one line, whatever a cause's text held."""
    return " ".join(str(text).splitlines()) if ("\n" in text or "\r" in text) else text


class BackwardError(GradcliError):
    """The backward raised. ``str()`` is one line, composed by the graph that
    ran it (``Graph.describe_failure``): the file and line of the op whose node
    failed, the node and the message, and which op (or leaf) created the node,
    e.g. ``g.yaml:14: backward failed in FailBackward0: boom (node created by op
    ops[3] 'mylog' at g.yaml:14)``. ``cause`` is the exception, ``node`` the
    innermost node that failed (or None)."""

    def __init__(self, message, cause=None, node=None, file=None):
        self.message = _one_line(str(message))
        self.cause = cause
        self.node = node
        self.file = file
        super().__init__(self.message)

    def __str__(self):
        return self.message
