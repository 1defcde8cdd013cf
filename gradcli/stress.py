"""``gradcli stress``: prove that graphs and the engine hold under reentrancy,
concurrency, errors, shutdown and perturbed interleavings.

Each scenario runs checks in a loop (bounded by iterations and a deadline)
on a fresh Engine, then stops the engine and counts threads left behind.
A watchdog dumps every thread's stack and exits non-zero on a hang.
An interrupt (Ctrl-C) cancels every backward in flight and stops the engines
within a second (Note [Interrupting stress]).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np

from .devices import to_host
from .errors import GraphError

SCENARIOS = ("reentrant", "concurrent", "errors", "shutdown", "chaos", "fork", "inplace")


@dataclasses.dataclass
class ScenarioResult:
    name: str
    iterations: int = 0
    failures: list = dataclasses.field(default_factory=list)
    latencies: list = dataclasses.field(default_factory=list)
    peak_threads: int = 0
    leaked_threads: int = 0
    seconds: float = 0.0

    @property
    def ok(self):
        return not self.failures and self.leaked_threads == 0

    def percentile(self, q):
        if not self.latencies:
            return None
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))]

    def to_json(self):
        return {"scenario": self.name, "iterations": self.iterations,
                "failures": self.failures[:20], "failure_count": len(self.failures),
                "p50_s": self.percentile(0.5), "p99_s": self.percentile(0.99),
                "peak_threads": self.peak_threads, "leaked_threads": self.leaked_threads,
                "seconds": self.seconds, "ok": self.ok}


class Context:
    def __init__(self, threads, iterations, deadline, seed, deterministic, graphs):
        self.threads = threads
        self.iterations = iterations
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.seed = seed
        self.deterministic = deterministic
        self.graphs = graphs

    def time_left(self):
        return self.deadline - time.monotonic()

    def another(self, i):
        """Whether iteration ``i`` runs: the first always does (a graph slower
        than --duration is measured once, never reported as 0 iterations),
        later ones while iterations and time are left."""
        return i == 0 or (i < self.iterations and self.time_left() > 0)


# -- interrupts ----------------------------------------------------------------------
# Note [Interrupting stress]
# Ctrl-C raises KeyboardInterrupt in the main thread only, while the backwards
# run on stress worker threads (and on the engines' device and pool threads).
# Without help the main thread stopped waiting, but nothing told the workers:
# engine.stop() then waited for their backwards (a 20 s `delay` ran to its
# end) and the interpreter's exit joined the non-daemon workers, so a hung
# worker made the process unkillable by Ctrl-C. Now:
#   - the main thread waits in short timed joins, so it sees the interrupt
#     even when the signal landed on another thread;
#   - each scenario's engine is a StressEngine, which knows the graph tasks it
#     is running; on an interrupt, `interrupt_all()` fails each of them (as a
#     plain backward interrupted on its own thread does, Note [Interrupted
#     backwards] in autograd/engine.py): queued nodes are skipped and a node in
#     sleep_unless_cancelled() wakes at once;
#   - then it joins the workers and stops the engines within INTERRUPT_WAIT_S
#     in all; what is still busy after that (a node that cannot be cancelled)
#     is a daemon thread, left to end with the process, which exits at once.
INTERRUPT_WAIT_S = 0.5


class StressInterrupted(RuntimeError):
    """The error a cancelled graph task ends with (the run was interrupted)."""


class _Live:
    """The engines and worker threads of the stress run in progress."""

    def __init__(self):
        self.lock = threading.Lock()
        self.engines = []
        self.workers = set()

    def add_engine(self, engine):
        with self.lock:
            self.engines = [e for e in self.engines if not (e.stopped and e.stress_idle())]
            self.engines.append(engine)


LIVE = _Live()


def _engine_class():
    from .autograd import Engine

    class StressEngine(Engine):
        """An Engine that can cancel the graph tasks it is running."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._stress_running = set()
            self._stress_running_lock = threading.Lock()
            self._stress_prune_at = 64
            self._stress_cancelled = False
            LIVE.add_engine(self)

        def execute_with_graph_task(self, graph_task, *args, **kwargs):
            with self._stress_running_lock:
                if self._stress_cancelled:      # a backward that starts after the interrupt
                    raise StressInterrupted("the stress run was interrupted")
                self._stress_running.add(graph_task)
                if len(self._stress_running) >= self._stress_prune_at:
                    # A graph task handed to the reentrant pool outlives this
                    # call: drop finished ones here (amortized O(1) per call).
                    self._stress_running = {g for g in self._stress_running if not g.future_completed}
                    self._stress_prune_at = max(64, 2 * len(self._stress_running))
            try:
                return super().execute_with_graph_task(graph_task, *args, **kwargs)
            finally:
                if graph_task.future_completed:
                    with self._stress_running_lock:
                        self._stress_running.discard(graph_task)

        def stress_idle(self):
            with self._stress_running_lock:
                return all(g.future_completed for g in self._stress_running)

        def cancel_running(self):
            """Fail every graph task still running (each wakes and skips its work)."""
            with self._stress_running_lock:
                self._stress_cancelled = True
                tasks = [g for g in self._stress_running if not g.future_completed]
                self._stress_running = set()
            for g in tasks:
                g.set_exception(StressInterrupted("the stress run was interrupted"), None)

    return StressEngine


