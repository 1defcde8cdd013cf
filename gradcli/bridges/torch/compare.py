"""Replay a graph file in PyTorch and compare its gradients and node order with gradcli's.

``replay(document)`` runs the file's ops with PyTorch (ATen ops through
``torch.ops.aten.NAME.OVERLOAD``, version-1 ops through the PyTorch
functions that record the same backward node), runs PyTorch's backward and
returns the gradients and the names of the nodes in the order PyTorch ran
them. ``compare(grads, order, torch_result)`` sets gradcli's result beside it
and names the first difference. This backs ``gradcli validate --against
torch``; it needs the ``torch`` extra and imports torch on first use.

Version-1 ops map to the PyTorch call that records the same node where one
exists; where gradcli's node has no single PyTorch counterpart (``cross_entropy``
is ``LogSoftmaxBackward0`` + ``NllLossBackward0`` in PyTorch, N-D ``matmul``
records ``UnsafeViewBackward0``/``BmmBackward0``...) the order comparison shows
the difference: that is what the comparison is for. Engine exercisers
(``checkpoint``, ``reenter``, ``delay``, ``fail``, ``nan``, ``custom``, ``grad``)
and ``to`` have no PyTorch equivalent here and are refused, naming the op.

Note [Replayed leaves]: the leaf tensors (and ``grad_roots`` tensors) are the
arrays gradcli's own loader builds from the same document: its dtypes,
``init`` kinds (seeded random ones included), ``file``/``key`` reading with
its member checks, and its memory budgets. The replay has no leaf reader of
its own, so PyTorch and gradcli start from the same values by construction.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile

import numpy as np

from ...errors import GraphError
from ...ops.torch_ref import torch_reference

class CompareError(GraphError):
    """A graph the PyTorch replay cannot run (an op with no PyTorch equivalent, ...)."""


@dataclasses.dataclass
class TorchResult:
    grads: dict           # tensor name -> numpy array
    order: list           # node names in the order PyTorch ran them


# -- node order --------------------------------------------------------------------------------
def node_name(fn) -> str:
    """PyTorch's node name as gradcli writes it (``AccumulateGrad`` without the C++ namespace)."""
    return fn.name().rsplit("::", 1)[-1]


