"""Graph: a loaded graph file, its forward pass and its backward pass."""
from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np

from .devices import to_device, to_host
from .errors import BackwardError, GraphError


@dataclasses.dataclass
class LeafSpec:
    name: str
    shape: tuple | None
    dtype: np.dtype
    device: object
    requires_grad: bool
    make: object            # make(shape) -> np.ndarray on the CPU
    line: int | None = None

    def array(self, shape=None):
        data = self.make(self.shape if self.shape is not None else shape)
        return to_device(data, self.device)


@dataclasses.dataclass
class OpSpec:
    index: int
    id: str
    label: str              # "ops[3] 'id' (mul)" for messages
    op: object
    inputs: list
    outputs: list
    args: dict
    retain_grad: bool = False
    line: int | None = None


@dataclasses.dataclass
class BackwardSpec:
    roots: list
    grad_roots: dict
    inputs: list | None
    retain_graph: bool = False
    create_graph: bool = False
    allow_unused: bool = False
    line: int | None = None


@dataclasses.dataclass
class ExpectSpec:
    grads: dict
    numeric: bool = False
    rtol: float = 1e-7
    atol: float = 0.0
    order: list | None = None
    error: str | None = None


@dataclasses.dataclass
class NodeRun:
    """One node evaluation of a backward, in the order they started."""
    node: str
    op: str | None
    sequence_nr: int
    topological_nr: int
    device: str
    thread: str
    graph_task: int
    depth: int
    start_s: float
    end_s: float

    def to_json(self):
        return {"node": self.node, "op": self.op, "sequence_nr": self.sequence_nr,
                "topological_nr": self.topological_nr, "device": self.device}


@dataclasses.dataclass
class Result:
    graph: str
    grads: dict             # name -> array (on its device)
    order: list             # [NodeRun]
    forward_s: float
    backward_s: float

    def to_json(self, with_data=True):
        grads = {}
        for name, g in self.grads.items():
            if g is None:               # an unused input (allow_unused)
                grads[name] = None
                continue
            arr = to_host(g)
            entry = {"shape": list(arr.shape), "dtype": str(arr.dtype), "device": _device_str(g)}
            if with_data:
                entry["data"] = arr.tolist()
            grads[name] = entry
        return {"graph": self.graph, "grads": grads, "order": [r.node for r in self.order],
                "timing": {"forward_s": self.forward_s, "backward_s": self.backward_s}}

    def save_npz(self, path):
        np.savez(path, **{name: to_host(g) for name, g in self.grads.items() if g is not None})


def _device_str(array):
    from .devices import device_of

    return str(device_of(array))