_ENGINE_CLASS = None


def new_engine():
    """A fresh StressEngine, known to interrupt_all()."""
    global _ENGINE_CLASS
    if _ENGINE_CLASS is None:
        _ENGINE_CLASS = _engine_class()
    return _ENGINE_CLASS()


def interrupt_all():
    """Cancel every backward of the run, join the workers and stop the engines,
    within INTERRUPT_WAIT_S (Note [Interrupting stress]). Idempotent."""
    deadline = time.monotonic() + INTERRUPT_WAIT_S
    with LIVE.lock:
        engines, LIVE.engines = LIVE.engines, []
        workers, LIVE.workers = list(LIVE.workers), set()
    for engine in engines:
        engine.cancel_running()
    for t in workers:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = any(t.is_alive() for t in workers)
    for engine in engines:
        # Workers that ended took their backwards with them: stop cleanly.
        # A hung one leaves its engine's threads behind at once (daemons).
        engine.stop(wait_limit=0.0 if hung else max(0.01, deadline - time.monotonic()))


@contextlib.contextmanager
def _engine_for(result, label="engine"):
    """A StressEngine for one scenario: stopped (and its leftover threads
    counted) when the scenario ends; on an interrupt, everything is cancelled."""
    engine = new_engine()
    try:
        yield engine
    except Exception:
        engine.stop()
        _wait_gone(engine, result, label)
        raise
    except BaseException:       # KeyboardInterrupt: leave within a second
        interrupt_all()
        raise
    engine.stop()
    _wait_gone(engine, result, label)


# -- helpers -----------------------------------------------------------------------
def _T(data, requires_grad=False):
    from .autograd import Tensor

    return Tensor(np.asarray(data, dtype=np.float64), requires_grad=requires_grad)


