"""The float64 reference of an exported graph: the gradients the same model has
when every floating value is float64, and PyTorch's own distance to them.

``attach_reference(graph)`` replays the written graph in PyTorch with every
floating tensor and every ``dtype`` argument raised to float64 (Note [Widened
replay]), and writes into ``expect.reference``:

- ``grads``: the float64 gradients, one ``weights.npz`` entry per tensor
  (key ``grad64:NAME``), beside PyTorch's own in ``grad:NAME``;
- ``distance``: PyTorch's norm-wise relative error to them per tensor,
  ``||g_torch - g_64|| / ||g_64||`` (for the reader: ``validate`` recomputes it
  from the two arrays, so an edited number cannot loosen the verdict);
- ``perturbed``: PyTorch's gradients at the graph's own precision in
  ``PERTURBED_DRAWS`` replays with every floating leaf moved by one ulp (keys
  ``gradulpK:NAME``), the spread of its own rounding (Note [The float32
  yardstick] in gradcli/verdict.py).

A graph that computes in float64 throughout gets no reference: widening would
change nothing. ``gradcli.verdict`` (validate) uses the reference for the
tensors whose gradient path has a lower precision (``gradcli.precision``).

Note [Widened replay]: the reference is the *written graph* replayed, not a
float64 copy of the module run again. The graph holds the module's folded
constants and random masks (dropout) as arrays, so the float64 run uses the
very masks and constants the float32 run used; a re-run module would draw its
masks again, in another dtype, from a generator whose stream depends on the
dtype. The export already checks that the graph replays as the module at its
own precision (Note [Exported order] in exporter.py), so widening the graph is
widening the module. ``_to_copy(dtype=float32)`` inside a float64 model (T5's
layer norm) becomes a float64 copy: the reference has no islands.
"""
from __future__ import annotations

import copy

import numpy as np

from .errors import WEIGHTS_FILE
from ..graphfile import GRAD_PREFIX, c_array

REF_PREFIX = "grad64:"     # weights.npz keys of the float64 reference gradients
ULP_PREFIX = "gradulp"     # gradulpK:NAME, PyTorch's gradients with the leaves moved by one ulp
PERTURBED_DRAWS = 2        # Note [The float32 yardstick] in gradcli/verdict.py
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23}
LOW_FLOATS = {"float16", "bfloat16", "float32"}


def _low_tensors(document):
    return [(name, spec) for name, spec in (document.get("tensors") or {}).items()
            if isinstance(spec, dict) and spec.get("dtype") in LOW_FLOATS]


def _low_args(document):
    return [args for args in ((op.get("args") or {}) for op in document.get("ops") or [])
            if args.get("dtype") in LOW_FLOATS]


def below_float64(document) -> bool:
    """Whether a tensor or a ``dtype`` argument of the document is below float64 (what
    ``widen`` raises), read without copying it."""
    return bool(_low_tensors(document) or _low_args(document))


def widen(document, arrays):
    """(document, arrays) with every floating tensor and ``dtype`` argument float64.

    Example: ``widen({"tensors": {"w": {"dtype": "float32", ...}}, ...}, {"w": a32})``
    gives ``w`` as float64 in both. Returns None when nothing is below float64.
    """
    if not below_float64(document):
        return None
    doc = copy.deepcopy(document)
    doc.pop("expect", None)
    out = dict(arrays)
    for name, spec in _low_tensors(doc):
        spec["dtype"] = "float64"
        key = spec.get("key", name)
        if key in out:
            out[key] = np.asarray(out[key]).astype(np.float64)
    for args in _low_args(doc):
        args["dtype"] = "float64"
    return doc, out


