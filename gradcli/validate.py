"""``gradcli validate``: check graph files against their ``expect`` section.

Per file: load it (format check), run it, then run the checks:

- ``backward``: the backward ran (or, with ``expect.error``, ``error``: it
  failed with a message containing that text);
- ``grads[NAME]``: each ``expect.grads`` entry, ``|actual - expected| <=
  atol + rtol |expected|`` with ``expect.rtol``/``expect.atol`` where the
  gradient's whole path is float64; where it computes in lower precision and
  the file has a float64 reference, ``gradcli.verdict``'s norm-wise policy
  (``--elementwise`` or ``expect.elementwise`` keeps the element-wise check);
- ``order``: ``expect.order`` equals the node names of a single-threaded run;
- ``check-order`` (``--check-order``): that run's order equals the predicted
  execution order;
- ``repeat`` (``--repeat N``): N backwards on one retained graph give N times
  the gradient of one;
- ``numeric[ROOT/INPUT]`` (``--numeric``, ``--fast`` or ``expect.numeric``):
  the Jacobians against finite differences (``gradcli.gradcheck``).

A file's status is pass, fail or invalid. The command itself (options, exit
codes, table, JSON, JUnit) is ``gradcli.cli.cmd_validate``.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from .errors import BackwardError, GraphError

PASS, FAIL, NONDIFF, SKIPPED = "pass", "fail", "nondiff", "skipped"


@dataclasses.dataclass
class Check:
    """One check of one file; ``status`` is pass, fail, nondiff or skipped."""
    name: str
    kind: str
    status: str
    message: str = ""
    tensor: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    worst_index: object = None
    time_s: float = 0.0
    distance: float | None = None        # norm-wise distances to the float64 reference
    torch_distance: float | None = None  # (gradcli.verdict), when that policy judged
    precision: str | None = None         # the lowest floating dtype on the gradient's path
    kinks: int | None = None             # elements judged on float32's branches (Note [Kinks])

    @property
    def ok(self):
        return self.status != FAIL

    def to_json(self):
        return {"name": self.name, "kind": self.kind, "status": self.status,
                "tensor": self.tensor, "max_abs_err": _json_float(self.max_abs_err),
                "max_rel_err": _json_float(self.max_rel_err), "worst_index": self.worst_index,
                "message": self.message, "time_s": self.time_s,
                "distance": _json_float(self.distance),
                "torch_distance": _json_float(self.torch_distance), "precision": self.precision,
                "kinks": self.kinks}


@dataclasses.dataclass
class FileReport:
    path: str
    graph: str | None = None
    checks: list = dataclasses.field(default_factory=list)
    invalid: str | None = None       # the GraphError message when the input is invalid

    @property
    def status(self):
        if self.invalid is not None:
            return "invalid"
        return FAIL if any(c.status == FAIL for c in self.checks) else PASS

    def counts(self):
        counts = {"checks": len(self.checks), PASS: 0, FAIL: 0, NONDIFF: 0, SKIPPED: 0}
        for c in self.checks:
            counts[c.status] += 1
        return counts

    def to_json(self):
        return {"file": self.path, "graph": self.graph, "status": self.status,
                "error": self.invalid, "checks": [c.to_json() for c in self.checks],
                "summary": self.counts()}


@dataclasses.dataclass
class Options:
    numeric: bool = False
    fast: bool = False
    eps: float = 1e-6
    atol: float = 1e-5
    rtol: float = 1e-3
    check_order: bool = False
    repeat: int = 1
    detect_anomaly: bool = False
    check_inf: bool = False
    multithreading: bool = True
    seed: int = 0
    elementwise: bool = False     # every gradient element-wise, no norm-wise float32 verdict


def _json_float(x):
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _listing(items, limit=10):
    """The first ``limit`` items, then how many more: one message never lists thousands."""
    head = ", ".join(map(str, items[:limit]))
    return f"[{head}]" if len(items) <= limit else f"[{head}, ... and {len(items) - limit} more]"


# -- the checks ------------------------------------------------------------------------------
def _compare(actual, expected, rtol, atol):
    """(ok, max abs err, max rel err, worst index) with numpy.allclose's rule."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    with np.errstate(all="ignore"):
        diff = np.abs(a - e)
        rel = np.where(diff == 0, 0.0, diff / np.abs(e))
        tol = atol + rtol * np.abs(e)
    both_nan = np.isnan(a) & np.isnan(e)
    bad = ~((diff <= tol) | both_nan)
    if not diff.size:
        return True, 0.0, 0.0, []
    excess = np.where(np.isnan(diff) & ~both_nan, np.inf, np.where(both_nan, -np.inf, diff - tol))
    worst = [int(i) for i in np.unravel_index(int(np.argmax(excess)), diff.shape)]
    clean = np.where(both_nan, 0.0, diff)
    clean_rel = np.where(both_nan, 0.0, rel)
    return (not bad.any(), float(np.max(clean)) if not np.isnan(clean).any() else float("nan"),
            float(np.max(clean_rel)) if not np.isnan(clean_rel).any() else float("nan"), worst)


