#!/usr/bin/env python
"""Micro-benchmark of gradcli's ATen array kernels on resnet18's shapes.

For a 2x3x64x64 batch (resnet18's 20 convolutions, its stem max-pool, its 20
batch norms in training) it times each kernel's forward and backward
(``convolution`` + ``convolution_backward`` with every gradient,
``max_pool2d_with_indices`` + backward, ``native_batch_norm`` + backward) in
gradcli's NumPy kernels and in PyTorch's ``torch.ops.aten`` (no autograd:
the same kernels called directly), the median over ``--repeat`` runs, and
prints per-shape rows and the totals. Both libraries use their default thread
counts unless ``--threads N`` is given: then ``torch.set_num_threads(N)`` and
numpy's BLAS gets N threads through OPENBLAS/OMP/MKL_NUM_THREADS, set before
numpy is imported. On a shared, loaded machine ``--threads 1`` gives the
stable figures (oversubscribed threads make both sides 10x slower and noisy).

The kernel totals bound what the ATen op layer adds on top of them; the
issue's target is resnet18 forward+backward "well under 2 s" here.

    python scripts/bench_kernels.py [--dtype float32|float64] [--repeat 5] [--threads 1]
"""
import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--threads" in sys.argv[:-1]:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n

import numpy as np  # noqa: E402

from gradcli.ops import aten_kernels as K  # noqa: E402
from gradcli.ops.aten.norm_attention import native_batch_norm_backward  # noqa: E402 - written with ops

# (name, C_in, C_out, kernel, stride, padding, input H=W, count in resnet18)
RESNET18_CONVS = [
    ("conv1", 3, 64, 7, 2, 3, 64, 1),
    ("layer1 3x3", 64, 64, 3, 1, 1, 16, 4),
    ("layer2 3x3 s2", 64, 128, 3, 2, 1, 16, 1),
    ("layer2 3x3", 128, 128, 3, 1, 1, 8, 3),
    ("layer2 down 1x1", 64, 128, 1, 2, 0, 16, 1),
    ("layer3 3x3 s2", 128, 256, 3, 2, 1, 8, 1),
    ("layer3 3x3", 256, 256, 3, 1, 1, 4, 3),
    ("layer3 down 1x1", 128, 256, 1, 2, 0, 8, 1),
    ("layer4 3x3 s2", 256, 512, 3, 2, 1, 4, 1),
    ("layer4 3x3", 512, 512, 3, 1, 1, 2, 3),
    ("layer4 down 1x1", 256, 512, 1, 2, 0, 4, 1),
]
# (C, H=W, count): the batch norms after each convolution
RESNET18_BNS = [(64, 32, 1), (64, 16, 4), (128, 8, 5), (256, 4, 5), (512, 2, 5)]
BATCH = 2


def median_time(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def conv_fns(cin, cout, k, s, p, hw, dtype, torch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, cin, hw, hw)).astype(dtype)
    w = rng.standard_normal((cout, cin, k, k)).astype(dtype)
    b = None
    args = ([s, s], [p, p], [1, 1], False, [0, 0], 1)
    y = K.convolution(x, w, b, *args)
    go = rng.standard_normal(y.shape).astype(dtype)

    def ours():
        K.convolution(x, w, b, *args)
        K.convolution_backward(go, x, w, None, *args, [True, True, False])

    if torch is None:
        return ours, None
    tx, tw, tgo = (torch.from_numpy(a) for a in (x, w, go))
    A = torch.ops.aten

    def theirs():
        A.convolution(tx, tw, None, *args)
        A.convolution_backward(tgo, tx, tw, None, *args, [True, True, False])

    return ours, theirs


def maxpool_fns(dtype, torch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, 64, 32, 32)).astype(dtype)
    args = ([3, 3], [2, 2], [1, 1], [1, 1], False)
    out, idx = K.max_pool2d_with_indices(x, *args)
    go = rng.standard_normal(out.shape).astype(dtype)

    def ours():
        _, i = K.max_pool2d_with_indices(x, *args)
        K.max_pool2d_with_indices_backward(go, x, *args, i)

    if torch is None:
        return ours, None
    tx, tgo = torch.from_numpy(x), torch.from_numpy(go)
    A = torch.ops.aten

    def theirs():
        _, i = A.max_pool2d_with_indices(tx, *args)
        A.max_pool2d_with_indices_backward(tgo, tx, *args, i)

    return ours, theirs


def bn_fns(c, hw, dtype, torch):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((BATCH, c, hw, hw)).astype(dtype)
    w, b = np.ones(c, dtype), np.zeros(c, dtype)
    rm, rv = np.zeros(c, dtype), np.ones(c, dtype)
    go = rng.standard_normal(x.shape).astype(dtype)

    def ours():
        out = K.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        native_batch_norm_backward([go], out, x, w, b, rm, rv, True, 0.1, 1e-5, output_mask=[True] * 3)

    if torch is None:
        return ours, None
    tx, tw, tb, trm, trv, tgo = (torch.from_numpy(a.copy()) for a in (x, w, b, rm, rv, go))
    A = torch.ops.aten

    def theirs():
        _, m, inv = A.native_batch_norm(tx, tw, tb, trm, trv, True, 0.1, 1e-5)
        A.native_batch_norm_backward(tgo, tx, tw, trm, trv, m, inv, True, 1e-5, [True] * 3)

    return ours, theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    opts = ap.parse_args()
    dtype = np.dtype(opts.dtype)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and opts.threads:
        torch.set_num_threads(opts.threads)
    rows = []
    for name, cin, cout, k, s, p, hw, count in RESNET18_CONVS:
        rows.append((f"conv {name} {cin}->{cout} k{k} s{s} @{hw}", count,
                     *conv_fns(cin, cout, k, s, p, hw, dtype, torch)))
    rows.append(("max_pool2d 3x3 s2 @32", 1, *maxpool_fns(dtype, torch)))
    for c, hw, count in RESNET18_BNS:
        rows.append((f"batch_norm train C{c} @{hw}", count, *bn_fns(c, hw, dtype, torch)))
    print(f"resnet18 kernels, batch {BATCH}x3x64x64, {dtype.name}, forward+backward, "
          f"median of {opts.repeat} (ms per call)")
    print(f"{'kernel':44s} {'n':>2s} {'gradcli':>9s} {'torch':>9s} {'ratio':>7s}")
    total_ours = total_theirs = 0.0
    for label, count, ours, theirs in rows:
        t_ours = median_time(ours, opts.repeat)
        total_ours += count * t_ours
        if theirs is not None:
            t_theirs = median_time(theirs, opts.repeat)
            total_theirs += count * t_theirs
            print(f"{label:44s} {count:2d} {t_ours * 1e3:9.2f} {t_theirs * 1e3:9.2f} "
                  f"{t_ours / t_theirs:7.1f}")
        else:
            print(f"{label:44s} {count:2d} {t_ours * 1e3:9.2f}")
    line = f"total (each row x n): gradcli {total_ours * 1e3:.1f} ms"
    if torch is not None:
        line += f", torch {total_theirs * 1e3:.1f} ms, ratio {total_ours / total_theirs:.1f}"
    print(line)


if __name__ == "__main__":
    main()
