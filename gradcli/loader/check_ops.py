"""The check of a file's op entries against their ops' contracts: the op, its
inputs (laid out as its schema for an ATen op), args, outputs, and its results'
shapes and dtypes from its own ``infer`` against the memory budgets, before
anything runs. Everything about an op comes from its ``Op`` object (Note [Ops
carry their contract] in ops/core.py): no op is named here. What a bad entry
meets; the op a run calls is bound by the build step (``bound_op.py``)."""
from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np

from ..errors import OpBugError
from ..errors import first_line as _first_line
from ..graph import OpSpec
from .bound_op import INPUT_ERRORS
from .budget import nbytes, result_sizes
from .checker import NAME_RE, Checker, close_matches, is_number, kind_of, short

OP_KEYS = {"op", "inputs", "output", "outputs", "args", "id", "retain_grad", "device", "body",
           "function", "no_grad"}
# Note [Checkpoint nesting]: the forward of nested checkpoints, and the re-run of
# the body inside each checkpoint's backward, recurse one Python call chain per
# level (~5 frames); 170 levels still run under Python's default recursion
# limit, 200 do not. Deeper files are refused at load with one line instead of
# a RecursionError in the loader, the forward or the backward.
MAX_CHECKPOINT_NESTING = 128


class Defined(NamedTuple):
    """What the check knows of a name before anything runs (shape None: not known)."""
    shape: tuple | None
    dtype: np.dtype | None
    leaf: bool


