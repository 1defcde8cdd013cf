"""Measure the distances that set the norm-wise verdict's factor (gradcli.verdict).

For each model: export it (``gradcli.bridges.torch.from_module``, which writes the
float64 reference), run the graph in gradcli and print, per gradient, the lowest
precision on its path, gradcli's and PyTorch's norm-wise relative error to the
float64 gradients, and their ratio; then the medians and maxima.

    PYTHONPATH=. python scripts/verdict_distances.py [resnet18 transformer lstm t5]

Needs torch; resnet18 needs torchvision, t5 needs transformers (a model whose
library is missing is skipped with a note). Random weights, no downloads.
"""
from __future__ import annotations

import sys
import tempfile

import numpy as np


def resnet18():
    import torch
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None, num_classes=10), (4, 3, 64, 64), "float32"


def transformer():
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                          batch_first=True)

        def forward(self, x):
            return self.layer(x)

    torch.manual_seed(0)
    return Encoder(), (2, 6, 32), "float32"


def lstm():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
            self.fc = torch.nn.Linear(32, 5)

        def forward(self, x):
            return self.fc(self.lstm(x)[0])

    torch.manual_seed(0)
    return Net(), (2, 7, 16), "float32"


def t5():
    import torch
    from transformers import T5Config, T5EncoderModel

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cfg = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                           num_heads=4, dropout_rate=0.0)
            torch.manual_seed(0)
            self.m = T5EncoderModel(cfg)

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    ids = np.random.default_rng(0).integers(0, 64, (2, 8))
    return Encoder(), ids, "float64"


MODELS = {"resnet18": resnet18, "transformer": transformer, "lstm": lstm, "t5": t5}


def measure(name):
    import torch

    from gradcli.bridges.torch import from_module
    from gradcli.bridges.torch.reference import normwise_distance
    from gradcli.devices import to_host
    from gradcli.loader import load
    from gradcli.precision import lowest_precision

    try:
        module, shape, dtype = MODELS[name]()
    except ImportError as exc:
        print(f"{name}: skipped ({exc})")
        return None
    if isinstance(shape, tuple):
        inputs = (torch.randn(*shape, generator=torch.Generator().manual_seed(1)),)
    else:
        inputs = (torch.as_tensor(shape),)
    # the float32 CPU LSTM runs mkldnn_rnn_layer, which graph files do not have
    with torch.backends.mkldnn.flags(enabled=name != "lstm"), \
            tempfile.TemporaryDirectory() as folder:
        path = from_module(module, inputs, dtype=dtype).write(folder)
        graph = load(path)
        result = graph.run()
        precision = lowest_precision(graph)
        rows = []
        for tensor, spec in graph.expect.grads.items():
            if tensor not in graph.expect.reference:
                continue
            mine = np.asarray(to_host(result.grads[tensor]), dtype=np.float64)
            theirs = np.asarray(to_host(spec.array(mine.shape)), dtype=np.float64)
            ref = np.asarray(to_host(graph.expect.reference[tensor].array(mine.shape)))
            d_gc, d_pt = normwise_distance(mine, ref), normwise_distance(theirs, ref)
            rows.append((tensor, str(precision[tensor].dtype), d_gc, d_pt,
                         d_gc / d_pt if d_pt else float("inf")))
    print(f"{name} ({dtype}):")
    for tensor, prec, d_gc, d_pt, ratio in rows:
        print(f"  {tensor[-56:]:<56} {prec:<8} gradcli {d_gc:9.3g}  torch {d_pt:9.3g}  "
              f"ratio {ratio:6.3g}")
    col = np.array([r[2:] for r in rows])
    print(f"  median gradcli {np.median(col[:, 0]):.3g} torch {np.median(col[:, 1]):.3g} "
          f"ratio {np.median(col[:, 2]):.3g}; max gradcli {col[:, 0].max():.3g} "
          f"torch {col[:, 1].max():.3g} ratio {col[:, 2].max():.3g}")
    return rows


def main(argv):
    for name in argv or list(MODELS):
        if name not in MODELS:
            sys.exit(f"unknown model {name!r} (expected one of {', '.join(MODELS)})")
        measure(name)


if __name__ == "__main__":
    main(sys.argv[1:])
