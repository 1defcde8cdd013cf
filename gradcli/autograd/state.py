"""Thread-local autograd state: grad mode, multithreading switch, sequence numbers.

PyTorch keeps these in thread-local storage (``GradMode``,
``AutogradState``, ``at::sequence_number``); so do we.
"""
from __future__ import annotations

import contextlib
import threading

from ..devices import NO_DEVICE


class _AutogradState(threading.local):
    grad_enabled = True
    multithreading_enabled = True
    anomaly_nan = False          # check node outputs for NaN (anomaly mode)
    anomaly_inf = False          # also check for Inf
    sequence_nr = 0              # next sequence number of a node recorded here


STATE = _AutogradState()


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


def next_sequence_nr() -> int:
    """Take the next sequence number of the calling thread (``get_and_increment``)."""
    state = STATE
    nr = state.sequence_nr
    state.sequence_nr = nr + 1
    return nr


@contextlib.contextmanager
def set_grad_enabled(enabled: bool):
    state = STATE
    prev = state.grad_enabled
    state.grad_enabled = enabled
    try:
        yield
    finally:
        state.grad_enabled = prev


def no_grad():
    return set_grad_enabled(False)


def enable_grad():
    return set_grad_enabled(True)


@contextlib.contextmanager
def set_multithreading_enabled(enabled: bool):
    """Equivalent of ``torch.autograd.set_multithreading_enabled``.

    With multithreading disabled, every node of a backward started on this
    thread runs on this thread (the device ready queues are bypassed).
    """
    state = STATE
    prev = state.multithreading_enabled
    state.multithreading_enabled = enabled
    try:
        yield
    finally:
        state.multithreading_enabled = prev


@contextlib.contextmanager
def detect_anomaly(check_nan: bool = True, check_inf: bool = False):
    """Check every node's outputs for NaN (and Inf) during backwards started here."""
    state = STATE
    prev = state.anomaly_nan, state.anomaly_inf
    state.anomaly_nan, state.anomaly_inf = check_nan, check_inf
    try:
        yield
    finally:
        state.anomaly_nan, state.anomaly_inf = prev


# -- the engine's per-thread state ----------------------------------------------
# Note [Worker device]: ``worker_device`` is NO_DEVICE for a thread outside the
# engine, CPU_DEVICE while a thread drives its own backward on the CPU, the
# device index for a device thread, and the owner's device for a reentrant pool
# thread. A call to execute() from a thread whose worker_device is not
# NO_DEVICE is therefore a reentrant backward.
#
# Who sets what, and why (engine.cpp keeps the same thread-locals):
#   worker_device, engine   Engine.execute_with_graph_task (a thread driving
#                           its own backward, reset when it returns),
#                           Engine._device_thread_main (for the thread's life),
#                           Engine._reentrant_thread_main (per graph task
#                           taken over); ``engine`` routes reentrant calls back
#                           to the engine that runs them.
#   current_depth,          Engine.execute_with_graph_task around a reentrant
#   total_depth             backward nested on this thread's stack; a pool
#                           thread starts at its graph task's depth.
#   local_ready_queue       Engine.execute (created once, kept across calls),
#                           device and pool threads (their device's queue).
#   current_graph_task      graph_task_guard, by Engine.thread_main around each
#                           node and GraphTask.exec_post_processing around the
#                           final callbacks; read by queue_callback and
#                           get_current_graph_task_execution_order.


class _EngineTLS(threading.local):
    worker_device = NO_DEVICE
    current_depth = 0          # reentrant backwards nested on this thread's stack
    total_depth = 0            # reentrant depth of the graph task being driven
    local_ready_queue = None   # this thread's ready queue (kept across calls)
    current_graph_task = None  # for queue_callback and the execution order
    engine = None              # the engine this thread works for (reentrant calls use it)


ENGINE_TLS = _EngineTLS()


@contextlib.contextmanager
def graph_task_guard(graph_task):
    """Set the thread's current graph task, restoring the previous one after."""
    tls = ENGINE_TLS
    prev = tls.current_graph_task
    tls.current_graph_task = graph_task
    try:
        yield
    finally:
        tls.current_graph_task = prev
