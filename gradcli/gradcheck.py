"""Numerical gradient checking of a loaded graph, as ``torch.autograd.gradcheck``.

The graph's forward is re-run as a pure function of its differentiable
inputs (the leaves that require grad, or ``backward.inputs``) in float64:
floating leaves of lower precision are promoted and ``cast`` ops to a lower
floating precision cast to float64 instead, so the check tests the gradient
formulas and not rounding. Outputs are the backward's roots.

- Full mode: for every output ``i`` (root) and input ``j`` the Jacobian
  ``J_ij`` is built twice: numerically, by central differences
  ``(f(x + eps e_l) - f(x - eps e_l)) / 2 eps`` per input element ``l``, and
  analytically, one backward through the engine per output element (a row
  ``e_k^T J``). They must agree elementwise: ``|a - n| <= atol + rtol |n|``.
- Fast mode (``fast=True``): per output a random unit vector ``v``, per input
  a random unit vector ``u``; ``v^T J u`` is compared: numerically as the
  directional difference ``v . (f(x + eps u) - f(x - eps u)) / 2 eps``,
  analytically as ``(v^T J) . u`` from one backward per output.

Second derivatives (``check_gradgrad``, at the end of this module, as
``torch.autograd.gradgradcheck`` lives next to gradcheck): the same checks
on the first-order gradient of graphs that use ``grad`` ops or
``create_graph``.

Non-differentiable points: where an element disagrees, the one-sided
differences ``(f(x+eps) - f(x)) / eps`` and ``(f(x) - f(x-eps)) / eps`` are
compared as well. When they disagree with each other (a kink: relu at 0, a
max with ties, |x| at 0) and the analytical value lies between them (a
subgradient, which is what PyTorch returns there), the element is reported as
a non-differentiable point, not as a failure.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .devices import to_device, to_host
from .errors import GraphError
from .graph import Graph

LOWER_FLOATS = ("float16", "float32")


@dataclasses.dataclass
class Mismatch:
    """The check of one (output, input) pair of the Jacobian.

    ``status``: ``ok``, ``mismatch`` (a failure), ``nondiff`` (disagreement at
    non-differentiable points only) or ``error`` (the check could not run).
    ``numerical``/``analytical`` are the Jacobian blocks ``[out_numel, in_numel]``
    in full mode and scalars ``v^T J u`` in fast mode.
    """
    output: int
    input: int
    output_name: str
    input_name: str
    status: str
    message: str = ""
    numerical: object = None
    analytical: object = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    worst_index: dict | None = None     # {"output": [...], "input": [...]} (full mode)
    nondiff_points: int = 0
    fast: bool = False
    note: str = ""                      # why the check ran as it did (full -> fast)

    @property
    def ok(self):
        return self.status in ("ok", "nondiff")

    def to_json(self):
        return {"output": self.output, "input": self.input, "output_name": self.output_name,
                "input_name": self.input_name, "status": self.status, "message": self.message,
                "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "worst_index": self.worst_index, "nondiff_points": self.nondiff_points,
                "fast": self.fast, "note": self.note}


# -- float64 copy of a graph -----------------------------------------------------------
def _promote_leaf(leaf):
    if leaf.dtype.kind != "f" or leaf.dtype == np.float64:
        return leaf
    make = leaf.make
    return leaf.replace(dtype=np.dtype(np.float64),
                        make=lambda shape=None: np.asarray(make(shape), dtype=np.float64))


def _promote_op(spec):
    dtype_arg = getattr(spec.op, "dtype_arg", None)     # the arg naming the result's dtype
    if dtype_arg and spec.args.get(dtype_arg) in LOWER_FLOATS:
        return spec.replace(args=dict(spec.args, **{dtype_arg: "float64"}))
    return spec


def promoted(graph: Graph) -> Graph:
    """A copy of ``graph`` computing in float64 (lower-precision floats promoted)."""
    leaves = {name: _promote_leaf(leaf) for name, leaf in graph.leaves.items()}
    ops = [_promote_op(spec) for spec in graph.ops]
    return Graph(graph.name, graph.file, leaves, ops, graph.backward_spec, graph.expect,
                 graph.base_dir)


def differentiable_inputs(graph: Graph) -> list:
    """The names gradcheck perturbs: ``backward.inputs``, else leaves requiring grad."""
    if graph.backward_spec.inputs:
        return list(graph.backward_spec.inputs)
    return [name for name, leaf in graph.leaves.items() if leaf.requires_grad]


def _seeded(graph):
    """The graph's random draws on a replay (Note [the graph's generator] in gradcli/ops/rng.py)."""
    import contextlib  # noqa: PLC0415

    if not getattr(graph, "draws_random", lambda: False)():
        return contextlib.nullcontext()
    from .ops.rng import seeded  # noqa: PLC0415

    return seeded(getattr(graph, "seed", 0))


# -- the forward as a pure function ------------------------------------------------------
class _Function:
    """``f(overrides) -> [root arrays]``: the graph's ops replayed on NumPy arrays."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.roots = list(graph.backward_spec.roots)
        self.leaves = {}
        for name, leaf in graph.leaves.items():
            self.leaves[name] = np.asarray(leaf.make(leaf.shape))
        self.on_tensors = needs_tensor_replay(graph)

    def values(self, overrides=None):
        if self.on_tensors:      # Note [Replaying on Tensors]
            return replay_values(self.graph, self.leaves, overrides)
        overrides = overrides or {}
        vals = dict(self.leaves)
        vals.update({k: v for k, v in overrides.items() if k in vals})
        # the forward's random draws on every replay (Note [the graph's generator])
        with np.errstate(all="ignore"), _seeded(self.graph):
            for spec in self.graph.ops:
                args = [vals[n] for n in spec.inputs]
                if getattr(spec.op, "moves_device", False):   # the identity here: all on host
                    outs = [args[0]]
                else:
                    out = spec.op.fn(*args, **spec.args)
                    outs = list(out) if spec.op.multi_output else [out]
                for name, o in zip(spec.outputs, outs):
                    vals[name] = overrides[name] if name in overrides else to_host(o)
        return vals

    def __call__(self, overrides=None):
        vals = self.values(overrides)
        return [np.asarray(vals[r], dtype=np.float64) for r in self.roots]