def node_order(roots, run):
    """Call ``run()`` and return the names of the autograd nodes under ``roots`` in run order.

    A pre-hook on every node reachable from the roots' ``grad_fn`` (leaves'
    ``AccumulateGrad`` included) records the node's name when the engine calls
    it; the hooks return nothing, so they change no gradient.
    """
    order, seen, handles = [], set(), []
    stack = [r.grad_fn for r in roots if r.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        handles.append(fn.register_prehook(lambda grads, fn=fn: order.append(node_name(fn))))
        stack.extend(nxt for nxt, _ in fn.next_functions)
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return order


# -- replay --------------------------------------------------------------------------------------
def replay(source, *, base_dir=None, arrays=None, leaves=None) -> TorchResult:
    """Run a graph in PyTorch: ``source`` is a path or a parsed document (a dict).

    ``arrays``: ``{(file, key): array}``, the arrays of the files the document
    names when they are not written yet (the exporter's check), standing in
    for every file; ``leaves``: ``{name: array}`` values that replace leaf
    tensors (gradcli's loaded leaves: a validate run passes its own). Raises
    CompareError (a GraphError) naming the op for what it cannot replay, or
    gradcli's load error for a document gradcli itself refuses.
    """
    import torch

    path = None
    if isinstance(source, (str, os.PathLike)):
        from ...document import read_document

        path = os.fspath(source)
        data = read_document(path).data
        base_dir = os.path.dirname(os.path.abspath(path)) if base_dir is None else base_dir
        display = path
    else:
        data, display = source, f"<{source.get('name', 'graph')}>"
    rep = _Replay(torch, data, display)
    rep.check_replayable()
    try:
        with _loaded(data, path, base_dir or ".", arrays, display) as graph:
            rep.take_leaves(graph, leaves or {})    # files are read here, while they exist
    except GraphError as exc:
        if isinstance(exc, CompareError):
            raise
        raise CompareError(f"gradcli cannot load the graph: {exc}", display) from None
    return rep.run()


@contextlib.contextmanager
def _loaded(data, path, base_dir, arrays, display):
    """gradcli's Graph of the document (Note [Replayed leaves]); ``arrays`` are
    written to a temporary folder for the loader to read them."""
    from ...loader import load, loads

    if path is not None and not arrays:
        yield load(path)
        return
    text = json.dumps(data)
    if not arrays:
        yield loads(text, format="json", name=display.strip("<>"), base_dir=base_dir)
        return
    with tempfile.TemporaryDirectory(prefix="gradcli-replay-") as folder:
        by_file = {}
        for (file, key), arr in arrays.items():
            by_file.setdefault(file, {})[key] = np.asarray(arr)
        for file, members in by_file.items():
            target = os.path.join(folder, file)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if file.endswith(".npz"):
                np.savez(target, **members)
            else:
                np.save(target, members[None])
        yield loads(text, format="json", name=display.strip("<>"), base_dir=folder)


class _Replay:
    def __init__(self, torch, data, display):
        self.torch = torch
        self.data = data
        self.display = display
        self.leaf_arrays = {}
        self.root_grads = {}

    def fail(self, message, op_index=None, op=None):
        where = ""
        if op_index is not None:
            where = f"ops[{op_index}]" + (f" ({op.get('id')})" if op and op.get("id") else "") + ": "
        raise CompareError(f"{where}{message}", self.display)

    # before loading: what PyTorch cannot replay, named by op -------------------------------
    def check_replayable(self):
        for name, spec in (self.data.get("tensors") or {}).items():
            device = (spec or {}).get("device", "cpu") if isinstance(spec, dict) else "cpu"
            if device != "cpu":
                self.fail(f"tensor {name}: device {device!r} is not replayed in PyTorch (CPU only)")
        for i, op in enumerate(self.data.get("ops") or []):
            name = op.get("op", "") if isinstance(op, dict) else ""
            if name.startswith("aten."):
                self.overload(name, op, i)
            elif name.startswith("function.") and isinstance(op.get("composite"), dict):
                pass                    # Note [Replayed Functions]
            elif torch_reference(name) is None:
                self.fail(f"op {name!r} has no PyTorch equivalent to replay", i, op)

    # leaves: gradcli's loaded arrays (Note [Replayed leaves]) --------------------------------
    def take_leaves(self, graph, leaves):
        from ...graph import LeafSpec
        from ...devices import to_host

        for name, leaf in graph.leaves.items():
            value = leaves[name] if name in leaves else leaf.make(leaf.shape)
            self.leaf_arrays[name] = np.asarray(to_host(value))
        for name, g in graph.backward_spec.grad_roots.items():
            if isinstance(g, LeafSpec):
                self.root_grads[name] = np.asarray(to_host(g.make(g.shape)))

    def tensor(self, name, requires_grad):
        t = self.torch.from_numpy(np.array(self.leaf_arrays[name]))
        if requires_grad:
            t.requires_grad_(True)
        return t

    # ops -------------------------------------------------------------------------------------
    def run(self):
        torch = self.torch
        env = {name: self.tensor(name, bool((spec or {}).get("requires_grad")))
               for name, spec in (self.data.get("tensors") or {}).items()}
        grad_names = [n for n, spec in (self.data.get("tensors") or {}).items()
                      if (spec or {}).get("requires_grad")]
        with torch.enable_grad():
            for i, op in enumerate(self.data.get("ops") or []):
                if op.get("no_grad") is True:   # Note [Ops run with grad mode off]
                    with torch.no_grad():
                        result = self.call(op, env, i)
                else:
                    result = self.call(op, env, i)
                if "outputs" in op:
                    if not isinstance(result, (tuple, list)) or len(result) != len(op["outputs"]):
                        self.fail(f"{op['op']} returned {type(result).__name__}, not "
                                  f"{len(op['outputs'])} tensors", i, op)
                    outs = list(zip(op["outputs"], result))
                else:
                    outs = [(op["output"], result)]
                for name, value in outs:
                    env[name] = value
                    if op.get("retain_grad") and value.requires_grad:
                        value.retain_grad()
                        grad_names.append(name)
        return self.backward(env, grad_names)

    def call(self, op, env, index):
        name = op.get("op", "")
        try:
            if name.startswith("aten."):
                return self.call_aten(name, op, env, index)
            if name.startswith("function.") and isinstance(op.get("composite"), dict):
                return self.call_function(name, op, env, index)
            fn = torch_reference(name)
            if fn is None:
                self.fail(f"op {name!r} has no PyTorch equivalent to replay", index, op)
            args = [self.resolve(x, env, index, op) for x in op.get("inputs", [])]
            return fn(self.torch, args, op.get("args") or {})
        except CompareError:
            raise
        except Exception as exc:  # noqa: BLE001 - PyTorch's own error, reported on one line
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.fail(f"{name}: PyTorch raised {type(exc).__name__}: {msg}", index, op)

    def resolve(self, x, env, index, op):
        if x is None or isinstance(x, (bool, int, float)):
            return x
        if isinstance(x, list):
            return [self.resolve(v, env, index, op) for v in x]
        if x not in env:
            self.fail(f"undefined tensor {x!r}", index, op)
        return env[x]

    def call_aten(self, name, op, env, index):
        from . import schema as S

        overload = self.overload(name, op, index)
        inputs = list(op.get("inputs", []))
        args = dict(op.get("args") or {})
        kwargs = {}
        for a in overload._schema.arguments:
            if S.tensor_kind(a) is not None:
                if inputs:
                    kwargs[a.name] = self.resolve(inputs.pop(0), env, index, op)
            elif a.name in args:
                kwargs[a.name] = S.read_value(a.name, args.pop(a.name), a)
        if inputs:
            self.fail(f"{name} takes fewer tensor inputs than given", index, op)
        if args:
            self.fail(f"{name} has no argument {sorted(args)[0]!r}", index, op)
        return overload(**kwargs)

    # Note [Replayed Functions]: a ``function.CLASS`` composite (Note [Python Functions as
    # composites], gradcli/ops/composite.py) stands for a Python autograd.Function, which
    # PyTorch cannot call by name. The replay makes a Function class of that name, whose
    # forward runs the body's ATen ops and whose backward runs the backward's: PyTorch's
    # engine then records and runs one ``CLASSBackward`` node for it, as it did for the
    # module's own Function, and the exporter's check compares the two.
    def call_function(self, name, op, env, index):
        torch = self.torch
        comp = op["composite"]
        bwd = comp.get("backward") or {}
        inputs = [self.resolve(x, env, index, op) for x in op.get("inputs", [])]
        constants = [self.resolve(x, env, index, op) for x in comp.get("constants", [])]
        names = list(op.get("inputs", [])) + list(comp.get("constants", []))
        outputs = op.get("outputs") or [op["output"]]
        replay = self

        def run_body(body, scope):
            for k, entry in enumerate(body):
                result = replay.call(entry, scope, index)
                outs = entry.get("outputs") or [entry["output"]]
                scope.update(zip(outs, result if "outputs" in entry else [result]))
            return scope

        def forward(ctx, *tensors):
            ctx.save_for_backward(*tensors)
            scope = run_body(comp["body"], dict(zip(names, tensors)))
            result = tuple(scope[o] for o in outputs)
            ctx.mark_non_differentiable(*[r for r, g in zip(result, bwd.get("grads", []))
                                          if g is None])
            return result

        def backward(ctx, *grads):
            saved = ctx.saved_tensors
            scope = dict(zip(names, saved))
            scope.update((g, v) for g, v in zip(bwd.get("grads", []), grads) if g is not None)
            scope = run_body(bwd.get("body", []), scope)
            per_input = [None] * len(saved)
            for k, g in enumerate(bwd.get("outputs", [])):
                if g is not None:
                    per_input[k] = scope[g]
            return tuple(per_input)

        cls = type(name.split(".", 1)[1], (torch.autograd.Function,),
                   {"forward": staticmethod(forward), "backward": staticmethod(backward)})
        out = cls.apply(*inputs, *constants)
        return list(out) if "outputs" in op else out[0]

    def overload(self, name, op, index):
        parts = name.split(".")
        packet = getattr(self.torch.ops.aten, parts[1], None) if len(parts) == 3 else None
        overload = getattr(packet, parts[2], None) if packet is not None else None
        if overload is None:
            self.fail(f"unknown ATen op {name!r}", index, op)
        return overload

    # backward ------------------------------------------------------------------------------
    def backward(self, env, grad_names):
        torch = self.torch
        spec = self.data.get("backward") or {}
        roots = [env[r] for r in spec.get("roots", [])]
        grad_roots = []
        for name, root in zip(spec.get("roots", []), roots):
            g = (spec.get("grad_roots") or {}).get(name)
            if g is None:
                grad_roots.append(None)
            elif isinstance(g, (int, float)):
                grad_roots.append(torch.full_like(root, float(g)))
            else:
                grad_roots.append(self.torch.from_numpy(np.array(self.root_grads[name]))
                                  .to(root.dtype))
        retain = spec.get("retain_graph")
        create = bool(spec.get("create_graph", False))
        wrt = spec.get("inputs")
        grads = {}
        if wrt:
            tensors = [env[n] for n in wrt]
            box = []
            order = node_order(roots, lambda: box.append(torch.autograd.grad(
                roots, tensors, grad_roots, retain_graph=retain, create_graph=create,
                allow_unused=bool(spec.get("allow_unused", False)))))
            for n, g in zip(wrt, box[0]):
                if g is not None:
                    grads[n] = g.detach().numpy(force=True)
        else:
            order = node_order(roots, lambda: torch.autograd.backward(
                roots, grad_roots, retain_graph=retain, create_graph=create))
            for n in grad_names:
                if env[n].grad is not None:
                    grads[n] = env[n].grad.detach().numpy(force=True)
        return TorchResult(grads, order)


# -- side by side ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Comparison:
    """gradcli's result beside PyTorch's; ``first_difference`` is None when they agree."""
    grad_rows: list        # (name, status, max_abs_err, detail)
    order_rows: list       # (index, gradcli name or None, torch name or None, same)
    first_difference: str | None

    @property
    def ok(self):
        return self.first_difference is None

    def format(self) -> str:
        lines = ["gradients (gradcli vs torch):"]
        for name, status, err, detail in self.grad_rows:
            err_s = "" if err is None else f"  max|diff| {err:.3g}"
            lines.append(f"  {'ok  ' if status == 'ok' else 'DIFF'} {name}{err_s}"
                         f"{'  ' + detail if detail else ''}")
        width = max([len(g or "") for _, g, _, _ in self.order_rows] + [7])
        lines.append(f"order:\n  {'#':>4}  {'gradcli':<{width}}  torch")
        for i, g, t, same in self.order_rows:
            lines.append(f"  {i:>4}  {g or '-':<{width}}  {t or '-'}{'' if same else '   <-- differs'}")
        lines.append("first difference: " + (self.first_difference or "none"))
        return "\n".join(lines)


def compare(grads, order, torch_result, *, rtol=1e-7, atol=0.0) -> Comparison:
    """Compare gradcli's ``grads`` ({name: array}) and ``order`` (node names) with PyTorch's."""
    first = None
    grad_rows = []
    for name in sorted(set(grads) | set(torch_result.grads)):
        mine, theirs = grads.get(name), torch_result.grads.get(name)
        if mine is None or theirs is None:
            detail = "no gradient from " + ("gradcli" if mine is None else "torch")
            grad_rows.append((name, "diff", None, detail))
            first = first or f"grads[{name}]: {detail}"
            continue
        a, e = np.asarray(mine), np.asarray(theirs)
        if a.shape != e.shape:
            detail = f"shape {list(a.shape)} vs {list(e.shape)}"
            grad_rows.append((name, "diff", None, detail))
            first = first or f"grads[{name}]: {detail}"
            continue
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        diff = np.abs(a64 - e64)
        err = float(diff.max(initial=0.0))
        close = np.allclose(a64, e64, rtol=rtol, atol=atol, equal_nan=True)
        detail = ""
        if not close:
            with np.errstate(invalid="ignore"):
                worst = np.unravel_index(int(np.nanargmax(diff - rtol * np.abs(e64))), diff.shape) \
                    if diff.size else ()
            idx = [int(i) for i in worst]
            detail = f"at {idx}: gradcli {a64[tuple(idx)]!r}, torch {e64[tuple(idx)]!r}"
            first = first or f"grads[{name}] {detail}"
        grad_rows.append((name, "ok" if close else "diff", err, detail))
    order_rows = []
    for i in range(max(len(order), len(torch_result.order))):
        g = order[i] if i < len(order) else None
        t = torch_result.order[i] if i < len(torch_result.order) else None
        order_rows.append((i, g, t, g == t))
        if g != t and first is None:
            first = f"order[{i}]: gradcli {g or '(ended)'}, torch {t or '(ended)'}"
    return Comparison(grad_rows, order_rows, first)
