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


def _one_line(text):
    """Messages reach users as one line, whatever a cause's text held."""
    return " ".join(str(text).splitlines()) if ("\n" in text or "\r" in text) else text


class BackwardError(GradcliError):
    """The backward raised. ``str()`` is one line: the file and line of the op
    whose node failed, the node and the message, and which op (or leaf) created
    the node, e.g. ``g.yaml:14: backward failed in FailBackward0: boom (node
    created by op ops[3] 'mylog' at g.yaml:14)``. Anomaly errors keep PyTorch's
    own wording ("Function 'LogBackward0' returned nan values ...")."""

    def __init__(self, cause, node=None, graph=None):
        self.cause = cause
        self.node = node
        self.graph = graph
        self.file = graph.file if graph is not None else None
        super().__init__(str(self))

    def __str__(self):
        from .autograd.engine import AnomalyError  # noqa: PLC0415 - avoid an import cycle

        node = self.node
        msg = str(self.cause).strip().replace("\n", " ") or type(self.cause).__name__
        line = getattr(node, "source", None)
        loc = "" if not self.file else (f"{self.file}:{line}: " if line else f"{self.file}: ")
        if node is None:
            return f"{loc}backward failed: {msg}"
        if not isinstance(self.cause, AnomalyError):
            msg = f"backward failed in {node.name}: {msg}"
        return f"{loc}{msg}{self.origin()}"

    def origin(self):
        """`` (node created by op ops[3] 'mylog' at g.yaml:14)``, or for a leaf's
        accumulator `` (node accumulates into tensor 'W' at g.yaml:5)``."""
        node, graph = self.node, self.graph
        op_id, line = node.op_id, node.source
        if not op_id:
            return ""
        at = f" at {self.file}:{line}" if self.file and line else ""
        for spec in graph.ops if graph is not None else ():
            if spec.id == op_id and (line is None or spec.line == line):
                default = f"ops[{spec.index}]"
                label = default if spec.id == default else f"{default} {spec.id!r}"
                return f" (node created by op {label}{at})"
        leaf = graph.leaves.get(op_id) if graph is not None else None
        if leaf is not None:
            at = f" at {self.file}:{leaf.line}" if leaf.line else ""
            return f" (node accumulates into tensor {op_id!r}{at})"
        # An op inside a checkpoint body, or a graph-less backward.
        label = op_id if op_id.startswith("ops[") else repr(op_id)
        return f" (node created by op {label}{at})"
