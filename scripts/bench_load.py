"""Load time of large graph files: N leaf tensors (YAML and JSON), and a chain of
N ops; CPU and wall time of ``gradcli.load`` and of the first ``run``.

    PYTHONPATH=$PWD python scripts/bench_load.py [--tensors 100000] [--ops 20000]

Targets (a 2-core machine shared with other work, so CPU seconds are
the figure to compare): 100,000 tensors load in well under 11 s (9 s of CPU
before Note [Collector pauses] in gradcli/collector.py, 5 s after, of
which the YAML reader is about 3.5 s).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gradcli  # noqa: E402


def tensors_doc(n):
    return {"version": 1,
            "tensors": {f"t{i}": {"shape": [2], "requires_grad": True} for i in range(n)},
            "ops": [{"op": "sum", "inputs": ["t0"], "output": "loss"}],
            "backward": {"roots": ["loss"]}}


def chain_doc(n):
    ops = [{"op": "exp" if i % 2 else "neg", "inputs": [f"h{i}" if i else "x"],
            "output": f"h{i + 1}"} for i in range(n)]
    ops.append({"op": "sum", "inputs": [f"h{n}"], "output": "loss"})
    return {"version": 1, "tensors": {"x": {"shape": [2], "requires_grad": True}},
            "ops": ops, "backward": {"roots": ["loss"]}}


def yaml_text(doc):
    lines = ["version: 1", "tensors:"]
    for name, t in doc["tensors"].items():
        lines.append(f"  {name}: {json.dumps(t)}")
    lines.append("ops:")
    lines += [f"  - {json.dumps(op)}" for op in doc["ops"]]
    lines += ["backward:", f"  roots: {json.dumps(doc['backward']['roots'])}"]
    return "\n".join(lines) + "\n"


def measure(label, path):
    c0, t0 = time.process_time(), time.perf_counter()
    graph = gradcli.load(path)
    c1, t1 = time.process_time(), time.perf_counter()
    graph.run()
    c2, t2 = time.process_time(), time.perf_counter()
    print(f"{label:32s} load {c1 - c0:6.2f} s CPU ({t1 - t0:6.2f} s wall)   "
          f"first run {c2 - c1:6.2f} s CPU ({t2 - t1:6.2f} s wall)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for label, doc in ((f"{args.tensors} tensors", tensors_doc(args.tensors)),
                           (f"{args.ops} ops", chain_doc(args.ops))):
            for ext, text in (("yaml", yaml_text(doc)), ("json", json.dumps(doc))):
                path = os.path.join(tmp, f"g.{ext}")
                with open(path, "w") as fh:
                    fh.write(text)
                measure(f"{label} ({ext})", path)


if __name__ == "__main__":
    main()