def _path_precisions(graph, expect):
    """{name: PathPrecision} of the expected gradients (Note [Gradient path])."""
    from .precision import lowest_precision

    if not expect.grads:
        return {}
    return lowest_precision(graph)


def _why(p):
    """How the lowest precision on a path was found, for the messages."""
    if p.op is None:
        return f"{p.dtype} is the tensor's own dtype"
    line = f" at line {p.line}" if p.line else ""
    return f"{p.dtype} on its gradient path: {p.op}{line} computes in {p.dtype}"


def _references(result, expect, precisions, elementwise):
    """{name: float64 reference array} of the gradients the norm-wise verdict judges."""
    from .devices import to_host as _host

    if elementwise:
        return {}
    refs = {}
    for name, spec in expect.reference.items():
        p, got = precisions.get(name), result.grads.get(name)
        if p is not None and np.dtype(p.dtype).itemsize < 8 and got is not None:
            refs[name] = np.asarray(_host(spec.array(np.shape(got))), dtype=np.float64)
    return refs


def _moved(expect, name, shape):
    """PyTorch's gradients of ``name`` with its leaves moved by one ulp (Note [The float32
    yardstick] in verdict.py), those of the gradient's shape; [] for none."""
    from .devices import to_host as _host

    out = []
    for spec in expect.perturbed.get(name, ()):
        a = np.asarray(_host(spec.array(shape)))
        if a.shape == tuple(shape):
            out.append(a)
    return out


def _judge_normwise(check, name, actual, expected, ref, p, scale, moved):
    """The float32 policy (gradcli.verdict) on one gradient; False when it cannot judge."""
    from .verdict import judge

    if ref.shape != actual.shape:
        check.status = FAIL
        check.message = (f"the float64 reference of {name!r} has shape {list(ref.shape)}, the "
                         f"gradient {list(actual.shape)}")
        return True
    verdict = judge(name, actual, expected, ref, p.dtype, _why(p), scale,
                    torch_perturbed=moved)
    if verdict is None:
        return False
    check.distance, check.torch_distance = verdict.distance, verdict.torch_distance
    check.status = PASS if verdict.ok else FAIL
    check.message = verdict.message
    return True


def _scale64(result, expect, precisions):
    """The largest RMS of the expected gradients whose path is float64 throughout
    (Note [The float64 floor] in verdict.py); 0.0 when there is none."""
    from .devices import to_host as _host

    best = 0.0
    for name, spec in expect.grads.items():
        p, got = precisions.get(name), result.grads.get(name)
        if got is None or (p is not None and np.dtype(p.dtype).itemsize < 8):
            continue
        e = np.asarray(_host(spec.array(np.shape(_host(got)))), dtype=np.float64)
        if e.size and np.isfinite(e).all():
            best = max(best, float(np.sqrt(np.mean(e * e))))
    return best


