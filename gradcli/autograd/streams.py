"""CUDA stream semantics of the backward (Note [Streaming backwards]).

A node runs on the stream its forward op ran on (recorded per input in
``InputMetadata.stream``). When a gradient produced on one stream is
accumulated for a node that runs on another, the consumer stream waits on an
event recorded on the producer stream. At the end, the caller's current
stream on each device waits on the streams the leaves (AccumulateGrad) ran
on, so the caller may use ``.grad`` on its own stream without a sync.

Streams are duck-typed: ``record() -> event``, ``wait_event(event)``,
``device_id`` and use as a context manager (CuPy's ``Stream`` has all of
them), so the logic is tested with fake streams on machines without a GPU.
"""
from __future__ import annotations

from ..devices import device_of


def stream_of(array):
    """The current stream of the device ``array`` lives on; None where its
    device type has no streams (the host, sim devices)."""
    dev = device_of(array)
    return dev.kind.current_stream(dev.index) if not dev.is_cpu else None


def current_stream(dev):
    """The calling thread's current stream on device ``dev`` (the caller's ambient stream)."""
    return dev.kind.current_stream(dev.index)


def sync(producer, consumer):
    """Make ``consumer`` wait for the work queued so far on ``producer``."""
    if producer is not None and consumer is not None and producer != consumer:
        consumer.wait_event(producer.record())


def stash_current_streams(devices):
    """Remember the caller's current stream on each device (at execute time),
    by device index (a stream's ``device_id``)."""
    return {d.index: current_stream(d) for d in devices}


def sync_leaf_streams(caller_streams, leaf_streams):
    """The caller's streams wait on every leaf stream of their device."""
    for leaf in leaf_streams:
        caller = caller_streams.get(leaf.device_id)
        sync(leaf, caller)
