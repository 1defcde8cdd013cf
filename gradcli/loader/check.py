"""Step one of a load: the document against the format and the op contracts.

``DocumentCheck.check`` checks the whole file statically (keys, names, ops,
arities, args, devices, files, and every op's output shapes and dtypes against
its inputs' and the memory budget, from the op's own ``infer``; the memory of
the whole graph and the time its backward may wait on purpose, from the op's
contract) and raises a one-line GraphError naming the file, the line, the op and
the problem. It reads no weights but their headers and runs no op: what it
returns (``CheckedGraph``) is what ``build`` binds into a Graph. This module is
the top level, ``backward`` and ``expect``; ``check_tensors`` and ``check_ops``
the entries.
"""
from __future__ import annotations

from ..graph import BackwardSpec, ExpectSpec, ForwardSpec
from .check_ops import Defined, OpChecks
from .check_tensors import TensorChecks
from .checker import finite_float, is_int, is_number, kind_of

TOP_KEYS = {"version", "name", "seed", "tensors", "ops", "backward", "expect"}
BACKWARD_KEYS = {"roots", "grad_roots", "inputs", "retain_graph", "create_graph", "allow_unused"}
EXPECT_KEYS = {"grads", "numeric", "rtol", "atol", "order", "error", "reference", "rounding", "elementwise",
               "forward"}
FORWARD_KEYS = {"values", "rtol", "atol"}
MAX_PERTURBED = 8           # PyTorch's runs with moved leaves, per tensor (export writes 2)


class CheckedGraph:
    """A checked document, for ``build``: the graph's parts (leaves and op specs not
    yet bound), what its forward allocates (as loaded and in float64), and what the
    build binds (``sources``: every leaf's source; ``unbound``: every op entry)."""

    __slots__ = ("name", "file", "base_dir", "seed", "leaves", "ops", "backward", "expect",
                 "forward_bytes", "float64_forward_bytes", "sources", "unbound", "weights",
                 "options")

    def __init__(self, **fields):
        for key, value in fields.items():
            setattr(self, key, value)