# -- analytical side ---------------------------------------------------------------------
class _Analytical:
    """Vector-Jacobian products ``v^T J`` through the engine, on the float64 graph."""

    def __init__(self, graph: Graph, inputs):
        values = graph.forward()
        graph.root_grads()                     # checks the roots (raises GraphError)
        for name in inputs:
            if name not in values:
                graph.fail(f"input {name!r} is not defined", graph.backward_spec.line, "backward")
            if not values[name].requires_grad:
                graph.fail(f"input {name!r} does not require grad", graph.backward_spec.line,
                           "backward")
        self.roots = [values[r] for r in graph.backward_spec.roots]
        self.inputs = [values[n] for n in inputs]
        # Note [gradcheck accumulates where the file does]: with no ``backward.inputs`` the
        # file's own backward is a plain backward() into every leaf's .grad, and so is
        # gradcheck's: a reentrant checkpoint refuses grad() and backward(inputs=...)
        # (Note [Checkpoint and grad()], as PyTorch's), but a plain backward() through it
        # is what the file runs. The leaves' .grad is cleared before each product, so
        # each reads one v^T J. With ``backward.inputs`` the file itself asks for only
        # some gradients, and gradcheck does as it does: grad() on those inputs.
        self.accumulate = not graph.backward_spec.inputs
        self.leaves = [values[n] for n in graph.leaves if values[n].requires_grad]

    def vjp(self, i, v):
        """``v^T J_i`` for root ``i``: one array per input (zeros where unused)."""
        from .autograd import backward, grad, set_multithreading_enabled

        root = self.roots[i]
        v = to_device(np.asarray(v, dtype=root.dtype).reshape(root.shape), root.device)
        with set_multithreading_enabled(False):
            if self.accumulate:
                for leaf in self.leaves:
                    leaf.grad = None
                backward([root], [v], retain_graph=True)
                result = [t.grad for t in self.inputs]
            else:
                result = grad([root], self.inputs, [v], retain_graph=True, allow_unused=True)
        out = []
        for t, g in zip(self.inputs, result):
            out.append(np.zeros(t.shape, np.float64) if g is None
                       else np.asarray(to_host(g), dtype=np.float64))
        return out


