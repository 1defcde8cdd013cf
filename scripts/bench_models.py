#!/usr/bin/env python
"""Real models through gradcli: export at float64, check against PyTorch, time both.

For each model (torchvision's resnet18 in train mode and mobilenet_v3_small in
eval mode, ``nn.TransformerEncoderLayer``, and a tiny ViT, GPT-2 and BERT built
from ``transformers`` configs with random weights, no downloads) it

1. exports the module with ``gradcli.bridges.torch.from_module`` at float64 (the
   exporter's projection loss, Note [Projection loss]) into ``--out/NAME``;
2. loads the graph with gradcli, runs its backward and compares with the
   file's ``expect`` (PyTorch's own gradients and node order): the largest
   relative gradient error (must be within rtol 1e-7) and whether the order of
   the op nodes is PyTorch's;
3. times forward+backward, gradcli (``Graph.run``: the forward of the ATen ops and
   the engine's backward) against PyTorch (the module's forward, the same
   projection loss, ``backward()``), both with one thread (``--threads``, default
   1: ``torch.set_num_threads`` and the BLAS thread variables, set before NumPy
   loads), in ``--rounds`` rounds that interleave the two and the models:
   - steady: the median of ``--repeat`` runs after one warm-up;
   - first run: gradcli's ``load`` plus its first run, against PyTorch reading
     the same weights file (``weights.safetensors`` through
     ``safetensors.torch.load_file``, or ``weights.npz`` through ``numpy.load``,
     as ``--weights`` says) into a fresh copy of the module plus its first step;
   - load: gradcli's ``load`` (parsing, checking, binding) plus making every leaf
     (its array read or drawn), against PyTorch's ``torch.load`` of the module's
     float64 ``state_dict`` (written once with ``torch.save``) plus
     ``load_state_dict`` into a copy of the module made beforehand;
   each row shows the median ratio over the rounds and its spread (min-max);
4. with ``--memory``, the peak memory of load plus three runs, in a fresh
   process for each side: the peak of the resident set (sampled every
   millisecond) over what it was after the imports and the model's making.

and prints a Markdown table (model, ops, nodes, times, checks). Needs torch
2.13, torchvision and transformers, which gradcli does not depend on: run it
from a throwaway environment (README "Running a real model").

    python scripts/bench_models.py [--repeat 5] [--rounds 3] [--threads 1] [--memory]
                                   [--out /tmp/gradcli-models] [--models resnet18,vit_tiny]
                                   [--weights safetensors|npz]

torchvision's C++ extension may not load with a CPU torch; its model
definitions are plain Python, so the extension's operator registration
(``torchvision._meta_registrations``) is skipped here.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

if __name__ == "__main__":
    _n = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv[:-1] else "1"
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _n

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _torchvision_models():
    # the extension's meta registrations need its compiled ops; the models do not
    sys.modules.setdefault("torchvision._meta_registrations",
                           types.ModuleType("torchvision._meta_registrations"))
    import torchvision.models as models

    return models


def _hf(model, attr):
    import torch

    class Output(torch.nn.Module):
        """A transformers model returning one tensor (``attr`` of its output)."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return getattr(self.model(*inputs), attr)

    return Output()


def resnet18(torch):
    return _torchvision_models().resnet18(), (torch.randn(2, 3, 64, 64),), True


def mobilenet_v3_small(torch):
    return _torchvision_models().mobilenet_v3_small(), (torch.randn(2, 3, 64, 64),), False


def transformer_encoder_layer(torch):
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                             batch_first=True)
    return layer, (torch.randn(2, 16, 64),), True


def vit_tiny(torch):
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    return _hf(ViTModel(cfg), "last_hidden_state"), (torch.randn(2, 3, 32, 32),), False


