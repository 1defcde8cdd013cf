#!/usr/bin/env python
"""Real models on a CUDA device: gradcli on ``cuda:0`` against PyTorch CUDA, in one run.

Two steps, on two machines:

1. ``export`` (where torch 2.13+, torchvision and transformers are installed; no GPU
   needed): writes resnet18 (train, 2x3x64x64), the tiny GPT-2 and the tiny ViT of
   scripts/bench_models.py at float64 and float32 into ``--out/NAME-DTYPE/``, each a
   graph file with ``weights.safetensors`` (parameters by their state_dict names, the
   input, the projection ``loss.projection.0``) and PyTorch's CPU gradients as
   ``expect``;
2. ``run`` (on the GPU machine, with CuPy and torch with CUDA): for each exported
   model it
   - loads the graph with every leaf mapped to ``cuda:0`` (``--device-map cpu=cuda``)
     and runs forward and backward there;
   - builds the same module there (scripts/bench_models.py's builders), loads the
     file's weights into it, moves it to ``cuda`` and runs the same projection loss
     and ``backward()``;
   - compares the two sets of gradients (norm-wise relative distance per parameter,
     the largest over parameters), and each against the file's CPU gradients;
   - times steady forward+backward of both, ``cupy.cuda.Device().synchronize()`` /
     ``torch.cuda.synchronize()`` closing every timed step, in ``--rounds`` rounds
     that interleave the two sides (each the median of ``--repeat`` steps after a
     warm-up), and prints the median ratio with its spread;
   - with ``--profile DIR``, appends a cProfile of three gradcli steps per model to ``DIR/profile.txt``
     (where the time goes: kernels, launches, the Python of each node).

    python scripts/gpu_models.py export --out .gpu
    python scripts/gpu_models.py run --dir .gpu [--repeat 10] [--rounds 3] [--profile OUT]
    python scripts/gpu_models.py stream-control [--trials 3]

``stream-control`` shows the engine's cross-stream wait by taking it away (see its
function).

docs/gpu.md records the figures, with the machine and the versions.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

MODELS = ("resnet18", "gpt2_tiny", "vit_tiny")
DTYPES = ("float64", "float32")


def export(out):
    import torch

    import bench_models
    from gradcli.bridges.torch import from_module

    for name in MODELS:
        for dtype in DTYPES:
            torch.manual_seed(0)
            module, inputs, train = bench_models.MODELS[name](torch)
            exported = from_module(module, inputs, dtype=dtype, train=train, name=name)
            path = exported.write(os.path.join(out, f"{name}-{dtype}"), weights="safetensors")
            with open(os.path.join(out, f"{name}-{dtype}", "model.json"), "w") as fh:
                json.dump({"name": name, "dtype": dtype, "train": train,
                           "graph": os.path.basename(path)}, fh)
            print(f"exported {path}", flush=True)


def _torch_module(torch, info, weights, dev):
    """The model's module with the file's weights, on ``dev`` at the file's dtype."""
    import bench_models

    torch.manual_seed(0)
    module, _inputs, train = bench_models.MODELS[info["name"]](torch)
    state = module.state_dict()
    loaded = {}
    for key in state:
        for stored in (key, f"m.{key}"):
            if stored in weights:
                loaded[key] = weights[stored]
                break
    # a parameter the export left out is one the output does not use (ViT's pooler);
    # it keeps its seeded value and gets no gradient on either side
    module.load_state_dict(loaded, strict=False)
    dtype = getattr(torch, info["dtype"])
    return module.to(device=dev, dtype=dtype).train(train)