# -- comparison --------------------------------------------------------------------------
def _errors(analytical, numerical):
    a = np.asarray(analytical, dtype=np.float64)
    n = np.asarray(numerical, dtype=np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(a - n)
        rel = np.where(diff == 0, 0.0, diff / np.abs(n))
    return diff, rel


def _finite_max(x):
    """The largest element; NaN when any element is NaN."""
    if x.size == 0:
        return 0.0
    return float("nan") if np.isnan(x).any() else float(np.max(x))


def _is_kink(a, fwd, bwd, atol, rtol):
    """One-sided differences disagree and ``a`` lies between them (a subgradient)."""
    lo, hi = np.minimum(fwd, bwd), np.maximum(fwd, bwd)
    scale = np.maximum(np.abs(lo), np.abs(hi))
    split = np.abs(fwd - bwd) > atol + rtol * scale
    tol = atol + rtol * scale
    inside = (a >= lo - tol) & (a <= hi + tol)
    return split & inside


def _is_jump(fwd, bwd, atol, rtol):
    """One-sided differences that differ by a jump, not by curvature times eps."""
    split = np.abs(fwd - bwd)
    return (split > 100 * (atol + rtol * np.maximum(np.abs(fwd), np.abs(bwd))))  \
        & (split > 0.5 * np.maximum(np.abs(fwd), np.abs(bwd)))


def _fmt(x):
    return np.array2string(np.asarray(x), precision=6, threshold=60, edgeitems=3,
                           max_line_width=120, floatmode="maxprec")


def _idx(shape, flat):
    return [int(i) for i in np.unravel_index(int(flat), shape)] if shape else []


def _index_str(name, index):
    return f"{name}[{', '.join(str(i) for i in index)}]" if index else name


# -- gradcheck ---------------------------------------------------------------------------
def check_jacobians(graph: Graph, eps=1e-6, atol=1e-5, rtol=1e-3, fast=False, seed=0,
                    inputs=None, max_bytes=None) -> list:
    """Check every (output, input) pair; returns one ``Mismatch`` per pair, passing or not.

    Full mode allocates ``full_jacobian_bytes`` (27 GB for a 30,000-element root
    and input): where that is over ``max_bytes`` (default: the budget the graph
    was loaded with, ``--max-graph-bytes``) the check runs in fast mode instead
    and every result's ``note`` says so.

    Raises ``GraphError`` for an invalid graph (roots or inputs that cannot
    be differentiated).
    """
    if max_bytes is None:
        max_bytes = getattr(graph, "max_graph_bytes", None)
    if max_bytes is None:
        from .loader import default_max_graph_bytes  # noqa: PLC0415

        max_bytes = default_max_graph_bytes()
    # Note [gradcheck's memory]: the check holds three float64 copies of the graph's
    # values at once (the recorded forward, the replayed one it perturbs around, and
    # one perturbed replay), then the Jacobians (full_jacobian_bytes; over the budget,
    # fast mode instead). The loader counted the float64 forward.
    forward64 = getattr(graph, "float64_forward_bytes", None)
    if forward64 is not None and 3 * forward64 > max_bytes:
        raise GraphError(f"the numeric check needs three float64 copies of the graph's tensors "
                         f"({3 * forward64} bytes), over the memory budget of {max_bytes} bytes "
                         f"for the whole graph (--max-graph-bytes)", graph.file,
                         graph.backward_spec.line, "backward")
    g64 = promoted(graph)
    inputs = list(inputs) if inputs is not None else differentiable_inputs(g64)
    if not inputs:
        raise GraphError("nothing to check: no tensor requires grad", graph.file,
                         graph.backward_spec.line, "backward")
    analytical = _Analytical(g64, inputs)
    f = _Function(g64)
    base_vals = f.values()
    f0 = f()
    x0 = {}
    for name in inputs:
        x = np.asarray(base_vals[name])
        x0[name] = x.astype(np.float64) if x.dtype.kind == "f" else x
    roots = f.roots
    note = ""
    if not fast:
        need = full_jacobian_bytes([r.size for r in f0], [x0[n].size for n in inputs])
        work = full_check_work(sum(x0[n].size for n in inputs), len(graph.ops),
                               sum(np.asarray(v).size for v in base_vals.values()))
        if need > max_bytes:
            fast = True
            note = (f"the full Jacobians would need {need} bytes, over the memory budget of "
                    f"{max_bytes} bytes: checked v^T J u for random unit vectors instead "
                    f"(fast mode)")
        elif work > MAX_FULL_CHECK_WORK:
            fast = True
            note = (f"the full check would replay the forward {2 * sum(x0[n].size for n in inputs)} "
                    f"times (about {work:.2g} element operations, over {MAX_FULL_CHECK_WORK:.0e}: "
                    f"minutes to hours): checked v^T J u for random unit vectors instead "
                    f"(fast mode)")
    if fast:
        results = _fast(f, f0, x0, analytical, roots, inputs, eps, atol, rtol, seed)
        for m in results:
            m.note = note
        return results
    return _full(f, f0, x0, analytical, roots, inputs, eps, atol, rtol)


# Note [gradcheck's time]: full mode replays the forward twice per input element,
# so its time grows as (input elements) x (forward cost): a 200,000-element input
# through one tanh is 400,000 replays, over ten minutes, a hang to whoever waits.
# The cost of one replay is counted in element operations: the elements the
# forward computes plus about 10,000 per op call (the Python overhead of a call is
# that of a NumPy op on ~10,000 elements). Over MAX_FULL_CHECK_WORK (a few minutes
# on one core; tiny_gpt, 27,328 inputs through 90 ops, is about 5e10 and stays
# full) the check runs in fast mode, as it does over the memory budget, and says so.
MAX_FULL_CHECK_WORK = 1e11
OP_CALL_WORK = 10_000


def full_check_work(input_elements, n_ops, forward_elements):
    """Element operations of full mode's numerical Jacobian (Note [gradcheck's time])."""
    return 2 * input_elements * (forward_elements + OP_CALL_WORK * n_ops)


def full_jacobian_bytes(output_sizes, input_sizes):
    """What full mode allocates: per (output, input) pair the numerical Jacobian
    and its two one-sided versions, and the analytical one, in float64."""
    return 4 * 8 * sum(output_sizes) * sum(input_sizes)


def gradcheck(graph: Graph, eps=1e-6, atol=1e-5, rtol=1e-3, fast=False, seed=0) -> list:
    """The pairs that do not simply pass: failures, non-differentiable points and errors."""
    return [m for m in check_jacobians(graph, eps, atol, rtol, fast, seed) if m.status != "ok"]


def _full(f, f0, x0, analytical, roots, inputs, eps, atol, rtol):
    # Numerical: one column per input element, for every output at once.
    num, fwd, bwd = {}, {}, {}
    for j, name in enumerate(inputs):
        x = x0[name]
        n_in = x.size
        cols = [[np.empty((r.size, n_in)) for r in f0] for _ in range(3)]
        for col in range(n_in):
            xp = x.copy()
            xp.flat[col] += eps
            fp = f({name: xp})
            xm = x.copy()
            xm.flat[col] -= eps
            fm = f({name: xm})
            for i, (p, m, c) in enumerate(zip(fp, fm, f0)):
                cols[0][i][:, col] = ((p - m) / (2 * eps)).ravel()
                cols[1][i][:, col] = ((p - c) / eps).ravel()
                cols[2][i][:, col] = ((c - m) / eps).ravel()
        for i in range(len(roots)):
            num[i, j], fwd[i, j], bwd[i, j] = cols[0][i], cols[1][i], cols[2][i]

    # Analytical: one backward per output element gives a row of every J_ij.
    ana = {}
    errors = {}
    for i, r in enumerate(f0):
        rows = [np.empty((r.size, x0[name].size)) for name in inputs]
        try:
            for k in range(r.size):
                v = np.zeros(r.size)
                v[k] = 1.0
                for j, g in enumerate(analytical.vjp(i, v)):
                    rows[j][k, :] = g.ravel()
        except Exception as exc:  # noqa: BLE001 - reported as the check's error
            errors[i] = exc
        for j in range(len(inputs)):
            ana[i, j] = rows[j]

    results = []
    for i, root in enumerate(roots):
        out_shape = f0[i].shape
        for j, name in enumerate(inputs):
            in_shape = x0[name].shape
            base = Mismatch(i, j, root, name, "ok")
            if i in errors:
                base.status = "error"
                base.message = (f"Jacobian check for output {i} with respect to input {j} could "
                                f"not run: the backward raised {type(errors[i]).__name__}: "
                                f"{errors[i]}")
                results.append(base)
                continue
            a, n = ana[i, j], num[i, j]
            diff, rel = _errors(a, n)
            tol = atol + rtol * np.abs(n)
            bad = ~(diff <= tol)
            base.numerical, base.analytical = n, a
            base.max_abs_err = _finite_max(diff)
            base.max_rel_err = _finite_max(rel)
            if diff.size:
                excess = np.where(np.isnan(diff), np.inf, diff - tol)
                if bad.any():
                    excess = np.where(bad, excess, -np.inf)
                worst = int(np.argmax(excess))
                k, col = divmod(worst, a.shape[1])
                base.worst_index = {"output": _idx(out_shape, k), "input": _idx(in_shape, col)}
            # Kinks: among failing elements, any subgradient between one-sided
            # differences that disagree; among passing ones (max ties, where the
            # central difference happens to agree), only clear jumps.
            kink = _is_kink(a, fwd[i, j], bwd[i, j], atol, rtol)
            kink &= bad | _is_jump(fwd[i, j], bwd[i, j], atol, rtol)
            if not bad.any() and not kink.any():
                results.append(base)
                continue
            flagged = bad | kink
            k, col = divmod(int(np.argmax(np.where(flagged, excess, -np.inf))), a.shape[1])
            where = (f"d {_index_str(root, _idx(out_shape, k))} / "
                     f"d {_index_str(name, _idx(in_shape, col))}")
            one_sided = (f"one-sided differences {fwd[i, j][k, col]:.6g} (forward) and "
                         f"{bwd[i, j][k, col]:.6g} (backward)")
            if kink[bad].all():
                base.status = "nondiff"
                base.nondiff_points = int(kink.sum())
                base.message = (f"non-differentiable point for output {i} with respect to input "
                                f"{j} ({root!r} w.r.t. {name!r}): {int(kink.sum())} element(s), "
                                f"e.g. {where}: {one_sided} disagree; central difference "
                                f"{n[k, col]:.6g}, analytical {a[k, col]:.6g} (a subgradient); "
                                f"not a failure")
            else:
                real = bad & ~kink
                k, col = divmod(int(np.argmax(np.where(real, excess, -np.inf))), a.shape[1])
                base.worst_index = {"output": _idx(out_shape, k), "input": _idx(in_shape, col)}
                where = (f"d {_index_str(root, _idx(out_shape, k))} / "
                         f"d {_index_str(name, _idx(in_shape, col))}")
                base.status = "mismatch"
                base.nondiff_points = int(kink.sum())
                base.message = (
                    f"Jacobian mismatch for output {i} with respect to input {j},\n"
                    f"output {root!r} {list(out_shape)}, input {name!r} {list(in_shape)}; "
                    f"{int(real.sum())} of {a.size} element(s) differ (|a - n| > atol + rtol |n|, "
                    f"atol={atol:g}, rtol={rtol:g}); worst {where}: numerical "
                    f"{n[k, col]:.6g}, analytical {a[k, col]:.6g}\n"
                    f"numerical:{_fmt(n)}\nanalytical:{_fmt(a)}\n"
                    f"(Jacobian rows are output elements, columns input elements)")
            results.append(base)
    return results


def _fast(f, f0, x0, analytical, roots, inputs, eps, atol, rtol, seed):
    rng = np.random.default_rng(seed)
    us = {}
    for name in inputs:
        u = rng.standard_normal(x0[name].shape)
        norm = np.linalg.norm(u.ravel())
        us[name] = u / norm if norm else u
    vs = []
    for r in f0:
        v = rng.standard_normal(r.shape)
        norm = np.linalg.norm(v.ravel())
        vs.append(v / norm if norm else v)

    results = []
    num = {}
    for j, name in enumerate(inputs):
        x, u = x0[name], us[name]
        fp, fm = f({name: x + eps * u}), f({name: x - eps * u})
        for i, v in enumerate(vs):
            num[i, j] = (float(np.sum(v * (fp[i] - fm[i]))) / (2 * eps),
                         float(np.sum(v * (fp[i] - f0[i]))) / eps,
                         float(np.sum(v * (f0[i] - fm[i]))) / eps)
    for i, root in enumerate(roots):
        try:
            gs = analytical.vjp(i, vs[i])
            err = None
        except Exception as exc:  # noqa: BLE001 - reported as the check's error
            gs, err = None, exc
        for j, name in enumerate(inputs):
            m = Mismatch(i, j, root, name, "ok", fast=True)
            if err is not None:
                m.status = "error"
                m.message = (f"Jacobian check for output {i} with respect to input {j} could not "
                             f"run: the backward raised {type(err).__name__}: {err}")
                results.append(m)
                continue
            a = float(np.sum(gs[j] * us[name]))
            n, fw, bw = num[i, j]
            diff, rel = _errors(a, n)
            m.numerical, m.analytical = n, a
            m.max_abs_err, m.max_rel_err = float(diff), float(rel)
            passed = bool(diff <= atol + rtol * abs(n))
            kink = bool(_is_kink(np.float64(a), np.float64(fw), np.float64(bw), atol, rtol))
            if passed and not (kink and bool(_is_jump(np.float64(fw), np.float64(bw), atol, rtol))):
                results.append(m)
                continue
            if kink:
                m.status = "nondiff"
                m.nondiff_points = 1
                m.message = (f"non-differentiable point for output {i} with respect to input "
                             f"{j} ({root!r} w.r.t. {name!r}) along a random direction: one-sided "
                             f"differences {fw:.6g} and {bw:.6g} disagree; central difference "
                             f"{n:.6g}, analytical {a:.6g} (a subgradient); not a failure")
            else:
                m.status = "mismatch"
                m.message = (
                    f"Jacobian mismatch for output {i} with respect to input {j},\n"
                    f"numerical:{n:.10g}\nanalytical:{a:.10g}\n"
                    f"(output {root!r}, input {name!r}; fast mode compares v^T J u for random "
                    f"unit vectors v and u; run without --fast to see the full Jacobian)")
            results.append(m)
    return results


# -- gradgradcheck: second derivatives ------------------------------------------------
# Second derivatives against finite differences, as ``torch.autograd.gradgradcheck``.
#
# A graph that uses ``grad`` ops or ``backward.create_graph`` promises
# gradients that can be differentiated again. ``check_gradgrad`` checks them
# the way PyTorch's gradgradcheck does: with random upstream gradients ``v``
# (one per root, fixed by ``seed``), the first-order gradient
#
#     G(x, v) = grad(roots, inputs, grad_outputs=v)
#
# is itself a function of the inputs ``x`` and of ``v``; its Jacobian is
# built numerically, by central differences of ``G`` (each evaluation a
# forward and a backward through the engine, in float64), and analytically,
# by backwards through the graph that ``G`` recorded with ``create_graph``
# (the backward of the backward). Full mode compares the whole Jacobians,
# ``fast`` the projections ``w^T J u`` on random unit vectors (the comparison
# and its reporting are ``_full`` / ``_fast`` above).
# Outputs are named ``grad(x)`` and the ``v`` inputs ``grad_outputs(root)``.
#
# Note [Replaying on Tensors]: gradcheck replays a graph as a pure function of
# arrays (every op's ``fn``). A graph with an op whose forward runs a backward
# (``runs_backward``: ``grad``) cannot be replayed that way: the gradient needs
# the recorded graph. Such graphs are replayed on Tensors with recording on
# (``replay``), which is also what the first-order check of them uses.


def uses_higher_order(graph) -> bool:
    """The graph runs a backward in its forward (``grad`` ops) or asks for create_graph."""
    return bool(graph.backward_spec.create_graph) or needs_tensor_replay(graph)


def needs_tensor_replay(graph) -> bool:
    return any(getattr(spec.op, "runs_backward", False) for spec in graph.ops)


def replay(graph, leaves, overrides=None):
    """The graph's forward on Tensors (host arrays; ``to`` is the identity) from the
    leaf arrays ``leaves``; ``overrides`` replace leaves or op outputs by name (an
    overridden op output becomes a leaf that requires grad). Returns name -> Tensor."""
    from .autograd import Tensor, set_grad_enabled

    overrides = overrides or {}
    values = {}
    for name, leaf in graph.leaves.items():
        data = overrides.get(name, leaves[name])
        values[name] = Tensor(np.array(data, copy=True), requires_grad=leaf.requires_grad)
    with set_grad_enabled(True), np.errstate(all="ignore"), _seeded(graph):
        for spec in graph.ops:
            inputs = [values[n] for n in spec.inputs]
            if getattr(spec.op, "moves_device", False):
                outs = [inputs[0]]
            else:
                out = spec.op(*inputs, **spec.args)
                outs = list(out) if isinstance(out, (list, tuple)) else [out]
            for name, t in zip(spec.outputs, outs):
                if name in overrides:
                    t = Tensor(np.array(overrides[name], dtype=np.float64), requires_grad=True)
                values[name] = t
    return values


def replay_values(graph, leaves, overrides=None):
    """``replay`` as host arrays (gradcheck's ``_Function.values``)."""
    return {name: to_host(t.data) for name, t in replay(graph, leaves, overrides).items()}


class _FirstOrder:
    """``G(x, v)``: the first-order gradients at given inputs and root gradients."""

    def __init__(self, graph, leaves, inputs, v_names):
        self.graph = graph
        self.leaves = leaves
        self.inputs = inputs
        self.v_names = v_names
        self.v0 = {}

    def __call__(self, overrides=None):
        from .autograd import grad, set_multithreading_enabled

        overrides = dict(overrides or {})
        values = replay(self.graph, self.leaves, {k: v for k, v in overrides.items()
                                                  if k not in self.v0})
        roots = [values[r] for r in self.graph.backward_spec.roots]
        vs = [np.asarray(overrides.get(n, self.v0[n])) for n in self.v_names]
        with set_multithreading_enabled(False):
            result = grad(roots, [values[n] for n in self.inputs], vs, allow_unused=True)
        return [np.zeros(values[n].shape) if g is None else np.asarray(to_host(g), np.float64)
                for n, g in zip(self.inputs, result)]


class _SecondOrder:
    """``w^T J`` of ``G`` through the recorded backward of the backward."""

    def __init__(self, graph, leaves, inputs, v_names, v0):
        from .autograd import Tensor, grad, set_multithreading_enabled

        values = replay(graph, leaves)
        roots = [values[r] for r in graph.backward_spec.roots]
        for r, name in zip(roots, graph.backward_spec.roots):
            if not r.requires_grad:
                graph.fail(f"root {name!r} does not require grad", graph.backward_spec.line,
                           "backward")
        self.xs = [values[n] for n in inputs]
        self.vs = [Tensor(np.array(v0[n], copy=True), requires_grad=True) for n in v_names]
        with set_multithreading_enabled(False):
            first = grad(roots, self.xs, self.vs, create_graph=True, allow_unused=True)
        self.first = list(first)

    def vjp(self, i, w):
        from .autograd import grad, set_multithreading_enabled

        wrt = self.xs + self.vs
        g = self.first[i]
        if g is None or not g.requires_grad:       # G_i does not depend on anything
            return [np.zeros(t.shape) for t in wrt]
        w = np.asarray(w, dtype=np.float64).reshape(g.shape)
        with set_multithreading_enabled(False):
            result = grad([g], wrt, [w], retain_graph=True, allow_unused=True)
        return [np.zeros(t.shape) if r is None else np.asarray(to_host(r), np.float64)
                for t, r in zip(wrt, result)]


def check_gradgrad(graph, eps=1e-6, atol=1e-5, rtol=1e-3, fast=False, seed=0) -> list:
    """Check the Jacobian of the first-order gradient; one ``gradcheck.Mismatch``
    per (gradient, input) pair, passing or not (see the module's docstring)."""
    from .errors import BackwardError

    g64 = promoted(graph)
    inputs = differentiable_inputs(g64)
    if not inputs:
        raise GraphError("nothing to check: no tensor requires grad", graph.file,
                         graph.backward_spec.line, "backward")
    leaves = {name: np.asarray(leaf.make(leaf.shape)) for name, leaf in g64.leaves.items()}
    base = replay(g64, leaves)
    rng = np.random.default_rng(seed)
    roots = list(g64.backward_spec.roots)
    v_names = [f"grad_outputs({r})" for r in roots]
    v0 = {n: rng.standard_normal(base[r].shape) for n, r in zip(v_names, roots)}
    f = _FirstOrder(g64, leaves, inputs, v_names)
    f.v0 = v0
    outputs = [f"grad({n})" for n in inputs]
    wrt = inputs + v_names
    try:
        analytical = _SecondOrder(g64, leaves, inputs, v_names, v0)
        f0 = f()
    except (GraphError, BackwardError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported as the check's error
        return [Mismatch(i, j, out, name, "error", fast=fast,
                         message=f"second-derivative check for {out!r} w.r.t. {name!r} could "
                                 f"not run: the backward with create_graph raised "
                                 f"{type(exc).__name__}: {exc}")
                for i, out in enumerate(outputs) for j, name in enumerate(wrt)]
    x0 = {n: np.asarray(to_host(base[n].data), np.float64) for n in inputs}
    x0.update(v0)
    if fast:
        return _fast(f, f0, x0, analytical, outputs, wrt, eps, atol, rtol, seed)
    return _full(f, f0, x0, analytical, outputs, wrt, eps, atol, rtol)
