"""Export the example models in graphs/models/ (needs torch: pip install 'gradcli[torch]').

    python scripts/export_examples.py            # rewrites graphs/models/*/
    python scripts/export_examples.py --check    # exits 1 if a committed export is stale

Each model is small (weights well under 1 MB), float64, with random weights
from a fixed seed, and is exported with ``gradcli.bridges.torch.from_module``: the
graph (ATen ops), its weights and PyTorch's gradients and backward node order
as ``expect``. The builders are plain functions, so the CLI can export them
too, e.g.:

    gradcli export scripts/export_examples.py:build_mlp --input-shape 8,16 --dtype float64 -o out/
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "graphs", "models")


def build_mlp():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, 10))


class SmallCNN(nn.Module):
    """Conv-BN-ReLU-maxpool, a grouped strided conv-BN-ReLU, global average pool, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = F.relu(self.bn2(self.conv2(x)), inplace=True)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def build_cnn():
    torch.manual_seed(2)
    return SmallCNN()


def build_transformer():
    torch.manual_seed(3)
    return nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1,
                                      batch_first=True)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        # The causal mask as an additive bias: input-independent, so the export folds it
        # into one constant tensor (0 on and below the diagonal, -inf above).
        causal = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
        att = (att + causal).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A GPT-style decoder: token + position embeddings, pre-norm blocks, tied output head."""

    def __init__(self, vocab=50, context=8, dim=32, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        positions = torch.arange(idx.shape[1])
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_gpt():
    torch.manual_seed(4)
    return TinyGPT()


def examples():
    """(folder, builder, inputs, export keyword arguments) for each example."""
    g = torch.Generator().manual_seed(0)
    return [
        ("mlp", build_mlp, (torch.randn(8, 16, generator=g),), {}),
        ("cnn_batchnorm", build_cnn, (torch.randn(2, 3, 16, 16, generator=g),),
         {"loss": "cross_entropy", "target": np.array([3, 7])}),
        ("transformer_block", build_transformer, (torch.randn(2, 6, 32, generator=g),), {}),
        ("tiny_gpt", build_gpt, (torch.randint(0, 50, (2, 8), generator=g),), {}),
    ]


def export_all(out_dir=OUT):
    from gradcli.bridges.torch import from_module

    written = []
    for folder, build, inputs, kwargs in examples():
        graph = from_module(build(), inputs, dtype=torch.float64, train=True, name=folder,
                            **kwargs)
        graph.header = (f"Example model {folder!r}: regenerate with "
                        "`python scripts/export_examples.py`.\n" + graph.header)
        path = graph.write(os.path.join(out_dir, folder))
        size = os.path.getsize(os.path.join(out_dir, folder, "weights.npz"))
        written.append((path, len(graph.document["ops"]), len(graph.document["expect"]["order"]),
                        size))
    return written


def _same_export(fresh, committed):
    """Whether two export folders hold the same graph.yaml and the same arrays."""
    try:
        with open(os.path.join(fresh, "graph.yaml"), "rb") as a, \
                open(os.path.join(committed, "graph.yaml"), "rb") as b:
            if a.read() != b.read():
                return False
        with np.load(os.path.join(fresh, "weights.npz")) as a, \
                np.load(os.path.join(committed, "weights.npz")) as b:
            return sorted(a.files) == sorted(b.files) and all(
                np.array_equal(a[k], b[k]) for k in a.files)
    except FileNotFoundError:
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="export into a temporary folder and compare with graphs/models/")
    args = parser.parse_args(argv)
    if not args.check:
        for path, ops, nodes, size in export_all():
            print(f"{os.path.relpath(path, ROOT)}: {ops} ops, {nodes} backward nodes, "
                  f"weights.npz {size / 1024:.0f} KiB")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        export_all(tmp)
        stale = []
        for folder, *_ in examples():
            if not _same_export(os.path.join(tmp, folder), os.path.join(OUT, folder)):
                stale.append(folder)
        for s in stale:
            print(f"stale: graphs/models/{s}", file=sys.stderr)
        return 1 if stale else 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.exit(main())