def _check_grads(graph, result, expect, opts=None):
    from .devices import to_host as _host
    from .verdict import FACTOR, rounding_floor, within_spread

    checks = []
    precisions = _path_precisions(graph, expect)
    elementwise = expect.elementwise or (opts is not None and opts.elementwise)
    refs = _references(result, expect, precisions, elementwise)
    # the floor's scale (Note [The floor] in verdict.py): the largest RMS reference gradient
    scale = max((float(np.sqrt(np.mean(r * r))) for r in refs.values() if r.size
                 and np.isfinite(r).all()), default=0.0)
    scale64 = []                    # computed at the first float64 failure, once
    retry = []                      # norm-wise failures, judged again on float32's branches
    for name, spec in expect.grads.items():
        check = Check(f"grads[{name}]", "grads", PASS, tensor=name)
        checks.append(check)
        if name not in result.grads:
            check.status = FAIL
            check.message = (f"no gradient for {name!r}: it is not a leaf that requires grad, a "
                             "retain_grad output or a backward input")
            continue
        actual = _host(result.grads[name])
        if actual is None:
            check.status = FAIL
            check.message = f"the gradient of {name!r} is None (no root depends on it)"
            continue
        expected = _host(spec.array(actual.shape))
        if expected.shape != actual.shape:
            check.status = FAIL
            check.message = (f"expected a gradient of shape {list(expected.shape)}, got "
                             f"{list(actual.shape)}")
            continue
        failure = _elementwise(check, name, actual, expected, expect.rtol, expect.atol)
        p = precisions.get(name)
        low = p is not None and np.dtype(p.dtype).itemsize < 8
        check.precision = None if p is None else str(p.dtype)
        # Note [Element-wise below float64]: without a reference, or on request, a
        # gradient below float64 is held element-wise to the file's rtol/atol, as before.
        note = ""
        if name in refs:
            moved = _moved(expect, name, actual.shape)
            if _judge_normwise(check, name, actual, expected, refs[name], p, scale, moved):
                if check.status == FAIL:
                    retry.append((check, name, actual, expected, p, moved))
                continue
        elif low:
            note = ("; element-wise on request" if elementwise else
                    "; element-wise: the file has no float64 reference (re-export it for the "
                    "norm-wise verdict)") + f"; {_why(p)}"
        if failure is not None and not low and not elementwise:
            if not scale64:
                scale64.append(_scale64(result, expect, precisions))
            ok, rms, floor = rounding_floor(actual, expected, np.float64, scale64[0])
            if ok:                          # Note [The float64 floor] in verdict.py
                check.message = (f"within float64 rounding of the graph's gradients: RMS error "
                                 f"{rms:.3g} within the floor {floor:.3g} ({FACTOR:g} x float64 "
                                 f"eps x the largest RMS gradient, {scale64[0]:.3g}); element-wise: "
                                 f"{failure}")
                continue
            if name in expect.rounding:     # Note [The float64 yardstick] in verdict.py
                ok, d, bound = within_spread(actual, expected, expect.rounding[name])
                if ok:
                    check.message = (f"within PyTorch's own float64 rounding: norm-wise distance "
                                     f"{d:.3g} within {bound:.3g} ({FACTOR:g} x PyTorch's spread "
                                     f"{expect.rounding[name]:.3g} under one-ulp perturbations of "
                                     f"its leaves); element-wise: {failure}")
                    continue
                failure += (f"; norm-wise distance {d:.3g} over {bound:.3g} ({FACTOR:g} x "
                            f"PyTorch's own float64 spread)")
        if failure is None:
            check.message = f"matches (rtol={expect.rtol:g}, atol={expect.atol:g}){note}"
        else:
            check.status = FAIL
            check.message = f"gradient of {name!r} differs from expect.grads: {failure}{note}"
    if retry:
        _judge_on_branches(graph, retry, refs, scale)
    return checks


def _judge_on_branches(graph, retry, refs, scale):
    """Note [Kinks] in verdict.py: the norm-wise failures judged again against the float64
    gradient on the branches the float32 run took, where float32 rounding put elements
    on other pieces of a kinked op than float64 did; the message says which."""
    from .branches import branch_reference
    from .verdict import judge

    kinks = branch_reference(graph)
    if kinks is None or not kinks.flips and kinks.unexplained is None:
        return
    if kinks.unexplained is not None:
        for check, *_ in retry:
            check.message += f"; not judged on float32's branches: {kinks.unexplained}"
        return
    total = sum(f.count for f in kinks.flips)
    first = kinks.flips[0]
    where = (f"{total} element(s) at {len(kinks.flips)} op(s), first {first.op}"
             + (f" at line {first.line}" if first.line else "")
             + f", {first.nearest:.3g} from its kink in float64")
    for check, name, actual, expected, p, moved in retry:
        fix = kinks.correction.get(name)
        if fix is None or fix.shape != refs[name].shape:
            continue
        verdict = judge(name, actual, expected, refs[name] + fix, p.dtype, _why(p), scale,
                        torch_reference=refs[name], torch_perturbed=moved)
        if verdict is None:
            continue
        check.distance = verdict.distance
        check.kinks = total
        check.status = PASS if verdict.ok else FAIL
        check.message = (f"float32 rounding put {where} on another piece of a kinked op than "
                         f"float64; judged against the float64 gradient on those branches: "
                         f"{verdict.message}")


