"""Python's cyclic garbage collector, paused while a big graph is built or run.

Note [Collector pauses]
~~~~~~~~~~~~~~~~~~~~~~~
Loading a graph file, recording its forward and running its backward each
allocate several container objects per op (specs, nodes, edges, tensors,
buffers) and free almost none of them until the run ends. Every 700
allocations the collector runs, and every so often a full collection walks
every object alive: the growing graph itself. That made load and forward
superlinear and cost about a third of a ``gradcli run`` (40,000-op chain:
load 31 -> 19 us/op, forward 35 -> 14 us/op with the collector off).
A run makes no reference cycles: graph nodes never point back at the
tensors they produce (Note [Saved tensors]), and a leaf holds its
AccumulateGrad weakly (Note [The leaf holds its accumulator weakly] in
autograd/tensor.py). Reference counting frees a run's graph as soon as the
next run drops it, so pausing the collector does not grow memory with the
size of the graph or with ``--repeat``, and the collector, resumed after
each run, finds nothing of it to free (tests/test_perf_paths.py). Before the
weak reference, each leaf's cycle made the resumed collector walk the whole
live graph of the last run: 2 to 4% of a small transformer's steady run. ``paused()`` is counted across threads: the collector is
turned off by the first pause and back on (if it was on) by the last resume,
so concurrent or nested runs (a reentrant backward inside a run) compose.
It never turns on a collector that the application had turned off.

Resuming has a cost of its own: the objects made while paused are all young,
so the first collection after resuming walks every one still alive (the
loaded graph, the recorded nodes: ~3.5 us per op at 20,000 ops). A command
that keeps what it made for the rest of the process (``gradcli run``: the
loaded graph; its last run) resumes with ``paused(freeze=True)``, which
moves everything alive to the permanent generation first (``gc.freeze()``):
still freed by reference counting, never walked again.
"""
from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_depth = 0
_was_enabled = False


class paused:
    """``with paused():`` runs its body with the cyclic collector off (Note [Collector pauses])."""

    __slots__ = ("freeze",)

    def __init__(self, freeze=False):
        self.freeze = freeze

    def __enter__(self):
        global _depth, _was_enabled
        with _lock:
            if _depth == 0:
                _was_enabled = gc.isenabled()
                if _was_enabled:
                    gc.disable()
            _depth += 1
        return self

    def __exit__(self, *exc):
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                if self.freeze:
                    gc.freeze()
                gc.enable()
        return False
