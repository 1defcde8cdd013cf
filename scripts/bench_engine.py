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
4. multidevice  two independent branches, one on simulated device sim:0 and one
           on sim:1: ``to(x_i, sim:i) -> 4 x matmul [448x448] float64 -> tanh
           -> to(cpu)``, the branches added on the CPU, ``loss = sum``. The
           backward runs with engine multithreading on (each sim device has its
           own worker thread; NumPy drops the GIL inside BLAS, so the branches'
           matmuls can overlap) and off (every node on the calling thread), and
           the speedup on/off is reported twice: (a) with numpy's BLAS threads as
           they are, (b) with BLAS limited to 1 thread (in-process through
           threadpoolctl or OpenBLAS's own setter, else in a child process started
           with OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS=1). The
           gradients of both modes are checked against a NumPy reference.

If ``import torch`` works the same graphs are built and timed in torch in the
same process, with ``torch.set_num_threads`` set to the thread count of
numpy's BLAS, and the ratio gradcli / torch is printed.

    python scripts/bench_engine.py              # ~1 minute
    python scripts/bench_engine.py --quick      # smoke run, < 15 s
    python scripts/bench_engine.py --only multidevice --repeat 21
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
import subprocess
import sys
import threading
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
MD_N, MD_LAYERS, MD_DTYPE = 448, 4, "float64"      # multidevice: [N,N] matmuls per branch
MD_N_QUICK = 320
MD_DEVICES = ("sim:0", "sim:1")
BENCHES = ("chain", "fanin", "mlp", "multidevice")
_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


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
    getter, _ = _openblas_thread_fns()
    if getter is not None:
        threads = int(getter())
    if threads is None:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            if os.environ.get(var, "").isdigit():
                threads = int(os.environ[var])
                break
    return name, version, threads


def _openblas_thread_fns():
    """(get_num_threads, set_num_threads) of the OpenBLAS bundled with numpy, or Nones."""
    libdirs = [os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs"),
               os.path.join(os.path.dirname(np.__file__), ".dylibs")]
    for libdir in libdirs:
        for lib in glob.glob(os.path.join(libdir, "*openblas*")):
            try:
                dll = ctypes.CDLL(lib)
            except OSError:
                continue
            for suffix in ("scipy_openblas_%s_num_threads64_", "openblas_%s_num_threads64_",
                           "openblas_%s_num_threads"):
                get = getattr(dll, suffix % "get", None)
                if get is not None:
                    get.restype = ctypes.c_int
                    put = getattr(dll, suffix % "set", None)
                    if put is not None:
                        put.argtypes, put.restype = [ctypes.c_int], None
                    return get, put
    return None, None


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


# -- multidevice: two branches on sim:0 / sim:1, engine threads on vs off -------------------
def md_setup(n, layers, dtype=MD_DTYPE):
    """The data of the two branches (made once) and their NumPy reference gradients."""
    from gradcli.devices import device as parse_device, to_device

    rng = np.random.default_rng(0)
    branches = []
    for dev in MD_DEVICES:
        x = rng.standard_normal((n, n)).astype(dtype)
        ws = [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(dtype) for _ in range(layers)]
        branches.append({"device": dev, "x": x, "ws": ws,
                         "ws_dev": [to_device(w, parse_device(dev)) for w in ws]})
    ref = []                                   # d sum(tanh(x W1 .. WL)) / d {x, W1..WL}
    for br in branches:
        hs = [br["x"].astype(np.float64)]
        for w in br["ws"]:
            hs.append(hs[-1] @ w.astype(np.float64))
        g = 1.0 - np.tanh(hs[-1]) ** 2
        gws = [None] * layers
        for j in range(layers - 1, -1, -1):
            gws[j] = hs[j].T @ g
            g = g @ br["ws"][j].astype(np.float64).T
        ref += [g] + gws
    return branches, ref


