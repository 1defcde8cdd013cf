"""Benchmark: `gradcli validate` over a corpus of generated graph files, serial,
with --jobs 1 and --jobs 2, and on a two-worker local Dask cluster (--scheduler).

    python scripts/bench_parallel.py --files 1000 --repeats 3

Writes the corpus (``--corpus``, default a temporary folder): each file a chain
``y = tanh(y * w_i)`` of ``--depth`` links over 16-element tensors, with its
gradients in ``expect`` (computed here with NumPy, so every file passes). Each
configuration runs the whole corpus ``--repeats`` times as a fresh ``gradcli``
process; the figures are median wall times (min-max), and ratios to --jobs 1.
PyTorch has no counterpart to a corpus run: the ratios are gradcli's against itself.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def graph_text(k, depth, size=16):
    """The k-th corpus file: a tanh/mul chain with its gradients as expect."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal(size)
    ws = [rng.uniform(0.5, 1.5, size) for _ in range(depth)]
    ys = [x]
    for w in ws:
        ys.append(np.tanh(ys[-1] * w))
    g = np.ones(size)
    grads = {}
    for i in reversed(range(depth)):
        gm = g * (1 - ys[i + 1] ** 2)
        grads[f"w{i}"] = gm * ys[i]
        g = gm * ws[i]
    grads["x"] = g
    fmt = lambda a: "[" + ", ".join(repr(float(v)) for v in a) + "]"  # noqa: E731
    lines = ["version: 1", f"name: chain{k}", "tensors:",
             f"  x: {{value: {fmt(x)}, requires_grad: true}}"]
    lines += [f"  w{i}: {{value: {fmt(w)}, requires_grad: true}}" for i, w in enumerate(ws)]
    lines.append("ops:")
    prev = "x"
    for i in range(depth):
        lines.append(f"  - {{op: mul, inputs: [{prev}, w{i}], output: m{i}}}")
        lines.append(f"  - {{op: tanh, inputs: [m{i}], output: y{i}}}")
        prev = f"y{i}"
    lines.append(f"  - {{op: sum, inputs: [{prev}], output: loss}}")
    lines += ["backward: {roots: [loss]}", "expect:", "  rtol: 1.0e-9", "  atol: 1.0e-12",
              "  grads:"]
    lines += [f"    {name}: {{value: {fmt(v)}}}" for name, v in sorted(grads.items())]
    return "\n".join(lines) + "\n"


def write_corpus(folder, files, depth):
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(files):
        p = folder / f"g{k:05d}.yaml"
        p.write_text(graph_text(k, depth))
        paths.append(p.name)
    return paths


def run_once(args, corpus, paths):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gradcli", "validate", "--format", "json",
                           *args, *paths], cwd=corpus, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gradcli validate {' '.join(args)} failed ({proc.returncode}): "
                         f"{proc.stderr[-2000:]}")
    doc = json.loads(proc.stdout)
    return elapsed, [f["status"] for f in doc["files"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--depth", type=int, default=20, help="links per chain (2 ops each)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--corpus", default=None, help="folder for the corpus (default: temporary)")
    ap.add_argument("--no-dask", action="store_true", help="skip the Dask cluster")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gradcli-corpus-") as tmp:
        corpus = opts.corpus or tmp
        paths = write_corpus(corpus, opts.files, opts.depth)
        configs = [("serial", []), ("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"])]
        cluster = None
        if not opts.no_dask:
            from distributed import LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                   host="127.0.0.1", dashboard_address=None, silence_logs=50)
            configs.append(("dask, 2 workers", ["--scheduler", cluster.scheduler_address]))
        load_before = os.getloadavg()[0]
        try:
            times, verdicts = {}, {}
            for _ in range(opts.repeats):          # interleaved: drift hits every config alike
                for name, args in configs:
                    t, v = run_once(args, corpus, paths)
                    times.setdefault(name, []).append(t)
                    verdicts.setdefault(name, v)
        finally:
            if cluster is not None:
                cluster.close()
    same = all(v == verdicts["serial"] for v in verdicts.values())
    base = statistics.median(times["--jobs 1"])
    print(f"{opts.files} files, chains of {opts.depth} links ({2 * opts.depth + 1} ops), "
          f"{opts.repeats} runs each, {os.cpu_count()} CPUs; same verdicts: {same}")
    print(f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
          "(other processes share these CPUs)")
    print(f"{'configuration':<18} {'median s':>9} {'min-max s':>15} {'files/s':>8} "
          f"{'speed-up vs --jobs 1':>21}")
    for name, _ in configs:
        ts = times[name]
        med = statistics.median(ts)
        print(f"{name:<18} {med:>9.2f} {min(ts):>7.2f}-{max(ts):<7.2f} "
              f"{opts.files / med:>8.0f} {base / med:>21.2f}")
    if not same:
        raise SystemExit("the verdicts differ between configurations")


if __name__ == "__main__":
    main()
