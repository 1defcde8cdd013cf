"""An exported graph as data: the YAML document and the arrays of ``weights.npz`` (or
``weights.safetensors``, as ``write`` is told).

NumPy and PyYAML only (no torch, no onnx), so a written graph can be inspected or
rewritten without a framework; every bridge (``torch``, ``onnx``) writes through it.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import GRAPH_FILE, WEIGHTS_FILE, BridgeError as ExportError

GRAD_PREFIX = "grad:"       # weights.npz keys of expected gradients; ':' is not in tensor names
FORWARD_PREFIX = "forward:"  # weights.npz keys of expected forward values (expect.forward)
FILE_DTYPES = {"float16", "float32", "float64", "int32", "int64", "bool"}   # the spec's dtypes
WEIGHTS_FILES = {"npz": WEIGHTS_FILE, "safetensors": "weights.safetensors"}   # write(weights=)
TOLERANCES = {"float64": (1e-7, 1e-10), "float32": (1e-4, 1e-6), "float16": (1e-2, 1e-3)}


def c_array(a, dtype=None):
    """``a`` as a C-contiguous array of its own shape: ``np.ascontiguousarray`` turns a
    0-d array into shape [1], and a scalar parameter (CLIP's ``logit_scale``) written so
    would take a gradient of another shape than PyTorch's.

    Example: ``c_array(np.float64(2.0)).shape == ()``.
    """
    a = np.asarray(a, dtype=dtype)
    return np.array(a, order="C") if a.ndim == 0 else np.ascontiguousarray(a)


class ExportedGraph:
    """``document``: the graph file as plain data; ``arrays``: weights.npz by key."""

    def __init__(self, document, arrays, header=""):
        self.document = document
        self.arrays = arrays
        self.header = header

    @classmethod
    def build(cls, *, name, tensors, arrays, ops, root, grads, order, floating, forward=None,
              forward_tolerance=None):
        """Assemble the document: every tensor and expected value comes from weights.npz.

        ``forward``: ``{tensor name: array}`` another runtime computed for these tensors
        (``expect.forward``), compared with ``forward_tolerance`` ``(rtol, atol)``.
        ``order`` None: the file says nothing of the backward order.

        >>> g = ExportedGraph.build(name="g", tensors={"x": {"requires_grad": True}},
        ...     arrays={"x": np.ones(2)}, ops=[{"op": "sum", "inputs": ["x"], "output": "s"}],
        ...     root="s", grads={"x": np.ones(2)}, order=None, floating="float64")
        >>> sorted(g.document["expect"])
        ['atol', 'grads', 'rtol']
        """
        arrays = dict(arrays)
        doc_tensors = {}
        for tname, extra in tensors.items():
            arr = arrays[tname]
            if str(arr.dtype) not in FILE_DTYPES:
                raise ExportError(f"tensor {tname} has dtype {arr.dtype}, which graph files do "
                                  f"not have ({', '.join(sorted(FILE_DTYPES))})")
            entry = {"file": WEIGHTS_FILE, "key": tname, "shape": list(arr.shape),
                     "dtype": str(arr.dtype)}
            if extra.get("requires_grad"):
                entry["requires_grad"] = True
            doc_tensors[tname] = entry
        defined = list(doc_tensors)
        for op in ops:
            defined += op["outputs"] if "outputs" in op else [op["output"]]
        if len(set(defined)) != len(defined):
            clash = sorted(n for n in set(defined) if defined.count(n) > 1)[0]
            raise ExportError(f"two tensors would be named {clash!r} in the graph file")
        expect_grads = {}
        for tname, g in grads.items():
            arrays[GRAD_PREFIX + tname] = c_array(g)
            expect_grads[tname] = {"file": WEIGHTS_FILE, "key": GRAD_PREFIX + tname}
        rtol, atol = TOLERANCES.get(floating, TOLERANCES["float32"])
        expect = {}
        if grads or order is not None:
            expect.update(grads=expect_grads, rtol=rtol, atol=atol)
        if order is not None:
            expect["order"] = list(order)
        if forward:
            f_rtol, f_atol = forward_tolerance or (rtol, atol)
            values = {}
            for tname, value in forward.items():
                arrays[FORWARD_PREFIX + tname] = c_array(value)
                values[tname] = {"file": WEIGHTS_FILE, "key": FORWARD_PREFIX + tname}
            expect["forward"] = {"values": values, "rtol": f_rtol, "atol": f_atol}
        document = {
            "version": 1, "name": name, "tensors": doc_tensors, "ops": ops,
            "backward": {"roots": [root]},
        }
        if expect:
            document["expect"] = expect
        return cls(document, arrays)

    def file_arrays(self):
        """{(file, key): array} as a reader of the written files would see them."""
        return {(WEIGHTS_FILE, k): v for k, v in self.arrays.items()}

    def yaml_text(self) -> str:
        """The document as YAML: one line per tensor, op and expected gradient."""
        import yaml

        def flow(value):
            text = yaml.safe_dump(value, default_flow_style=True, width=2**31, sort_keys=False,
                                  allow_unicode=True).strip()
            return text[:-3].strip() if text.endswith("\n...") else text   # a scalar's end mark

        doc = self.document
        lines = [f"# {line}".rstrip() for line in self.header.splitlines()]
        lines += [f"version: {doc['version']}", f"name: {flow(doc['name'])}", "tensors:"]
        lines += [f"  {flow(k)}: {flow(v)}" for k, v in doc["tensors"].items()]
        lines.append("ops:")
        lines += [f"  - {flow(op)}" for op in doc["ops"]]
        lines.append(f"backward: {flow(doc['backward'])}")
        expect = doc.get("expect")
        if expect:
            lines.append("expect:")
            if "grads" in expect:
                lines.append("  grads:")
                lines += [f"    {flow(k)}: {flow(v)}" for k, v in expect["grads"].items()]
                for key in ("rtol", "atol"):
                    lines.append(f"  {key}: {flow(expect[key])}")
            if "order" in expect:
                lines.append(f"  order: {flow(expect['order'])}")
            reference = expect.get("reference")
            if reference:
                lines.append("  reference:")
                lines.append("    grads:")
                lines += [f"      {flow(k)}: {flow(v)}" for k, v in reference["grads"].items()]
                lines.append(f"    distance: {flow(reference['distance'])}")
                if reference.get("perturbed"):
                    lines.append("    perturbed:")
                    lines += [f"      {flow(k)}: {flow(v)}"
                              for k, v in reference["perturbed"].items()]
            rounding = expect.get("rounding")
            if rounding:
                lines.append("  rounding:")
                lines.append(f"    distance: {flow(rounding['distance'])}")
            if "forward" in expect:
                forward = expect["forward"]
                lines.append("  forward:")
                lines.append("    values:")
                lines += [f"      {flow(k)}: {flow(v)}" for k, v in forward["values"].items()]
                for key in ("rtol", "atol"):
                    lines.append(f"    {key}: {flow(forward[key])}")
        lines += [f"{k}: {flow(v)}" for k, v in doc.items() if k.startswith("x-")]
        return "\n".join(lines) + "\n"

    def write(self, directory, weights="npz"):
        """Write ``DIR/graph.yaml`` and its weights, ``DIR/weights.npz`` or (``weights=
        "safetensors"``) ``DIR/weights.safetensors``; returns the graph file's path.

        Either way the loader maps the arrays without a copy (Note [Weights read once] in
        gradcli/loader/weights.py): the archive stores its members uncompressed, and a
        safetensors file is written by the safetensors package (``gradcli[torch]``).

        >>> g = ExportedGraph.build(name="g", tensors={"x": {"requires_grad": True}},
        ...     arrays={"x": np.ones(2)}, ops=[{"op": "sum", "inputs": ["x"], "output": "s"}],
        ...     root="s", grads={}, order=None, floating="float64")
        >>> import tempfile; os.path.basename(g.write(tempfile.mkdtemp(), weights="safetensors"))
        'graph.yaml'
        """
        if weights not in WEIGHTS_FILES:
            raise ValueError(f"weights must be one of {', '.join(WEIGHTS_FILES)}, not {weights!r}")
        os.makedirs(directory, exist_ok=True)
        name = WEIGHTS_FILES[weights]
        target = os.path.join(directory, name)
        text = self.yaml_text()
        if weights == "npz":
            with open(target, "wb") as fh:
                np.savez(fh, **self.arrays)
        else:
            _save_safetensors(self.arrays, target)
            renamed = _with_weights_file(self.document, WEIGHTS_FILE, name)
            text = ExportedGraph(renamed, self.arrays, self.header).yaml_text()
        path = os.path.join(directory, GRAPH_FILE)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path


def _save_safetensors(arrays, target):
    try:
        from safetensors.numpy import save_file  # noqa: PLC0415 - only to write this format
    except ImportError:
        raise ExportError("writing weights.safetensors needs the safetensors package: pip "
                          "install 'gradcli[torch]' (or write weights.npz: --weights npz)") from None
    save_file({k: c_array(v) for k, v in arrays.items()}, target)


def _with_weights_file(document, old, new):
    """A copy of ``document`` whose ``file: old`` entries say ``new``."""
    if isinstance(document, dict):
        out = {k: _with_weights_file(v, old, new) for k, v in document.items()}
        if out.get("file") == old:
            out["file"] = new
        return out
    if isinstance(document, list):
        return [_with_weights_file(v, old, new) for v in document]
    return document
