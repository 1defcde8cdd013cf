#!/usr/bin/env python
"""Profiling (loading, recording, engine, start-up, memory), side by side
with PyTorch where it is installed. Not a test: figures on a loaded machine are noisy,
so every figure is a median over interleaved repeats with its spread (min-max).

    python scripts/profile_perf.py backward [--repeat 7]     # chain / fan-in, us per node
    python scripts/profile_perf.py repeated [--repeat 7]     # retain_graph backwards
    python scripts/profile_perf.py e2e [--ops 20000]          # gradcli run vs torch
    python scripts/profile_perf.py phases [--ops 40000]       # where a run's time goes
    python scripts/profile_perf.py startup [--repeat 11]
    python scripts/profile_perf.py memory [--ops 1000000]     # bytes per recorded node

One BLAS thread on both sides (OPENBLAS/OMP/MKL_NUM_THREADS=1, torch.set_num_threads(1)).
In-process figures are the calling thread's CPU time (time.thread_time: both engines run
a CPU backward on the calling thread), less disturbed by other load than wall time;
``--wall`` switches to wall-clock time.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VEC = 8


CLOCK = time.thread_time


def _stats(xs):
    return statistics.median(xs), min(xs), max(xs)


def _fmt(xs, scale=1.0, unit=""):
    med, lo, hi = _stats([x * scale for x in xs])
    return f"{med:8.2f}{unit} [{lo:.2f}-{hi:.2f}]"


# -- graphs ------------------------------------------------------------------------
def gc_chain(n_ops):
    import numpy as np

    from gradcli.autograd import Tensor
    import gradcli.ops  # noqa: F401 - Tensor operators

    y0 = Tensor(np.random.default_rng(0).standard_normal(VEC), requires_grad=True)
    c, d = Tensor(np.full(VEC, 0.999)), Tensor(np.full(VEC, 0.001))
    y = y0
    for _ in range(n_ops // 2):
        y = y * c + d
    return y0, y


def gc_fanin(n):
    import numpy as np

    from gradcli.autograd import Tensor
    import gradcli.ops  # noqa: F401

    x = Tensor(np.random.default_rng(0).standard_normal(VEC), requires_grad=True)
    terms = [x * Tensor(np.full(VEC, 1.0 + i * 1e-4)) for i in range(n)]
    while len(terms) > 1:
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return x, terms[0]


def th_chain(n_ops):
    import numpy as np
    import torch

    y0 = torch.tensor(np.random.default_rng(0).standard_normal(VEC), requires_grad=True)
    c, d = torch.full((VEC,), 0.999, dtype=torch.float64), torch.full((VEC,), 0.001, dtype=torch.float64)
    y = y0
    for _ in range(n_ops // 2):
        y = y * c + d
    return y0, y


def th_fanin(n):
    import numpy as np
    import torch

    x = torch.tensor(np.random.default_rng(0).standard_normal(VEC), requires_grad=True)
    terms = [x * torch.full((VEC,), 1.0 + i * 1e-4, dtype=torch.float64) for i in range(n)]
    while len(terms) > 1:
        nxt = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return x, terms[0]


def _torch():
    try:
        import torch
    except Exception:  # noqa: BLE001
        return None
    torch.set_num_threads(1)
    return torch


# -- backward ------------------------------------------------------------------------
def cmd_backward(args):
    import numpy as np

    from gradcli.autograd import backward

    torch = _torch()
    work = {"chain": (gc_chain, th_chain, args.chain, args.chain + 1),
            "fanin": (gc_fanin, th_fanin, args.fanin, 2 * args.fanin)}
    for name, (gbuild, tbuild, n, nodes) in work.items():
        g_t, t_t = [], []
        for _ in range(args.repeat):
            leaf, out = gbuild(n)
            gc.collect()
            t0 = CLOCK()
            backward([out], [np.ones(VEC)])
            g_t.append((CLOCK() - t0) / nodes)
            del leaf, out
            if torch is not None:
                leaf, out = tbuild(n)
                gc.collect()
                t0 = CLOCK()
                out.backward(torch.ones(VEC, dtype=torch.float64))
                t_t.append((CLOCK() - t0) / nodes)
                del leaf, out
        line = f"{name:6s} n={n}: gradcli {_fmt(g_t, 1e6, 'us')}"
        if t_t:
            line += f"  torch {_fmt(t_t, 1e6, 'us')}  ratio {statistics.median(g_t) / statistics.median(t_t):.2f}x"
        print(line, flush=True)


def cmd_repeated(args):
    import numpy as np

    from gradcli.autograd import backward

    torch = _torch()
    n = args.chain
    leaf, out = gc_chain(n)
    g_t, t_t = [], []
    backward([out], [np.ones(VEC)], retain_graph=True)
    if torch is not None:
        tl, to = th_chain(n)
        to.backward(torch.ones(VEC, dtype=torch.float64), retain_graph=True)
    for _ in range(args.repeat):
        t0 = CLOCK()
        backward([out], [np.ones(VEC)], retain_graph=True)
        g_t.append((CLOCK() - t0) / (n + 1))
        if torch is not None:
            t0 = CLOCK()
            to.backward(torch.ones(VEC, dtype=torch.float64), retain_graph=True)
            t_t.append((CLOCK() - t0) / (n + 1))
    line = f"repeated chain n={n}: gradcli {_fmt(g_t, 1e6, 'us')}"
    if t_t:
        line += f"  torch {_fmt(t_t, 1e6, 'us')}  ratio {statistics.median(g_t) / statistics.median(t_t):.2f}x"
    print(line)


# -- end to end ------------------------------------------------------------------------
def write_chain_json(path, n_ops):
    """The benchmark's chain graph (``bench_engine.chain_document``) as a JSON file."""
    from bench_engine import chain_document     # this folder; imported when a file is needed

    with open(path, "w") as fh:
        json.dump(chain_document(n_ops), fh)


