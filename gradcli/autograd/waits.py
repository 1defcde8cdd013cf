"""Blocking waits that Ctrl-C can cut short on the main thread.

Note [Waiting on the main thread]: CPython runs a signal's Python handler on
the main thread only, and a blocking lock acquire there is cut short by a
signal (EINTR, then the handler raises KeyboardInterrupt) only when the kernel
delivers the signal to the main thread itself. A process-directed SIGINT may
land on any thread that does not block it; under load it often lands on a
device thread, and the main thread then sleeps on in its acquire until the lock
is released: for a backward whose device thread is in a 60 s node, a minute
after Ctrl-C (tests/test_engine_threads.py saw it once in about a dozen runs
on a loaded machine). The main thread therefore waits in slices of
``MAIN_SLICE_S``: the end of each slice returns to the interpreter, which runs
a pending handler. A wait that ends normally ends as soon as the lock is
released, as before; the slices only bound how late a signal is noticed.
Other threads block plainly (they never run handlers).
"""
from __future__ import annotations

import threading
import time

__all__ = ["acquire", "wait_event", "MAIN_SLICE_S"]

MAIN_SLICE_S = 0.1
_MAIN = threading.main_thread()


def acquire(lock) -> None:
    """``lock.acquire()``, in slices on the main thread (Note [Waiting on the main thread])."""
    if threading.current_thread() is not _MAIN:
        lock.acquire()
        return
    while not lock.acquire(timeout=MAIN_SLICE_S):
        pass


def wait_event(event, timeout=None) -> bool:
    """``event.wait(timeout)``, in slices on the main thread (Note [Waiting on the main
    thread])."""
    if threading.current_thread() is not _MAIN:
        return event.wait(timeout)
    if timeout is None:
        while not event.wait(MAIN_SLICE_S):
            pass
        return True
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return event.is_set()
        if event.wait(min(left, MAIN_SLICE_S)):
            return True