def _timed(result, fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    result.latencies.append(time.perf_counter() - t0)
    result.peak_threads = max(result.peak_threads, threading.active_count())
    return out


def _check(result, cond, message):
    if not cond:
        result.failures.append(message)


def _close(a, b, deterministic=False):
    a, b = np.asarray(a), np.asarray(b)
    return np.array_equal(a, b) if deterministic else np.allclose(a, b, rtol=1e-10, atol=1e-12)


def _chain(x, n, ops, rng, device=None, fail_at=None, jitter_ms=0):
    """y = (x * 1.5 + 0.25) repeated, with optional failure and delay nodes."""
    y = x
    if device is not None:
        y = ops.to(y, device=device)
    for i in range(n):
        y = ops.add(ops.mul(y, np.float64(1.5)), np.float64(0.25))
        if jitter_ms:
            y = ops.delay(y, ms=0, jitter_ms=jitter_ms, seed=rng.randrange(2**31))
        if fail_at == i:
            y = ops.fail(y, message=f"planted failure at step {i}")
    if device is not None:
        y = ops.to(y, device="cpu")
    return ops.sum(y)


def _iterate(ctx, result, iteration):
    """Run ``iteration(engine, i)`` on a fresh Engine until --iterations or the
    deadline, then stop the engine and count the threads it left behind."""
    with _engine_for(result) as engine:
        i = 0
        while ctx.another(i):
            iteration(engine, i)
            result.iterations += 1
            i += 1


# -- scenarios -------------------------------------------------------------------------
def scenario_reentrant(ctx, result):
    from . import ops
    from .autograd import backward
    from .ops.reentrant import checkpoint

    depths = [5000, 200, 1000]

    def iteration(engine, i):
        depth = depths[i % len(depths)]
        # Deep reentrant backward through the pool.
        x = _T(np.ones(4), True)
        y = ops.sum(ops.mul(ops.reenter(x, depth=depth), np.full(4, 3.0)))
        _timed(result, backward, y, engine=engine)
        _check(result, _close(x.grad, np.full(4, 3.0)), f"reenter depth {depth}: grad {x.grad}")
        # Reentrant backward from a device thread.
        x = _T(np.ones(4), True)
        xs = ops.to(x, device="sim:0")
        y = ops.sum(ops.to(ops.reenter(ops.mul(xs, np.float64(2.0)), depth=150), device="cpu"))
        _timed(result, backward, y, engine=engine)
        _check(result, _close(x.grad, np.full(4, 2.0)), f"reenter on sim:0: grad {x.grad}")
        # 100 nested checkpoints.
        def square(a):
            return ops.mul(a, a)

        fn = square
        for _ in range(100):
            fn = (lambda inner: lambda a: checkpoint(inner, a))(fn)
        x = _T(np.array([0.5, -1.0]), True)
        out = fn(x)
        _timed(result, backward, ops.sum(out), engine=engine)
        _check(result, _close(x.grad, 2 * np.array([0.5, -1.0])), f"nested checkpoints: grad {x.grad}")

    _iterate(ctx, result, iteration)


def _run_threads(n, target):
    errors = []

    def wrap(k):
        try:
            target(k)
        except Exception as exc:  # noqa: BLE001 - reported as a failure
            errors.append(f"thread {k}: {type(exc).__name__}: {exc}")

    # Daemons: a worker hung in a node that cannot be cancelled never holds
    # up the process's exit (Note [Interrupting stress]).
    threads = [threading.Thread(target=wrap, args=(k,), name=f"stress-{k}", daemon=True)
               for k in range(n)]
    with LIVE.lock:
        LIVE.workers.update(threads)
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.1)     # timed: the main thread sees Ctrl-C at once
    except BaseException:
        interrupt_all()
        raise
    with LIVE.lock:
        LIVE.workers.difference_update(threads)
    return errors


def scenario_concurrent(ctx, result):
    from . import ops
    from .autograd import backward

    def iteration(engine, i):
        device = None if i % 2 == 0 else f"sim:{i % 2}"
        # Separate graphs, one per thread.
        expected = 1.5 ** 20

        def separate(k):
            x = _T(np.full(8, 1.0 + k), True)
            y = _chain(x, 20, ops, ctx.rng, device=device)
            _timed(result, backward, y, engine=engine)
            if not _close(x.grad, np.full(8, expected)):
                raise AssertionError(f"separate graph grad {x.grad[:2]} != {expected}")

        result.failures.extend(_run_threads(ctx.threads, separate))
        # One graph shared by all threads, with retain_graph: exactly N accumulations.
        x = _T(np.full(8, 0.5), True)
        y = _chain(x, 20, ops, ctx.rng, device=device)
        result.failures.extend(_run_threads(
            ctx.threads, lambda k: _timed(result, backward, y, retain_graph=True, engine=engine)))
        _check(result, _close(x.grad, np.full(8, expected * ctx.threads)),
               f"shared graph on {device or 'cpu'}: grad {x.grad[0]} != {expected * ctx.threads}")
        # Shared graph without retain_graph: one wins, the others get the
        # "backward through the graph a second time" error; nothing hangs.
        x = _T(np.full(8, 0.5), True)
        y = ops.sum(ops.mul(ops.exp(x), x))
        outcomes = []

        def racer(k):
            try:
                backward(y, engine=engine)
                outcomes.append("ok")
            except RuntimeError as exc:
                outcomes.append("twice" if "second time" in str(exc) else f"other: {exc}")

        _run_threads(ctx.threads, racer)
        _check(result, outcomes.count("ok") >= 1 and all(o in ("ok", "twice") for o in outcomes),
               f"racing backwards on one graph: {outcomes}")

    _iterate(ctx, result, iteration)


