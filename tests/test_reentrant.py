"""Reentrant backward (reenter, checkpoint), deterministic mode, and `gradcli stress`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradcli.ops as O
from gradcli.autograd import Engine, Tensor, backward, set_multithreading_enabled
from gradcli.autograd.engine import default_max_recursion_depth
from gradcli.ops.reentrant import checkpoint


def _reenter_loss(x, depth, scale=3.0):
    return O.sum(O.mul(O.OPS["reenter"](x, depth=depth), np.full(x.shape, scale)))


@pytest.mark.timeout(60)
def test_default_depth_never_hits_recursion_limit():
    """The default depth limit (60 levels, ~9 frames each) stays inside Python's
    recursion limit even when backward is called from 300 frames deep."""
    assert default_max_recursion_depth() == 60
    engine = Engine()

    def deep(n):
        if n:
            return deep(n - 1)
        x = Tensor(np.ones(3), requires_grad=True)
        backward(_reenter_loss(x, 400), engine=engine)
        return x.grad

    try:
        np.testing.assert_array_equal(deep(300), np.full(3, 3.0))
    finally:
        engine.stop()


@pytest.mark.timeout(60)
def test_deep_reenter_uses_and_reuses_pool_threads():
    """Mirrors test_autograd.py::TestAutograd::test_deep_reentrant: 5,000 levels."""
    engine = Engine()
    try:
        x = Tensor(np.ones(4), requires_grad=True)
        backward(_reenter_loss(x, 5000), engine=engine)
        np.testing.assert_array_equal(x.grad, np.full(4, 3.0))
        pool = len(engine._thread_pool.threads)
        assert pool >= 5000 // 61          # one pool thread per 60 levels past the first
        x.grad = None
        backward(_reenter_loss(x, 5000), engine=engine)
        np.testing.assert_array_equal(x.grad, np.full(4, 3.0))
        assert len(engine._thread_pool.threads) == pool      # reused, none created
    finally:
        engine.stop()
    assert not engine.live_threads()


@pytest.mark.timeout(60)
def test_depth_limit_env_override(monkeypatch):
    monkeypatch.setenv("GRADCLI_MAX_REENTRANT_DEPTH", "5")
    engine = Engine()
    try:
        assert engine.max_recursion_depth == 5
        x = Tensor(np.ones(2), requires_grad=True)
        backward(_reenter_loss(x, 30), engine=engine)
        np.testing.assert_array_equal(x.grad, np.full(2, 3.0))
        assert len(engine._thread_pool.threads) >= 4
    finally:
        engine.stop()


@pytest.mark.timeout(60)
def test_reenter_from_device_thread():
    """Reentrant backward works from a device thread and across devices."""
    engine = Engine()
    try:
        x = Tensor(np.ones(3), requires_grad=True)
        xs = O.to(x, device="sim:0")
        y = O.sum(O.to(O.mul(O.OPS["reenter"](xs, depth=200), np.float64(2.0)), device="cpu"))
        trace = []
        backward(y, engine=engine, trace=trace)
        np.testing.assert_array_equal(x.grad, np.full(3, 2.0))
        import threading

        names = {t.ident: t.name for t in threading.enumerate()}
        threads = {names.get(rec[1], "") for rec in trace if rec[0].name == "ReenterBackward0"}
        assert any(n.startswith("gradcli-device-sim:0") for n in threads)
        assert max(rec[5] for rec in trace) == 200      # the deepest graph task's depth
    finally:
        engine.stop()


def _nested_checkpoints(levels):
    """``checkpoint(checkpoint(...checkpoint(square, a)...))``, as torch.utils.checkpoint
    takes a callable; returns a function of one Tensor giving a list of outputs."""
    def square(a):
        return [O.OPS["mul"](a, a)]

    fn = square
    for _ in range(levels):
        fn = (lambda inner: lambda a: checkpoint(inner, a))(fn)
    return fn


@pytest.mark.timeout(60)
def test_nested_checkpoints_give_the_plain_gradient():
    engine = Engine()
    try:
        op = _nested_checkpoints(100)
        x = Tensor(np.array([0.5, -1.5, 2.0]), requires_grad=True)
        (out,) = op(x)
        assert out.grad_fn.name == "CheckpointFunctionBackward"
        backward(O.sum(out), engine=engine)
        np.testing.assert_allclose(x.grad, 2 * np.array([0.5, -1.5, 2.0]))
    finally:
        engine.stop()


@pytest.mark.timeout(30)
def test_checkpoint_backward_twice_fails_like_pytorch():
    op = _nested_checkpoints(1)
    x = Tensor(np.ones(2), requires_grad=True)
    (out,) = op(x)
    loss = O.sum(out)
    backward(loss)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        backward(loss)


def _two_device_sum(seed):
    """A node fed from two devices: arrival order of its contributions varies."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=64) * 1e3, requires_grad=True)
    parts = []
    for b in range(6):
        y = O.to(x, device=f"sim:{b % 2}")
        y = O.delay(O.mul(y, np.float64(1.0 + 1e-7 * b)), ms=0, jitter_ms=1, seed=seed + b)
        parts.append(O.to(y, device="cpu"))
    total = parts[0]
    for p in parts[1:]:
        total = O.add(total, p)
    return x, O.sum(O.mul(total, total))


