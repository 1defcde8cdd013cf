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

With ``--inprocess`` (the old mode) the same graphs are also built and timed in
torch in the same process, with ``torch.set_num_threads`` set to the thread count
of numpy's BLAS, and the ratio gradcli / torch is printed.

The figures (each side in its own process, gradcli and PyTorch runs
interleaved, medians with their spread, ratios gradcli / PyTorch):

5. backward of the three workloads above (``chain``, ``fanin``, ``mlp``) measured in
   child processes, one per side and round, with one BLAS thread on both sides
   (OPENBLAS/OMP/MKL_NUM_THREADS=1 in the child's environment and
   ``torch.set_num_threads(1)``), and the MLP again with the default threads: never
   PyTorch and NumPy BLAS threads busy in one process. The first backward of each
   child (cold) is reported apart from the steady state (the later ones). The MLP
   has a third side, the same math written by hand in NumPy (``np_mlp_backward``),
   in its own processes too: gradcli / NumPy by hand is the engine's cost over
   NumPy's BLAS, and gradcli / PyTorch also holds OpenBLAS against PyTorch's BLAS.
6. e2e: ``gradcli run`` on 20,000-, 200,000- and 1,000,000-op chain JSON files
   (``y = y*c + d``, 8 x float64): the whole process less the median of the same
   process on a tiny graph, against PyTorch in a process that has imported torch
   (untimed) timing json.load + build + forward + backward of the same file. Per-op
   cost, and the scaling (per-op cost at the largest size / at 20,000).
7. startup: ``gradcli run`` on a 2-op graph against ``python -c "import numpy"``,
   with bytecode written, and with PYTHONDONTWRITEBYTECODE=1 both after the
   install step compiled the package and with no bytecode at all (each on a fresh
   copy of the package: Note [Start-up with and without bytecode]).
8. memory: resident bytes per recorded node of a long chain (gradcli's autograd API
   and PyTorch), and gradcli's GC-tracked objects per node.
9. read: reading the chain files, gradcli's JSON and YAML readers against
   ``json.loads`` and libyaml itself (its event stream; the C composer's node tree
   up to 200,000 ops; ``yaml.load`` with CSafeLoader up to 20,000 ops), the
   collector off on every side; the ratios the targets are set on.

    python scripts/bench_engine.py              # several minutes (1,000,000-op files)
    python scripts/bench_engine.py --quick      # smoke run: small sizes, few repeats
    python scripts/bench_engine.py --only e2e --sizes 20000,200000 --rounds 5
    python scripts/bench_engine.py --only multidevice --repeat 21
    python scripts/bench_engine.py --json out.json
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

torch = None      # imported by the processes that time PyTorch (never by gradcli's)


def _import_torch():
    global torch
    if torch is None:
        try:
            import torch as _torch
        except Exception:  # noqa: BLE001 - any failure means: no torch comparison
            return None
        torch = _torch
    return torch


def torch_available():
    """torch's version if ``import torch`` works, asked in a child (this process stays
    torch-free), else None."""
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None

CHAIN_OPS = 20_000
FANIN_BRANCHES = 10_000
VEC = 8
MLP_LAYERS, MLP_WIDTH, MLP_BATCH = 4, 1024, 256
MD_N, MD_LAYERS, MD_DTYPE = 448, 4, "float64"      # multidevice: [N,N] matmuls per branch
MD_N_QUICK = 320
MD_DEVICES = ("sim:0", "sim:1")
BENCHES = ("chain", "fanin", "mlp", "multidevice", "e2e", "startup", "memory", "read")
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


