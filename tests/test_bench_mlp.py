"""The benchmark's MLP written by hand in NumPy computes gradcli's gradients.

scripts/bench_engine.py reports gradcli / "NumPy by hand" as its MLP ratio;
the ratio means something only if both sides do the same math.
"""
import importlib.util
import pathlib

import numpy as np

from gradcli.autograd import backward

_PATH = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "bench_engine.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_engine", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_numpy_by_hand_mlp_matches_gradcli():
    B = _bench()
    params, loss, _ = B.gc_mlp()
    backward(loss)
    by_hand = B.np_mlp_backward(B.np_mlp())
    # by_hand: (bias, weight) per layer from the last layer down; params: (w, b) per layer up.
    expected = []
    for layer in reversed(range(B.MLP_LAYERS)):
        w, b = params[2 * layer], params[2 * layer + 1]
        expected += [b.grad, w.grad]
    assert len(by_hand) == len(expected) == 2 * B.MLP_LAYERS
    for got, want in zip(by_hand, expected):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
