"""The engine's threads: lazy start, start-once, shutdown, process exit and fork.

Mirrors the thread life cycle of ``torch/csrc/autograd/engine.cpp``: device
threads start on the first backward that needs them (``start_device_threads``
under ``std::call_once``), ``Engine::stop`` shuts them down (waiting at most
``GRADCLI_SHUTDOWN_WAIT_LIMIT`` seconds), they never hold up the process's exit,
and an engine whose threads were lost to ``fork()`` fails at once in the child.

Every test uses its own ``Engine()`` and has a timeout: a hang is a failure.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gradcli.ops  # noqa: F401 - registers the ops
from gradcli.autograd import Engine, Tensor, backward, set_multithreading_enabled
from gradcli.autograd.engine import FORK_ERROR
from gradcli.devices import cupy_module, device, device_of, sim_device_count, to_device
from gradcli.ops import OPS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORK_MSG = "Unable to handle autograd's threading in combination with fork-based multiprocessing"
NUM_DEVICES = sim_device_count()

pytestmark = pytest.mark.skipif(NUM_DEVICES < 2, reason="needs GRADCLI_SIM_DEVICES >= 2")


# -- helpers ---------------------------------------------------------------------------------
def host(a):
    return np.asarray(a)


def sim_leaf(values, dev="sim:0"):
    return Tensor(to_device(np.asarray(values, dtype=np.float64), device(dev)), requires_grad=True)


def sim_backward(engine, dev="sim:0", delay_ms=0, trace=None):
    """A small graph on ``dev``: loss = sum(delay(w * w)); returns w after its backward."""
    w = sim_leaf(np.arange(4.0), dev)
    h = OPS["mul"](w, w)
    if delay_ms:
        h = OPS["delay"](h, ms=delay_ms)
    loss = OPS["sum"](h)
    backward([loss], engine=engine, trace=trace)
    return w


def cpu_backward(engine):
    x = Tensor(np.arange(4.0), requires_grad=True)
    loss = OPS["sum"](OPS["mul"](x, x))
    backward([loss], engine=engine)
    return x


def reentrant_backward(engine, depth=100):
    """A reenter of ``depth`` levels: past max_recursion_depth a pool thread takes over."""
    x = Tensor(np.arange(3.0), requires_grad=True)
    loss = OPS["sum"](OPS["reenter"](x, depth=depth))
    backward([loss], engine=engine)
    np.testing.assert_allclose(x.grad, np.ones(3))
    return x


def expected_thread_name(index):
    cp = cupy_module()
    if cp is not None and index < cp.cuda.runtime.getDeviceCount():
        return f"gradcli-device-cuda:{index}+sim:{index}"
    return f"gradcli-device-sim:{index}"


def engine_threads(engine):
    return list(engine.device_threads) + list(engine._thread_pool.threads)


def wait_until(pred, timeout=5.0, step=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def run_in_thread(fn, *args):
    """Run ``fn`` on a daemon thread; returns (thread, box) with box['result'|'error']."""
    box = {}

    def target():
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    return th, box


@pytest.fixture
def engine():
    eng = Engine()
    yield eng
    eng.stop()


# -- lazy start, start once -------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_cpu_only_backward_starts_no_thread(engine):
    before = set(threading.enumerate())
    cpu_backward(engine)
    cpu_backward(engine)
    assert engine.device_threads == []
    assert engine.live_threads() == []
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("gradcli-")]


@pytest.mark.timeout(30)
def test_sim_backward_with_multithreading_disabled_starts_no_thread(engine):
    with set_multithreading_enabled(False):
        w = sim_backward(engine)
    assert engine.device_threads == []
    assert device_of(w.grad) is device("sim:0")
    np.testing.assert_allclose(host(w.grad), 2 * np.arange(4.0))


@pytest.mark.timeout(30)
def test_first_sim_backward_starts_one_thread_per_device(engine):
    cpu_backward(engine)
    assert engine.device_threads == []
    sim_backward(engine, "sim:1")
    threads = list(engine.device_threads)
    assert len(threads) == NUM_DEVICES
    assert all(t.is_alive() and t.daemon for t in threads)
    assert [t.name for t in threads] == [expected_thread_name(i) for i in range(NUM_DEVICES)]
    # More backwards, on every device, reuse them.
    for i in range(NUM_DEVICES):
        sim_backward(engine, f"sim:{i}")
    cpu_backward(engine)
    assert engine.device_threads == threads


@pytest.mark.timeout(30)
def test_device_threads_start_exactly_once_under_concurrent_backwards(engine):
    """8 threads call backward at once on a fresh engine; the start is widened with a sleep
    so that they all race for it."""
    original = engine.start_device_threads
    calls = []

    def slow_start():
        calls.append(threading.get_ident())
        time.sleep(0.2)
        original()

    engine.start_device_threads = slow_start
    before = set(threading.enumerate())
    barrier = threading.Barrier(8)
    results, errors = [], []

    def work(i):
        barrier.wait(10)
        try:
            results.append(sim_backward(engine, f"sim:{i % NUM_DEVICES}"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(8)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(20)
    assert not any(t.is_alive() for t in workers), "a concurrent backward hung"
    assert not errors, errors
    assert len(results) == 8
    for w in results:
        np.testing.assert_allclose(host(w.grad), 2 * np.arange(4.0))
    assert len(calls) == 1, f"start_device_threads ran {len(calls)} times"
    assert len(engine.device_threads) == NUM_DEVICES
    new = [t for t in set(threading.enumerate()) - before if t.name.startswith("gradcli-device-")]
    assert sorted(new, key=id) == sorted(engine.device_threads, key=id)
    assert len({t.name for t in new}) == NUM_DEVICES


@pytest.mark.timeout(30)
def test_concurrent_backwards_without_patching(engine):
    barrier = threading.Barrier(8)
    before = set(threading.enumerate())
    out = []
    threads = []
    for i in range(8):
        def work(i=i):
            barrier.wait(10)
            return sim_backward(engine, f"sim:{i % 2}")
        threads.append(run_in_thread(work))
    for th, box in threads:
        th.join(20)
        assert not th.is_alive()
        assert "error" not in box, box.get("error")
        out.append(box["result"])
    new = [t for t in set(threading.enumerate()) - before if t.name.startswith("gradcli-device-")]
    assert len(new) == len(engine.device_threads) == NUM_DEVICES


# -- stop() --------------------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_stop_idle_engine_ends_device_and_pool_threads(caplog):
    eng = Engine()
    sim_backward(eng)
    reentrant_backward(eng, depth=100)
    assert eng._thread_pool.threads, "depth 100 > 60 must have used a pool thread"
    assert len(eng.live_threads()) == NUM_DEVICES + len(eng._thread_pool.threads)
    with caplog.at_level("WARNING", logger="gradcli.engine"):
        eng.stop(wait_limit=20)
    # An idle engine's threads end on their shutdown tasks: stop() did not
    # give up on any of them (no warning), and they are gone when it returns.
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert wait_until(lambda: eng.live_threads() == [], 5), eng.live_threads()
    eng.stop()                 # idempotent


@pytest.mark.timeout(30)
def test_stop_never_started_engine():
    eng = Engine()
    eng.stop()
    assert eng.live_threads() == []
    assert eng.stopped


@pytest.mark.timeout(30)
def test_stopped_engine_raises_and_new_engine_works():
    eng = Engine()
    sim_backward(eng)
    eng.stop()
    with pytest.raises(RuntimeError, match="this engine was stopped; create a new Engine"):
        sim_backward(eng)
    with pytest.raises(RuntimeError, match="this engine was stopped"):
        cpu_backward(eng)
    fresh = Engine()
    try:
        w = sim_backward(fresh, "sim:1")
        np.testing.assert_allclose(host(w.grad), 2 * np.arange(4.0))
        assert device_of(w.grad) is device("sim:1")
    finally:
        fresh.stop()


@pytest.mark.timeout(30)
def test_stop_during_long_node_returns_within_wait_limit():
    eng = Engine()
    trace = []
    th, box = run_in_thread(sim_backward, eng, "sim:0", 5000, trace)
    # Wait until the delay node is running on the device thread.
    assert wait_until(lambda: any(r[0].name == "DelayBackward0" for r in trace), 10)
    eng.stop(wait_limit=0.5)
    # stop() gave up after its limit instead of waiting for the node: the
    # backward (a 5 s delay) is still running when it returns.
    assert th.is_alive(), "stop() waited for the running node instead of its wait limit"
    th.join(30)             # no backward thread left running into later tests
    assert not th.is_alive() and "error" not in box, box


@pytest.mark.timeout(30)
def test_backward_in_flight_at_stop_finishes_or_fails():
    """A backward running when stop() gives up waiting (wait limit 0.5 s) must not hang its
    caller: it should complete (the threads were left to finish) or raise."""
    eng = Engine()
    trace = []
    th, box = run_in_thread(sim_backward, eng, "sim:0", 1000, trace)
    assert wait_until(lambda: any(r[0].name == "DelayBackward0" for r in trace), 10)
    eng.stop(wait_limit=0.5)
    th.join(20)     # the delay ends 1 s after it started
    assert not th.is_alive(), "the backward running at stop() never returned"


@pytest.mark.timeout(40)
def test_create_run_stop_cycles_leave_no_threads():
    # Let threads of earlier tests finish first.
    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("gradcli-")
                            and t.is_alive() and t.name.startswith("gradcli-reentrant")], 2)
    baseline = threading.active_count()
    all_threads = []
    for i in range(50):
        eng = Engine()
        w = sim_backward(eng, f"sim:{i % NUM_DEVICES}")
        np.testing.assert_allclose(host(w.grad), 2 * np.arange(4.0))
        reentrant_backward(eng, depth=100)
        assert eng._thread_pool.threads
        all_threads.extend(engine_threads(eng))
        eng.stop()
    assert wait_until(lambda: threading.active_count() <= baseline, 5), (
        f"{threading.active_count() - baseline} thread(s) left: "
        f"{[t.name for t in all_threads if t.is_alive()][:10]}")
    assert not [t for t in all_threads if t.is_alive()]


# -- process exit ---------------------------------------------------------------------------------
EXIT_CODE = """
import sys, threading, time
import numpy as np
import gradcli.ops
from gradcli.ops import OPS
from gradcli.autograd import Engine, Tensor, backward
from gradcli.devices import device, to_device