def normwise_distance(got, reference) -> float:
    """``||got - reference|| / ||reference||`` in float64 (0 when both are zero,
    inf when only the reference is).

    Example: ``normwise_distance(np.float32([1, 2]), np.array([1.0, 2.0])) == 0.0``.
    """
    g = np.asarray(got, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    err = float(np.linalg.norm((g - r).ravel()))
    norm = float(np.linalg.norm(r.ravel()))
    if norm == 0.0:
        return 0.0 if err == 0.0 else float("inf")
    return err / norm


def attach_reference(graph):
    """Add ``expect.reference`` (module docstring) to an ExportedGraph in place;
    returns the reference gradients by name ({} when the graph is float64 throughout).

    Note [No reference is no export failure]: a graph whose float64 replay fails
    (an op PyTorch does not run at float64) is still written, without a
    reference: validate then checks it element-wise, as files written before the
    reference existed, and the file's header says why it has none.
    """
    from . import compare as compare_torch

    widened = widen(graph.document, graph.arrays)
    if widened is None:
        return {}
    doc, arrays = widened
    try:
        result = compare_torch.replay(doc, arrays={(WEIGHTS_FILE, k): v
                                                   for k, v in arrays.items()})
    except Exception as exc:  # noqa: BLE001 - Note [No reference is no export failure]
        text = str(exc).strip().splitlines()
        graph.reference_skipped = f"{type(exc).__name__}: {text[0] if text else ''}"
        return {}
    expect = graph.document["expect"]
    ref_entries, distance, refs = {}, {}, {}
    for name in expect["grads"]:
        ref = result.grads.get(name)
        if ref is None:
            continue
        torch_grad = graph.arrays[GRAD_PREFIX + name]
        refs[name] = ref
        graph.arrays[REF_PREFIX + name] = c_array(ref, np.float64)
        ref_entries[name] = {"file": WEIGHTS_FILE, "key": REF_PREFIX + name}
        d = normwise_distance(torch_grad, ref)
        if np.isfinite(d):
            distance[name] = float(f"{d:.3g}")
    expect["reference"] = {"grads": ref_entries, "distance": distance}
    perturbed = _perturbed_draws(graph, list(ref_entries))
    if perturbed:
        expect["reference"]["perturbed"] = perturbed
    return refs


def _lowest_eps(document):
    """The machine epsilon of the lowest floating dtype the document names."""
    names = {spec.get("dtype") for _, spec in _low_tensors(document)}
    names |= {args.get("dtype") for args in _low_args(document)}
    return max(_EPS.get(n, 0.0) for n in names) if names else 0.0


def _perturbed_draws(graph, names, seed=1):
    """Note [The float32 yardstick] in gradcli/verdict.py: PyTorch's replays of the written
    graph at its own precision with every floating leaf array multiplied by ``1 + eps * u``
    (``eps`` of the graph's lowest floating dtype, ``u`` uniform in [-1, 1] from ``seed``);
    their gradients go into ``graph.arrays`` as ``gradulpK:NAME``. Returns
    ``{name: [{file, key}, ...]}`` ({} where a replay fails: PyTorch's one run stands).
    """
    from . import compare as compare_torch

    eps = _lowest_eps(graph.document)
    if not names or not eps:
        return {}
    rng = np.random.default_rng(seed)
    out, written = {name: [] for name in names}, {}
    skip = (GRAD_PREFIX, REF_PREFIX, ULP_PREFIX)
    for draw in range(1, PERTURBED_DRAWS + 1):
        moved = {}
        for key, value in graph.arrays.items():
            a = np.asarray(value)
            if a.dtype.kind == "f" and not key.startswith(skip):
                a = (a * (1.0 + eps * rng.uniform(-1.0, 1.0, a.shape))).astype(a.dtype)
            moved[(WEIGHTS_FILE, key)] = a
        try:
            result = compare_torch.replay(graph.document, arrays=moved)
        except Exception:  # noqa: BLE001 - as Note [No reference is no export failure]
            return {}
        for name in names:
            got = result.grads.get(name)
            if got is None:
                return {}
            key = f"{ULP_PREFIX}{draw}:{name}"
            written[key] = c_array(got)
            out[name].append({"file": WEIGHTS_FILE, "key": key})
    graph.arrays.update(written)
    return out


def attach_rounding(graph, seed=0):
    """Add ``expect.rounding`` to an ExportedGraph that computes in float64 throughout
    (Note [The float64 yardstick] in gradcli/verdict.py): PyTorch's replay of the written
    graph with every floating leaf array multiplied by ``1 + eps * u`` (``u`` uniform in
    [-1, 1], drawn from ``seed``), and each gradient's norm-wise distance to PyTorch's own.
    Returns the distances by name ({} where the graph has a float64 reference instead, or
    where the replay fails: the element-wise check and its floor then stand alone).
    """
    from . import compare as compare_torch

    expect = graph.document["expect"]
    if expect.get("reference") or below_float64(graph.document):
        return {}
    rng = np.random.default_rng(seed)
    eps = np.finfo(np.float64).eps
    perturbed = {}
    for key, value in graph.arrays.items():
        a = np.asarray(value)
        if a.dtype == np.float64 and not key.startswith((GRAD_PREFIX, REF_PREFIX)):
            a = a * (1.0 + eps * rng.uniform(-1.0, 1.0, a.shape))
        perturbed[(WEIGHTS_FILE, key)] = a
    try:
        result = compare_torch.replay(graph.document, arrays=perturbed)
    except Exception:  # noqa: BLE001 - as Note [No reference is no export failure]
        return {}
    distance = {}
    for name in expect["grads"]:
        got = result.grads.get(name)
        if got is not None:
            d = normwise_distance(got, graph.arrays[GRAD_PREFIX + name])
            if np.isfinite(d):          # (a NaN gradient has no spread: element-wise only)
                distance[name] = float(f"{d:.3g}")
    if distance:
        expect["rounding"] = {"distance": distance}
    return distance


def reference_note(graph) -> str:
    """A line for the graph file's header about ``expect.reference`` ("" for none needed)."""
    skipped = getattr(graph, "reference_skipped", None)
    if skipped:
        return (f"\nno expect.reference: the float64 replay of this graph failed ({skipped}); "
                "validate checks its gradients element-wise.")
    if graph.document.get("expect", {}).get("rounding"):
        return ("\nexpect.rounding: PyTorch's own float64 spread per gradient (its replay with "
                "every floating leaf moved by one ulp); validate accepts a gradient that fails "
                "element-wise only within 4x that, norm-wise (docs/graph-format.md).")
    if not graph.document.get("expect", {}).get("reference"):
        return ""
    moved = ("; PyTorch's runs with its leaves moved by one ulp (keys gradulpK:NAME)"
             if graph.document["expect"]["reference"].get("perturbed") else "")
    return ("\nexpect.reference: the float64 model's gradients (weights.npz, keys grad64:NAME) "
            f"and PyTorch's norm-wise distance to them{moved}; validate judges gradients "
            "computed below float64 by them (docs/graph-format.md).")