# -- the MLP written by hand in NumPy ------------------------------------------------
# The target: "the MLP stays within 5% of the same math written by hand in NumPy".
# The forward keeps what the backward formulas read (each layer's input and each
# relu's output), as an autograd engine does; the backward is the formulas
# PyTorch's nodes use (derivatives.yaml), written out: mean -> grad / n expanded;
# add -> the bias gradient summed over the batch; mm -> grad @ W.T and h.T @ grad;
# relu -> threshold_backward(grad, result, 0), i.e. where(result <= 0, 0, grad),
# which passes a NaN on as PyTorch does. No copies: each gradient is a fresh array,
# the way PyTorch's AccumulateGrad steals it. What it leaves out is everything that
# makes an engine (nodes, edges, the ready queue, dependency counts, InputBuffers).
def np_mlp():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((MLP_BATCH, MLP_WIDTH)).astype(np.float32)
    ws = [(rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) / np.sqrt(MLP_WIDTH)).astype(np.float32)
          for _ in range(MLP_LAYERS)]
    bs = [np.zeros(MLP_WIDTH, np.float32) for _ in range(MLP_LAYERS)]
    inputs, relus, h = [], [], x
    for layer in range(MLP_LAYERS):
        inputs.append(h)
        h = np.matmul(h, ws[layer]) + bs[layer]
        if layer < MLP_LAYERS - 1:
            h = np.maximum(h, np.float32(0))
            relus.append(h)
    return ws, inputs, relus, h


def np_mlp_backward(state):
    ws, inputs, relus, out = state
    g = np.broadcast_to(np.array(1.0 / out.size, out.dtype), out.shape)     # MeanBackward0
    grads = []
    for layer in reversed(range(MLP_LAYERS)):
        if layer < MLP_LAYERS - 1:                                           # ThresholdBackward0
            g = np.where(relus[layer] <= 0, np.zeros((), g.dtype), g)
        grads.append(g.sum(axis=0))                                          # AddBackward0 (bias)
        grads.append(np.matmul(inputs[layer].T, g))                          # MmBackward0: W
        if layer > 0:
            g = np.matmul(g, ws[layer].T)                                    # MmBackward0: h
    return grads


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
    return leaves, O.sum(O.add(outs[0], outs[1]))


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


# -- each side in its own process, interleaved ---------------------------------
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
E2E_SIZES = (20_000, 200_000, 1_000_000)
E2E_SIZES_QUICK = (2_000, 20_000)
MEMORY_NODES, MEMORY_NODES_QUICK = 1_000_000, 100_000