use_default = {use_default!r}
daemon = {daemon!r}
engine = None if use_default else Engine()
w = Tensor(to_device(np.ones(3), device("sim:1")), requires_grad=True)
loss = OPS["sum"](OPS["delay"](OPS["mul"](w, w), ms=5000))
started = threading.Event()

def work():
    started.set()
    backward([loss], engine=engine)
    print("backward finished", flush=True)

threading.Thread(target=work, daemon=daemon).start()
started.wait()
time.sleep(0.3)      # the delay node is running on gradcli-device-sim:1
print("main thread exits", flush=True)
"""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("use_default,daemon", [(True, True), (False, True), (True, False)],
                         ids=["default-engine-daemon", "own-engine-daemon",
                              "default-engine-nondaemon"])
def test_process_exit_never_hangs(use_default, daemon):
    env = {**os.environ, "GRADCLI_SHUTDOWN_WAIT_LIMIT": "1"}
    code = EXIT_CODE.format(use_default=use_default, daemon=daemon)
    proc = subprocess.run([sys.executable, "-c", code], timeout=30, capture_output=True,
                          text=True, env=env, cwd=REPO)
    assert "main thread exits" in proc.stdout, proc.stderr
    assert proc.returncode == 0, proc.stderr
    # A daemon thread's backward is abandoned at exit (the process gave up on
    # the busy device thread after its 1 s limit instead of waiting 5 s); a
    # non-daemon thread is waited for by Python, so its backward completes.
    assert ("backward finished" in proc.stdout) == (not daemon), proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr


# -- fork ---------------------------------------------------------------------------------------------
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "fork"),
                                reason="fork semantics tested on Linux only")


def fork_and_wait(child_fn, timeout=20):
    """Run ``child_fn() -> int`` in a forked child; return (exit code, message, seconds)."""
    r, w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:                           # the child: never return into pytest
        code = 99
        try:
            os.close(r)
            code, message = child_fn()
            os.write(w, message.encode()[:4000])
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(w, f"child raised {type(exc).__name__}: {exc}".encode()[:4000])
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(code)
    os.close(w)
    deadline = t0 + timeout
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(r)
        pytest.fail(f"forked child hung for {timeout}s")
    elapsed = time.monotonic() - t0
    chunks = []
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(), elapsed


def _expect_fork_error(fn):
    def child():
        try:
            fn()
        except RuntimeError as exc:
            return (0, "ok") if FORK_MSG in str(exc) else (2, f"wrong error: {exc}")
        return 1, "the backward ran in the child"
    return child


@linux_only
@pytest.mark.timeout(30)
@pytest.mark.parametrize("what", ["sim", "cpu", "single-thread"])
def test_engine_with_threads_fails_at_once_after_fork(engine, what):
    sim_backward(engine)
    assert engine.device_threads

    def use():
        if what == "sim":
            sim_backward(engine)
        elif what == "cpu":
            cpu_backward(engine)
        else:
            with set_multithreading_enabled(False):
                sim_backward(engine)

    code, message, elapsed = fork_and_wait(_expect_fork_error(use))
    assert code == 0, message
    # "At once": well before fork_and_wait's 20 s hang detection (a generous
    # margin for a loaded machine; the fault it guards against hangs forever).
    assert elapsed < 15, f"the child took {elapsed:.1f}s to fail"
    assert FORK_MSG in FORK_ERROR
    # The parent's engine is unharmed.
    np.testing.assert_allclose(host(sim_backward(engine).grad), 2 * np.arange(4.0))


@linux_only
@pytest.mark.timeout(30)
def test_engine_with_pool_threads_only_fails_after_fork(engine):
    reentrant_backward(engine, depth=100)
    assert engine._thread_pool.threads and not engine.device_threads
    code, message, _ = fork_and_wait(_expect_fork_error(lambda: reentrant_backward(engine, 100)))
    assert code == 0, message


@linux_only
@pytest.mark.timeout(30)
def test_cpu_engine_without_threads_works_after_fork(engine):
    cpu_backward(engine)
    assert engine.device_threads == []

    def child():
        x = cpu_backward(engine)
        ok = np.allclose(x.grad, 2 * np.arange(4.0)) and engine.device_threads == []
        return (0, "ok") if ok else (1, f"bad grad {x.grad}")

    code, message, _ = fork_and_wait(child)
    assert code == 0, message


@linux_only
@pytest.mark.timeout(30)
def test_fresh_engine_works_in_forked_child(engine):
    sim_backward(engine)

    def child():
        for mt in (False, True):
            eng = Engine()
            with set_multithreading_enabled(mt):
                w = sim_backward(eng, "sim:1")
            if not np.allclose(host(w.grad), 2 * np.arange(4.0)):
                return 1, f"bad grad (multithreading={mt})"
            if device_of(w.grad) is not device("sim:1"):
                return 1, f"grad on {device_of(w.grad)}"
            eng.stop()
        return 0, "ok"

    code, message, _ = fork_and_wait(child)
    assert code == 0, message


@linux_only
@pytest.mark.timeout(30)
def test_stop_in_forked_child_does_not_hang(engine):
    sim_backward(engine)

    def child():
        engine.stop()
        return 0, "ok"

    code, message, elapsed = fork_and_wait(child)
    assert code == 0, message
    assert elapsed < 15       # a hang is caught at 20 s by fork_and_wait


SPAWN_CODE = textwrap.dedent("""
    import multiprocessing as mp, sys
    import numpy as np

    def child(q):
        import gradcli.ops
        from gradcli.ops import OPS
        from gradcli.autograd import Engine, Tensor, backward
        from gradcli.devices import cupy_module, device, device_of, to_device
        eng = Engine()
        w = Tensor(to_device(np.arange(4.0), device("sim:1")), requires_grad=True)
        backward([OPS["sum"](OPS["mul"](w, w))], engine=eng)
        q.put((np.asarray(w.grad).tolist(), str(device_of(w.grad)), len(eng.device_threads)))
        eng.stop()

    if __name__ == "__main__":
        import gradcli.ops
        from gradcli.ops import OPS
        from gradcli.autograd import Engine, Tensor, backward
        from gradcli.devices import cupy_module, device, to_device
        parent = Engine()          # the parent has live device threads when it spawns
        w = Tensor(to_device(np.ones(2), device("sim:0")), requires_grad=True)
        backward([OPS["sum"](w)], engine=parent)
        assert parent.device_threads
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        grad, dev, nthreads = q.get(timeout=20)
        p.join(20)
        assert p.exitcode == 0, p.exitcode
        assert grad == [0.0, 2.0, 4.0, 6.0], grad
        assert dev == "sim:1", dev
        assert nthreads > 0
        print("spawn ok")