def _distances(ours, theirs, keys):
    """(norm-wise relative distance of all the gradients together, the largest per
    parameter): a parameter's gradient norm is floored at 1e-6 of the whole's, so a
    gradient that is zero in exact arithmetic (an attention key bias: softmax does
    not see it) compares its rounding noise with the model's scale, not with itself."""
    diff = {k: np.asarray(ours[k], np.float64) - np.asarray(theirs[k], np.float64) for k in keys}
    norms = {k: float(np.linalg.norm(np.asarray(theirs[k], np.float64))) for k in keys}
    whole = max(float(np.sqrt(sum(n * n for n in norms.values()))), 1e-300)
    total = float(np.sqrt(sum(float(np.sum(d * d)) for d in diff.values()))) / whole
    worst = max(float(np.linalg.norm(diff[k])) / max(norms[k], 1e-6 * whole) for k in keys)
    return total, worst


def _median_time(step, sync, repeat):
    step()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(folder, repeat, rounds, profile):
    import cupy
    import torch

    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"cupy {cupy.__version__}, numpy {np.__version__}", flush=True)
    rows, failed = {}, []
    for sub in sorted(os.listdir(folder)):
        meta = os.path.join(folder, sub, "model.json")
        if not os.path.exists(meta):
            continue
        with open(meta) as fh:
            info = json.load(fh)
        try:
            _run_one(folder, sub, info, rows, repeat, rounds, profile)
        except Exception as exc:  # noqa: BLE001 - a model that fails is a line saying why
            import traceback

            traceback.print_exc()
            failed.append(f"| {sub} | failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} |")
            print(failed[-1], flush=True)
    _table(rows, failed)


