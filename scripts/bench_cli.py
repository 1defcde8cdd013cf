"""CLI timings: start-up of `gradcli --help` and `gradcli run`, and printing a
large table (the plain renderer above core.RICH_TABLE_MAX_ROWS rows, and rich
for comparison).

    PYTHONPATH=$PWD python scripts/bench_cli.py [--rows 100000] [--rich-rows 10000]
"""
from __future__ import annotations

import argparse
import io
import os
import pathlib
import statistics
import subprocess
import sys
import time
from contextlib import redirect_stdout

ROOT = pathlib.Path(__file__).resolve().parent.parent


def startup(args, n=5):
    times = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gradcli", *args], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rows(n):
    return [[str(i), f"Node{i}Backward0", f"ops[{i}]", "cpu", str(i), str(n - i), "MainThread"]
            for i in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--rich-rows", type=int, default=10_000)
    a = ap.parse_args()
    from gradcli.cli import core

    print(f"gradcli --help:              {startup(['--help']) * 1e3:8.1f} ms")
    print(f"gradcli run graphs/mlp.yaml: {startup(['run', 'graphs/mlp.yaml']) * 1e3:8.1f} ms")
    cols = ["#", "node", "op", "device", "sequence_nr", "topological_nr", "thread"]
    data = rows(a.rows)
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        core.print_table("bench", cols, data)
    print(f"table, {a.rows} rows (plain):   {time.perf_counter() - t0:8.2f} s")
    from rich.table import Table

    table = Table(title="bench")
    for c in cols:
        table.add_column(c)
    for r in rows(a.rich_rows):
        table.add_row(*r)
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        core.console().print(table)
    print(f"table, {a.rich_rows} rows (rich):    {time.perf_counter() - t0:8.2f} s")


if __name__ == "__main__":
    main()