def md_build(branches):
    """Fresh forward: leaves [x0, W0.., x1, W1..] and loss = sum(cpu(b0) + cpu(b1))."""
    leaves, outs = [], []
    for br in branches:
        x = Tensor(br["x"], requires_grad=True)          # CPU leaf, copied to sim:i
        leaves.append(x)
        h = O.to(x, device=br["device"])
        for w_dev in br["ws_dev"]:
            w = Tensor(w_dev, requires_grad=True)         # leaf on sim:i
            leaves.append(w)
            h = O.matmul(h, w)
        outs.append(O.to(O.tanh(h), device="cpu"))
    return leaves, O.sum_(O.add(outs[0], outs[1]))


def md_check(leaves, ref, dtype, what, stride=1):
    """Every leaf's gradient equals the NumPy reference (the run was not broken).

    ``stride`` > 1 compares every stride-th row and column only (the cheap check
    after each timed backward; the untimed traced runs compare everything).
    """
    rtol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-9
    for i, (leaf, want) in enumerate(zip(leaves, ref)):
        if leaf.grad is None:
            raise AssertionError(f"multidevice ({what}): leaf {i} got no gradient")
        got = np.asarray(leaf.grad[::stride, ::stride], dtype=np.float64)
        want = want[::stride, ::stride]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max(),
                                   err_msg=f"multidevice ({what}): leaf {i}")


def md_traced(branches, mt):
    """One untimed backward with a trace: node count, thread count, matmul node time."""
    leaves, loss = md_build(branches)
    trace = []
    with set_multithreading_enabled(mt):
        t0 = time.perf_counter()
        backward(loss, trace=trace)
        wall = time.perf_counter() - t0
    names = {rec[0].name for rec in trace}
    mm = [rec for rec in trace if "Mm" in rec[0].name or "Matmul" in rec[0].name]
    threads_mm = {rec[1] for rec in mm}
    return leaves, {"nodes": len(trace), "threads": len({rec[1] for rec in trace}),
                    "matmul_threads": len(threads_mm), "node_names": sorted(names),
                    "matmul_node_s": sum(rec[3] - rec[2] for rec in mm), "wall_s": wall}


def md_numpy_work(branches):
    """The backward's matmuls in plain NumPy: (seq, par) callables.

    Per branch and layer the two products the backward computes, dH = G W^T and
    dW = H^T G, on [N,N] operands; ``seq`` runs both branches on this thread,
    ``par`` runs each branch on its own Python thread (the ceiling of what the
    engine's two device threads can gain on this machine right now).
    """
    work = [[(br["x"], w.T) for w in br["ws"]] + [(br["x"].T, w) for w in br["ws"]]
            for br in branches]

    def branch(pairs):
        for a, b in pairs:
            np.matmul(a, b)

    def seq():
        for pairs in work:
            branch(pairs)

    def par():
        ts = [threading.Thread(target=branch, args=(pairs,)) for pairs in work]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return seq, par