def _child_env(blas_threads=None, extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if blas_threads is not None:
        env.update({var: str(blas_threads) for var in _BLAS_ENV})
    env.update(extra or {})
    return env


def _child(kind, cfg, env, timeout=3600):
    """Run this script as a child doing ``kind``; returns the JSON it prints last."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind,
                           "--child-config", json.dumps(cfg)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"bench_engine: child {kind} {cfg} failed with exit code "
                         f"{proc.returncode}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _stats(xs):
    xs = sorted(xs)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs),
            "all": xs}


def _spread(st, scale=1.0, fmt="{:.3g}"):
    return (fmt.format(st["median"] * scale) + " [" + fmt.format(st["min"] * scale) + "-"
            + fmt.format(st["max"] * scale) + "]")


def _interleaved(rounds, runners):
    """Run ``runners`` (name -> callable) ``rounds`` times, rotating which goes first."""
    out = {name: [] for name in runners}
    names = list(runners)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            out[name].append(runners[name]())
    return out


# backward workloads ------------------------------------------------------------------------
def child_backward(cfg):
    """One side of one workload: the first backward apart, then ``iters`` more."""
    side, bench, iters = cfg["side"], cfg["bench"], cfg["iters"]
    if side == "torch":
        th = _import_torch()
        th.set_num_threads(cfg["threads"])
        build = {"chain": th_chain, "fanin": th_fanin, "mlp": th_mlp}[bench]
        run, count = th_backward(False), th_count_nodes(False)
    elif side == "numpy":                   # the MLP by hand: no engine, no nodes
        build, run, count = np_mlp, np_mlp_backward, lambda state: 0
    else:
        build = {"chain": gc_chain, "fanin": gc_fanin, "mlp": gc_mlp}[bench]
        run, count = gc_backward(False), gc_count_nodes(False)
    state = build()
    gc.collect()
    t0 = time.perf_counter()
    run(state)
    first = time.perf_counter() - t0
    nodes = count(build())
    times = []
    for _ in range(iters):
        state = None
        state = build()
        gc.collect()
        t0 = time.perf_counter()
        run(state)
        times.append(time.perf_counter() - t0)
    return {"first_s": first, "steady_s": times, "nodes": nodes}


def bench_backward(which, rounds, iters, have_torch):
    """chain, fanin, mlp: each side in its own child process, interleaved rounds."""
    variants = [(name, 1) for name in which] + ([("mlp", None)] if "mlp" in which else [])
    rows = []
    for bench, blas in variants:
        threads = blas or (os.cpu_count() or 1)
        runners = {"gradcli": lambda b=bench, t=blas: _child(
            "backward", {"side": "gradcli", "bench": b, "iters": iters}, _child_env(t))}
        if have_torch:
            runners["torch"] = lambda b=bench, t=blas, n=threads: _child(
                "backward", {"side": "torch", "bench": b, "iters": iters, "threads": n},
                _child_env(t))
        if bench == "mlp":
            runners["numpy"] = lambda t=blas: _child(
                "backward", {"side": "numpy", "bench": "mlp", "iters": iters}, _child_env(t))
        res = _interleaved(rounds, runners)
        row = {"bench": bench, "blas_threads": blas or "default", "rounds": rounds,
               "iters": iters}
        for side, runs in res.items():
            row[side] = {"nodes": runs[0]["nodes"],
                         "first": _stats([r["first_s"] for r in runs]),
                         "steady": _stats([t for r in runs for t in r["steady_s"]])}
        rows.append(row)
        print(f"  done backward {bench} (BLAS threads {row['blas_threads']})", flush=True)
    return rows


def print_backward(rows):
    print("\nbackward (each side in its own process; steady = median [min-max] over "
          "rounds x iterations; first = the first backward of each process)")
    hdr = (f"{'bench':6s} {'BLAS':>7s} {'nodes':>6s} {'unit':>8s} {'gradcli steady':>22s} "
           f"{'torch steady':>22s} {'ratio':>6s} {'gradcli first':>14s} {'torch first':>12s}")
    print(hdr)
    print("-" * len(hdr))
    for row in rows:
        g, t = row["gradcli"], row.get("torch")
        if row["bench"] == "mlp":
            unit, gs, ts = "ms", 1e3, 1e3
        else:
            unit, gs = "us/node", 1e6 / g["nodes"]
            ts = 1e6 / t["nodes"] if t else 0
        line = (f"{row['bench']:6s} {str(row['blas_threads']):>7s} {g['nodes']:6d} {unit:>8s} "
                f"{_spread(g['steady'], gs):>22s} ")
        if t:
            row["ratio"] = (g["steady"]["median"] * gs) / (t["steady"]["median"] * ts)
            line += f"{_spread(t['steady'], ts):>22s} {row['ratio']:5.2f}x "
        else:
            line += f"{'-':>22s} {'-':>6s} "
        line += f"{g['first']['median'] * gs:14.3g} "
        line += f"{t['first']['median'] * ts:12.3g}" if t else f"{'-':>12s}"
        print(line)
        n = row.get("numpy")
        if n:       # the MLP by hand in NumPy, same BLAS threads, its own processes
            row["ratio_numpy"] = g["steady"]["median"] / n["steady"]["median"]
            print(f"{'':6s} {'':>7s} {'':>6s} {'':>8s} {'numpy by hand':>22s} "
                  f"{_spread(n['steady'], 1e3):>22s} {row['ratio_numpy']:5.2f}x "
                  f"{'(gradcli / numpy by hand)':>27s}")


# end to end ----------------------------------------------------------------------------------
def chain_document(n_ops):
    """A graph file (as data) of ``n_ops`` ops: y = y*c + d repeated, then a sum."""
    ops = []
    y = "y0"
    for i in range(n_ops // 2):
        ops.append({"op": "mul", "inputs": [y, "c"], "output": f"m{i}"})
        ops.append({"op": "add", "inputs": [f"m{i}", "d"], "output": f"y{i + 1}"})
        y = f"y{i + 1}"
    ops.append({"op": "sum", "inputs": [y], "output": "loss"})
    return {"version": 1, "name": f"chain{n_ops}", "seed": 0,
            "tensors": {"y0": {"shape": [VEC], "init": "normal", "requires_grad": True},
                        "c": {"shape": [VEC], "init": {"dist": "full", "fill": 0.999}},
                        "d": {"shape": [VEC], "init": {"dist": "full", "fill": 0.001}}},
            "ops": ops, "backward": {"roots": ["loss"]}}


def chain_yaml(doc):
    """The same document as YAML, one flow mapping per op (as people write them)."""
    lines = ["version: 1", f"name: {doc['name']}", "seed: 0", "tensors:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in doc["tensors"].items()]
    lines.append("ops:")
    lines += [f"  - {{op: {op['op']}, inputs: [{', '.join(op['inputs'])}], output: "
              f"{op['output']}}}" for op in doc["ops"]]
    lines.append("backward: {roots: [loss]}")
    return "\n".join(lines) + "\n"


def write_chain_files(folder, sizes):
    files = {}
    for n in sizes:
        doc = chain_document(n)
        js, ym = os.path.join(folder, f"chain{n}.json"), os.path.join(folder, f"chain{n}.yaml")
        with open(js, "w") as f:
            json.dump(doc, f, indent=1)
        with open(ym, "w") as f:
            f.write(chain_yaml(doc))
        files[n] = (js, ym)
    tiny = os.path.join(folder, "tiny.json")
    with open(tiny, "w") as f:
        json.dump(chain_document(2), f, indent=1)
    return files, tiny


def _wall(cmd, env, cwd=None):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, cwd=cwd)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_engine: {' '.join(cmd)} failed ({proc.returncode}): "
                         f"{proc.stderr[-1000:]}")
    return wall


def child_e2e_torch(cfg):
    """PyTorch after ``import torch``: json.load, build, forward, backward of a chain file."""
    th = _import_torch()
    th.set_num_threads(cfg["threads"])
    t0 = time.perf_counter()
    with open(cfg["file"]) as f:
        doc = json.load(f)
    g = th.Generator().manual_seed(doc.get("seed", 0))
    env = {}
    for name, spec in doc["tensors"].items():
        init = spec.get("init", "zeros")
        if init == "normal":
            t = th.randn(spec["shape"], dtype=th.float64, generator=g)
        else:
            t = th.full(spec["shape"], init["fill"], dtype=th.float64)
        env[name] = t.requires_grad_(bool(spec.get("requires_grad")))
    fns = {"mul": th.mul, "add": th.add, "sum": th.sum}
    for op in doc["ops"]:
        env[op["output"]] = fns[op["op"]](*(env[i] for i in op["inputs"]))
    roots = [env[r] for r in doc["backward"]["roots"]]
    th.autograd.backward(roots)
    grads = {k: v.grad for k, v in env.items() if v.requires_grad and v.grad is not None}
    total = time.perf_counter() - t0
    assert set(grads) == {"y0"}
    return {"s": total, "ops": len(doc["ops"])}


def bench_e2e(files, tiny, rounds_for, have_torch):
    gradcli_cmd = [sys.executable, "-m", "gradcli", "run"]
    env = _child_env()
    base = _interleaved(max(5, rounds_for(0)), {"tiny": lambda: _wall(gradcli_cmd + [tiny], env)})
    startup = statistics.median(base["tiny"])
    rows = []
    for n, (js, _) in files.items():
        runners = {"gradcli": lambda f=js: _wall(gradcli_cmd + [f], env) - startup}
        if have_torch:
            runners["torch"] = lambda f=js: _child(
                "e2e_torch", {"file": f, "threads": os.cpu_count() or 1}, env)["s"]
        res = _interleaved(rounds_for(n), runners)
        row = {"ops": n + 1, "rounds": rounds_for(n), "gradcli": _stats(res["gradcli"]),
               "gradcli_tiny_run_s": startup}
        if have_torch:
            row["torch"] = _stats(res["torch"])
            row["ratio"] = row["gradcli"]["median"] / row["torch"]["median"]
        rows.append(row)
        print(f"  done e2e {n} ops", flush=True)
    return rows


def print_e2e(rows):
    print("\ne2e: `gradcli run` on a chain JSON file, whole process less a tiny graph's run "
          f"({rows[0]['gradcli_tiny_run_s'] * 1e3:.0f} ms), vs PyTorch after `import torch`: "
          "json.load + build + forward + backward; s, median [min-max]")
    hdr = (f"{'ops':>8s} {'gradcli s':>22s} {'us/op':>7s} {'torch s':>22s} {'us/op':>7s} "
           f"{'ratio':>6s}")
    print(hdr)
    print("-" * len(hdr))
    for row in rows:
        g = row["gradcli"]
        line = f"{row['ops']:8d} {_spread(g):>22s} {g['median'] / row['ops'] * 1e6:7.1f} "
        if "torch" in row:
            t = row["torch"]
            line += (f"{_spread(t):>22s} {t['median'] / row['ops'] * 1e6:7.1f} "
                     f"{row['ratio']:5.2f}x")
        print(line)
    first, last = rows[0], rows[-1]
    if last is not first:
        for side in ("gradcli", "torch"):
            if side in last:
                k = (last[side]["median"] / last["ops"]) / (first[side]["median"] / first["ops"])
                last[f"scaling_{side}"] = k
                print(f"scaling {side}: per-op cost at {last['ops']} ops / at {first['ops']} ops "
                      f"= {k:.2f}x")


# start-up ----------------------------------------------------------------------------------
# Note [Start-up with and without bytecode]: where bytecode is written (the default)
# every module is compiled once and later starts read its .pyc. With
# PYTHONDONTWRITEBYTECODE=1 Python still reads the .pyc files that are there; it
# only compiles in memory, at every start, the modules that have none (or a stale
# one). Timing the repository with that variable alone therefore measures
# whatever __pycache__ earlier runs left behind. So each row runs a fresh copy of
# the package (no __pycache__) in its own folder, as the working directory (``-m``
# puts it first on sys.path):
#   bytecode written       the default; one untimed run writes the bytecode first;
#   DONTWRITE, installed   PYTHONDONTWRITEBYTECODE=1 after the install step's
#                          ``python -m compileall`` (`make`; pip compiles what a
#                          non-editable install copies): what an installed
#                          environment that writes no bytecode sees;
#   DONTWRITE, no .pyc     PYTHONDONTWRITEBYTECODE=1 and never compiled: every
#                          gradcli module is compiled from source at every start
#                          (a checkout run without the install step).
# numpy (and click, yaml, ...) is read from the environment's own bytecode in
# every row: pip compiled it when it installed them.
def _package_copy(folder, name, compiled):
    import shutil

    target = os.path.join(folder, name)
    shutil.copytree(os.path.join(REPO, "gradcli"), os.path.join(target, "gradcli"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if compiled:
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(target, "gradcli")],
                       check=True)
    return target


def bench_startup(tiny, rounds):
    import tempfile

    rows = {}
    with tempfile.TemporaryDirectory(prefix="gradcli-startup-") as folder:
        written = _package_copy(folder, "written", compiled=False)
        installed = _package_copy(folder, "installed", compiled=True)
        source = _package_copy(folder, "source", compiled=False)
        for label, where, dont_write in (("bytecode written", written, False),
                                         ("DONTWRITEBYTECODE, installed", installed, True),
                                         ("DONTWRITEBYTECODE, no .pyc", source, True)):
            env = _child_env()
            env["PYTHONPATH"] = where
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if dont_write:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            gradcli = [sys.executable, "-m", "gradcli", "run", tiny]
            if not dont_write:
                _wall(gradcli, env, cwd=where)      # writes the bytecode, untimed
            res = _interleaved(rounds, {
                "gradcli": lambda e=env, w=where: _wall(gradcli, e, cwd=w),
                "numpy": lambda e=env, w=where: _wall([sys.executable, "-c", "import numpy"], e,
                                                      cwd=w)})
            rows[label] = {side: _stats(v) for side, v in res.items()}
            rows[label]["ratio"] = rows[label]["gradcli"]["median"] / rows[label]["numpy"]["median"]
        # the honesty check: the last row really ran without any bytecode of gradcli's
        pyc = glob.glob(os.path.join(source, "gradcli", "**", "*.pyc"), recursive=True)
        if pyc:
            raise SystemExit(f"bench_engine: {len(pyc)} .pyc files appeared in the copy "
                             "run with PYTHONDONTWRITEBYTECODE=1")
    print("\nstartup: `gradcli run` on a 2-op graph vs `python -c \"import numpy\"`; ms, "
          "median [min-max] (a fresh copy of the package per row: Note [Start-up with and "
          "without bytecode])")
    for label, row in rows.items():
        print(f"  {label:30s} gradcli {_spread(row['gradcli'], 1e3):>18s}  numpy "
              f"{_spread(row['numpy'], 1e3):>18s}  ratio {row['ratio']:.2f}x")
    return rows


# memory per node ---------------------------------------------------------------------------
def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_memory(cfg):
    n = cfg["nodes"]
    gc.collect()
    if cfg["side"] == "torch":
        th = _import_torch()
        th.set_num_threads(1)
        th_chain(4)
        before = _rss()
        state = th_chain(n)
        after = _rss()
        return {"bytes_per_node": (after - before) / n, "nodes": n}
    gc_chain(4)
    gc.collect()
    objects = len(gc.get_objects())
    before = _rss()
    state = gc_chain(n)
    after = _rss()
    tracked = len(gc.get_objects()) - objects
    del state
    return {"bytes_per_node": (after - before) / n, "gc_objects_per_node": tracked / n,
            "nodes": n}


def bench_memory(nodes, rounds, have_torch):
    runners = {"gradcli": lambda: _child("memory", {"side": "gradcli", "nodes": nodes},
                                         _child_env(1))}
    if have_torch:
        runners["torch"] = lambda: _child("memory", {"side": "torch", "nodes": nodes},
                                          _child_env(1))
    res = _interleaved(rounds, runners)
    out = {side: {"bytes_per_node": _stats([r["bytes_per_node"] for r in v])}
           for side, v in res.items()}
    out["gradcli"]["gc_objects_per_node"] = res["gradcli"][0]["gc_objects_per_node"]
    out["nodes"] = nodes
    print(f"\nmemory: resident bytes per recorded node, chain of {nodes} ops (autograd API, "
          "graph alive), median [min-max]")
    line = (f"  gradcli {_spread(out['gradcli']['bytes_per_node'], fmt='{:.0f}')} B/node, "
            f"{out['gradcli']['gc_objects_per_node']:.1f} GC-tracked objects/node")
    if have_torch:
        out["ratio"] = (out["gradcli"]["bytes_per_node"]["median"]
                        / out["torch"]["bytes_per_node"]["median"])
        line += (f"; torch {_spread(out['torch']['bytes_per_node'], fmt='{:.0f}')} B/node; "
                 f"ratio {out['ratio']:.2f}x")
    print(line)
    return out


# reading -----------------------------------------------------------------------------------
READ_COLUMNS = ("json gradcli", "json.loads", "yaml gradcli", "libyaml events", "libyaml nodes",
                "yaml.load CSafeLoader")


def child_read(cfg):
    """Time one read of ``cfg['file']`` by ``cfg['what']``, the cyclic collector off.

    Every side runs with the collector off (as ``gradcli run`` reads: Note [Collector
    pauses]), so each column is the parser's work and no side pays, or is spared, a
    collection of the data it built.
    """
    from gradcli.document import read_document
    import yaml

    path, what = cfg["file"], cfg["what"]
    gc.collect()
    gc.disable()
    t0, c0 = time.perf_counter(), time.process_time()
    if what == "gradcli":
        data = read_document(path).data
    elif what == "json.loads":
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    elif what == "libyaml events":         # the C parser's events, nothing built from them
        with open(path, "rb") as f:
            loader = yaml.CSafeLoader(f.read().decode("utf-8"))
        get, end = loader.get_event, yaml.StreamEndEvent
        while type(get()) is not end:
            pass
        loader.dispose()
        data = None
    elif what == "libyaml nodes":          # the C composer's node tree, nothing constructed
        with open(path, "rb") as f:
            loader = yaml.CSafeLoader(f.read().decode("utf-8"))
        node = loader.get_single_node()
        loader.dispose()
        assert len(node.value) > 0
        data = None
    else:                                   # yaml.load(CSafeLoader)
        with open(path, "rb") as f:
            data = yaml.load(f.read().decode("utf-8"), Loader=yaml.CSafeLoader)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if data is not None:
        assert len(data["ops"]) == cfg["ops"]
    return {"s": elapsed, "cpu_s": cpu}


def bench_read(files, rounds_for):
    """YAML may be slower than JSON, but not by more than libyaml is."""
    rows = []
    for n, (js, ym) in files.items():
        jobs = {"json gradcli": ("gradcli", js), "json.loads": ("json.loads", js),
                "yaml gradcli": ("gradcli", ym), "libyaml events": ("libyaml events", ym)}
        if n <= 200_000:
            jobs["libyaml nodes"] = ("libyaml nodes", ym)
        if n <= 20_000:
            jobs["yaml.load CSafeLoader"] = ("yaml.load", ym)
        runners = {k: (lambda w=w, f=f: _child("read", {"file": f, "what": w, "ops": n + 1},
                                                _child_env(1)))
                   for k, (w, f) in jobs.items()}
        res = _interleaved(rounds_for(n), runners)
        row = {"ops": n + 1, "rounds": rounds_for(n),
               **{k: _stats([r["s"] for r in v]) for k, v in res.items()}}
        row["cpu"] = {k: _stats([r["cpu_s"] for r in v]) for k, v in res.items()}
        for unit, stats in (("", row), ("cpu_", row["cpu"])):
            med = {k: stats[k]["median"] for k in res}
            row[unit + "yaml_over_json"] = med["yaml gradcli"] / med["json gradcli"]
            row[unit + "libyaml_over_json_loads"] = med["libyaml events"] / med["json.loads"]
            row[unit + "json_over_json_loads"] = med["json gradcli"] / med["json.loads"]
            row[unit + "yaml_over_libyaml"] = med["yaml gradcli"] / med["libyaml events"]
        rows.append(row)
        print(f"  done read {n} ops", flush=True)
    print("\nread: graph files of a chain, s, median [min-max] (each read in a fresh process, "
          "the collector off on every side)")
    print(f"{'ops':>8s} " + " ".join(f"{c:>22s}" for c in READ_COLUMNS))
    for row in rows:
        print(f"{row['ops']:8d} " + " ".join(
            f"{_spread(row[c]) if c in row else '-':>22s}" for c in READ_COLUMNS))
    print("\nread ratios (of medians): the target is yaml/json gradcli <= events/json.loads, "
          "i.e. gradcli's YAML reader over libyaml's events no more than its JSON reader "
          "over json.loads")
    print("over the wall-clock medians, and over the medians of each process's CPU time "
          "(less moved by other load on a shared machine)")
    print(f"{'ops':>8s} {'':4s} {'yaml/json gradcli':>18s} {'events/json.loads':>18s} "
          f"{'yaml gradcli/events':>20s} {'json gradcli/loads':>19s}")
    for row in rows:
        for unit, label in (("", "wall"), ("cpu_", "cpu")):
            print(f"{row['ops']:8d} {label:4s} {row[unit + 'yaml_over_json']:17.2f}x "
                  f"{row[unit + 'libyaml_over_json_loads']:17.2f}x "
                  f"{row[unit + 'yaml_over_libyaml']:19.2f}x "
                  f"{row[unit + 'json_over_json_loads']:18.2f}x")
    return rows


def main_processes(args, which, have_torch):
    """The benchmarks: every measurement in child processes (see the docstring)."""
    import tempfile

    quick = args.quick
    rounds = args.rounds or (2 if quick else 5)
    results = {}
    t_start = time.perf_counter()
    backward_which = [b for b in ("chain", "fanin", "mlp") if b in which]
    if backward_which:
        results["backward"] = bench_backward(backward_which, rounds, 1 if quick else 3,
                                             have_torch)
        print_backward(results["backward"])
    need_files = [w for w in ("e2e", "read", "startup") if w in which]
    if need_files or "memory" in which:
        sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else (
            E2E_SIZES_QUICK if quick else E2E_SIZES)

        def rounds_for(n):
            if args.rounds:
                return args.rounds
            return 2 if quick else (5 if n <= 20_000 else 3 if n <= 200_000 else 2)
        with tempfile.TemporaryDirectory(prefix="gradcli-bench-") as folder:
            # (start-up alone needs only the tiny graph, not the big chain files)
            big = [w for w in ("e2e", "read") if w in which]
            files, tiny = write_chain_files(folder, sizes if big else ())
            if "startup" in which:
                results["startup"] = bench_startup(tiny, args.rounds or (5 if quick else 15))
            if "e2e" in which:
                results["e2e"] = bench_e2e(files, tiny, rounds_for, have_torch)
                print_e2e(results["e2e"])
            if "read" in which:
                results["read"] = bench_read(files, rounds_for)
    if "memory" in which:
        nodes = args.memory_nodes or (MEMORY_NODES_QUICK if quick else MEMORY_NODES)
        results["memory"] = bench_memory(nodes, 1 if quick else 3, have_torch)
    print(f"\n(benchmarks: {time.perf_counter() - t_start:.1f} s)")
    return results


# -- main ----------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: few repeats, 2,000- and 20,000-op files, 100,000 nodes "
                         "for memory")
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
    ap.add_argument("--inprocess", action="store_true",
                    help="the old mode for chain/fanin/mlp: gradcli and torch timed in this "
                         "process (default: each side in its own child process)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="child processes per side and measurement (default 5 for "
                         "backward, e2e and read at 20,000 ops, 3 at 200,000, 2 at 1,000,000; "
                         "2 with --quick)")
    ap.add_argument("--sizes", default=None,
                    help="chain sizes (ops) for e2e and read, comma-separated "
                         "(default 20000,200000,1000000; 2000,20000 with --quick)")
    ap.add_argument("--memory-nodes", type=int, default=None,
                    help="chain length for the memory figure (default 1,000,000; 100,000 "
                         "with --quick)")
    ap.add_argument("--child", choices=("multidevice", "backward", "e2e_torch", "memory", "read"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--child-config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child == "multidevice":
        return md_child(json.loads(args.child_config))
    if args.child:
        fn = {"backward": child_backward, "e2e_torch": child_e2e_torch,
              "memory": child_memory, "read": child_read}[args.child]
        print(json.dumps(fn(json.loads(args.child_config))))
        return 0
    repeat = args.repeat or (3 if args.quick else 15)
    use_torch = args.inprocess and not args.no_torch and _import_torch() is not None
    torch_version = None if args.no_torch else torch_available()
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
        "torch": torch_version,
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
            if name not in benches or not args.inprocess:
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
        floor = mlp_matmul_floor(repeat) if "mlp" in which and args.inprocess else None
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

    processes = main_processes(args, which, torch_version is not None)

    # -- the table of --inprocess and multidevice -------------------------------------------
    if results:
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
            json.dump({"env": env, "results": results, "processes": processes}, f, indent=2)
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