def _elementwise(check, name, actual, expected, rtol, atol):
    """Compare element-wise, record the errors on ``check``; None where it matches, else
    the difference in words (the errors, the tolerance and the worst element)."""
    ok, max_abs, max_rel, worst = _compare(actual, expected, rtol, atol)
    check.max_abs_err, check.max_rel_err, check.worst_index = max_abs, max_rel, worst
    if ok:
        return None
    idx = f"{name}[{', '.join(map(str, worst))}]" if worst else name
    a = actual[tuple(worst)] if worst else actual
    e = expected[tuple(worst)] if worst else expected
    return (f"max abs error {max_abs:.6g}, max rel error {max_rel:.6g} (rtol={rtol:g}, "
            f"atol={atol:g}); worst element {idx}: got {float(a):.10g}, "
            f"expected {float(e):.10g}")


# Note [Forward check]: ``expect.forward`` holds the values another runtime (onnxruntime,
# for ``gradcli import``) computed for some tensors of the graph on the file's own
# inputs. The check reads gradcli's values of the run that computed the gradients
# (``graph.values``), so it judges the forward those gradients come from; a forward
# that differs fails here before a gradient check could blame the backward.
def _check_forward(graph, expect):
    from .devices import to_host as _host

    checks = []
    forward = expect.forward
    values = graph.current_values()
    for name, spec in forward.values.items():
        check = Check(f"forward[{name}]", "forward", PASS, tensor=name)
        checks.append(check)
        actual = _host(values[name].data)
        expected = _host(spec.array(actual.shape))
        if expected.shape != actual.shape:
            check.status = FAIL
            check.message = (f"expected a value of shape {list(expected.shape)}, got "
                             f"{list(actual.shape)}")
            continue
        if actual.dtype == np.bool_ or expected.dtype == np.bool_:
            actual, expected = actual.astype(np.int64), expected.astype(np.int64)
        failure = _elementwise(check, name, actual, expected, forward.rtol, forward.atol)
        if failure is None:
            check.message = f"matches (rtol={forward.rtol:g}, atol={forward.atol:g})"
        else:
            check.status = FAIL
            check.message = f"value of {name!r} differs from expect.forward: {failure}"
    return checks


def _first_difference(got, want):
    for k, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return k
    return min(len(got), len(want))


def _check_orders(graph, opts, expect, anomaly):
    """expect.order and --check-order, on one single-threaded run."""
    want_expect = expect.order is not None
    if not (want_expect or opts.check_order):
        return []
    checks = []
    start = time.perf_counter()
    try:
        graph.forward()
        predicted = graph.predicted_order() if opts.check_order else None
        _, order, _ = graph.backward(multithreading=False, anomaly=anomaly)
        error = None
    except BackwardError as exc:
        error = str(exc)
    elapsed = time.perf_counter() - start
    if want_expect:
        check = Check("order", "order", PASS, time_s=elapsed)
        if error:
            check.status, check.message = FAIL, f"the single-threaded backward failed: {error}"
        else:
            got = [r.node for r in order]
            if got == list(expect.order):
                check.message = f"{len(got)} nodes ran in the expected order"
            else:
                k = _first_difference(got, expect.order)
                g = got[k] if k < len(got) else "(end)"
                w = expect.order[k] if k < len(expect.order) else "(end)"
                check.status = FAIL
                check.message = (f"run order differs from expect.order at position {k}: got {g}, "
                                 f"expected {w}; ran {_listing(got)}")
                check.worst_index = [k]
        checks.append(check)
    if opts.check_order:
        check = Check("check-order", "check-order", PASS, time_s=elapsed)
        if error:
            check.status, check.message = FAIL, f"the single-threaded backward failed: {error}"
        else:
            want = [(n.name, n.metadata.get("op_id"), n.sequence_nr) for n in predicted]
            got = [(r.node, r.op, r.sequence_nr) for r in order]
            if got == want:
                check.message = f"{len(got)} nodes ran in the predicted execution order"
            else:
                k = _first_difference(got, want)
                fmt = lambda t: f"{t[0]} ({t[1]}, seq {t[2]})" if t != "(end)" else t  # noqa: E731
                g = got[k] if k < len(got) else "(end)"
                w = want[k] if k < len(want) else "(end)"
                check.status = FAIL
                check.message = (f"run order differs from the predicted order at position {k}: "
                                 f"ran {fmt(g)}, predicted {fmt(w)}")
                check.worst_index = [k]
        checks.append(check)
    return checks