def gpt2_tiny(torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=100, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return _hf(GPT2LMHeadModel(cfg), "logits"), (torch.randint(0, 100, (2, 8)),), False


def bert_tiny(torch):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    return _hf(BertModel(cfg), "last_hidden_state"), (torch.randint(0, 100, (2, 8)),), False


MODELS = {"resnet18": resnet18, "mobilenet_v3_small": mobilenet_v3_small,
          "transformer_encoder_layer": transformer_encoder_layer, "vit_tiny": vit_tiny,
          "gpt2_tiny": gpt2_tiny, "bert_tiny": bert_tiny}


def median_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def read_state(torch, weights, names):
    """The arrays of ``weights`` (a .safetensors or .npz file) that the module's
    state_dict names, as torch tensors."""
    if weights.endswith(".safetensors"):
        from safetensors.torch import load_file

        return {k: v for k, v in load_file(weights).items() if k in names}
    with np.load(weights) as npz:
        return {k: torch.from_numpy(npz[k]) for k in npz.files if k in names}


def torch_side(torch, module, inputs, train, weights):
    """(first(): a fresh copy of the module reading ``weights`` plus its first step,
    step(): one steady step, load(): ``torch.load`` of the module's state_dict plus
    ``load_state_dict``): the module's forward, a projection loss and backward() at
    float64."""
    import copy

    base = copy.deepcopy(module).to(torch.float64).train(train)
    xs = [x.to(torch.float64) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = base(*xs)
    proj = torch.randn_like(out)
    names = set(base.state_dict())

    def step(m):
        m.zero_grad(set_to_none=True)
        (m(*xs) * proj).sum().backward()

    def first():
        m = copy.deepcopy(module).to(torch.float64).train(train)
        m.load_state_dict(read_state(torch, weights, names), strict=False)
        step(m)

    state_file = os.path.join(os.path.dirname(weights), "state_dict.pt")
    torch.save(base.state_dict(), state_file)
    target = copy.deepcopy(base)

    def load():
        target.load_state_dict(torch.load(state_file, weights_only=True))
    return first, lambda: step(base), load


def gradcli_check(path):
    """Load, run once and compare with the file's ``expect``."""
    from gradcli import loader

    graph = loader.load(path)
    result = graph.run()
    expect = graph.expect
    worst = 0.0
    ok = True
    for name, leaf in expect.grads.items():
        e = np.asarray(leaf.make(None), dtype=np.float64)
        a = np.asarray(result.grads[name], dtype=np.float64)
        ok &= a.shape == e.shape and np.allclose(a, e, rtol=1e-7, atol=expect.atol)
        scale = np.maximum(np.abs(e), expect.atol / 1e-7 if expect.atol else 1e-300)
        worst = max(worst, float(np.max(np.abs(a - e) / scale, initial=0.0)))
    order = [r.node for r in result.order]
    return dict(ops=len(graph.ops), nodes=len(order), grads_ok=ok, worst_rel=worst,
                order_ok=order == expect.order)


def gradcli_side(path):
    from gradcli import loader

    def first():
        loader.load(path).run(order=False)

    def load():
        for leaf in loader.load(path).leaves.values():
            leaf.shared()
    graph = loader.load(path)
    return first, lambda: graph.run(order=False), load


def peak_memory(side, name, path):
    """Peak resident growth (bytes) of load + three runs in a fresh process."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_memory", side, name, path],
                         capture_output=True, text=True, check=True, env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memory_child(side, name, path):
    """The peak of the resident set over what it was before, sampled every millisecond
    by a thread while one side loads and runs three times."""
    import json
    import threading

    import torch

    torch.set_num_threads(1)
    from gradcli import loader

    torch.manual_seed(0)
    module, inputs, train = MODELS[name](torch)
    if side == "torch":
        first, step, _ = torch_side(torch, module, inputs, train, _weights_file(path))
    import gc

    gc.collect()
    before = peak = _rss()
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.wait(0.001):
            peak = max(peak, _rss())
    sampler = threading.Thread(target=sample)
    sampler.start()
    if side == "torch":
        first()
        step()
        step()
    else:
        graph = loader.load(path)
        for _ in range(3):
            graph.run(order=False)
    peak = max(peak, _rss())
    done.set()
    sampler.join()
    print(json.dumps(peak - before))


def _weights_file(path):
    """The weights file the export wrote beside the graph file ``path``."""
    folder = os.path.dirname(path)
    return next(os.path.join(folder, f) for f in ("weights.safetensors", "weights.npz")
                if os.path.exists(os.path.join(folder, f)))


def _spread(values):
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def _geomean(values):
    return float(np.exp(np.mean(np.log(values))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="/tmp/gradcli-models")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--weights", choices=("safetensors", "npz"), default="safetensors",
                        help="the weights file the export writes (gradcli export's default)")
    parser.add_argument("--_memory", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._memory:
        _memory_child(*args._memory)
        return

    import torch

    torch.set_num_threads(args.threads)
    from gradcli.bridges.torch import from_module

    models, rows, failed = {}, {}, []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        torch.manual_seed(0)
        try:
            module, inputs, train = MODELS[name](torch)
            t0 = time.perf_counter()
            exported = from_module(module, inputs, dtype="float64", train=train, name=name)
            path = exported.write(os.path.join(args.out, name), weights=args.weights)
            export_s = time.perf_counter() - t0
            row = gradcli_check(path)
            weights = _weights_file(path)
            models[name] = (path, torch_side(torch, module, inputs, train, weights),
                            gradcli_side(path), inputs, train)
        except Exception as exc:  # noqa: BLE001 - a model that fails is a row saying why
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            failed.append(f"| {name} | failed: {type(exc).__name__}: {msg} |")
            print(failed[-1], file=sys.stderr, flush=True)
            continue
        row.update(steady=[], first=[], g_steady=[], t_steady=[], g_first=[], t_first=[],
                   load=[], g_load=[], t_load=[])
        rows[name] = row
        print(f"{name}: exported in {export_s:.1f} s", file=sys.stderr, flush=True)

    for r in range(args.rounds):        # interleaved: every model, both sides, each round
        for name, (path, (t_first, t_step, t_load), (g_first, g_step, g_load), _, _) in models.items():
            row = rows[name]
            ts = median_time(t_step, args.repeat)
            gs = median_time(g_step, args.repeat)
            t0 = time.perf_counter()
            g_first()
            gf = time.perf_counter() - t0
            t0 = time.perf_counter()
            t_first()
            tf = time.perf_counter() - t0
            row["g_steady"].append(gs)
            row["t_steady"].append(ts)
            row["g_first"].append(gf)
            row["t_first"].append(tf)
            gl = median_time(g_load, args.repeat)
            tl = median_time(t_load, args.repeat)
            row["g_load"].append(gl)
            row["t_load"].append(tl)
            row["load"].append(gl / tl)
            row["steady"].append(gs / ts)
            row["first"].append(gf / tf)
            print(f"round {r + 1} {name}: steady {gs * 1e3:.1f} / {ts * 1e3:.1f} ms, first "
                  f"{gf * 1e3:.1f} / {tf * 1e3:.1f} ms, load {gl * 1e3:.1f} / {tl * 1e3:.1f} ms",
                  file=sys.stderr, flush=True)

    memory = {}
    if args.memory:
        for name, (path, *_rest) in models.items():
            memory[name] = (peak_memory("gradcli", name, path), peak_memory("torch", name, path))

    print("| model | ops | nodes | gradcli steady (ms) | PyTorch steady (ms) | steady ratio (min-max) | "
          "gradcli load + first run (ms) | PyTorch read + first step (ms) | first-run ratio (min-max) | "
          "gradcli load + leaves (ms) | torch.load + load_state_dict (ms) | load ratio (min-max) | "
          + ("peak memory gradcli / PyTorch (MB) | " if memory else "")
          + "vs PyTorch (float64, rtol 1e-7) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if memory else "") + "---|")
    for name, row in rows.items():
        med = statistics.median
        check = (f"grads {'equal' if row['grads_ok'] else 'DIFFER'} (max rel err "
                 f"{row['worst_rel']:.1e}), order {'equal' if row['order_ok'] else 'DIFFERS'}")
        mem = (f" {memory[name][0] / 2**20:.1f} / {memory[name][1] / 2**20:.1f} |" if memory else "")
        print(f"| {name} | {row['ops']} | {row['nodes']} | {med(row['g_steady']) * 1e3:.1f} | "
              f"{med(row['t_steady']) * 1e3:.1f} | {_spread(row['steady'])} | "
              f"{med(row['g_first']) * 1e3:.1f} | {med(row['t_first']) * 1e3:.1f} | "
              f"{_spread(row['first'])} | {med(row['g_load']) * 1e3:.1f} | "
              f"{med(row['t_load']) * 1e3:.1f} | {_spread(row['load'])} |{mem} {check} |")
    for line in failed:
        print(line)
    if rows:
        steady = [statistics.median(r["steady"]) for r in rows.values()]
        first = [statistics.median(r["first"]) for r in rows.values()]
        per_round = [_geomean([r["steady"][k] for r in rows.values()]) for k in range(args.rounds)]
        per_round_first = [_geomean([r["first"][k] for r in rows.values()]) for k in range(args.rounds)]
        print(f"\nsteady geomean {_geomean(steady):.2f}x (rounds {min(per_round):.2f}-{max(per_round):.2f}), "
              f"worst {max(steady):.2f}x; first-run geomean {_geomean(first):.2f}x "
              f"(rounds {min(per_round_first):.2f}-{max(per_round_first):.2f})")
        load = [statistics.median(r["load"]) for r in rows.values()]
        per_round_load = [_geomean([r["load"][k] for r in rows.values()]) for k in range(args.rounds)]
        print(f"load geomean {_geomean(load):.2f}x (rounds {min(per_round_load):.2f}-"
              f"{max(per_round_load):.2f}), worst {max(load):.2f}x")


if __name__ == "__main__":
    main()
