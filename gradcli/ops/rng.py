"""The generator random ops draw from: one per thread, seeded by the graph that runs them.

Note [the graph's generator]: a graph's forward runs under ``seeded(graph.seed)``, so every
forward of one graph file draws the same numbers (gradcheck's finite differences re-run the
forward and need the same dropout mask each time), and two files with different ``seed``
keys draw different ones. Outside a graph (an op called from Python) the thread's default
generator, seeded 0, is used. gradcli's generator is NumPy's PCG64, not PyTorch's Philox or
mt19937: a graph's random values can never equal the ones PyTorch draws for the same seed.

Example::

    >>> from gradcli.ops.rng import generator, seeded
    >>> with seeded(7):
    ...     a = generator().random()
    >>> with seeded(7):
    ...     a == generator().random()
    True
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

_LOCAL = threading.local()


def _new(seed):
    return np.random.Generator(np.random.PCG64(seed))


def generator():
    """The current thread's generator (the running graph's, else a default seeded 0)."""
    g = getattr(_LOCAL, "generator", None)
    if g is None:
        g = _LOCAL.generator = _new(0)
    return g


@contextmanager
def seeded(seed):
    """Draw from a fresh generator seeded ``seed`` inside the block; the previous one after."""
    previous = getattr(_LOCAL, "generator", None)
    _LOCAL.generator = _new(seed)
    try:
        yield _LOCAL.generator
    finally:
        _LOCAL.generator = previous