class OpChecks(Checker):
    """Op entries (``ops``, and the bodies of checkpoints and composites)."""

    # Note [Plain op entries]
    # ~~~~~~~~~~~~~~~~~~~~~~~
    # Most entries of a big file are plain: ``{op, inputs, output}`` (an ``id``,
    # ``retain_grad``, empty ``args`` at most) of an op whose contract needs nothing
    # from the entry (public, supported, no user code, no body, no device key, bound
    # by the plain ``Op.for_entry``, named inputs, one output, no required args and
    # none that fail when absent, no backward wait), on inputs whose shapes and dtypes
    # an earlier entry of the same op had. ``plain_op`` checks such an entry with the
    # checks of ``op`` in one pass, without building paths, labels of the failures
    # or lists, and takes the inferred result, its bytes and the inputs the forward's
    # precheck compares with from that earlier entry (the op contract: they are a
    # function of the op and its inputs' shapes and dtypes). Anything else, and any
    # entry that fails a check, goes through ``op``'s general code, which raises the
    # error it always raised: the fast path only ever accepts what that code accepts,
    # and builds the same OpSpec.
    def plain_op(self, i, entry, defined, base, prefix):
        """``entry`` checked and built as ``op`` would, or None to let ``op`` do it."""
        if type(entry) is not dict or not entry.keys() <= _PLAIN_KEYS:
            return None
        name = entry.get("op")
        if type(name) is not str:
            return None
        plain = self.plain_contract(name)
        if plain is False:
            return None
        op, lo, hi = plain
        args = entry.get("args")
        if args is not None and (type(args) is not dict or args):
            return None
        inputs = entry.get("inputs")
        if type(inputs) is not list or not lo <= len(inputs) <= hi:
            return None
        metas = []
        for n in inputs:
            if type(n) is not str:
                return None
            meta = defined.get(n)
            if meta is None:
                return None
            metas.append(meta)
        out = entry.get("output")
        if (type(out) is not str or out in defined
                or not ((out.isascii() and out.isidentifier()) or NAME_RE.fullmatch(out))):
            return None
        retain = entry.get("retain_grad", False)
        if type(retain) is not bool:
            return None
        known = self._plain_results.get((op, *metas))
        if known is None:
            return None
        meta, (nbytes, nbytes64), checked = known
        if self.graph_bytes + nbytes > self.options.max_graph_bytes:
            return None
        where = f"{prefix}[{i}]"
        op_id = entry.get("id", where)
        if type(op_id) is not str or not op_id:
            return None
        label = f"{where} ({name})" if op_id == where else f"{where} {op_id!r} ({name})"
        self.graph_bytes += nbytes
        self.graph_bytes64 += nbytes64
        defined[out] = meta
        return self.op_spec(i, base, op_id, label, op, inputs, [out], {}, retain, checked)

    def plain_contract(self, name):
        """``_plain_contract(name)``, once per op name of the file."""
        plain = self._plain.get(name)
        if plain is None:
            plain = self._plain[name] = _plain_contract(name)
        return plain

    def op_spec(self, i, base, op_id, label, op, inputs, outputs, args, retain, checked):
        """The OpSpec of entry ``i``, with its line found on demand (Note [Lines on demand
        for ops]); the build step binds its op (``checked``: the inputs' (shape, dtype)
        the check already inferred on, or None)."""
        line, find_line = self.entry_line(base, i)
        spec = OpSpec(index=i, id=op_id, label=label, op=op, inputs=list(inputs),
                      outputs=list(outputs), args=args, retain_grad=retain, lineno=line,
                      find_line=find_line)
        self.unbound.append((spec, checked, None))
        return spec

    def op(self, i, entry, defined, base=("ops",), prefix="ops") -> OpSpec:
        """One op entry. Everything about the op itself comes from its ``Op`` object
        (Note [Ops carry their contract] in ops/core.py): no op is named here."""
        spec = self.plain_op(i, entry, defined, base, prefix)
        if spec is not None:
            return spec
        if isinstance(entry, dict) and "composite" in entry:     # the ops layer reads it
            from ..ops import composite  # noqa: PLC0415
            spec = composite.load(self, i, entry, defined, base, prefix, Defined, OpSpec)
            if self.no_grad(entry, base + (i,), spec.label, spec.retain_grad):
                from .bound_op import NoGradCall  # noqa: PLC0415
                spec.no_grad = True     # (a composite is not bound: its call is set here)
                spec.call = NoGradCall(None, spec.op, spec.args)
            return spec
        OPS = _ops()
        path = base + (i,)
        where = f"{prefix}[{i}]"
        if not isinstance(entry, dict):
            self.fail(f"an op must be a mapping, not {kind_of(entry)}", path, where)
        op_id = entry.get("id", where)
        if not isinstance(op_id, str) or not op_id:
            self.fail(f"id must be a non-empty string, got {op_id!r}", path + ("id",), where)
        if "op" not in entry:
            self.fail("missing required key 'op'", path, where)
        name = entry["op"]
        label = f"{where}" if op_id == where else f"{where} {op_id!r}"
        if not isinstance(name, str):
            self.fail(f"op must be a string, got {name!r}", path + ("op",), label)
        label = f"{label} ({name})"
        op = OPS.get(name)
        if op is None or not op.public:
            public = sorted(n for n, o in OPS.items() if o.public)
            hint = close_matches(name, public)
            hint = f" (did you mean {hint[0]!r}?)" if hint else ""
            self.fail(f"unknown op {name!r}{hint}", path + ("op",), label)
        if op.needs_code and not self.options.allow_code:
            function = entry.get("function")
            what = f" ({function})" if isinstance(function, str) else ""
            self.fail(f"op {name!r} runs user code{what}: refused without --allow-code "
                      "(allow_code=True in the API)", path + ("op",), label)
        if not op.supported:
            self.fail(f"op {name!r} is not supported by this version of gradcli yet",
                      path + ("op",), label)
        if op.has_body:
            return self.checkpoint(i, entry, defined, path, where, op_id, label)
        self.check_keys(entry, OP_KEYS, path, label, "an op")
        for key, takes in (("body", "has_body"), ("function", "needs_code")):
            if key in entry and not getattr(op, takes):
                owners = " or ".join(n for n, o in sorted(OPS.items()) if getattr(o, takes) and o.public)
                self.fail(f"key {key!r} is only valid for op {owners}", path + (key,), label)
        if "device" in entry and not op.moves_device:
            owners = " or ".join(repr(n) for n, o in sorted(OPS.items()) if o.moves_device and o.public)
            self.fail(f"key 'device' is only valid for op {owners}", path + ("device",), label)
        if type(op).for_entry is not _BASE_FOR_ENTRY or op.entry_binder is not None:
            # custom, grad ops: bound to their entry (the plain Op.for_entry returns the op
            # itself without reading its site: no site made for every op)
            op = op.for_entry(entry, self.site(path, label, op_id))

        inputs = entry.get("inputs")
        params = getattr(op, "tensor_inputs", None)
        if params is not None:      # laid out as the op's schema: nulls, lists, numbers
            inputs, op = self.schema_inputs(op, params, inputs, path, label)
        else:
            if not isinstance(inputs, list) or not all(isinstance(n, str) for n in inputs):
                self.fail("inputs must be a list of tensor names", path + ("inputs",), label)
            lo, hi = (op.arity, op.arity) if isinstance(op.arity, int) else op.arity
            if len(inputs) < lo or (hi is not None and len(inputs) > hi):
                want = str(lo) if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
                self.fail(f"takes {want} input{'s' if want != '1' else ''}, got {len(inputs)}",
                          path + ("inputs",), label)
        for k, n in enumerate(inputs):
            if n not in defined:
                scope = (" (a checkpoint body sees only the checkpoint's inputs: pass it in)"
                         if ".body[" in where else "")
                self.fail(f"input {n!r} is not defined above this op{scope}",
                          path + (("inputs", k) if params is None else ("inputs",)), label)

        args = entry.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self.fail(f"args must be a mapping, not {kind_of(args)}", path + ("args",), label)
        args = dict(args)
        if op.moves_device:         # the target device is the entry's `device` key
            if "device" not in entry:
                self.fail(f"op {name!r} needs key 'device' (the target device)", path, label)
            args["device"] = str(self.device(entry["device"], path + ("device",), label))
        checked = self.op_args(op, args, path, label)
        for key, arg in op.args.items():     # args naming a tensor: one more input
            if arg.names_tensor and checked.get(key) is not None:
                if checked[key] not in defined:
                    self.fail(f"arg {key!r} names {checked[key]!r}, which is not defined above "
                              "this op", path + ("args", key), label)
                inputs = [*inputs, checked[key]]

        if op.multi_output:
            outputs = entry.get("outputs")
            if "output" in entry:
                self.fail(f"op {name!r} has several outputs: use outputs: [...]", path + ("output",), label)
            if not isinstance(outputs, list) or not outputs:
                self.fail("outputs must be a non-empty list of names", path + ("outputs",), label)
        else:
            if "outputs" in entry:
                outputs = entry["outputs"]
                if not isinstance(outputs, list) or len(outputs) != 1:
                    self.fail(f"op {name!r} has one output: use output: NAME", path + ("outputs",), label)
            elif "output" in entry:
                outputs = [entry["output"]]
            else:
                self.fail("missing required key 'output'", path, label)
        seen = set()
        for k, out in enumerate(outputs):
            out_path = path + (("outputs", k) if "outputs" in entry else ("output",))
            self.check_name(out, out_path, label)
            if out in defined:
                what = "a leaf tensor" if defined[out].leaf else "an output of an op above"
                self.fail(f"output {out!r} is already defined as {what} (names are defined once)",
                          out_path, label)
            if out in seen:
                self.fail(f"output {out!r} is named twice", out_path, label)
            seen.add(out)
        n_out = op.num_outputs(checked)
        if n_out is not None and n_out != len(outputs):
            self.fail(f"{name} makes {n_out} outputs but {len(outputs)} names are given in "
                      "outputs", path + ("outputs",), label)
        retain = entry.get("retain_grad", False)
        if not isinstance(retain, bool):
            self.fail(f"retain_grad must be true or false, got {retain!r}", path + ("retain_grad",), label)
        no_grad = self.no_grad(entry, path, label, retain)
        in_metas = [defined[n] for n in inputs]
        metas = self.infer(op, in_metas, list(inputs), checked, outputs, path, label)
        for out, meta in zip(outputs, metas):
            defined[out] = meta
        if getattr(op, "restrides_self", False):    # self has the new geometry (as_strided_)
            defined[inputs[0]] = metas[0]
        if not op.view:
            self.allocate([(m.shape, m.dtype) for m in metas], path, label)
        self.wait(op, checked, path, label)
        inferred = None
        if metas[0].shape is not None:       # inferred: the same inputs need no second check
            inferred = [(m.shape, m.dtype) for m in in_metas]
            plain = self.plain_contract(name)
            if plain and plain[0] is op and not checked and "outputs" not in entry:
                # what the next entry of this op on the same inputs' shapes takes
                # (Note [Plain op entries])
                self._plain_results[(op, *in_metas)] = (
                    metas[0], (0, 0) if op.view else result_sizes([(m.shape, m.dtype) for m in metas]),
                    inferred)
        spec = self.op_spec(i, base, op_id, label, op, inputs, outputs, checked, retain, inferred)
        spec.no_grad = no_grad
        return spec

    def no_grad(self, entry, path, label, retain):
        """The entry's ``no_grad`` flag (Note [Ops run with grad mode off] in bound_op.py)."""
        no_grad = entry.get("no_grad", False)
        if not isinstance(no_grad, bool):
            self.fail(f"no_grad must be true or false, got {no_grad!r}", path + ("no_grad",), label)
        if no_grad and retain:
            self.fail("retain_grad on an op run with no_grad: its outputs do not require grad",
                      path + ("retain_grad",), label)
        return no_grad

    def schema_inputs(self, op, params, inputs, path, label):
        """An ATen entry's ``inputs``: one item per schema tensor argument (``params``), a
        name, ``null`` for an absent ``Tensor?``, a nested list for a ``Tensor[]`` (names,
        or nulls in a ``Tensor?[]``), a number for a wrapped number. Returns the names in
        order (what the graph passes) and the op bound to this layout."""
        from ..ops.aten.registry import Slot  # noqa: PLC0415

        ipath = path + ("inputs",)
        if not isinstance(inputs, list):
            self.fail(f"inputs must be a list (one item per tensor argument of {op.doc}), "
                      f"not {kind_of(inputs)}", ipath, label)
        if len(inputs) != len(params):
            names = ", ".join(p.name for p in params) or "none"
            self.fail(f"takes {len(params)} tensor input{'s' if len(params) != 1 else ''} "
                      f"({names}), got {len(inputs)}", ipath, label)
        names, layout = [], []

        def item(v, p, k, in_list):
            if v is None:
                if not p.optional:
                    what = ("holds tensors (a Tensor[]: only a Tensor?[] takes nulls)" if in_list
                            else "is not optional")
                    self.fail(f"input {p.name!r} {what}: null given", ipath + (k,), label)
                return None
            if isinstance(v, str):
                names.append(v)
                return Slot(len(names) - 1)
            numbers = getattr(op, "numbers_as_tensors", True)   # Note [numbers as tensors]
            if is_number(v) and not in_list and numbers:
                return v
            what = "a tensor name or null" if in_list and p.optional else "a tensor name"
            self.fail(f"input {p.name!r} must be {what}"
                      f"{'' if in_list or not numbers else ' or a number'}, got {short(v)}"
                      f"{' (as in PyTorch, this op takes no number for a Tensor)' if is_number(v) and not numbers else ''}",
                      ipath + (k,), label)

        for k, (v, p) in enumerate(zip(inputs, params)):
            if p.is_list:
                if not isinstance(v, list):
                    self.fail(f"input {p.name!r} is a tensor list: give a list of names, "
                              f"got {short(v)}", ipath + (k,), label)
                if not v:   # PyTorch: torch.cat(): expected a non-empty list of Tensors
                    self.fail(f"input {p.name!r}: expected a non-empty list of Tensors, got []",
                              ipath + (k,), label)
                layout.append([item(x, p, k, True) for x in v])
            else:
                layout.append(item(v, p, k, False))
        return names, op.bind(layout)

    def op_args(self, op, args, path, label):
        """Each arg through its checker, the required ones present, then the op's rules
        across args (clamp needs min or max, ...)."""
        checked = {}
        for key, value in args.items():
            spec = op.args.get(key)
            if spec is None:
                known = ", ".join(sorted(op.args)) or "none"
                hint = close_matches(str(key), sorted(op.args))
                hint = f"did you mean {hint[0]!r}? " if hint else ""
                self.fail(f"unknown arg {key!r} ({hint}known: {known})", path + ("args", key), label)
            try:
                checked[key] = spec.check(value) if spec.check else value
            except ValueError as exc:
                self.fail(f"bad arg {key!r}: {exc}", path + ("args", key), label)
        for key, spec in op.args.items():
            if spec.required and key not in checked:
                self.fail(f"missing required arg {key!r}", path + ("args",), label)
        try:
            op.check_args(checked)
        except ValueError as exc:
            self.fail(str(exc), path + ("args",), label)
        return checked

    def infer(self, op, metas, names, args, outputs, path, label):
        """The outputs' shapes and dtypes from the inputs' (the op's ``infer``): the static
        shape check and the memory budget of every result, before anything runs."""
        unknown = [Defined(None, None, False)] * len(outputs)
        if any(m.shape is None for m in metas):
            return unknown
        shapes, dtypes = [m.shape for m in metas], [m.dtype for m in metas]

        def inputs():
            return ", ".join(f"{n} {list(s)} {d}" for n, s, d in zip(names, shapes, dtypes))

        # Note [Infer cache]: an op's infer is a function of its inputs' shapes and
        # dtypes and its args (the op contract), so a long graph that repeats an op
        # on the same shapes (a chain, the layers of a model) infers once per
        # distinct key. Only results that passed every check below are kept; ops
        # that run user code, and unhashable args, are inferred every time.
        try:
            key = (op, tuple(shapes), tuple(dtypes), tuple(args.items()))
            hash(key)
        except TypeError:
            key = None
        if key is not None and not op.needs_code:
            cached = self._infer_cache.get(key)
            if cached is not None and len(cached) == len(outputs):
                return cached
        from ..ops.core import ShapeMismatch  # noqa: PLC0415

        try:
            results = op.infer_outputs(shapes, dtypes, args)
        except ShapeMismatch as exc:
            self.fail(exc.message(names), path, label)
        except INPUT_ERRORS as exc:
            self.fail(f"{_first_line(exc)} (inputs: {inputs()})", path, label)
        except Exception as exc:  # noqa: BLE001 - the op library's fault, not the file's
            raise OpBugError(op.name, exc, self.file, self.doc.line(*path), label) from exc
        if results is None:
            return unknown
        if len(results) != len(outputs):
            self.fail(f"produces {len(results)} outputs but {len(outputs)} names are given",
                      path, label)
        budget = self.options.max_tensor_bytes
        for shape, dtype in results:
            size = nbytes(shape, dtype.itemsize)
            if size > budget:
                self.fail(f"the result of shape {list(shape)} needs {size} bytes, over the "
                          f"memory budget of {budget} bytes (--max-tensor-bytes) "
                          f"(inputs: {inputs()})", path, label)
        metas = [Defined(shape, dtype, False) for shape, dtype in results]
        if key is not None and not op.needs_code:
            self._infer_cache[key] = metas   # shared, never mutated
        return metas

    def checkpoint(self, i, entry, defined, path, where, op_id, label) -> OpSpec:
        """``{op: checkpoint, inputs, outputs, body}``: the body is a scope of its own.

        It reads the checkpoint's inputs by their names and nothing else,
        must define every name in ``outputs``, and its other names stay inside
        it (they may repeat outer names).
        """
        nesting = where.count(".body[") + 1
        if nesting > MAX_CHECKPOINT_NESTING:
            self.fail(f"checkpoints nest {nesting} deep here; at most {MAX_CHECKPOINT_NESTING} "
                      "levels are supported (each level nests the forward and a reentrant "
                      "backward on the stack)", path, label)
        self.check_keys(entry, (OP_KEYS - {"function", "device"}) | {"use_reentrant"}, path,
                        label, "a checkpoint op")
        use_reentrant = entry.get("use_reentrant", True)
        if not isinstance(use_reentrant, bool):
            self.fail(f"use_reentrant must be true or false, got {use_reentrant!r}",
                      path + ("use_reentrant",), label)
        for key in ("args",):
            if entry.get(key):
                self.fail(f"checkpoint takes no {key}", path + (key,), label)
        inputs = entry.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(n, str) for n in inputs) or not inputs:
            self.fail("inputs must be a non-empty list of tensor names", path + ("inputs",), label)
        for k, n in enumerate(inputs):
            if n not in defined:
                self.fail(f"input {n!r} is not defined above this op", path + ("inputs", k), label)
            if inputs.index(n) != k:
                self.fail(f"input {n!r} is listed twice", path + ("inputs", k), label)
        outputs = entry.get("outputs")
        if "output" in entry:
            self.fail("a checkpoint names its results with outputs: [...]", path + ("output",), label)
        if not isinstance(outputs, list) or not outputs:
            self.fail("outputs must be a non-empty list of names", path + ("outputs",), label)
        body = entry.get("body")
        if not isinstance(body, list) or not body:
            self.fail("body must be a non-empty list of ops", path + ("body",), label)
        scope = {n: defined[n] for n in inputs}
        body_specs = [self.op(k, op_entry, scope, path + ("body",), f"{where}.body")
                      for k, op_entry in enumerate(body)]
        seen = set()
        for k, out in enumerate(outputs):
            self.check_name(out, path + ("outputs", k), label)
            if out not in scope or out in inputs:
                self.fail(f"output {out!r} is not defined by the body (a checkpoint's outputs "
                          "are names its body defines)", path + ("outputs", k), label)
            if out in defined:
                self.fail(f"output {out!r} is already defined above (names are defined once)",
                          path + ("outputs", k), label)
            if out in seen:
                self.fail(f"output {out!r} is named twice", path + ("outputs", k), label)
            seen.add(out)
        retain = entry.get("retain_grad", False)
        if not isinstance(retain, bool):
            self.fail(f"retain_grad must be true or false, got {retain!r}", path + ("retain_grad",), label)
        for out in outputs:
            defined[out] = Defined(scope[out].shape, scope[out].dtype, False)
        line, find_line = self.entry_line(path[:-1], i)
        spec = OpSpec(index=i, id=op_id, label=label, op=None, inputs=list(inputs),
                      outputs=list(outputs), args={}, retain_grad=retain, lineno=line,
                      find_line=find_line)
        self.unbound.append((spec, None, (body_specs, use_reentrant)))   # its op: the build's
        return spec



