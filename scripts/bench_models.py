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
3. times forward+backward: gradcli (``Graph.run``: the forward of the ATen ops
   and the engine's backward) and PyTorch (the module's forward, the same
   projection loss, ``backward()``), the median of ``--repeat`` runs after one
   warm-up, both with their default thread counts, or ``--threads N`` for both
   (``torch.set_num_threads`` and the BLAS thread variables, set before NumPy
   loads): on a shared, loaded machine ``--threads 1`` gives stable figures.
   gradcli's time includes reading the weights from ``weights.npz`` (leaves are
   made at the start of each forward); that part is also shown on its own.

and prints a Markdown table (model, ops, nodes, times, checks). Needs torch
2.13, torchvision and transformers, which gradcli does not depend on: run it
from a throwaway environment (README "Running a real model").

    python scripts/bench_models.py [--repeat 5] [--threads 1] [--out /tmp/gradcli-models]
                                   [--models resnet18,vit_tiny]

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

if __name__ == "__main__" and "--threads" in sys.argv[:-1]:
    _n = sys.argv[sys.argv.index("--threads") + 1]
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


def torch_time(torch, module, inputs, train, repeat):
    """The module's forward, a projection loss and backward() at float64."""
    import copy

    m = copy.deepcopy(module).to(torch.float64).train(train)
    xs = [x.to(torch.float64) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        out = m(*xs)
    proj = torch.randn_like(out)

    def step():
        m.zero_grad(set_to_none=True)
        (m(*xs) * proj).sum().backward()
    return median_time(step, repeat)


def gradcli_check(path, repeat):
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
    same_order = order == expect.order

    def step():
        r = graph.run()
        return r.forward_s + r.backward_s
    times = sorted(step() for _ in range(repeat))
    leaves = sorted(median_time(lambda: [leaf.make(leaf.shape) for leaf in graph.leaves.values()], 1)
                    for _ in range(repeat))
    return dict(ops=len(graph.ops), nodes=len(order), grads_ok=ok, worst_rel=worst,
                order_ok=same_order, gradcli_s=times[len(times) // 2],
                leaves_s=leaves[len(leaves) // 2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="/tmp/gradcli-models")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from gradcli.bridges.torch import from_module

    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        torch.manual_seed(0)
        try:
            module, inputs, train = MODELS[name](torch)
            t0 = time.perf_counter()
            exported = from_module(module, inputs, dtype="float64", train=train, name=name)
            path = exported.write(os.path.join(args.out, name))
            export_s = time.perf_counter() - t0
            row = gradcli_check(path, args.repeat)
            row["torch_s"] = torch_time(torch, module, inputs, train, args.repeat)
        except Exception as exc:  # noqa: BLE001 - a model that fails is a row saying why
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            rows.append(f"| {name} | - | - | - | - | failed: {type(exc).__name__}: {msg} |")
            print(rows[-1], file=sys.stderr, flush=True)
            continue
        shape = "x".join(str(s) for s in inputs[0].shape)
        check = (f"grads {'equal' if row['grads_ok'] else 'DIFFER'} (max rel err "
                 f"{row['worst_rel']:.1e}), order {'equal' if row['order_ok'] else 'DIFFERS'}")
        rows.append(f"| {name} ({'train' if train else 'eval'}, {shape}) | {row['ops']} | "
                    f"{row['nodes']} | {row['gradcli_s']:.3f} ({row['leaves_s']:.3f}) | {row['torch_s']:.3f} | "
                    f"{check} |")
        print(rows[-1] + f"  (export {export_s:.1f} s)", file=sys.stderr, flush=True)
    print("| model (mode, input) | ops | nodes | gradcli fwd+bwd (s) (reading weights) | "
          "PyTorch fwd+bwd (s) | "
          "vs PyTorch (float64, rtol 1e-7) |")
    print("|---|---:|---:|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
