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
    saved_hooks = ()             # the saved-tensor hooks stack (Note [Saved-tensor hooks])
    saved_hooks_disabled = None  # disable_saved_tensors_hooks' message


STATE = _AutogradState()


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


def next_sequence_nr() -> int:
    """Take the next sequence number of the calling thread (``get_and_increment``)."""
    state = STATE
    nr = state.sequence_nr
    state.sequence_nr = nr + 1
    return nr


# Note [Grad-mode objects]: as PyTorch's ``torch/autograd/grad_mode.py``, the grad-mode
# switches are objects. ``no_grad()`` and ``enable_grad()`` change the mode when their
# ``with`` block is entered (and work as decorators); ``set_grad_enabled(mode)`` and
# ``set_multithreading_enabled(mode)`` change it as soon as they are called, so a plain
# call ``set_grad_enabled(False)`` works as a function, and a ``with`` block restores the
# mode that was in force when the object was made. Each object is one-shot state on the
# calling thread; a decorated function makes a fresh one per call.
class _DecoratorContextManager:
    """A context manager that also decorates functions (``_DecoratorContextManager``)."""

    def __call__(self, func):
        import functools  # noqa: PLC0415 - only for decorators

        @functools.wraps(func)
        def decorate_context(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)
        return decorate_context

    def clone(self):
        return self.__class__()


class no_grad(_DecoratorContextManager):
    """Disable gradient recording inside its block (a context manager and a decorator).

    Example::

        with no_grad():
            y = x * 2          # y.requires_grad is False
    """

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = False

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev


class enable_grad(_DecoratorContextManager):
    """Enable gradient recording inside its block (a context manager and a decorator).

    Example::

        with no_grad(), enable_grad():
            y = x * 2          # recorded
    """

    def __enter__(self):
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = True

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev


class set_grad_enabled(_DecoratorContextManager):
    """Set grad mode at once; as a context manager, restore the previous mode after.

    Example::

        set_grad_enabled(False)        # a plain call: recording is off from here
        with set_grad_enabled(True):
            y = x * 2                  # recorded; off again after the block
    """

    def __init__(self, mode: bool):
        self.prev = STATE.grad_enabled
        self.mode = bool(mode)
        STATE.grad_enabled = self.mode

    def __call__(self, func):
        STATE.grad_enabled = self.prev   # a decorator changes nothing until called
        return super().__call__(func)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev

    def clone(self):
        return self.__class__(self.mode)

    def __repr__(self):
        return f"gradcli.autograd.set_grad_enabled(mode={self.mode})"


class set_multithreading_enabled(_DecoratorContextManager):
    """Equivalent of ``torch.autograd.set_multithreading_enabled``: set at once, restored
    after a ``with`` block.

    With multithreading disabled, every node of a backward started on this
    thread runs on this thread (the device ready queues are bypassed).

    Example::

        with set_multithreading_enabled(False):
            backward(loss)             # every node runs on the calling thread
    """

    def __init__(self, mode: bool):
        self.prev = STATE.multithreading_enabled
        self.mode = bool(mode)
        STATE.multithreading_enabled = self.mode

    def __call__(self, func):
        STATE.multithreading_enabled = self.prev
        return super().__call__(func)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        STATE.multithreading_enabled = self.prev

    def clone(self):
        return self.__class__(self.mode)


def is_multithreading_enabled() -> bool:
    """Whether backwards started on this thread may use the device threads.

    Example::

        assert is_multithreading_enabled()
    """
    return STATE.multithreading_enabled


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
