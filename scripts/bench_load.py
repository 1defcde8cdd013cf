"""Load time of large graph files: N leaf tensors (YAML and JSON), and a chain of
N ops; CPU and wall time of ``gradcli.load`` and of the first ``run``.

With ``--weights`` (and torch installed), the load of weight files side by side with
PyTorch, in ``--rounds`` interleaved rounds: a graph whose leaves are the tensors of
one weight file (``.npz`` and ``.safetensors``), gradcli's ``load`` plus making every
leaf, against ``torch.load`` of the same tensors (a ``torch.save``d state dict) plus
``load_state_dict`` into a module holding them; medians over the rounds and their
spread (min-max), and the ratio.

    PYTHONPATH=$PWD python scripts/bench_load.py [--tensors 100000] [--ops 20000]
    PYTHONPATH=$PWD python scripts/bench_load.py --weights [--rounds 5]

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


# (label, count, shape, dtype): many small tensors, and a model's worth of large ones
WEIGHT_CASES = (("2000 x [64] float32", 2000, (64,), "float32"),
                ("200 x [256, 256] float32", 200, (256, 256), "float32"))


def weights_graph(tmp, count, shape, dtype, fmt):
    """A graph file whose ``count`` leaves are the tensors of one weight file."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {f"t{i}": rng.standard_normal(shape).astype(dtype) for i in range(count)}
    folder = os.path.join(tmp, f"{count}-{fmt}")
    os.makedirs(folder, exist_ok=True)
    if fmt == "npz":
        np.savez(os.path.join(folder, "w.npz"), **arrays)
    else:
        from safetensors.numpy import save_file

        save_file(arrays, os.path.join(folder, "w.safetensors"))
    doc = {"version": 1,
           "tensors": {k: {"file": f"w.{fmt}", "key": k, "shape": list(shape), "dtype": dtype,
                           "requires_grad": True} for k in arrays},
           "ops": [{"op": "sum", "inputs": ["t0"], "output": "loss"}],
           "backward": {"roots": ["loss"]}}
    path = os.path.join(folder, "graph.yaml")
    with open(path, "w") as fh:
        fh.write(yaml_text(doc))
    return path, arrays


def torch_load(tmp, arrays):
    """``load()``: torch.load of the tensors' state dict plus load_state_dict."""
    import torch

    module = torch.nn.ParameterDict({k: torch.nn.Parameter(torch.from_numpy(v.copy()))
                                     for k, v in arrays.items()})
    path = os.path.join(tmp, f"state-{len(arrays)}.pt")
    torch.save(module.state_dict(), path)

    def load():
        module.load_state_dict(torch.load(path, weights_only=True))
    return load


def gradcli_load(path):
    def load():
        for leaf in gradcli.load(path).leaves.values():
            leaf.shared()
    return load


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def weights_bench(rounds):
    import statistics

    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        for label, count, shape, dtype in WEIGHT_CASES:
            for fmt in ("npz", "safetensors"):
                path, arrays = weights_graph(tmp, count, shape, dtype, fmt)
                cases.append((f"{label}, .{fmt}", gradcli_load(path), torch_load(tmp, arrays)))
        times = {label: ([], []) for label, _, _ in cases}
        for _ in range(rounds):            # interleaved: every case, both sides, each round
            for label, g_load, t_load in cases:
                g_load()                   # a warm file cache on both sides
                t_load()
                times[label][0].append(timed(g_load))
                times[label][1].append(timed(t_load))
        med = statistics.median
        print("| weights | gradcli load + leaves (ms) | torch.load + load_state_dict (ms) "
              "| ratio (min-max) |")
        print("|---|---:|---:|---:|")
        for label, (g, t) in times.items():
            ratios = [a / b for a, b in zip(g, t)]
            print(f"| {label} | {med(g) * 1e3:.1f} ({min(g) * 1e3:.1f}-{max(g) * 1e3:.1f}) | "
                  f"{med(t) * 1e3:.1f} ({min(t) * 1e3:.1f}-{max(t) * 1e3:.1f}) | "
                  f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--weights", action="store_true",
                        help="weight files against torch.load (needs torch and safetensors)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.weights:
        weights_bench(args.rounds)
        return
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
