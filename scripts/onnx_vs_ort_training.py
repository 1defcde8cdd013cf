"""Compare `gradcli import`'s gradients with onnxruntime-training 1.19.2's gradient graph.

onnxruntime-training is an anchor, not a dependency: it installs only beside an old
onnxruntime (its own package is also named ``onnxruntime``), so it runs in a child
process whose path puts it first:

    pip download --no-deps -d /tmp/w onnxruntime-training==1.19.2
    (cd /tmp/w && unzip -q onnxruntime_training-*.whl -d ortt)
    python scripts/onnx_vs_ort_training.py --ort-path /tmp/w/ortt MODEL.onnx [...]

For each model (one float input of fixed shape): gradcli imports it (float32 and
float64), with the projection loss of Note [Projection loss]; the same loss is appended
to the ONNX graph (``Mul`` by R, ``ReduceSum``), onnxruntime-training generates the
gradient graph (``artifacts.generate_artifacts``, loss=None) and one training step
gives each parameter's gradient. Printed: the norm-wise relative difference per
initializer with more than one element (onnxruntime-training trains those).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CHILD = r'''
import json, os, sys
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module
src, x_file, r_file, out = sys.argv[1:5]
m = onnx.load(src)
x, r = np.load(x_file), np.load(r_file)
y = m.graph.output[0].name
m.graph.initializer.append(numpy_helper.from_array(r, "projection_R"))
m.graph.node.extend([helper.make_node("Mul", [y, "projection_R"], ["proj"]),
                     helper.make_node("ReduceSum", ["proj"], ["loss"], keepdims=0)])
del m.graph.output[:]
m.graph.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
params = [t.name for t in m.graph.initializer if t.data_type == TensorProto.FLOAT
          and t.name != "projection_R" and len(t.dims) and int(np.prod(t.dims)) > 1]
frozen = [t.name for t in m.graph.initializer if t.name not in params]
artifacts.generate_artifacts(m, requires_grad=params, frozen_params=frozen, loss=None,
                             optimizer=artifacts.OptimType.SGD, artifact_directory=out)
state = CheckpointState.load_checkpoint(os.path.join(out, "checkpoint"))
module = Module(os.path.join(out, "training_model.onnx"), state,
                os.path.join(out, "eval_model.onnx"))
module.train()
module(x)
np.savez(os.path.join(out, "grads.npz"), **{p: state.parameters[p].grad for p in params})
'''


def compare(path, ort_path):
    from gradcli import load
    from gradcli.bridges.onnx import from_onnx

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        g32 = from_onnx(path, reference=False)
        leaves = g32.document["tensors"]
        x_name = next(k for k in leaves if leaves[k].get("requires_grad"))
        np.save(os.path.join(tmp, "x.npy"), g32.arrays[x_name])
        np.save(os.path.join(tmp, "r.npy"), g32.arrays["loss.projection.0"])
        env = dict(os.environ, PYTHONPATH=ort_path)
        done = subprocess.run([sys.executable, "-c", CHILD, path, os.path.join(tmp, "x.npy"),
                               os.path.join(tmp, "r.npy"), tmp], env=env, capture_output=True,
                              text=True)
        if done.returncode:
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            return {"error": lines[-1] if lines else f"exit {done.returncode}"}
        ref = dict(np.load(os.path.join(tmp, "grads.npz")))
        for dtype in ("float32", "float64"):
            g = from_onnx(path, reference=False, dtype=dtype)
            grads = load(g.write(os.path.join(tmp, dtype))).run().grads
            for name, want in ref.items():
                got = grads.get(name) if name in grads else grads.get("m." + name)
                err = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
                rows.setdefault(name, {})[dtype] = err
    return rows


def main(argv):
    if "--ort-path" not in argv:
        print(__doc__)
        return 2
    i = argv.index("--ort-path")
    ort_path = argv[i + 1]
    for path in argv[:i] + argv[i + 2:]:
        rows = compare(path, ort_path)
        if "error" in rows:
            print(json.dumps({"model": os.path.basename(path), "error": rows["error"][:300]}))
            continue
        worst = {d: max(r[d] for r in rows.values()) for d in ("float32", "float64")}
        print(json.dumps({"model": os.path.basename(path), "initializers": len(rows),
                          "worst_rel_err": worst}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
