#!/usr/bin/env python
"""Backward-pass micro-benchmarks for the gradcli engine, against PyTorch when present.

Measures the time of the BACKWARD only (the graph is built untimed before each
measurement) and reports the median over ``--repeat`` runs:

1. chain   20,000 ops on 8-element float64 tensors: ``y = y * c + d``
           (10,000 MulBackward0 + 10,000 AddBackward0 + AccumulateGrad)
           -> microseconds per executed backward node.
2. fan-in  10,000 branches ``b_i = x * c_i`` from one 8-element leaf,
           summed with a balanced tree of adds -> microseconds per node.
3. mlp     4 layers of 1024, float32, batch 256, relu between layers,
           ``loss = mean(out)`` -> milliseconds per backward.

If ``import torch`` works the same graphs are built and timed in torch in the
same process, with ``torch.set_num_threads`` set to the thread count of
numpy's BLAS, and the ratio gradcli / torch is printed.

    python scripts/bench_engine.py              # ~1 minute
    python scripts/bench_engine.py --quick      # smoke run, < 15 s
    python scripts/bench_engine.py --json out.json --repeat 21
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import glob
import json
import os
import platform
import re
import statistics
import sys
import time

import numpy as np

from gradcli.autograd import Tensor, backward, set_multithreading_enabled
import gradcli.ops as O

try:
    import torch
except Exception:  # noqa: BLE001 - any failure means: no torch comparison
    torch = None

CHAIN_OPS = 20_000
FANIN_BRANCHES = 10_000
VEC = 8
MLP_LAYERS, MLP_WIDTH, MLP_BATCH = 4, 1024, 256


# -- environment -------------------------------------------------------------------
def numpy_blas_info():
    """(name, version, thread count or None) of the BLAS numpy is linked to."""
    name = version = "?"
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        name, version = blas.get("name", "?"), blas.get("version", "?")
    except Exception:  # noqa: BLE001 - older numpy
        pass
    threads = None
    libdirs = [os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs"),
               os.path.join(os.path.dirname(np.__file__), ".dylibs")]
    for libdir in libdirs:
        for lib in glob.glob(os.path.join(libdir, "*openblas*")):
            try:
                dll = ctypes.CDLL(lib)
            except OSError:
                continue
            for sym in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                        "openblas_get_num_threads"):
                fn = getattr(dll, sym, None)
                if fn is not None:
                    fn.restype = ctypes.c_int
                    threads = int(fn())
                    break
            if threads is not None:
                break
    if threads is None:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            if os.environ.get(var, "").isdigit():
                threads = int(os.environ[var])
                break
    return name, version, threads


def torch_blas_info():
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "?"


# -- timing helpers ----------------------------------------------------------------
def time_backward(build, run_backward, repeat, warm=None, retain=False):
    """Median seconds of ``run_backward(state)`` over ``repeat`` measurements.

    ``build()`` makes the graph (untimed). Without ``retain`` the graph is
    rebuilt before every measurement; with it, built once and the backward
    runs with retain_graph=True each time. One untimed warm-up backward runs
    first, through ``warm(state)`` when given (it returns the node count).
    """
    times = []
    state = build()
    nodes = (warm or run_backward)(state)
    for _ in range(repeat):
        if not retain:
            state = None
            state = build()
        gc.collect()
        t0 = time.perf_counter()
        run_backward(state)
        t1 = time.perf_counter()
        times.append(t1 - t0)
    state = None
    gc.collect()
    return statistics.median(times), times, nodes


# -- graphs: gradcli -----------------------------------------------------------------
def gc_chain(n_ops=CHAIN_OPS):
    rng = np.random.default_rng(0)
    y0 = Tensor(rng.standard_normal(VEC), requires_grad=True)
    c = Tensor(np.full(VEC, 0.999))
    d = Tensor(np.full(VEC, 0.001))
    y = y0
    for _ in range(n_ops // 2):
        y = y * c + d
    return y0, y, np.ones(VEC)


def gc_fanin(n_branches=FANIN_BRANCHES):
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal(VEC), requires_grad=True)
    terms = [x * Tensor(np.full(VEC, 1.0 + i * 1e-4)) for i in range(n_branches)]
    while len(terms) > 1:               # balanced tree of adds: n_branches - 1 adds
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return x, terms[0], np.ones(VEC)


def gc_mlp():
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((MLP_BATCH, MLP_WIDTH)).astype(np.float32))
    params = []
    h = x
    for layer in range(MLP_LAYERS):
        w = Tensor((rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) / np.sqrt(MLP_WIDTH))
                   .astype(np.float32), requires_grad=True)
        b = Tensor(np.zeros(MLP_WIDTH, np.float32), requires_grad=True)
        params += [w, b]
        h = O.add(O.matmul(h, w), b)
        if layer < MLP_LAYERS - 1:
            h = O.relu(h)
    loss = O.mean(h)
    return params, loss, None


def gc_backward(retain):
    def run(state):
        leaf, out, grad = state
        if grad is None:
            backward(out, retain_graph=retain)
        else:
            backward([out], [grad], retain_graph=retain)
    return run


def gc_count_nodes(retain):
    """A backward that returns the number of nodes the engine executed (traced)."""
    def run(state):
        _, out, grad = state
        trace = []
        if grad is None:
            backward(out, retain_graph=retain, trace=trace)
        else:
            backward([out], [grad], retain_graph=retain, trace=trace)
        return len(trace)
    return run


# -- graphs: torch -------------------------------------------------------------------
def th_chain(n_ops=CHAIN_OPS):
    g = torch.Generator().manual_seed(0)
    y0 = torch.randn(VEC, dtype=torch.float64, generator=g, requires_grad=True)
    c = torch.full((VEC,), 0.999, dtype=torch.float64)
    d = torch.full((VEC,), 0.001, dtype=torch.float64)
    y = y0
    for _ in range(n_ops // 2):
        y = y * c + d
    return y0, y, torch.ones(VEC, dtype=torch.float64)


def th_fanin(n_branches=FANIN_BRANCHES):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(VEC, dtype=torch.float64, generator=g, requires_grad=True)
    terms = [x * torch.full((VEC,), 1.0 + i * 1e-4, dtype=torch.float64)
             for i in range(n_branches)]
    while len(terms) > 1:
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return x, terms[0], torch.ones(VEC, dtype=torch.float64)


def th_mlp():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(MLP_BATCH, MLP_WIDTH, generator=g)
    params = []
    h = x
    for layer in range(MLP_LAYERS):
        w = (torch.randn(MLP_WIDTH, MLP_WIDTH, generator=g) / MLP_WIDTH ** 0.5).requires_grad_()
        b = torch.zeros(MLP_WIDTH, requires_grad=True)
        params += [w, b]
        h = h @ w + b                       # MmBackward0 + AddBackward0, as in gradcli
        if layer < MLP_LAYERS - 1:
            h = torch.relu(h)
    return params, h.mean(), None


def th_backward(retain):
    def run(state):
        _, out, grad = state
        torch.autograd.backward([out], None if grad is None else [grad], retain_graph=retain)
    return run


def th_count_nodes(retain):
    """A backward that first counts the nodes of the graph (all of them run)."""
    run_backward = th_backward(retain)

    def run(state):
        seen, stack = set(), [state[1].grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            stack.extend(f for f, _ in fn.next_functions)
        run_backward(state)
        return len(seen)
    return run


# -- BLAS floor of the MLP backward ----------------------------------------------------
def mlp_matmul_floor(repeat):
    """Median seconds of the 7 matmuls of the MLP backward, numpy vs torch."""
    rng = np.random.default_rng(0)
    h = rng.standard_normal((MLP_BATCH, MLP_WIDTH)).astype(np.float32)
    gout = rng.standard_normal((MLP_BATCH, MLP_WIDTH)).astype(np.float32)
    w = rng.standard_normal((MLP_WIDTH, MLP_WIDTH)).astype(np.float32)
    n_w, n_h = MLP_LAYERS, MLP_LAYERS - 1      # grad of each W; grad of each hidden h

    def np_run():
        for _ in range(n_w):
            np.matmul(h.T, gout)
        for _ in range(n_h):
            np.matmul(gout, w.T)

    def best_median(fn):
        fn()
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    out = {"numpy": best_median(np_run)}
    if torch is not None:
        th, tg, tw = torch.from_numpy(h), torch.from_numpy(gout), torch.from_numpy(w)

        def th_run():
            for _ in range(n_w):
                torch.mm(th.t(), tg)
            for _ in range(n_h):
                torch.mm(tg, tw.t())
        out["torch"] = best_median(th_run)
    return out


# -- main ----------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: few repeats (< 15 s)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed backwards per benchmark (default 15, 3 with --quick)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--retain-graph", action="store_true",
                    help="build each graph once and time backward(retain_graph=True) "
                         "(default: a fresh forward before every timed backward)")
    ap.add_argument("--no-gc", action="store_true",
                    help="disable Python's cyclic GC inside the timed region")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--only", choices=("chain", "fanin", "mlp"), action="append",
                    help="run only these benchmarks (repeatable)")
    ap.add_argument("--multithreading", action="store_true",
                    help="leave gradcli's engine multithreading on (default: off; CPU-only "
                         "graphs never use device threads either way)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 15)
    use_torch = torch is not None and not args.no_torch
    which = args.only or ["chain", "fanin", "mlp"]

    blas_name, blas_version, blas_threads = numpy_blas_info()
    threads = blas_threads or os.cpu_count() or 1
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "processor": _cpu_model(),
        "numpy": np.__version__,
        "numpy_blas": f"{blas_name} {blas_version}",
        "numpy_blas_threads": blas_threads,
        "torch": torch.__version__ if torch is not None else None,
        "repeat": repeat,
        "mode": "retain_graph" if args.retain_graph else "fresh forward per backward",
        "gc_in_timed_region": not args.no_gc,
    }
    if use_torch:
        torch.set_num_threads(threads)
        env["torch_blas"] = torch_blas_info()
        env["torch_threads"] = torch.get_num_threads()

    print("gradcli engine backward benchmark")
    for k, v in env.items():
        print(f"  {k:22s} {v}")
    print()

    benches = {
        "chain": (gc_chain, th_chain, "us/node"),
        "fanin": (gc_fanin, th_fanin, "us/node"),
        "mlp": (gc_mlp, th_mlp, "ms/backward"),
    }
    results = []
    t_start = time.perf_counter()
    if args.no_gc:
        gc.disable()
    try:
        for name in which:
            gc_build, th_build, unit = benches[name]
            row = {"bench": name, "unit": unit}
            with set_multithreading_enabled(args.multithreading):
                med, ts, row["nodes"] = time_backward(
                    gc_build, gc_backward(args.retain_graph), repeat,
                    warm=gc_count_nodes(args.retain_graph), retain=args.retain_graph)
            row["gradcli_s"] = med
            row["gradcli_all_s"] = ts
            if use_torch:
                tmed, tts, row["torch_nodes"] = time_backward(
                    th_build, th_backward(args.retain_graph), repeat,
                    warm=th_count_nodes(args.retain_graph), retain=args.retain_graph)
                row["torch_s"] = tmed
                row["torch_all_s"] = tts
            results.append(row)
            print(f"  done {name:6s} ({time.perf_counter() - t_start:5.1f} s)", flush=True)
        floor = mlp_matmul_floor(repeat) if "mlp" in which else None
    finally:
        if args.no_gc:
            gc.enable()

    # -- the table ----------------------------------------------------------------
    print()
    hdr = f"{'bench':7s} {'nodes':>7s} {'unit':>12s} {'gradcli':>10s}"
    if use_torch:
        hdr += f" {'torch':>10s} {'gradcli/torch':>14s}"
    print(hdr)
    print("-" * len(hdr))
    for row in results:
        scale = 1e3 if row["unit"] == "ms/backward" else 1e6 / row["nodes"]
        row["gradcli"] = row["gradcli_s"] * scale
        line = f"{row['bench']:7s} {row['nodes']:7d} {row['unit']:>12s} {row['gradcli']:10.3f}"
        if use_torch:
            tscale = 1e3 if row["unit"] == "ms/backward" else 1e6 / row["torch_nodes"]
            row["torch"] = row["torch_s"] * tscale
            row["ratio"] = row["gradcli"] / row["torch"]
            line += f" {row['torch']:10.3f} {row['ratio']:13.1f}x"
        print(line)
    if floor is not None:
        mlp = next(r for r in results if r["bench"] == "mlp")
        print()
        print(f"mlp: the 7 backward matmuls alone: numpy ({blas_name}) "
              f"{floor['numpy'] * 1e3:.2f} ms"
              + (f", torch ({env.get('torch_blas')}) {floor['torch'] * 1e3:.2f} ms"
                 if "torch" in floor else ""))
        print(f"     gradcli backward = {mlp['gradcli_s'] / floor['numpy']:.2f} x its numpy "
              f"matmul floor" + (f"; torch backward = {mlp['torch_s'] / floor['torch']:.2f} x "
                                 f"its matmul floor" if "torch" in floor else ""))
        mlp["matmul_floor_s"] = floor
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "results": results}, f, indent=2)
        print(f"wrote {args.json}")
    return 0


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


if __name__ == "__main__":
    sys.exit(main())
