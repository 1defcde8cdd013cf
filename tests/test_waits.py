"""Note [Waiting on the main thread]: a SIGINT that the kernel delivers to another
thread still interrupts the main thread's blocking waits (the ready queue's pop, a
graph task's wait), within a slice instead of when the wait would end."""
from __future__ import annotations

import signal
import threading
import time
from xml.etree import ElementTree

import pytest

from gradcli.autograd.ready_queue import ReadyQueue
from gradcli.autograd.waits import MAIN_SLICE_S, acquire, wait_event

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signals reach Python handlers on the main thread only")


def _sigint_from_another_thread(release):
    """SIGINT delivered to a helper thread (not the main one) after 0.2 s; if the
    main thread is still blocked 10 s later, ``release()`` ends its wait normally
    (so that a regression fails instead of hanging). Returns the helper's state."""
    state = {"done": threading.Event(), "released": False}

    def helper():
        time.sleep(0.2)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        if not state["done"].wait(10):
            state["released"] = True
            release()

    threading.Thread(target=helper, daemon=True).start()
    return state


@pytest.mark.timeout(30)
def test_acquire_on_the_main_thread_sees_a_signal_delivered_elsewhere():
    lock = threading.Lock()
    lock.acquire()
    state = _sigint_from_another_thread(lock.release)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        acquire(lock)
    state["done"].set()
    assert not state["released"] and time.monotonic() - t0 < 5


@pytest.mark.timeout(30)
def test_ready_queue_pop_sees_the_signal_and_leaves_no_waiter():
    queue = ReadyQueue()
    state = _sigint_from_another_thread(queue.push_shutdown)
    with pytest.raises(KeyboardInterrupt):
        queue.pop()
    state["done"].set()
    assert not state["released"]
    assert not queue._waiters          # a later push wakes no abandoned waiter
    queue.push_shutdown()
    assert queue.pop() is not None     # and the queue still works


@pytest.mark.timeout(30)
@pytest.mark.parametrize("timeout", [None, 60.0])
def test_graph_task_wait_sees_the_signal(timeout):
    done = threading.Event()
    state = _sigint_from_another_thread(done.set)
    with pytest.raises(KeyboardInterrupt):
        wait_event(done, timeout)
    state["done"].set()
    assert not state["released"]


@pytest.mark.timeout(30)
def test_a_graph_task_waits_through_wait_event():
    from types import SimpleNamespace

    from gradcli.autograd.graph_task import GraphTask

    done = threading.Event()
    state = _sigint_from_another_thread(done.set)
    with pytest.raises(KeyboardInterrupt):
        GraphTask.wait(SimpleNamespace(_done=done))
    state["done"].set()
    assert not state["released"]


@pytest.mark.timeout(30)
def test_waits_end_as_before_without_a_signal():
    event = threading.Event()
    t0 = time.monotonic()
    assert wait_event(event, 3 * MAIN_SLICE_S) is False            # a timeout still times out
    assert time.monotonic() - t0 >= 3 * MAIN_SLICE_S
    threading.Timer(0.05, event.set).start()
    assert wait_event(event) is True
    lock = threading.Lock()
    lock.acquire()
    threading.Timer(0.05, lock.release).start()
    acquire(lock)                                                   # returns once released


@pytest.mark.timeout(120)
def test_the_ctrl_c_tests_pass_in_a_run_started_with_sigint_ignored(tmp_path):
    """A background ``make test &`` (a shell without job control, or ``nohup``) starts the
    run with SIGINT ignored; conftest.py gives it Python's handler back, so the tests of
    Ctrl-C see their KeyboardInterrupt there too (they failed before it did)."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    test = f"{pathlib.Path(__file__).resolve()}::test_acquire_on_the_main_thread_sees_a_signal_delivered_elsewhere"
    report = tmp_path / "report.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          f"--junitxml={report}", test], cwd=root, capture_output=True, text=True,
                         timeout=100, env={**os.environ, "PYTHONPATH": str(root)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("1", "0", "0")