class DocumentCheck(TensorChecks, OpChecks):
    """One document under check (``check()``), with its file's folder, name and options.

    >>> from gradcli.document import parse_yaml
    >>> from gradcli.loader.options import LoadOptions
    >>> doc = parse_yaml("version: 1\\ntensors: {x: {value: 2.0, requires_grad: true}}\\n"
    ...                  "ops: [{op: mul, inputs: [x, x], output: y}]\\n"
    ...                  "backward: {roots: [y]}\\n", "<doc>")
    >>> [spec.label for spec in DocumentCheck(doc, ".", "g", LoadOptions()).check().ops]
    ['ops[0] (mul)']
    """

    def check(self) -> CheckedGraph:
        """The whole document checked; GraphError at the first problem."""
        data = self.doc.data
        if not isinstance(data, dict):
            self.fail(f"the document must be a mapping with version, tensors, ops and backward, "
                      f"not {kind_of(data)}")
        self.check_keys(data, TOP_KEYS, (), None, "the top level")
        if "version" not in data:
            self.fail("missing required key 'version' (this tool reads version: 1)")
        version = data["version"]
        if type(version) is not int or version != 1:      # 1.0 and true are not 1
            self.fail(f"unsupported format version {version!r} (this tool reads version: 1)",
                      ("version",))
        for key in ("tensors", "ops", "backward"):
            if key not in data:
                self.fail(f"missing required key {key!r}")
        name = data.get("name", self.stem)
        if not isinstance(name, str):
            self.fail("name must be a string", ("name",))
        seed = data.get("seed", 0)
        if not is_int(seed) or seed < 0:
            self.fail(f"seed must be a non-negative int, got {seed!r}", ("seed",))
        self.seed = seed

        tensors = data["tensors"]
        if not isinstance(tensors, dict):
            self.fail(f"tensors must be a mapping from name to tensor, not {kind_of(tensors)}",
                      ("tensors",))
        leaves = {}
        for tname, entry in tensors.items():
            self.check_name(tname, ("tensors", tname), f"tensors.{tname}")
            leaves[tname] = leaf = self.leaf(tname, entry, ("tensors", tname))
            self.allocate([(leaf.shape, leaf.dtype)], ("tensors", tname), f"tensors.{tname}")

        ops = data["ops"]
        if not isinstance(ops, list):
            self.fail(f"ops must be a list, not {kind_of(ops)}", ("ops",))
        defined = {n: Defined(leaf.shape, leaf.dtype, True) for n, leaf in leaves.items()}
        op_specs = [self.op(i, entry, defined) for i, entry in enumerate(ops)]

        backward = self.backward(data["backward"], defined, leaves)
        expect = self.expect(data.get("expect"), defined) if "expect" in data else None
        return CheckedGraph(
            name=name, file=self.file, base_dir=self.base_dir, seed=self.seed, leaves=leaves,
            ops=op_specs, backward=backward, expect=expect, forward_bytes=self.graph_bytes,
            float64_forward_bytes=self.graph_bytes64, sources=self.sources,
            unbound=self.unbound, weights=self.weights, options=self.options)

    # -- backward / expect ------------------------------------------------------------------
    def backward(self, spec, defined, leaves) -> BackwardSpec:
        path = ("backward",)
        where = "backward"
        if not isinstance(spec, dict):
            self.fail(f"backward must be a mapping, not {kind_of(spec)}", path, where)
        self.check_keys(spec, BACKWARD_KEYS, path, where, "backward")
        roots = spec.get("roots")
        if roots is None:
            self.fail("missing required key 'roots'", path, where)
        if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
            self.fail("roots must be a non-empty list of tensor names", path + ("roots",), where)
        for k, r in enumerate(roots):
            if r not in defined:
                self.fail(f"root {r!r} is not defined", path + ("roots", k), where)
        grad_roots = spec.get("grad_roots", {})
        if grad_roots is None:
            grad_roots = {}
        if not isinstance(grad_roots, dict):
            self.fail("grad_roots must be a mapping from root name to gradient", path + ("grad_roots",), where)
        root_grads = {}
        root_set = set(roots)
        for r, g in grad_roots.items():
            if r not in root_set:
                self.fail(f"grad_roots names {r!r}, which is not a root", path + ("grad_roots", r), where)
            if is_number(g):
                try:
                    root_grads[r] = float(g)
                except OverflowError:
                    self.fail(f"grad_roots.{r} is too large for a float", path + ("grad_roots", r), where)
            else:
                root_grads[r] = self.leaf(r, g, path + ("grad_roots", r), for_grad_root=True)
        inputs = spec.get("inputs")
        if inputs is not None:
            if not isinstance(inputs, list) or not inputs or not all(isinstance(n, str) for n in inputs):
                self.fail("inputs must be a non-empty list of tensor names", path + ("inputs",), where)
            for k, n in enumerate(inputs):
                if n not in defined:
                    self.fail(f"input {n!r} is not defined", path + ("inputs", k), where)
        flags = {}
        for key in ("retain_graph", "create_graph", "allow_unused"):
            value = spec.get(key, False)
            if not isinstance(value, bool):
                self.fail(f"{key} must be true or false, got {value!r}", path + (key,), where)
            flags[key] = value
        if "retain_graph" not in spec:          # as PyTorch: defaults to create_graph
            flags["retain_graph"] = flags["create_graph"]
        return BackwardSpec(roots=list(roots), grad_roots=root_grads, inputs=inputs,
                            line=self.doc.line(*path), **flags)

    def expect(self, spec, defined) -> ExpectSpec:
        path = ("expect",)
        where = "expect"
        if not isinstance(spec, dict):
            self.fail(f"expect must be a mapping, not {kind_of(spec)}", path, where)
        self.check_keys(spec, EXPECT_KEYS, path, where, "expect")
        grads = {}
        expected = spec.get("grads")
        if expected is None:
            expected = {}
        if not isinstance(expected, dict):
            self.fail(f"grads must be a mapping from tensor name to gradient, not {kind_of(expected)}",
                      path + ("grads",), where)
        for n, g in expected.items():
            if n not in defined:
                self.fail(f"expected gradient for {n!r}, which is not defined", path + ("grads", n), where)
            grads[n] = self.leaf(n, g, path + ("grads", n), for_grad_root=True)
        for key in ("rtol", "atol"):
            if key in spec and (not is_number(spec[key]) or spec[key] < 0
                                or isinstance(spec[key], int) and not finite_float(spec[key])):
                self.fail(f"{key} must be a non-negative number", path + (key,), where)
        order = spec.get("order")
        if order is not None and (not isinstance(order, list) or not all(isinstance(o, str) for o in order)):
            self.fail("order must be a list of node names", path + ("order",), where)
        error = spec.get("error")
        if error is not None and not isinstance(error, str):
            self.fail("error must be a string (a part of the expected message)", path + ("error",), where)
        for key in ("numeric", "elementwise"):
            if not isinstance(spec.get(key, False), bool):
                self.fail(f"{key} must be true or false", path + (key,), where)
        reference = self.reference(spec, grads, path)
        return ExpectSpec(grads=grads, numeric=spec.get("numeric", False),
                          rtol=spec.get("rtol", 1e-7), atol=spec.get("atol", 0.0), order=order,
                          error=error, reference=reference,
                          perturbed=self.perturbed(spec, reference, path),
                          rounding=self.rounding(spec, grads, path),
                          elementwise=spec.get("elementwise", False),
                          forward=(self.expect_forward(spec["forward"], defined)
                                   if "forward" in spec else None))

    def reference(self, spec, grads, path) -> dict:
        """expect.reference.grads: float64 gradients of tensors that expect.grads names
        (``gradcli.verdict``); its ``distance`` is informative and only type-checked."""
        ref = spec.get("reference")
        if ref is None:
            return {}
        path = path + ("reference",)
        if not isinstance(ref, dict) or not isinstance(ref.get("grads", {}), dict) \
                or not isinstance(ref.get("distance", {}), dict):
            self.fail("reference must be a mapping with grads and distance mappings", path,
                      "expect")
        self.check_keys(ref, {"grads", "distance", "perturbed"}, path, "expect",
                        "expect.reference")
        out = {}
        for n, g in (ref.get("grads") or {}).items():
            if n not in grads:
                self.fail(f"reference gradient for {n!r}, which expect.grads does not name",
                          path + ("grads", n), "expect")
            out[n] = self.leaf(n, g, path + ("grads", n), for_grad_root=True)
        for n, d in (ref.get("distance") or {}).items():
            if not is_number(d) or d < 0:
                self.fail(f"distance of {n!r} must be a non-negative number",
                          path + ("distance", n), "expect")
        return out

    def perturbed(self, spec, reference, path) -> dict:
        """expect.reference.perturbed: {name: [PyTorch's gradient with its leaves moved by one
        ulp, ...]} for tensors with a reference (Note [The float32 yardstick] in verdict.py)."""
        moved = (spec.get("reference") or {}).get("perturbed")
        if moved is None:
            return {}
        path = path + ("reference", "perturbed")
        if not isinstance(moved, dict):
            self.fail(f"perturbed must be a mapping from tensor name to a list of gradients, "
                      f"not {kind_of(moved)}", path, "expect")
        out = {}
        for n, entries in moved.items():
            if n not in reference:
                self.fail(f"perturbed gradients for {n!r}, which reference.grads does not name",
                          path + (n,), "expect")
            if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PERTURBED:
                self.fail(f"perturbed gradients of {n!r} must be a list of 1 to "
                          f"{MAX_PERTURBED} gradients", path + (n,), "expect")
            out[n] = [self.leaf(n, g, path + (n, i), for_grad_root=True)
                      for i, g in enumerate(entries)]
        return out

    def rounding(self, spec, grads, path) -> dict:
        """expect.rounding.distance: {name: PyTorch's own float64 rounding spread} for tensors
        that expect.grads names (Note [The float64 yardstick] in verdict.py)."""
        spec = spec.get("rounding")
        if spec is None:
            return {}
        path = path + ("rounding",)
        if not isinstance(spec, dict) or not isinstance(spec.get("distance"), dict):
            self.fail("rounding must be a mapping with a distance mapping", path, "expect")
        self.check_keys(spec, {"distance"}, path, "expect", "expect.rounding")
        out = {}
        for n, d in spec["distance"].items():
            if n not in grads:
                self.fail(f"rounding distance for {n!r}, which expect.grads does not name",
                          path + ("distance", n), "expect")
            if not is_number(d) or isinstance(d, bool) or d < 0 or not finite_float(d):
                self.fail(f"distance of {n!r} must be a non-negative number",
                          path + ("distance", n), "expect")
            out[n] = float(d)
        return out

    def expect_forward(self, spec, defined) -> ForwardSpec:
        """``expect.forward``: tensor values another runtime computed (Note [Forward check])."""
        path = ("expect", "forward")
        where = "expect.forward"
        if not isinstance(spec, dict):
            self.fail(f"forward must be a mapping, not {kind_of(spec)}", path, where)
        self.check_keys(spec, FORWARD_KEYS, path, where, "expect.forward")
        values = spec.get("values")
        if not isinstance(values, dict) or not values:
            self.fail("values must be a non-empty mapping from tensor name to value",
                      path + ("values",), where)
        checked = {}
        for n, v in values.items():
            if n not in defined:
                self.fail(f"expected value for {n!r}, which is not defined", path + ("values", n),
                          where)
            checked[n] = self.leaf(n, v, path + ("values", n), for_grad_root=True)
        for key in ("rtol", "atol"):
            if key in spec and (not is_number(spec[key]) or spec[key] < 0
                                or isinstance(spec[key], int) and not finite_float(spec[key])):
                self.fail(f"{key} must be a non-negative number", path + (key,), where)
        return ForwardSpec(values=checked, rtol=spec.get("rtol", 1e-7), atol=spec.get("atol", 0.0))

