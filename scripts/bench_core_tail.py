#!/usr/bin/env python
"""Micro-benchmark of the kernels of the last core ATen ops against PyTorch's, side by side:
``_embedding_bag`` (sum and max), ``grid_sampler_2d`` (bilinear and bicubic, forward and
backward), ``_pdist_forward`` + ``_pdist_backward`` and ``_fft_r2c`` + ``_fft_c2r``, each called
directly (no autograd) in gradcli's array kernels and in ``torch.ops.aten``; the median and
the spread (min, max) over ``--repeat`` runs, and gradcli's time as a ratio of PyTorch's.

    python scripts/bench_core_tail.py [--dtype float64|float32] [--repeat 7] [--threads 1]

``--threads N`` sets ``torch.set_num_threads(N)`` and NumPy's BLAS threads before NumPy is
imported: on a shared machine ``--threads 1`` gives the stable figures.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from gradcli.ops.aten_kernels import embedding_bag as EB  # noqa: E402
from gradcli.ops.aten_kernels import fft as FFT  # noqa: E402
from gradcli.ops.aten_kernels import grid_sample as GS  # noqa: E402
from gradcli.ops.aten_kernels import pdist as PD  # noqa: E402


def timings(fn, repeat):
    fn()                                   # warm-up
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def cases(dtype, torch):
    rng = np.random.default_rng(0)
    A = torch.ops.aten
    t = torch.from_numpy
    w = rng.standard_normal((5000, 64)).astype(dtype)
    idx = rng.integers(0, 5000, 20000)
    off = np.arange(0, 20000, 20)
    for mode, name in ((0, "sum"), (2, "max")):
        yield (f"_embedding_bag {name}: 20,000 indices, 1,000 bags, 64 wide",
               lambda mode=mode: EB.embedding_bag(w, idx, off, mode=mode),
               lambda mode=mode: A._embedding_bag(t(w), t(idx), t(off), mode=mode))
    x = rng.standard_normal((4, 16, 64, 64)).astype(dtype)
    g = rng.uniform(-1.1, 1.1, (4, 64, 64, 2)).astype(dtype)
    go = rng.standard_normal((4, 16, 64, 64)).astype(dtype)
    for mode, name in ((0, "bilinear"), (2, "bicubic")):
        yield (f"grid_sampler_2d {name} zeros: 4x16x64x64, forward",
               lambda mode=mode: GS.grid_sampler_2d(x, g, mode, 0, False),
               lambda mode=mode: A.grid_sampler_2d(t(x), t(g), mode, 0, False))
        yield (f"grid_sampler_2d {name} zeros: 4x16x64x64, backward",
               lambda mode=mode: GS.grid_sampler_2d_backward(go, x, g, mode, 0, False),
               lambda mode=mode: A.grid_sampler_2d_backward(t(go), t(x), t(g), mode, 0, False, [True, True]))
    p = rng.standard_normal((500, 32)).astype(dtype)
    d = PD.pdist_forward(p, 2.0)
    gd = rng.standard_normal(d.shape).astype(dtype)
    yield ("_pdist_forward + _pdist_backward: 500 rows of 32",
           lambda: PD.pdist_backward(gd, p, 2.0, PD.pdist_forward(p, 2.0)),
           lambda: A._pdist_backward(t(gd), t(p), 2.0, A._pdist_forward(t(p), 2.0)))
    s = rng.standard_normal((64, 4096)).astype(dtype)
    yield ("_fft_r2c + _fft_c2r: 64 signals of 4096",
           lambda: FFT.fft_c2r(FFT.fft_r2c(s, [1], 0, True), [1], 2, 4096),
           lambda: A._fft_c2r(A._fft_r2c(t(s), [1], 0, True), [1], 2, 4096))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, numpy {np.__version__}, {args.dtype}, {args.repeat} runs, "
          f"threads {args.threads or 'default'}")
    print(f"{'case':58s} {'gradcli ms (min-max)':>24s} {'torch ms (min-max)':>22s} {'ratio':>7s}")
    for name, ours, theirs in cases(np.dtype(args.dtype), torch):
        a, b = timings(ours, args.repeat), timings(theirs, args.repeat)
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:58s} {ma * 1e3:8.2f} ({min(a) * 1e3:6.2f}-{max(a) * 1e3:7.2f}) "
              f"{mb * 1e3:7.2f} ({min(b) * 1e3:6.2f}-{max(b) * 1e3:7.2f}) {ma / mb:6.1f}x")


if __name__ == "__main__":
    main()