""")


@pytest.mark.timeout(30)
def test_spawn_child_runs_sim_backward(tmp_path):
    script = tmp_path / "spawn_child.py"
    script.write_text(SPAWN_CODE)
    proc = subprocess.run([sys.executable, str(script)], timeout=30, capture_output=True,
                          text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "spawn ok" in proc.stdout


# -- Ctrl-C ------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_interrupt_while_a_device_thread_is_busy_cancels_the_backward(caplog):
    """Note [Interrupted backwards]: KeyboardInterrupt in the caller fails the
    graph task, the device thread's sleeping node wakes at once, and stop()
    then ends every thread (no warning about busy threads)."""
    import signal

    eng = Engine()
    trace = []

    def interrupt_when_busy():     # a real SIGINT, as Ctrl-C sends, to the main thread
        if wait_until(lambda: any(r[0].name == "DelayBackward0" for r in trace), 20):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    th = threading.Thread(target=interrupt_when_busy, daemon=True)
    th.start()
    with pytest.raises(KeyboardInterrupt):
        sim_backward(eng, "sim:0", 60_000, trace)
    th.join(20)
    with caplog.at_level("WARNING", logger="gradcli.engine"):
        eng.stop(wait_limit=30)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert wait_until(lambda: eng.live_threads() == [], 5), eng.live_threads()
    delay = next(r for r in trace if r[0].name == "DelayBackward0")
    assert delay[3] is not None and delay[3] - delay[2] < 30, "the 60 s node was not cut short"


@pytest.mark.timeout(90)
def test_ctrl_c_on_the_cli_ends_the_run_before_its_device_work(tmp_path):
    """SIGINT while sim:0's thread sleeps in a 60 s node: the process exits long
    before the node would end, without waiting on (or warning about) the thread."""
    import signal

    graph = tmp_path / "sleepy.yaml"
    graph.write_text(textwrap.dedent("""\
        version: 1
        tensors:
          x: {value: [1.0, 2.0], requires_grad: true, device: 'sim:0'}
        ops:
          - {op: delay, inputs: [x], output: d, args: {ms: 60000}}
          - {op: sum, inputs: [d], output: loss}
        backward:
          roots: [loss]
        """))
    code = textwrap.dedent(f"""\
        import sys, threading
        import gradcli.autograd.engine as E
        real = E.Engine.evaluate_function
        def announce(self, task, fn, inputs):
            if fn.name == "DelayBackward0":
                print("busy", flush=True)
            return real(self, task, fn, inputs)
        E.Engine.evaluate_function = announce
        from gradcli.cli import main
        main(args=["run", {str(graph)!r}], prog_name="gradcli")
        """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "busy"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=50)
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"exit took {elapsed:.1f}s: it waited for the 60 s node"
    assert proc.returncode != 0
    assert "still busy" not in err and "still using" not in err, err
    assert "Traceback" not in err, err


@pytest.mark.timeout(60)
def test_a_device_thread_that_cannot_start_fails_the_backward_cleanly(monkeypatch):
    real_start = threading.Thread.start

    def start(self):
        if self.name.startswith("gradcli-device-") and self.name.endswith("sim:1"):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    eng = Engine()
    with pytest.raises(RuntimeError, match=r"could not start the device thread for index 1 "
                                           r"\(can't start new thread\)"):
        sim_backward(eng)
    assert wait_until(lambda: eng.live_threads() == [], 5), eng.live_threads()
    monkeypatch.setattr(threading.Thread, "start", real_start)
    try:
        w = sim_backward(eng)                  # the engine tries again and works
        np.testing.assert_allclose(host(w.grad), 2 * np.arange(4.0))
    finally:
        eng.stop()