@pytest.mark.timeout(60)
def test_deterministic_mode_is_bit_identical_to_single_threaded():
    engine = Engine()
    try:
        x_ref, y_ref = _two_device_sum(0)
        with set_multithreading_enabled(False):
            backward(y_ref, engine=engine, deterministic=True)
        for seed in range(5):
            x, y = _two_device_sum(seed * 10)
            backward(y, engine=engine, deterministic=True)
            assert np.array_equal(x.grad, x_ref.grad)
    finally:
        engine.stop()


FAULTS_PY = Path(__file__).with_name("faults.py")     # plants a fault, then runs the CLI


def _gradcli(*args, env=None, timeout=120, fault=None):
    """Run the CLI in a subprocess; ``fault`` plants one of tests/faults.py's faults there."""
    argv = ([sys.executable, str(FAULTS_PY), fault, *args] if fault
            else [sys.executable, "-m", "gradcli", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.timeout(150)
def test_stress_all_scenarios_pass_with_json_and_junit(tmp_path):
    junit = tmp_path / "stress.xml"
    proc = _gradcli("stress", "--scenario", "reentrant", "--scenario", "concurrent",
                    "--scenario", "errors", "--scenario", "chaos", "--scenario", "fork",
                    "--iterations", "1", "--duration", "60", "--format", "json",
                    "--junit", str(junit))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] and [s["scenario"] for s in doc["scenarios"]] == [
        "reentrant", "concurrent", "errors", "chaos", "fork"]
    assert all(s["leaked_threads"] == 0 and s["iterations"] >= 1 for s in doc["scenarios"])
    import xml.etree.ElementTree as ET

    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0" and root.get("tests") == "5"
    (suite,) = root.findall("testsuite")
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == 5


@pytest.mark.timeout(120)
def test_stress_catches_racy_accumulation():
    """A planted fault (AccumulateGrad without its lock) must fail `concurrent`."""
    proc = _gradcli("stress", "--scenario", "concurrent", "--threads", "8", "--iterations", "3",
                    "--format", "json", fault="racy_accumulate")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert not doc["ok"] and any("shared graph" in f for f in doc["scenarios"][0]["failures"])


@pytest.mark.timeout(120)
def test_stress_watchdog_catches_lost_wakeup():
    """A planted lost wake-up hangs the caller; the watchdog dumps stacks and fails."""
    proc = _gradcli("stress", "--scenario", "chaos", "--timeout", "5", "--duration", "30",
                    fault="lost_wakeup", timeout=60)
    assert proc.returncode != 0
    assert "Timeout (0:00:05)!" in proc.stderr            # the watchdog fired, at --timeout
    # faulthandler's dump, one block per thread: the caller is stuck in the
    # engine waiting for its graph task (the lost wake-up), called from the
    # chaos scenario; the device threads wait idle on their ready queues.
    blocks = [b for b in proc.stderr.split("\n\n") if "(most recent call first)" in b]
    caller = [b for b in blocks if "in scenario_chaos" in b]
    assert len(caller) == 1, proc.stderr
    frames = [ln.strip() for ln in caller[0].splitlines()[1:]]
    # blocked on its ready queue (in the sliced wait of Note [Waiting on the main thread])
    frames = [f for f in frames if "waits.py" not in f]
    assert frames[0].endswith(" in pop"), frames
    assert any(f.endswith(" in execute_with_graph_task") for f in frames), frames
    assert any("in _device_thread_main" in b for b in blocks), proc.stderr
    # The dump shows where the owner hangs: asleep in its ready queue's pop()
    # inside the engine's worker loop, waiting for the lost wake-up.
    assert re.search(r'ready_queue\.py", line \d+ in pop', proc.stderr), proc.stderr
    assert re.search(r'engine\.py", line \d+ in thread_main', proc.stderr), proc.stderr


@pytest.mark.timeout(120)
def test_stress_shutdown_scenario():
    proc = _gradcli("stress", "--scenario", "shutdown", "--iterations", "3", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["scenarios"][0]["leaked_threads"] == 0


@pytest.mark.timeout(120)
def test_stress_given_graph_files():
    proc = _gradcli("stress", "graphs/mlp.yaml", "--threads", "4", "--iterations", "2",
                    "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["scenarios"][0]["scenario"] == "graphs" and doc["scenarios"][0]["iterations"] == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario, fault, failure", [
    ("reentrant", "no_reentrant_pool", "RecursionError"),
    ("errors", "swallow_errors", "did not reach the caller"),
    ("shutdown", "no_shutdown_tasks", "still alive after stop()"),
    ("fork", "no_fork_check", "forked child hung"),
    ("inplace", "no_version_check", "saved tensor changed in place"),
])
def test_each_stress_scenario_catches_its_planted_fault(scenario, fault, failure):
    """Prove each scenario's checks can fail: an engine switch breaks on purpose
    what the scenario tests (see tests/faults.py, which patches it in the subprocess)."""
    proc = _gradcli("stress", "--scenario", scenario, "--iterations", "1", "--format", "json",
                    fault=fault)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert not doc["ok"]
    assert any(failure in f for f in doc["scenarios"][0]["failures"]), doc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", ["reentrant", "errors", "fork", "inplace"])
def test_each_stress_scenario_passes_without_faults(scenario):
    proc = _gradcli("stress", "--scenario", scenario, "--iterations", "1", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["ok"]


# -- bounded reentrant depth and threads -----------------------------
def test_reenter_depth_is_bounded_at_load():
    from gradcli.errors import GraphError
    from gradcli.loader import loads

    text = """version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
ops:
  - {op: reenter, inputs: [x], output: r, args: {depth: 1000000000}}
  - {op: sum, inputs: [r], output: loss}
backward:
  roots: [loss]
"""
    with pytest.raises(GraphError) as info:
        loads(text, name="deep")
    assert "depth must be an int between 0 and 10000, got 1000000000" in str(info.value)
    assert ":5:" in str(info.value)
    loads(text.replace("1000000000", "8193"), name="deep")      # PyTorch's depth loads


@pytest.mark.timeout(120)
def test_pytorch_deep_reentrant_depth_runs_in_bounded_memory():
    """8,193 levels (PyTorch's test_deep_reentrant) work, with pool threads on
    small stacks: the process's resident memory stays within a few hundred MB."""
    code = ("import numpy as np, gradcli.ops as O\n"
            "from gradcli.autograd import Tensor, backward, Engine\n"
            "e = Engine()\n"
            "x = Tensor(np.ones(3), requires_grad=True)\n"
            "backward(O.sum(O.OPS['reenter'](x, depth=8193)), engine=e)\n"
            "assert (x.grad == 1).all(), x.grad\n"
            # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec,
            # so it would report this test process's own peak (pytest's).
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
            "print(len(e._thread_pool.threads), int(hwm.split()[1]) // 1024)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=110)
    assert proc.returncode == 0, proc.stderr
    threads, rss_mb = map(int, proc.stdout.split())
    assert threads >= 100          # one pool thread per ~60 levels
    assert rss_mb < 400, f"{rss_mb} MB resident"


def test_pool_threads_get_small_stacks(monkeypatch):
    from gradcli.autograd import engine as engine_mod

    sizes = []
    real = engine_mod.start_with_stack

    def spy(thread, stack_bytes):
        sizes.append(stack_bytes)
        real(thread, stack_bytes)

    monkeypatch.setattr(engine_mod, "start_with_stack", spy)
    engine = Engine()
    try:
        x = Tensor(np.ones(2), requires_grad=True)
        backward(_reenter_loss(x, 130), engine=engine)
    finally:
        engine.stop()
    assert sizes and set(sizes) == {engine_mod.POOL_THREAD_STACK_BYTES}
    assert engine_mod.POOL_THREAD_STACK_BYTES <= 2 * 1024 * 1024
    import threading

    assert threading.stack_size() == 0          # the process default is restored


@pytest.mark.timeout(60)
def test_a_pool_thread_that_cannot_start_is_a_clean_error(monkeypatch):
    """When the OS refuses a new thread, the reentrant backward that needed it
    fails with a RuntimeError naming the cause: no hang, no crash, and the
    engine keeps working."""
    from gradcli.autograd import engine as engine_mod

    started = []
    real = engine_mod.start_with_stack

    def refuse_after_one(thread, stack_bytes):
        if started:
            raise RuntimeError("can't start new thread")
        started.append(thread)
        real(thread, stack_bytes)

    monkeypatch.setattr(engine_mod, "start_with_stack", refuse_after_one)
    engine = Engine()
    try:
        x = Tensor(np.ones(2), requires_grad=True)
        with pytest.raises(RuntimeError, match="could not start a reentrant backward thread "
                                               r"\(can't start new thread\)"):
            backward(_reenter_loss(x, 500), engine=engine)
        monkeypatch.setattr(engine_mod, "start_with_stack", real)
        x = Tensor(np.ones(2), requires_grad=True)
        backward(_reenter_loss(x, 200), engine=engine)
        np.testing.assert_allclose(x.grad, [3.0, 3.0])
    finally:
        engine.stop()


@pytest.mark.timeout(120)
def test_cli_reports_a_thread_that_cannot_start_as_exit_3(tmp_path):
    graph = tmp_path / "deep.yaml"
    graph.write_text("""version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
ops:
  - {op: reenter, inputs: [x], output: r, args: {depth: 500}}
  - {op: sum, inputs: [r], output: loss}
backward:
  roots: [loss]
""")
    code = ("import sys, gradcli.autograd.engine as E\n"
            "real = E.start_with_stack\n"
            "n = []\n"
            "def refuse(t, s):\n"
            "    if n: raise RuntimeError(\"can't start new thread\")\n"
            "    n.append(t); real(t, s)\n"
            "E.start_with_stack = refuse\n"
            "from gradcli.cli import main\n"
            f"main(args=['run', {str(graph)!r}], prog_name='gradcli')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=110)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not start a reentrant backward thread" in lines[0], lines