class Graph:
    """A loaded graph file. ``run()`` = ``forward()`` + ``backward()``."""

    def __init__(self, name, file, leaves, ops, backward, expect, base_dir):
        self.name = name
        self.file = file
        self.leaves = leaves
        self.ops = ops
        self.backward_spec = backward
        self.expect = expect
        self.base_dir = base_dir
        self.values = None       # name -> Tensor after forward()

    def fail(self, message, line=None, where=None):
        raise GraphError(message, self.file, line, where)

    # -- forward -----------------------------------------------------------------------
    def forward(self):
        """Run the ops in order with recording on; returns the named tensors."""
        from .autograd import Tensor, set_grad_enabled
        from .ops.core import DeviceMismatch

        values = {}
        for name, leaf in self.leaves.items():
            values[name] = Tensor(leaf.array(), requires_grad=leaf.requires_grad, name=name)
        with set_grad_enabled(True):
            for spec in self.ops:
                inputs = [values[n] for n in spec.inputs]
                try:
                    out = spec.op(*inputs, **spec.args)
                except DeviceMismatch as exc:
                    self.fail(str(exc), spec.line, spec.label)
                except GraphError:
                    raise
                except (ValueError, TypeError, IndexError) as exc:  # AxisError is both
                    shapes = ", ".join(f"{n} {list(t.shape)} {t.dtype}" for n, t in zip(spec.inputs, inputs))
                    self.fail(f"{_first_line(exc)} (inputs: {shapes})", spec.line, spec.label)
                except FloatingPointError as exc:
                    self.fail(str(exc), spec.line, spec.label)
                outs = out if isinstance(out, list) else [out]
                if len(outs) != len(spec.outputs):
                    self.fail(f"produces {len(outs)} outputs but {len(spec.outputs)} names are given",
                              spec.line, spec.label)
                node = outs[0].grad_fn
                if node is not None:
                    node.op_id = spec.id
                    node.source = spec.line
                for name, t in zip(spec.outputs, outs):
                    t.name = name
                    values[name] = t
                    if spec.retain_grad:
                        if not t.requires_grad:
                            self.fail(f"retain_grad on {name!r}, which does not require grad",
                                      spec.line, spec.label)
                        t.retain_grad()
        self.values = values
        return values

    # -- backward ------------------------------------------------------------------------
    def root_grads(self):
        spec = self.backward_spec
        roots, grads = [], []
        for name in spec.roots:
            t = self.values[name]
            if not t.requires_grad:
                self.fail(f"root {name!r} does not require grad (no input of the ops that "
                          "compute it requires grad)", spec.line, "backward")
            g = spec.grad_roots.get(name)
            if g is None:
                if t.data.size != 1:
                    self.fail(f"root {name!r} has shape {list(t.shape)}: a non-scalar root needs "
                              "an entry in grad_roots", spec.line, "backward")
                g = np.ones(t.shape, t.dtype)
            elif isinstance(g, float):
                g = np.full(t.shape, g, t.dtype)
            else:
                g = g.array(t.shape)
                if g.shape != t.shape:
                    self.fail(f"grad_roots.{name} has shape {list(g.shape)} but the root has shape "
                              f"{list(t.shape)}", g.line if hasattr(g, "line") else spec.line, "backward")
            roots.append(t)
            grads.append(to_device(g, t.device))
        return roots, grads

    def check_inputs_reachable(self, roots, inputs):
        reachable = set()
        stack = [r.grad_fn or r.grad_accumulator for r in roots]
        while stack:
            fn = stack.pop()
            if fn is None or fn in reachable:
                continue
            reachable.add(fn)
            stack.extend(e[0] for e in fn.next_edges if e is not None)
        for name in inputs:
            t = self.values[name]
            if not t.requires_grad:
                self.fail(f"input {name!r} does not require grad", self.backward_spec.line, "backward")
            edge = t.gradient_edge()
            if edge[0] not in reachable and not self.backward_spec.allow_unused:
                self.fail(f"input {name!r} is not used to compute any root (set allow_unused: "
                          "true to allow it)", self.backward_spec.line, "backward")

    def backward(self, inputs=None, retain_graph=None, engine=None, multithreading=True,
                 deterministic=False, anomaly=None):
        """Run the backward; returns (grads by name, [NodeRun], seconds)."""
        from .autograd import backward as autograd_backward
        from .autograd import detect_anomaly, grad as autograd_grad, set_multithreading_enabled

        if self.values is None:
            self.forward()
        spec = self.backward_spec
        inputs = spec.inputs if inputs is None else inputs
        retain = spec.retain_graph if retain_graph is None else retain_graph
        roots, grads = self.root_grads()
        if inputs:
            for name in inputs:
                if name not in self.values:
                    self.fail(f"input {name!r} is not defined", spec.line, "backward")
            self.check_inputs_reachable(roots, inputs)
        trace = []
        anomaly_ctx = detect_anomaly(*anomaly) if anomaly else contextlib.nullcontext()
        if spec.create_graph:      # the backward records itself (higher-order gradients)
            import functools

            autograd_grad = functools.partial(autograd_grad, create_graph=True)
            autograd_backward = functools.partial(autograd_backward, create_graph=True)
        start = time.perf_counter()
        try:
            with set_multithreading_enabled(multithreading), anomaly_ctx:
                if inputs:
                    result = autograd_grad(roots, [self.values[n] for n in inputs], grads,
                                           retain_graph=retain, allow_unused=True, engine=engine,
                                           trace=trace, deterministic=deterministic)
                    named = dict(zip(inputs, result))
                else:
                    autograd_backward(roots, grads, retain_graph=retain, engine=engine,
                                      trace=trace, deterministic=deterministic)
                    named = None
        except Exception as exc:  # noqa: BLE001 - reported with the node and op
            raise BackwardError(exc, getattr(exc, "gradcli_node", None), self) from exc
        elapsed = time.perf_counter() - start
        if named is None:
            named = {}
            for name, t in self.values.items():
                if (t.is_leaf and t.requires_grad) or t.retains_grad:
                    named[name] = t.grad
        if spec.create_graph:      # differentiable gradients (Tensors) are reported as arrays
            from .autograd import Tensor

            named = {k: g.data if isinstance(g, Tensor) else g for k, g in named.items()}
        return named, self._order(trace, start), elapsed

    def _order(self, trace, t0):
        import threading

        from .autograd.node import GraphRoot

        names = {t.ident: t.name for t in threading.enumerate()}
        # GraphRoot is the engine's own seed node for several roots, not a node
        # of the graph: it is left out, as in get_current_graph_task_execution_order.
        return [NodeRun(node=fn.name, op=fn.op_id, sequence_nr=fn.sequence_nr,
                        topological_nr=fn.topological_nr, device=str(fn.device),
                        thread=names.get(tid, str(tid)), graph_task=gt, depth=depth,
                        start_s=start - t0, end_s=(end or start) - t0)
                for fn, tid, start, end, gt, depth in trace if not isinstance(fn, GraphRoot)]

    def run(self, inputs=None, retain_graph=None, engine=None, multithreading=True,
            deterministic=False, anomaly=None) -> Result:
        """Forward then backward, timed separately."""
        t0 = time.perf_counter()
        self.forward()
        forward_s = time.perf_counter() - t0
        grads, order, backward_s = self.backward(inputs, retain_graph, engine, multithreading,
                                                 deterministic, anomaly)
        return Result(self.name, grads, order, forward_s, backward_s)

    def predicted_order(self):
        """The order a single-threaded backward runs nodes in (before running it)."""
        from .autograd import predicted_execution_order

        if self.values is None:
            self.forward()
        from .autograd.graph_task import GraphTask

        roots, _ = self.root_grads()
        root_nodes = [r.gradient_edge()[0] for r in roots]
        inputs = self.backward_spec.inputs
        if not inputs:
            return predicted_execution_order(root_nodes)
        # grad(): only nodes on a path to an input run (Note [Exec info]).
        from .autograd.node import GraphRoot

        root_edges = [r.gradient_edge() for r in roots]
        graph_root = root_edges[0][0] if len(roots) == 1 else GraphRoot(root_edges, [])
        outputs = [self.values[n].gradient_edge() for n in inputs]
        task = GraphTask(False, False, 0, None, root_nodes)
        task.init_to_execute(graph_root, outputs, False,
                             min(e[0].topological_nr for e in outputs))
        return [fn for fn in predicted_execution_order(root_nodes, task.exec_info)
                if task.exec_info[fn].needed]


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