def _run_one(folder, sub, info, rows, repeat, rounds, profile):
    import cupy
    import torch
    from safetensors.numpy import load_file

    from gradcli import loader
    from gradcli.devices import to_host

    dev = torch.device("cuda")
    # gradcli computes float32 in float32 (CuPy's cuBLAS default); PyTorch's convolutions
    # would round their inputs to TF32 by default, which is another computation
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    path = os.path.join(folder, sub, info["graph"])
    host = load_file(os.path.join(folder, sub, "weights.safetensors"))
    weights = {k: torch.from_numpy(v) for k, v in host.items()}

    graph = loader.load(path, device_map={"cpu": "cuda"})
    result = graph.run()
    ours = {k: to_host(v) for k, v in result.grads.items() if v is not None}
    expect = {k: np.asarray(leaf.make(None)) for k, leaf in graph.expect.grads.items()}
    order_ok = [r.node for r in result.order] == graph.expect.order

    module = _torch_module(torch, info, weights, dev)
    x = weights["input"].to(dev)
    if x.is_floating_point():
        x = x.to(getattr(torch, info["dtype"]))
    proj = weights["loss.projection.0"].to(dev)

    def t_step():
        module.zero_grad(set_to_none=True)
        (module(x) * proj).sum().backward()
    t_step()
    theirs = {}
    for key, p in module.named_parameters():
        for stored in (key, f"m.{key}"):
            if stored in ours:
                theirs[stored] = p.grad.detach().cpu().numpy()
    common = sorted(set(theirs) & set(ours))
    on_cpu = [k for k in common if k in expect]
    vs_torch_cuda = _distances(ours, theirs, common)
    vs_cpu = _distances(ours, expect, on_cpu)
    torch_cuda_vs_cpu = _distances(theirs, expect, on_cpu)

    def g_step():
        graph.run(order=False)
    g_sync = cupy.cuda.Device().synchronize
    t_sync = torch.cuda.synchronize
    row = rows[sub] = dict(nodes=len(result.order), params=len(common), order_ok=order_ok,
                           vs_torch_cuda=vs_torch_cuda, vs_cpu=vs_cpu,
                           torch_cuda_vs_cpu=torch_cuda_vs_cpu, g=[], t=[], ratio=[])
    for _ in range(rounds):
        g = _median_time(g_step, g_sync, repeat)
        t = _median_time(t_step, t_sync, repeat)
        row["g"].append(g)
        row["t"].append(t)
        row["ratio"].append(g / t)
    print(f"{sub}: gradcli {statistics.median(row['g']) * 1e3:.2f} ms, torch CUDA "
          f"{statistics.median(row['t']) * 1e3:.2f} ms, grads vs torch CUDA {vs_torch_cuda[0]:.1e}",
          flush=True)
    if profile:
        import cProfile
        import pstats

        os.makedirs(profile, exist_ok=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            g_step()
        g_sync()
        prof.disable()
        with open(os.path.join(profile, "profile.txt"), "a") as fh:
            print(f"\n## {sub}: three gradcli steps on cuda:0", file=fh)
            stats = pstats.Stats(prof, stream=fh).sort_stats("tottime")
            stats.print_stats(25)
            stats.print_callers(r"core.array|asarray|synchroniz|\.get\b|item|tolist|__bool__")



def _pair(d):
    return f"{d[0]:.1e} ({d[1]:.1e})"


def _table(rows, failed):
    print("\n| model | nodes | params | gradcli cuda:0 (ms) | PyTorch CUDA (ms) | ratio (min-max) | "
          "grads vs PyTorch CUDA | grads vs PyTorch CPU | PyTorch CUDA vs CPU | order |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    med = statistics.median
    for sub, r in rows.items():
        print(f"| {sub} | {r['nodes']} | {r['params']} | {med(r['g']) * 1e3:.2f} | "
              f"{med(r['t']) * 1e3:.2f} | {med(r['ratio']):.2f}x ({min(r['ratio']):.2f}-"
              f"{max(r['ratio']):.2f}) | {_pair(r['vs_torch_cuda'])} | {_pair(r['vs_cpu'])} | "
              f"{_pair(r['torch_cuda_vs_cpu'])} | {'equal' if r['order_ok'] else 'DIFFERS'} |")
    for line in failed:
        print(line)
    print("\n(grads: the norm-wise relative distance of all the gradients together, and in "
          "brackets the largest per parameter, floored at 1e-6 of the whole; PyTorch CUDA with "
          "TF32 off)")


def stream_control(trials):
    """The cross-stream synchronisation, shown by taking it away: a gradient made by a
    long matmul chain on the default stream is read by matmul backwards on a side
    stream. With the engine's event wait (``streams.sync``) the gradient equals the
    host's; with the wait patched out, the side stream reads the buffer early."""
    import cupy

    import gradcli.ops as O
    from gradcli.autograd import Tensor, backward, streams

    n = 2048
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((n, n)) / np.sqrt(n)
    w_host = rng.standard_normal((n, n)) / np.sqrt(n)

    def run(x_data, w_data, side):
        x = Tensor(x_data, requires_grad=True)
        with side if side is not None else _nothing():
            h = O.matmul(x, x)                     # the consumer's node: on the side stream
        if side is not None:
            side.synchronize()                     # the forward itself is ordered
        g = h
        for _ in range(12):                        # the producer: long, on the default stream
            g = O.matmul(g, w_data)
        backward(O.sum(O.tanh(g)))
        return x.grad

    expected = run(x_host.copy(), w_host, None)
    for label, patched in (("with the event wait", False), ("without it", True)):
        worst = []
        for _ in range(trials):
            side = cupy.cuda.Stream(non_blocking=True)
            saved = streams.sync
            if patched:
                streams.sync = lambda producer, consumer: None
            try:
                got = run(cupy.asarray(x_host), cupy.asarray(w_host), side)
                cupy.cuda.Device().synchronize()
            finally:
                streams.sync = saved
            got = cupy.asnumpy(got)
            worst.append(float(np.max(np.abs(got - expected)) / np.max(np.abs(expected))))
        print(f"stream control, {label}: largest relative error per trial "
              + ", ".join(f"{w:.1e}" for w in worst), flush=True)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    e = sub.add_parser("export")
    e.add_argument("--out", default=".gpu")
    r = sub.add_parser("run")
    r.add_argument("--dir", default=".gpu")
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--profile", default=None)
    c = sub.add_parser("stream-control")
    c.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    if args.step == "export":
        export(args.out)
    elif args.step == "stream-control":
        stream_control(args.trials)
    else:
        run(args.dir, args.repeat, args.rounds, args.profile)


if __name__ == "__main__":
    main()
