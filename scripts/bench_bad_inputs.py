"""How fast the hostile files of the bad-input corpus are refused: the ``fast`` entries of
``tests/bad_inputs/expected.yaml`` (alias bombs, deep nesting), each loaded ``--repeat``
times; the median and spread of the wall time to the refusal, and the target.

    PYTHONPATH=$PWD python scripts/bench_bad_inputs.py [--repeat 7] [--limit 2.0]

Target: every file refused in well under ``--limit`` seconds (about 0.05 s each on the
2-core development machine); what the refusal must avoid (expanding a billion-value alias
bomb, recursing a million levels) takes minutes or does not end. Exits 1 when a median
is over the limit, so the target can gate a benchmark run. The tests check the
behaviour (one-line GraphError) and the memory bound (tracemalloc), not the time.
There is no PyTorch counterpart to compare with: PyTorch reads no graph files.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

import gradcli  # noqa: E402
from gradcli.errors import GraphError  # noqa: E402

CORPUS = ROOT / "tests" / "bad_inputs"


def fast_entries():
    expected = yaml.safe_load((CORPUS / "expected.yaml").read_text())
    return sorted(name for name, entry in expected.items() if entry.get("fast"))


def time_refusal(name):
    """Seconds from ``gradcli.load`` to its GraphError (any other outcome is an error)."""
    start = time.perf_counter()
    try:
        gradcli.load(CORPUS / name)
    except GraphError:
        return time.perf_counter() - start
    raise SystemExit(f"{name}: loaded without the GraphError the corpus expects")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--limit", type=float, default=2.0, help="target: seconds per refusal")
    args = parser.parse_args(argv)
    print(f"# {os.cpu_count()} CPUs; {args.repeat} runs per file; target < {args.limit} s")
    over = []
    for name in fast_entries():
        times = [time_refusal(name) for _ in range(args.repeat)]
        med = statistics.median(times)
        print(f"{name:34s} median {med * 1e3:8.2f} ms   min {min(times) * 1e3:8.2f}   "
              f"max {max(times) * 1e3:8.2f}")
        if med >= args.limit:
            over.append(name)
    if over:
        print(f"over the {args.limit} s target: {', '.join(over)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
