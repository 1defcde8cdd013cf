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


def stream_of(array):
    """The current CuPy stream for a CUDA array's device; None for others."""
    device = getattr(array, "device", None)
    if device is None or not hasattr(device, "id") or type(array).__module__.split(".")[0] != "cupy":
        return None
    import cupy  # noqa: PLC0415 - only reached for CuPy arrays

    with cupy.cuda.Device(device.id):
        return cupy.cuda.get_current_stream()


def current_stream(device_id):
    """The calling thread's current stream on ``device_id`` (the caller's ambient stream)."""
    import cupy  # noqa: PLC0415

    with cupy.cuda.Device(device_id):
        return cupy.cuda.get_current_stream()


def sync(producer, consumer):
    """Make ``consumer`` wait for the work queued so far on ``producer``."""
    if producer is not None and consumer is not None and producer != consumer:
        consumer.wait_event(producer.record())


def stash_current_streams(device_ids):
    """Remember the caller's current stream on each device (at execute time)."""
    return {d: current_stream(d) for d in device_ids}


def sync_leaf_streams(caller_streams, leaf_streams):
    """The caller's streams wait on every leaf stream of their device."""
    for leaf in leaf_streams:
        caller = caller_streams.get(leaf.device_id)
        sync(leaf, caller)