def md_run(n, layers, repeat, no_gc=False, dtype=MD_DTYPE):
    """Median backward seconds with engine multithreading on and off (interleaved runs)."""
    branches, ref = md_setup(n, layers, dtype)
    info, grads = {}, {}
    for mt, key in ((True, "multithreaded"), (False, "single_thread")):
        md_traced(branches, mt)                          # warm-up (starts the device threads)
        leaves, info[key] = md_traced(branches, mt)
        md_check(leaves, ref, dtype, key)
        grads[key] = [np.asarray(leaf.grad) for leaf in leaves]
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    for i, (g_mt, g_st) in enumerate(zip(grads["multithreaded"], grads["single_thread"])):
        np.testing.assert_allclose(g_mt, g_st, rtol=rtol, atol=rtol * np.abs(g_st).max(),
                                   err_msg=f"multidevice: leaf {i}, threads on vs off")
    grads = None
    if info["multithreaded"]["matmul_threads"] < 2:
        raise AssertionError("multidevice: with multithreading on, the matmul backwards of "
                             "sim:0 and sim:1 ran on fewer than 2 threads")
    if info["single_thread"]["threads"] != 1:
        raise AssertionError("multidevice: with multithreading off, nodes ran on "
                             f"{info['single_thread']['threads']} threads")
    np_seq, np_par = md_numpy_work(branches)
    np_seq(), np_par()
    times = {True: [], False: [], "seq": [], "par": []}
    if no_gc:
        gc.disable()
    try:
        for i in range(repeat):
            # interleave on/off (alternating which goes first) and the plain-NumPy
            # ceiling, so the machine's drift and noise hit all of them alike
            for mt in ((True, False) if i % 2 == 0 else (False, True)):
                leaves, loss = md_build(branches)
                gc.collect()
                with set_multithreading_enabled(mt):
                    t0 = time.perf_counter()
                    backward(loss)
                    t1 = time.perf_counter()
                times[mt].append(t1 - t0)
                loss = None
                md_check(leaves, ref, dtype, "multithreaded" if mt else "single_thread",
                         stride=8)
            for key, fn in (("seq", np_seq), ("par", np_par)):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
    finally:
        if no_gc:
            gc.enable()
    t_mt, t_st = statistics.median(times[True]), statistics.median(times[False])
    c_seq, c_par = statistics.median(times["seq"]), statistics.median(times["par"])
    return {
        "n": n, "layers": layers, "dtype": dtype, "repeat": repeat,
        "blas_threads": numpy_blas_info()[2],
        "nodes": info["multithreaded"]["nodes"],
        "multithreaded_s": t_mt, "single_thread_s": t_st,
        "multithreaded_all_s": times[True], "single_thread_all_s": times[False],
        "speedup": t_st / t_mt,
        "numpy_seq_s": c_seq, "numpy_2threads_s": c_par, "numpy_ceiling": c_seq / c_par,
        "numpy_seq_all_s": times["seq"], "numpy_2threads_all_s": times["par"],
        "traced": info, "grads_checked": True,
    }


def _blas1_inprocess(method):
    """A context manager limiting BLAS to 1 thread in this process, and its name; or None."""
    if method in ("auto", "threadpoolctl"):
        try:
            from threadpoolctl import threadpool_limits, threadpool_info
            if any(lib.get("user_api") == "blas" for lib in threadpool_info()):
                return threadpool_limits(limits=1, user_api="blas"), "threadpoolctl"
        except Exception:  # noqa: BLE001 - not installed / cannot see the BLAS
            pass
    if method in ("auto", "ctypes"):
        get, put = _openblas_thread_fns()
        if get is not None and put is not None:
            import contextlib

            @contextlib.contextmanager
            def limit():
                before = int(get())
                put(1)
                try:
                    yield
                finally:
                    put(before)
            with limit():
                ok = int(get()) == 1
            if ok:
                return limit(), "openblas_set_num_threads (ctypes)"
    return None


def md_blas1(n, layers, repeat, no_gc, method):
    """Variant (b): md_run with BLAS at 1 thread, in-process if possible, else a child."""
    limiter = None if method == "subprocess" else _blas1_inprocess(method)
    if limiter is not None:
        ctx, how = limiter
        with ctx:
            res = md_run(n, layers, repeat, no_gc)
        res["blas_limit"] = how
        return res
    if method not in ("auto", "subprocess"):
        raise SystemExit(f"bench_engine: --blas-limit {method} is not available here")
    env = dict(os.environ, **{var: "1" for var in _BLAS_ENV})
    cfg = json.dumps({"n": n, "layers": layers, "repeat": repeat, "no_gc": no_gc})
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "multidevice",
                           "--child-config", cfg], env=env, stdout=subprocess.PIPE,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bench_engine: the multidevice child (BLAS 1 thread) failed with "
                         f"exit code {proc.returncode}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["blas_limit"] = "child process, " + "=".join(_BLAS_ENV) + "=1"
    return res


def md_child(cfg):
    res = md_run(cfg["n"], cfg["layers"], cfg["repeat"], cfg.get("no_gc", False))
    print(json.dumps(res))
    return 0


