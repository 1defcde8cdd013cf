"""An exported graph as data: the YAML document and the arrays of ``weights.npz``.

NumPy and PyYAML only (no torch), so a written export can be inspected or
rewritten without the ``torch`` extra.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import GRAPH_FILE, WEIGHTS_FILE, ExportError

GRAD_PREFIX = "grad:"       # weights.npz keys of expected gradients; ':' is not in tensor names
FILE_DTYPES = {"float16", "float32", "float64", "int32", "int64", "bool"}   # the spec's dtypes
TOLERANCES = {"float64": (1e-7, 1e-10), "float32": (1e-4, 1e-6), "float16": (1e-2, 1e-3)}


class ExportedGraph:
    """``document``: the graph file as plain data; ``arrays``: weights.npz by key."""

    def __init__(self, document, arrays, header=""):
        self.document = document
        self.arrays = arrays
        self.header = header

    @classmethod
    def build(cls, *, name, tensors, arrays, ops, root, grads, order, floating):
        """Assemble the document: every tensor and expected gradient comes from weights.npz."""
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
            arrays[GRAD_PREFIX + tname] = np.ascontiguousarray(g)
            expect_grads[tname] = {"file": WEIGHTS_FILE, "key": GRAD_PREFIX + tname}
        rtol, atol = TOLERANCES.get(floating, TOLERANCES["float32"])
        document = {
            "version": 1, "name": name, "tensors": doc_tensors, "ops": ops,
            "backward": {"roots": [root]},
            "expect": {"grads": expect_grads, "rtol": rtol, "atol": atol, "order": list(order)},
        }
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
            lines.append("  grads:")
            lines += [f"    {flow(k)}: {flow(v)}" for k, v in expect["grads"].items()]
            for key in ("rtol", "atol"):
                lines.append(f"  {key}: {flow(expect[key])}")
            lines.append(f"  order: {flow(expect['order'])}")
        lines += [f"{k}: {flow(v)}" for k, v in doc.items() if k.startswith("x-")]
        return "\n".join(lines) + "\n"

    def write(self, directory):
        """Write ``DIR/graph.yaml`` and ``DIR/weights.npz``; returns the graph file's path."""
        os.makedirs(directory, exist_ok=True)
        weights = os.path.join(directory, WEIGHTS_FILE)
        with open(weights, "wb") as fh:
            np.savez_compressed(fh, **self.arrays)
        path = os.path.join(directory, GRAPH_FILE)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(self.yaml_text())
        return path