def _check_repeat(graph, opts, anomaly):
    from .devices import to_host as _host

    n = opts.repeat
    check = Check("repeat", "repeat", PASS)
    start = time.perf_counter()
    try:
        graph.forward()
        first, _, _ = graph.backward(retain_graph=True, multithreading=opts.multithreading,
                                     anomaly=anomaly)
        first = {k: None if g is None else np.array(_host(g), copy=True) for k, g in first.items()}
        total = {k: None if g is None else g.copy() for k, g in first.items()}
        accumulates = not graph.backward_spec.inputs
        for _ in range(n - 1):
            grads, _, _ = graph.backward(retain_graph=True, multithreading=opts.multithreading,
                                         anomaly=anomaly)
            for k, g in grads.items():
                g = None if g is None else np.asarray(_host(g))
                if accumulates:
                    total[k] = None if g is None else np.array(g, copy=True)
                elif g is not None:
                    total[k] = g.copy() if total[k] is None else total[k] + g
    except BackwardError as exc:
        check.status = FAIL
        check.message = f"repeated backward failed: {exc}"
        check.time_s = time.perf_counter() - start
        return check
    check.time_s = time.perf_counter() - start
    bad, worst_rel = [], -1.0
    for name, g1 in first.items():
        gn = total.get(name)
        if g1 is None:
            continue
        if gn is None:
            bad.append(f"{name}: no gradient after {n} backwards")
            continue
        expected = g1.astype(np.float64) * n
        rtol = max(4 * n * float(np.finfo(g1.dtype).eps), 1e-12)
        atol = rtol * float(np.max(np.abs(expected))) if expected.size else 0.0
        ok, max_abs, max_rel, worst = _compare(gn, expected, rtol, atol)
        rel_key = math.inf if math.isnan(max_rel) else max_rel
        if (not ok and check.status != FAIL) or (ok == (check.status != FAIL) and rel_key > worst_rel):
            check.tensor, check.max_abs_err, check.max_rel_err = name, max_abs, max_rel
            check.worst_index, worst_rel = worst, rel_key
        if not ok:
            check.status = FAIL
            bad.append(f"{name}: after {n} backwards the gradient is not {n} times that of one "
                       f"(max abs error {max_abs:.6g}, max rel error {max_rel:.6g}, worst "
                       f"element {worst})")
    if bad:
        check.status = FAIL
        check.message = "; ".join(bad)
    else:
        mode = "accumulated in .grad" if not graph.backward_spec.inputs else "summed over grad() calls"
        check.message = f"{n} backwards with retain_graph give {n} times the gradient ({mode})"
    return check


def _check_numeric(graph, opts):
    from .gradcheck import check_gradgrad, check_jacobians, uses_higher_order

    checks = _numeric_checks("numeric", check_jacobians, graph, opts)
    if uses_higher_order(graph):     # grad ops or create_graph: second derivatives too
        checks += _numeric_checks("gradgrad", check_gradgrad, graph, opts)
    return checks


def _numeric_checks(kind, check, graph, opts):
    start = time.perf_counter()
    try:
        pairs = check(graph, eps=opts.eps, atol=opts.atol, rtol=opts.rtol, fast=opts.fast,
                      seed=opts.seed)
    except BackwardError as exc:     # user code (custom) or a grad op's backward raised
        return [Check(kind, kind, FAIL, f"the {kind} check could not run: {exc}",
                      time_s=time.perf_counter() - start)]
    elapsed = (time.perf_counter() - start) / max(len(pairs), 1)
    checks = []
    for m in pairs:
        status = {"ok": PASS, "nondiff": NONDIFF}.get(m.status, FAIL)
        worst = m.worst_index
        message = m.message or (
            f"{'v^T J u' if m.fast else 'Jacobian'} of {m.output_name!r} w.r.t. {m.input_name!r} "
            f"matches finite differences (eps={opts.eps:g}, atol={opts.atol:g}, "
            f"rtol={opts.rtol:g}{', fast' if m.fast else ''})")
        if m.note:
            message += f" ({m.note})"
        checks.append(Check(f"{kind}[{m.output_name}/{m.input_name}]", kind, status,
                            message=message, tensor=m.input_name, max_abs_err=m.max_abs_err,
                            max_rel_err=m.max_rel_err, worst_index=worst, time_s=elapsed))
    return checks


