"""Backward of one concat with N inputs (gradcli's ``concat`` and ``aten.cat.default``):
CatBackward0 computes every input's gradient in one call, so the time is linear in N
(Note [one call for all inputs' gradients] in gradcli/ops/core.py).

    PYTHONPATH=$PWD python scripts/bench_concat.py --sizes 10000,30000 --rounds 3

Prints, per op and N, the median [min-max] seconds of the backward alone (the forward
is rebuilt before each round, outside the timed region)."""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _backward_seconds(op_name, n):
    from gradcli.autograd import Tensor, backward
    from gradcli.ops import OPS

    xs = [Tensor(np.ones((2, 1 + k % 3)), requires_grad=True) for k in range(n)]
    if op_name == "concat":
        y = OPS["concat"](*xs, axis=1)
    else:
        y = OPS["aten.cat.default"](xs, dim=1)
    g = np.ones(y.shape)
    start = time.perf_counter()
    backward([y], [g])
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,30000", help="numbers of inputs, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default="concat,aten.cat.default")
    args = parser.parse_args()
    for op_name in args.ops.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            times = [_backward_seconds(op_name, n) for _ in range(args.rounds)]
            print(f"{op_name:18s} N={n:6d}  {statistics.median(times):7.3f} s "
                  f"[{min(times):.3f}-{max(times):.3f}]", flush=True)


if __name__ == "__main__":
    main()