def scenario_inplace(ctx, result):
    """In-place ops, saved-tensor hooks and non-reentrant checkpoints under concurrency:
    each thread's graph changes tensors in place and offloads its saved tensors through
    hooks of its own (hooks are per thread); a saved tensor changed in place fails every
    concurrent backward of the shared graph with the version error, on the CPU and on
    a device thread, never with a wrong gradient."""
    from . import ops
    from .autograd import backward, checkpoint, grad
    from .autograd.graph import saved_tensors_hooks

    def iteration(engine, i):
        device = None if i % 2 == 0 else f"sim:{i % 2}"

        def own_graph(k):
            store = {}

            def pack(t):
                store[len(store)] = np.array(to_host(t.data), copy=True)
                return len(store) - 1

            def unpack(key):
                from .autograd import Tensor

                value = store.pop(key)
                return Tensor(value if device is None else ops.to(value, device=device))

            x = _T(np.full(8, 0.5 + k), True)
            with saved_tensors_hooks(pack, unpack):
                h = x if device is None else ops.to(x, device=device)
                y = ops.mul(h, np.float64(2.0))
                y.mul_(np.float64(3.0))          # MulBackward0 by a constant: saves nothing
                y.add_(np.float64(1.0))
                z = ops.exp(ops.mul(y, np.float64(0.1)))   # ExpBackward0 packs its result
                y.relu_()
                out = ops.sum(ops.mul(z, y))
                if device is not None:
                    out = ops.to(out, device="cpu")
            _timed(result, backward, out, engine=engine)
            yv = 6.0 * (0.5 + k) + 1.0
            expected = 6.0 * (np.exp(0.1 * yv) * (0.1 * yv + 1.0))
            if not _close(x.grad, np.full(8, expected)):
                raise AssertionError(f"in-place graph with hooks: grad {x.grad[:2]} != {expected}")
            if store:
                raise AssertionError(f"{len(store)} packed tensors were never unpacked")

        result.failures.extend(_run_threads(ctx.threads, own_graph))

        # A shared graph whose saved tensor an in-place op changed: every backward fails.
        x = _T(np.full(8, 0.5), True)
        h = x if device is None else ops.to(x, device=device)
        z = ops.exp(h)
        out = ops.sum(z if device is None else ops.to(z, device="cpu"))
        z.mul_(np.float64(2.0))
        outcomes = []

        def racer(k):
            try:
                _timed(result, grad, out, [x], retain_graph=True, engine=engine)
                outcomes.append("computed")
            except RuntimeError as exc:
                outcomes.append("version" if "modified by an inplace operation" in str(exc)
                                else f"other: {exc}")

        result.failures.extend(_run_threads(ctx.threads, racer))
        _check(result, outcomes == ["version"] * ctx.threads,
               f"saved tensor changed in place on {device or 'cpu'}: {outcomes}")

        # Non-reentrant checkpoints, one per thread, under grad().
        w = _T(np.full((4, 4), 0.1), True)

        def block(a):
            return ops.mul(ops.tanh(ops.matmul(a, w)), np.float64(2.0))

        def checkpointed(k):
            a = _T(np.full((2, 4), 0.1 * (k + 1)), True)
            plain = grad(ops.sum(block(a)), [a, w])
            y = checkpoint(block, a, use_reentrant=False)
            got = _timed(result, grad, ops.sum(y), [a, w], engine=engine)
            if not all(_close(p, g) for p, g in zip(plain, got)):
                raise AssertionError("checkpointed gradients differ from the plain graph's")

        result.failures.extend(_run_threads(ctx.threads, checkpointed))

    _iterate(ctx, result, iteration)


def scenario_errors(ctx, result):
    from . import ops
    from .autograd import backward
    from .ops import BackwardFailure

    def iteration(engine, i):
        device = None if i % 2 == 0 else "sim:0"
        fail_at = ctx.rng.randrange(30)
        x = _T(np.ones(8), True)
        y = _chain(x, 30, ops, ctx.rng, device=device, fail_at=fail_at)
        try:
            _timed(result, backward, y, engine=engine)
            result.failures.append(f"planted failure at step {fail_at} did not reach the caller")
        except BackwardFailure as exc:
            _check(result, f"step {fail_at}" in str(exc), f"wrong error: {exc}")
            _check(result, getattr(exc, "gradcli_node", None) is not None
                   and exc.gradcli_node.name == "FailBackward0", "error does not name its node")
        # The engine stays usable.
        x = _T(np.ones(8), True)
        _timed(result, backward, _chain(x, 30, ops, ctx.rng, device=device), engine=engine)
        _check(result, _close(x.grad, np.full(8, 1.5 ** 30)), "engine unusable after an error")

    _iterate(ctx, result, iteration)