def _wants_anomaly(expected_error, opts):
    if opts.detect_anomaly:
        return (True, opts.check_inf)
    text = expected_error or ""
    if "returned nan values" in text or "returned inf values" in text:
        # The expected message only exists in anomaly mode: it is implied.
        return (True, opts.check_inf or "returned inf values" in text)
    return None


def validate_graph(graph, path, opts: Options) -> FileReport:
    """Run every check on a loaded graph. GraphError propagates (invalid input)."""
    report = FileReport(path, graph.name)
    expect = graph.expect
    if expect is None:
        from .graph import ExpectSpec

        expect = ExpectSpec(grads={})
    numeric = opts.numeric or opts.fast or expect.numeric
    anomaly = (True, opts.check_inf) if opts.detect_anomaly else None

    if expect.error is not None:
        anomaly = _wants_anomaly(expect.error, opts)
        check = Check("error", "error", PASS)
        start = time.perf_counter()
        try:
            graph.run(multithreading=opts.multithreading, anomaly=anomaly)
            check.status = FAIL
            check.message = (f"the backward succeeded, but expect.error says it fails with "
                             f"{expect.error!r}")
        except BackwardError as exc:
            described = str(exc)
            if expect.error in str(exc.cause) or expect.error in described or expect.error in str(exc):
                check.message = f"failed as expected: {described}"
            else:
                check.status = FAIL
                check.message = (f"the backward failed, but not with {expect.error!r}: "
                                 f"{described}")
        check.time_s = time.perf_counter() - start
        report.checks.append(check)
        skipped = ([f"grads[{n}]" for n in expect.grads] + (["order"] if expect.order else [])
                   + (["check-order"] if opts.check_order else [])
                   + (["repeat"] if opts.repeat > 1 else []) + (["numeric"] if numeric else []))
        for name in skipped:
            report.checks.append(Check(name, name.split("[")[0], SKIPPED,
                                       "skipped: the backward is expected to fail (expect.error)"))
        return report

    check = Check("backward", "backward", PASS)
    report.checks.append(check)
    try:
        result = graph.run(multithreading=opts.multithreading, anomaly=anomaly)
    except BackwardError as exc:
        check.status = FAIL
        check.message = str(exc)
        for name in ([f"grads[{n}]" for n in expect.grads] + (["order"] if expect.order else [])
                     + (["check-order"] if opts.check_order else [])
                     + (["repeat"] if opts.repeat > 1 else [])):
            report.checks.append(Check(name, name.split("[")[0], SKIPPED,
                                       "skipped: the backward failed"))
        result = None
    if result is not None:
        check.time_s = result.forward_s + result.backward_s
        check.message = (f"{len(result.order)} nodes ran; {len(result.grads)} gradient(s)"
                         + (" (anomaly detection on)" if anomaly else ""))
        if expect.forward is not None:
            report.checks.extend(_check_forward(graph, expect))
        report.checks.extend(_check_grads(graph, result, expect, opts))
        report.checks.extend(_check_orders(graph, opts, expect, anomaly))
        if opts.repeat > 1:
            report.checks.append(_check_repeat(graph, opts, anomaly))
    if numeric:
        report.checks.extend(_check_numeric(graph, opts))
    return report


def validate_file(path, opts: Options, load=None) -> FileReport:
    """Load ``path`` with ``load(path)`` (default: ``gradcli.load``) and validate
    it; an invalid file gives a report with ``invalid`` set."""
    if load is None:
        from .loader import load
    try:
        graph = load(path)
        return validate_graph(graph, path, opts)
    except GraphError as exc:
        report = FileReport(path)
        report.invalid = str(exc)
        return report
