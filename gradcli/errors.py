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


def _one_line(text):
    """Messages reach users as one line, whatever a cause's text held."""
    return " ".join(str(text).splitlines()) if ("\n" in text or "\r" in text) else text


class BackwardError(GradcliError):
    """The backward raised: names the node, the op and where the op is in the file."""

    def __init__(self, cause, node=None, file=None):
        self.cause = cause
        self.node = node
        self.file = file
        super().__init__(str(self))

    def __str__(self):
        node = self.node
        parts = []
        if self.file:
            line = getattr(node, "source", None)
            parts.append(f"{self.file}:{line}: " if line else f"{self.file}: ")
        if node is not None:
            op = f" (op {node.op_id})" if node.op_id else ""
            parts.append(f"backward failed in {node.name}{op}: ")
        else:
            parts.append("backward failed: ")
        msg = str(self.cause).strip().replace("\n", " ")
        parts.append(msg or type(self.cause).__name__)
        return "".join(parts)