_OPS = None
_BASE_FOR_ENTRY = None   # Op.for_entry, set with _OPS


def _ops():
    """The op registry (the op library loads on first use)."""
    global _OPS, _BASE_FOR_ENTRY
    if _OPS is None:
        from ..ops import OPS  # noqa: PLC0415
        from ..ops.core import Op  # noqa: PLC0415

        _BASE_FOR_ENTRY = Op.for_entry
        _OPS = OPS
    return _OPS


_PLAIN_KEYS = frozenset({"op", "inputs", "output", "id", "args", "retain_grad"})


def _plain_contract(name):
    """``(op, min inputs, max inputs)`` when entries of op ``name`` may take the
    fast path (Note [Plain op entries]), else False."""
    op = _ops().get(name)
    if (op is None or not op.public or op.needs_code or not op.supported or op.has_body
            or op.moves_device or op.multi_output or op.fn is None
            or type(op).for_entry is not _BASE_FOR_ENTRY or op.entry_binder is not None
            or getattr(op, "tensor_inputs", None) is not None):
        return False
    try:
        if any(arg.required for arg in op.args.values()):
            return False
        op.check_args({})
        if op.num_outputs({}) != 1 or op.worst_backward_ms({}):
            return False
    except Exception:  # noqa: BLE001 - the general code reports it, entry by entry
        return False
    lo, hi = (op.arity, op.arity) if isinstance(op.arity, int) else op.arity
    return op, lo, sys.maxsize if hi is None else hi

