"""Thread-local autograd state: grad mode, multithreading switch, sequence numbers.

PyTorch keeps these in thread-local storage (``GradMode``,
``AutogradState``, ``at::sequence_number``); so do we.
"""
from __future__ import annotations

import contextlib
import threading


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
