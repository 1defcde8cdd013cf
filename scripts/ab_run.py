#!/usr/bin/env python
"""gradcli's steady run of graph files, one checkout of gradcli against another.

Two measures of the same thing (a loaded graph's ``run(order=False)`` after five warm-up
runs, one BLAS thread), for an A/B of a change to the run path:

    python scripts/ab_run.py cpu GRAPH.yaml [GRAPH.yaml ...] --tree OLD --tree NEW \\
        [--rounds 4] [--runs 30]
    python scripts/ab_run.py instructions GRAPH.yaml [...] --tree OLD --tree NEW [--runs 5]

- ``cpu``: each (graph, tree) in a fresh process, the trees interleaved in ``--rounds``
  rounds (their order alternating); a process reports the median CPU time of ``--runs``
  runs. Prints each tree's median over the rounds [min-max] and NEW/OLD per round.
- ``instructions``: each (graph, tree) once under valgrind's callgrind, counting only
  between the warm-up and the end of ``--runs`` runs (instrumentation switched on and off
  with ``callgrind_control``): instructions per run. A count does not depend on the
  machine's load, so it tells a change of a few percent on a shared machine; it weighs
  every instruction alike (a cache miss, or a wider BLAS kernel, is not seen).

A tree is a directory holding the ``gradcli`` package (a checkout, or ``git archive``
of a commit unpacked), put first on the child's ``sys.path``. Not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from gradcli import loader
graph = loader.load(sys.argv[2])
runs, count = int(sys.argv[3]), sys.argv[4] == "instructions"
for _ in range(5):
    graph.run(order=False)
if count:
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
times = []
for _ in range(runs):
    t0 = time.process_time()
    graph.run(order=False)
    times.append(time.process_time() - t0)
if count:
    subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], capture_output=True)
print(sorted(times)[len(times) // 2])
"""


def _env():
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env.pop("PYTHONPATH", None)
    return env


def cpu_time(tree, graph, runs):
    out = subprocess.run([sys.executable, "-c", CHILD, tree, graph, str(runs), "cpu"],
                         capture_output=True, text=True, check=True, env=_env())
    return float(out.stdout.strip().splitlines()[-1])


def instructions(tree, graph, runs):
    with tempfile.TemporaryDirectory(prefix="gradcli-ab-") as folder:
        out = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                              f"--callgrind-out-file={os.path.join(folder, 'cg.out')}",
                              sys.executable, "-c", CHILD, tree, graph, str(runs), "instructions"],
                             capture_output=True, text=True, check=True, env=_env())
    found = re.search(r"Collected : (\d+)", out.stderr)
    if not found:
        raise SystemExit(f"ab_run: no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1)) / runs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["cpu", "instructions"])
    p.add_argument("graphs", nargs="+")
    p.add_argument("--tree", action="append", required=True, help="a directory holding gradcli/")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--runs", type=int, default=None)
    args = p.parse_args()
    trees = [os.path.abspath(t) for t in args.tree]
    args.tree = [os.path.basename(os.path.normpath(t)) for t in args.tree]     # labels
    for graph in args.graphs:
        name = os.path.basename(os.path.dirname(os.path.abspath(graph))) or graph
        if args.what == "instructions":
            counts = [instructions(t, graph, args.runs or 5) for t in trees]
            cells = ", ".join(f"{t}: {c / 1e6:.2f}M" for t, c in zip(args.tree, counts))
            rel = "".join(f", {args.tree[k]}/{args.tree[0]} {c / counts[0]:.3f}"
                          for k, c in enumerate(counts) if k)
            print(f"{name}: instructions per run {cells}{rel}", flush=True)
            continue
        res = {t: [] for t in trees}
        for r in range(args.rounds):
            for t in (trees if r % 2 == 0 else trees[::-1]):
                res[t].append(cpu_time(t, graph, args.runs or 30))
        cells = ", ".join(f"{label}: {statistics.median(res[t]) * 1e3:.2f} ms "
                          f"[{min(res[t]) * 1e3:.2f}-{max(res[t]) * 1e3:.2f}]"
                          for label, t in zip(args.tree, trees))
        rel = ""
        for label, t in zip(args.tree[1:], trees[1:]):
            ratios = [b / a for a, b in zip(res[trees[0]], res[t])]
            rel += (f", {label}/{args.tree[0]} {statistics.median(ratios):.3f} "
                    f"[{min(ratios):.3f}-{max(ratios):.3f}]")
        print(f"{name}: CPU ms per run {cells}{rel}", flush=True)
        print(json.dumps({label: res[t] for label, t in zip(args.tree, trees)}), file=sys.stderr)


if __name__ == "__main__":
    main()