def scenario_shutdown(ctx, result):
    from . import ops
    from .autograd import backward

    i = 0
    while i < ctx.iterations and ctx.time_left() > 0:
        engine = new_engine()
        x = _T(np.ones(4), True)
        _timed(result, backward, _chain(x, 5, ops, ctx.rng, device="sim:0"), engine=engine)
        _check(result, _close(x.grad, np.full(4, 1.5 ** 5)), "wrong gradient before stop")
        engine.stop()
        _wait_gone(engine, result, label=f"idle stop #{i}")
        result.iterations += 1
        i += 1
    # Stop with work in flight: must return within the wait limit.
    engine = new_engine()
    x = _T(np.ones(4), True)
    y = ops.to(ops.sum(ops.delay(ops.to(x, device="sim:0"), ms=1500)), device="cpu")
    worker = threading.Thread(target=lambda: _swallow(backward, y, engine=engine), daemon=True)
    worker.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    with _engine_log_quiet():   # the warning it logs is this check's expected outcome
        engine.stop(wait_limit=0.3)
    # stop() gave up on the busy device thread instead of waiting for the
    # 1.5 s delay: the backward is still running when stop() returns.
    _check(result, worker.is_alive(), "stop() with work in flight overran its wait limit "
           f"({time.monotonic() - t0:.2f}s: it waited for the backward to finish)")
    worker.join(5)
    # A process that exits while a device thread is busy exits within the limit.
    code = ("import numpy as np, threading, gradcli.ops as O\n"
            "from gradcli.autograd import Tensor, backward\n"
            "x = Tensor(np.ones(3), requires_grad=True)\n"
            "y = O.to(O.sum(O.delay(O.to(x, device='sim:0'), ms=20000)), device='cpu')\n"
            "threading.Thread(target=backward, args=(y,), daemon=True).start()\n"
            "import time; time.sleep(0.3)\n")
    env = dict(os.environ, GRADCLI_SHUTDOWN_WAIT_LIMIT="1")
    t0 = time.monotonic()
    try:
        subprocess.run([sys.executable, "-c", code], env=env, timeout=15, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _check(result, time.monotonic() - t0 < 10, "exiting process waited too long for engine threads")
    except subprocess.TimeoutExpired:
        result.failures.append("a process with busy device threads did not exit (hang at exit)")
    result.iterations += 1


@contextlib.contextmanager
def _engine_log_quiet():
    """Drop the engine's log records (its stop() warnings) for a while."""
    import logging

    logger = logging.getLogger("gradcli.engine")
    drop = logging.Filter("\0")      # matches no logger name: drops every record
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _swallow(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception:  # noqa: BLE001
        pass


def scenario_chaos(ctx, result):
    from . import ops
    from .autograd import backward, set_multithreading_enabled

    def iteration(engine, i):
        seed = ctx.rng.randrange(2**31)

        def build():
            rng = random.Random(seed)
            x = _T(np.linspace(0.1, 1.0, 16), True)
            branches = []
            for b in range(4):
                dev = f"sim:{b % 2}"
                y = ops.to(x, device=dev)
                for _ in range(6):
                    y = ops.delay(ops.add(ops.mul(y, np.float64(1.0 + 0.1 * b)), np.float64(0.01)),
                                  ms=0, jitter_ms=2, seed=rng.randrange(2**31))
                branches.append(ops.to(y, device="cpu"))
            total = branches[0]
            for br in branches[1:]:
                total = ops.add(total, br)
            return x, ops.sum(ops.mul(total, total))

        x_ref, y_ref = build()
        with set_multithreading_enabled(False):
            backward(y_ref, engine=engine, deterministic=ctx.deterministic)
        x, y = build()
        _timed(result, backward, y, engine=engine, deterministic=ctx.deterministic)
        _check(result, _close(x.grad, x_ref.grad, ctx.deterministic),
               f"chaos run differs from the single-threaded reference "
               f"(max diff {float(np.max(np.abs(x.grad - x_ref.grad))):.3g})")
        # A graph living wholly on a device: every node runs on its device
        # thread, which must wake the caller when the graph task completes.
        from .devices import device as parse_device, to_device

        dev = f"sim:{i % 2}"

        xs = _T(np.ones(4), True)
        xs.data = to_device(xs.data, parse_device(dev))
        ys = ops.sum(ops.mul(ops.delay(xs, ms=0, jitter_ms=2, seed=seed), xs))
        _timed(result, backward, ys, engine=engine)
        _check(result, _close(np.asarray(xs.grad), np.full(4, 2.0)), f"all-{dev} graph: grad {xs.grad}")

    _iterate(ctx, result, iteration)


def scenario_fork(ctx, result):
    import multiprocessing as mp

    from . import ops
    from .autograd import backward

    if not hasattr(os, "fork"):
        result.iterations += 1
        return
    engine = new_engine()
    x = _T(np.ones(3), True)
    backward(_chain(x, 3, ops, ctx.rng, device="sim:0"), engine=engine)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the engine's threads did not survive the fork
        os.close(r)
        try:
            xx = _T(np.ones(3), True)
            backward(_chain(xx, 3, ops, random.Random(0), device="sim:0"), engine=engine)
            msg = b"no error"
        except RuntimeError as exc:
            msg = b"ok" if b"fork" in str(exc).encode() else str(exc).encode()[:200]
        except BaseException as exc:  # noqa: BLE001
            msg = repr(exc).encode()[:200]
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        result.failures.append("forked child hung using the parent's engine")
    message = os.read(r, 1000)
    os.close(r)
    _check(result, message == b"ok", f"forked child: expected the fork error, got {message!r}")
    engine.stop()
    _wait_gone(engine, result)
    with mp.get_context("spawn").Pool(1) as pool:
        value = pool.apply_async(_spawn_child).get(timeout=60)
    _check(result, value == 1.5 ** 3, f"spawned child computed {value}")
    result.iterations += 1


def _spawn_child():
    from . import ops
    from .autograd import Engine, backward

    engine = Engine()
    x = _T(np.ones(3), True)
    backward(_chain(x, 3, ops, random.Random(0), device="sim:0"), engine=engine)
    engine.stop()
    return float(x.grad[0])


# Note [Concurrent forwards and the memory budget]: the loader bounds one forward
# of a graph by --max-graph-bytes (Note [The memory budget of a whole graph]), but
# stressing a graph runs ``threads`` forwards at once (each run records its own,
# Note [Concurrent runs]) and keeps a reference run alive beside them. A file
# that fits the budget once can need ``threads + 1`` times it under stress, so the
# whole is checked against the same budget before anything runs.
def check_concurrent_budget(graph, threads):
    """Raise GraphError when ``threads`` concurrent runs of ``graph`` and the
    reference run need more than the graph's memory budget together."""
    budget = getattr(graph, "max_graph_bytes", None)
    forward = getattr(graph, "forward_bytes", None)
    if budget is None or forward is None:
        return
    need = forward * (threads + 1)
    if need > budget:
        raise GraphError(f"stress runs {threads} forwards of this graph at once beside a "
                         f"reference run: {threads + 1} x {forward} = {need} bytes, over the "
                         f"memory budget of {budget} bytes for the whole graph "
                         f"(--max-graph-bytes); lower --threads or raise --max-graph-bytes",
                         graph.file, None, "stress")


def scenario_graphs(ctx, result):
    """Stress given graph files: concurrent runs must equal a single-threaded reference."""
    from .errors import BackwardError

    with _engine_for(result) as engine:
        for path, load in ctx.graphs:
            ref_graph = load()
            try:
                ref = ref_graph.run(multithreading=False, engine=engine, deterministic=ctx.deterministic)
                ref_error = None
            except BackwardError as exc:
                ref, ref_error = None, type(exc.cause)
            i = 0
            while ctx.another(i):
                # Odd iterations share one Graph among all threads (Note [Concurrent runs]).
                graphs = ([load() for _ in range(ctx.threads)] if i % 2 == 0
                          else [load()] * ctx.threads)

                def one(k):
                    try:
                        res = _timed(result, graphs[k].run, engine=engine, deterministic=ctx.deterministic)
                    except BackwardError as exc:
                        if ref_error is None or not isinstance(exc.cause, ref_error):
                            raise
                        return
                    if ref is None:
                        raise AssertionError("expected the backward to fail as in the reference")
                    for name, g in ref.grads.items():
                        if g is not None and not _close(to_host(res.grads[name]), to_host(g), ctx.deterministic):
                            raise AssertionError(f"{path}: gradient of {name} differs from the reference")

                result.failures.extend(_run_threads(ctx.threads, one))
                result.iterations += 1
                i += 1


def _wait_gone(engine, result, label="engine"):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and engine.live_threads():
        time.sleep(0.01)
    leaked = len(engine.live_threads())
    result.leaked_threads += leaked
    if leaked:
        result.failures.append(f"{label}: {leaked} thread(s) still alive after stop()")


RUNNERS = {"reentrant": scenario_reentrant, "concurrent": scenario_concurrent,
           "errors": scenario_errors, "shutdown": scenario_shutdown, "chaos": scenario_chaos,
           "fork": scenario_fork, "inplace": scenario_inplace}


def run_scenarios(names, ctx, progress=None):
    results = []
    per = None
    for k, name in enumerate(names):
        remaining = max(ctx.deadline - time.monotonic(), 0)
        # Share what is left of --duration fairly among the scenarios still to run.
        per = remaining / (len(names) - k)
        sub = Context(ctx.threads, ctx.iterations, time.monotonic() + per, ctx.rng.randrange(2**31),
                      ctx.deterministic, ctx.graphs)
        result = ScenarioResult(name)
        t0 = time.monotonic()
        try:
            (scenario_graphs if name == "graphs" else RUNNERS[name])(sub, result)
        except GraphError:
            raise       # a given graph file is invalid input, not a failed check
        except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a failure
            result.failures.append(f"{type(exc).__name__}: {exc}")
        except BaseException:   # Ctrl-C: cancel what runs, stop, leave (Note [Interrupting stress])
            interrupt_all()
            raise
        result.seconds = time.monotonic() - t0
        results.append(result)
        if progress:
            progress(result)
    return results


# -- one graph file per worker (--jobs, --scheduler) ----------------------------------------
def stress_graph_file(path, load, threads, iterations, budget_s, seed, deterministic,
                      watchdog_s=None):
    """Stress one graph file where it was sent (a worker process or a cluster worker):
    ``("ok", ScenarioResult)``, or ``("invalid", message)`` for a file that does not load,
    is too big for ``threads`` runs at once, or whose forward fails. ``load(path)`` reads it
    (the command's load options). The worker arms its own watchdog: a hang ends it too.

    >>> kind, result = stress_graph_file("graphs/diamond.yaml", gradcli.load, 2, 1, 1.0, 0,
    ...                                  False)            # doctest: +SKIP
    """
    import faulthandler
    import functools

    if watchdog_s:
        faulthandler.dump_traceback_later(watchdog_s, exit=True)
    try:
        graph = load(path)
        check_concurrent_budget(graph, threads)
        graph.forward()
        ctx = Context(threads, iterations, time.monotonic() + budget_s, seed, deterministic,
                      [(path, functools.partial(load, path))])
        return "ok", run_scenarios(["graphs"], ctx)[0]
    except GraphError as exc:
        return "invalid", str(exc)
    finally:
        if watchdog_s:
            faulthandler.cancel_dump_traceback_later()


def merge_results(name, results, seconds):
    """One ScenarioResult of the per-file ``results``, as a serial run over all the
    files reports it: iterations, failures, latencies and leaked threads add up, the
    peak is the largest, ``seconds`` the wall time of the whole run.

    >>> merge_results("graphs", [ScenarioResult("graphs", iterations=2),
    ...                          ScenarioResult("graphs", iterations=3)], 1.0).iterations
    5
    """
    merged = ScenarioResult(name, seconds=seconds)
    for r in results:
        merged.iterations += r.iterations
        merged.failures.extend(r.failures)
        merged.latencies.extend(r.latencies)
        merged.peak_threads = max(merged.peak_threads, r.peak_threads)
        merged.leaked_threads += r.leaked_threads
    return merged