TORCH_E2E = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
clock = time.perf_counter if "--wall" in sys.argv else time.process_time
t0 = clock()
doc = json.load(open(sys.argv[1]))
g = torch.Generator().manual_seed(0)
vals = {}
for name, t in doc["tensors"].items():
    init = t["init"]
    if isinstance(init, str):
        v = torch.randn(t["shape"], dtype=torch.float64, generator=g)
    else:
        v = torch.full(t["shape"], init["fill"], dtype=torch.float64)
    vals[name] = v.requires_grad_(t.get("requires_grad", False))
fns = {"mul": torch.mul, "add": torch.add, "sum": torch.sum}
for op in doc["ops"]:
    vals[op["output"]] = fns[op["op"]](*[vals[n] for n in op["inputs"]])
vals["loss"].backward()
print(clock() - t0)
"""


def _proc_time(cmd, env=None):
    """The child's CPU time (user + system; wall time with --wall): on a loaded
    machine CPU time is the steadier figure."""
    import resource

    def cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    t0, c0 = time.perf_counter(), cpu()
    # (not from the checkout: `python -m` puts the working directory first on sys.path,
    # which would shadow a PYTHONPATH pointing at another checkout to compare with)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=tempfile.gettempdir())
    return time.perf_counter() - t0 if CLOCK is time.perf_counter else cpu() - c0


def _env(**extra):
    """The environment for child processes: PYTHONPATH as given, else this checkout."""
    return dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or ROOT, **extra)


def cmd_e2e(args):
    env = _env()
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.json")
        big = os.path.join(tmp, "chain.json")
        write_chain_json(tiny, 2)
        write_chain_json(big, args.ops)
        gcli = [sys.executable, "-m", "gradcli", "run"]
        torch_ok = _torch() is not None
        g_t, t_t = [], []
        for _ in range(args.repeat):
            base = _proc_time(gcli + [tiny], env)
            g_t.append((_proc_time(gcli + [big], env) - base) / args.ops)
            if torch_ok:        # the torch process's time after `import torch`
                out = subprocess.run([sys.executable, "-c", TORCH_E2E, big]
                                     + (["--wall"] if CLOCK is time.perf_counter else []), check=True,
                                     capture_output=True, text=True).stdout
                t_t.append(float(out) / args.ops)
        line = f"e2e chain {args.ops} ops: gradcli {_fmt(g_t, 1e6, 'us/op')}"
        if t_t:
            line += f"  torch {_fmt(t_t, 1e6, 'us/op')}  ratio {statistics.median(g_t) / statistics.median(t_t):.2f}x"
        print(line)


def cmd_phases(args):
    """Thread CPU time of each phase of a run, in-process."""
    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "chain.json")
        write_chain_json(big, args.ops)
        import gradcli.loader as L
        import gradcli.ops  # noqa: F401
        from gradcli.document import read_document
        from gradcli.loader.build import build
        from gradcli.loader.check import DocumentCheck
        rows = {}
        for _ in range(args.repeat):
            clock = time.thread_time
            t0 = clock()
            doc = read_document(big)
            t1 = clock()
            graph = build(DocumentCheck(doc, tmp, "chain", L.LoadOptions()).check())
            t2 = clock()
            values = graph._forward()
            t3 = clock()
            graph._backward(values, None, None, None, True, False, None)
            t4 = clock()
            for k, v in (("read", t1 - t0), ("load", t2 - t1), ("forward", t3 - t2),
                         ("backward", t4 - t3)):
                rows.setdefault(k, []).append(v / args.ops)
            del doc, graph, values
            gc.collect()
        for k, v in rows.items():
            print(f"{k:9s} {_fmt(v, 1e6, 'us/op')}")


def cmd_startup(args):
    env = _env()
    variants = {"import numpy": [sys.executable, "-c", "import numpy"],
                "gradcli --help": [sys.executable, "-m", "gradcli", "--help"],
                "gradcli run mlp.yaml": [sys.executable, "-m", "gradcli", "run",
                                         os.path.join(ROOT, "graphs", "mlp.yaml")]}
    for label, env_extra in (("bytecode", {}), ("PYTHONDONTWRITEBYTECODE=1",
                                                {"PYTHONDONTWRITEBYTECODE": "1"})):
        times = {k: [] for k in variants}
        e = dict(env, **env_extra)
        if not env_extra:
            e.pop("PYTHONDONTWRITEBYTECODE", None)
            for cmd in variants.values():      # write the bytecode once, untimed
                _proc_time(cmd, e)
        for _ in range(args.repeat):
            for k, cmd in variants.items():
                times[k].append(_proc_time(cmd, e))
        base = statistics.median(times["import numpy"])
        for k, v in times.items():
            print(f"[{label}] {k:22s} {_fmt(v, 1e3, 'ms')}  {statistics.median(v) / base:.2f}x numpy")


def cmd_memory(args):
    """Bytes per recorded node: RSS and tracemalloc growth over a chain of ``--ops`` ops."""
    import resource
    import tracemalloc

    import numpy as np

    from gradcli.autograd import Tensor
    import gradcli.ops  # noqa: F401

    def rss():
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    y0 = Tensor(np.random.default_rng(0).standard_normal(VEC), requires_grad=True)
    c, d = Tensor(np.full(VEC, 0.999)), Tensor(np.full(VEC, 0.001))
    gc.collect()
    if args.tracemalloc:
        tracemalloc.start()
    r0 = rss()
    y = y0
    for _ in range(args.ops // 2):
        y = y * c + d
    gc.collect()
    r1 = rss()
    extra = ""
    if args.tracemalloc:
        cur, _ = tracemalloc.get_traced_memory()
        extra = f", tracemalloc {cur / args.ops:.0f} B/node"
    print(f"memory at {args.ops} nodes: RSS {(r1 - r0) / args.ops:.0f} B/node{extra}, "
          f"gc-tracked objects {len(gc.get_objects())}, "
          f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["backward", "repeated", "e2e", "phases", "startup", "memory"])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--chain", type=int, default=20_000)
    p.add_argument("--fanin", type=int, default=10_000)
    p.add_argument("--ops", type=int, default=None)
    p.add_argument("--tracemalloc", action="store_true")
    p.add_argument("--wall", action="store_true", help="wall-clock instead of thread CPU time")
    args = p.parse_args()
    if args.wall:
        global CLOCK
        CLOCK = time.perf_counter
    if args.ops is None:
        args.ops = {"memory": 1_000_000, "phases": 40_000}.get(args.what, 20_000)
    globals()["cmd_" + args.what](args)


if __name__ == "__main__":
    main()