def md_print(row):
    a, b = row["variants"]["blas_as_is"], row["variants"]["blas_1"]
    print(f"\nmultidevice: 2 branches (sim:0, sim:1) x {a['layers']} matmul "
          f"[{a['n']}x{a['n']}] {a['dtype']} -> tanh -> cpu; {a['nodes']} nodes; "
          f"backward ms, median of {a['repeat']}")
    hdr = (f"{'variant':16s} {'BLAS thr':>8s} {'threads on':>11s} {'threads off':>12s} "
           f"{'speedup':>8s} {'plain numpy 2 threads':>22s}")
    print(hdr)
    print("-" * len(hdr))
    for label, v in (("(a) BLAS as is", a), ("(b) BLAS 1 thr", b)):
        print(f"{label:16s} {str(v['blas_threads']):>8s} {v['multithreaded_s'] * 1e3:11.1f} "
              f"{v['single_thread_s'] * 1e3:12.1f} {v['speedup']:7.2f}x "
              f"{v['numpy_ceiling']:21.2f}x")
    print(f"(b) BLAS limited through: {b['blas_limit']}")
    print("gradients: threads on == threads off == NumPy reference (allclose), every run")


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
    ap.add_argument("--only", choices=BENCHES, action="append",
                    help="run only these benchmarks (repeatable)")
    ap.add_argument("--multithreading", action="store_true",
                    help="leave gradcli's engine multithreading on (default: off; CPU-only "
                         "graphs never use device threads either way; multidevice always "
                         "times both)")
    ap.add_argument("--blas-limit", choices=("auto", "threadpoolctl", "ctypes", "subprocess"),
                    default="auto",
                    help="how multidevice limits BLAS to 1 thread for variant (b) (default "
                         "auto: threadpoolctl, else OpenBLAS's setter, else a child process)")
    ap.add_argument("--child", choices=("multidevice",), help=argparse.SUPPRESS)
    ap.add_argument("--child-config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return md_child(json.loads(args.child_config))
    repeat = args.repeat or (3 if args.quick else 15)
    use_torch = torch is not None and not args.no_torch
    which = args.only or list(BENCHES)

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
            if name == "multidevice":
                continue
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
    if "multidevice" in which:      # manages GC itself (--no-gc: off in the timed region)
        md_n = MD_N_QUICK if args.quick else MD_N
        md_repeat = args.repeat or (5 if args.quick else 15)
        a = md_run(md_n, MD_LAYERS, md_repeat, args.no_gc)
        b = md_blas1(md_n, MD_LAYERS, md_repeat, args.no_gc, args.blas_limit)
        results.append({
            "bench": "multidevice", "unit": "ms/backward", "nodes": a["nodes"],
            "gradcli_s": a["multithreaded_s"], "gradcli_all_s": a["multithreaded_all_s"],
            "speedup_blas_as_is": a["speedup"], "speedup_blas_1": b["speedup"],
            "variants": {"blas_as_is": a, "blas_1": b}})
        print(f"  done {'multidevice':6s} ({time.perf_counter() - t_start:5.1f} s)", flush=True)

    # -- the table ----------------------------------------------------------------
    print()
    bw = max([7] + [len(row["bench"]) for row in results])     # 7 unless multidevice ran
    hdr = f"{'bench':{bw}s} {'nodes':>7s} {'unit':>12s} {'gradcli':>10s}"
    if use_torch:
        hdr += f" {'torch':>10s} {'gradcli/torch':>14s}"
    print(hdr)
    print("-" * len(hdr))
    for row in results:
        scale = 1e3 if row["unit"] == "ms/backward" else 1e6 / row["nodes"]
        row["gradcli"] = row["gradcli_s"] * scale
        line = f"{row['bench']:{bw}s} {row['nodes']:7d} {row['unit']:>12s} {row['gradcli']:10.3f}"
        if row["bench"] == "multidevice":
            if use_torch:
                line += f" {'-':>10s} {'-':>14s}"
            line += (f"   threads on/off speedup: {row['speedup_blas_as_is']:.2f}x (BLAS as is),"
                     f" {row['speedup_blas_1']:.2f}x (BLAS 1 thread)")
        elif use_torch:
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
    md = next((r for r in results if r["bench"] == "multidevice"), None)
    if md is not None:
        md_print(md)
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
