"""Spawned worker processes for ``--jobs N``: one task per graph file, results
in input order.

``map_ordered(fn, items, jobs)`` calls ``fn(*item)`` for every item in one of
``jobs`` worker processes and returns one ``Outcome`` per item, in the order
of ``items`` whatever order they finished in. ``fn`` and the items travel by
pickle, so ``fn`` is a module-level function (pickled by its name) and the
items plain data.

Note [Spawned workers only]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
The workers are started with the ``spawn`` method: a fresh interpreter that
imports what it needs. ``fork`` would copy the parent mid-flight: once the
engine's device threads exist, a forked child inherits their locks in
whatever state they were (held by threads that do not exist in the child),
and its first backward can deadlock. PyTorch refuses to run autograd in a
child forked after its engine started for the same reason. Spawn costs an
interpreter start per worker, paid once per run, not once per file.

Note [Workers ignore SIGINT]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Ctrl-C in a terminal sends SIGINT to the whole process group, the workers
included. Each worker would print its own KeyboardInterrupt traceback, and a
worker in the middle of a backward may take its time to notice. So the
workers are started with SIGINT ignored (an interpreter started with SIGINT
ignored keeps it ignored: Python installs its handler only over the default
one), and the parent alone decides: on an interrupt it kills every worker
(SIGKILL, nothing to clean up: a worker holds no file of ours open for
writing) and waits for them, which takes milliseconds, then re-raises.

Note [One task per worker at a time]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Each worker has its own pipe and is handed its next task only when it has
returned the previous one. So the parent always knows which file a worker is
on: a worker that dies (killed by the kernel for memory, a crash in a native
library) is reported against that file, and a fresh worker takes over the
remaining files. No queue feeder threads, nothing that can fill up and block.
"""
from __future__ import annotations

import os
import time

#: How long the parent waits for a killed worker to be gone (it takes milliseconds).
KILL_WAIT_S = 0.5


class WorkerLost(RuntimeError):
    """A worker process ended while it ran a task."""


class Outcome:
    """What one task gave: ``value``, or ``error`` (the exception it raised)."""
    __slots__ = ("value", "error")

    def __init__(self, value=None, error=None):
        self.value = value
        self.error = error

    def get(self):
        """The value, or raise the task's error."""
        if self.error is not None:
            raise self.error
        return self.value


def cpu_count() -> int:
    """The cores this process may run on (``--jobs 0``).

    >>> cpu_count() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_jobs(jobs: int) -> int:
    """``--jobs``: 0 means one per core.

    >>> resolve_jobs(3)
    3
    """
    return cpu_count() if jobs == 0 else jobs


def _portable(exc):
    """``exc`` if it survives pickling, else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception that does not round-trip
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def unfreeze():
    """After a task in a long-lived worker: what the task's load froze for the rest of
    the process (Note [Collector pauses]) becomes collectable again, so that a worker
    that runs thousands of files does not keep their reference cycles."""
    import gc

    gc.unfreeze()


def _worker_main(conn):
    """A worker: run tasks from ``conn`` until it closes or sends None."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # Note [Workers ignore SIGINT]
    except (ValueError, OSError):
        pass
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, fn, args = msg
        try:
            reply = (index, True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            reply = (index, False, _portable(exc))
        unfreeze()
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - a value that does not pickle
            conn.send((index, False, RuntimeError(f"the result of task {index} cannot be "
                                                  f"sent back: {type(exc).__name__}: {exc}")))


class _Worker:
    def __init__(self, ctx):
        import signal

        parent, child = ctx.Pipe()
        self.conn = parent
        self.process = ctx.Process(target=_worker_main, args=(child,), daemon=True,
                                   name="gradcli-worker")
        # Note [Workers ignore SIGINT]: the child starts with SIGINT ignored.
        try:
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:          # not the main thread: nothing to restore
            old = None
        try:
            self.process.start()
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
        child.close()
        self.task = None            # the index of the task it runs

    def send(self, index, fn, args):
        self.task = index
        self.conn.send((index, fn, args))

    def kill(self):
        try:
            self.process.kill()
        except (OSError, ValueError, AttributeError):
            pass


def _stop(workers, kill):
    """End every worker: politely when idle, SIGKILL with ``kill``; wait for them."""
    for w in workers:
        if kill:
            w.kill()
        else:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                w.kill()
    deadline = time.monotonic() + (KILL_WAIT_S if kill else 5.0)
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.kill()
            w.process.join(KILL_WAIT_S)
        w.conn.close()


def map_ordered(fn, items, jobs, *, on_done=None, describe=str) -> list:
    """``[Outcome of fn(*item) for item in items]``, run in ``jobs`` spawned worker
    processes (Note [Spawned workers only]); ``on_done(n_done, n_total)`` is called
    after each task. ``describe(item)`` names an item in a lost worker's error.
    An interrupt kills every worker before it propagates (Note [Workers ignore SIGINT]).

    >>> [o.get() for o in map_ordered(pow, [(2, 3), (3, 2)], jobs=2)]
    [8, 9]
    """
    import multiprocessing
    from multiprocessing.connection import wait

    items = [tuple(item) for item in items]
    outcomes = [None] * len(items)
    if not items:
        return outcomes
    ctx = multiprocessing.get_context("spawn")
    pending = list(range(len(items)))[::-1]      # pop() takes the next in input order
    workers = []
    done = 0
    clean = False

    def give(w):
        index = pending.pop()
        w.send(index, fn, items[index])

    try:
        for _ in range(min(max(1, jobs), len(items))):
            w = _Worker(ctx)
            workers.append(w)
            give(w)
        busy = list(workers)
        while busy:
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for w in list(busy):
                index = w.task
                if w.conn in ready:
                    try:
                        got, ok, value = w.conn.recv()
                    except (EOFError, OSError):
                        got = None              # it died while sending: lost, below
                    except Exception as exc:  # noqa: BLE001 - a result that does not unpickle
                        got, ok, value = index, False, RuntimeError(
                            f"{describe(items[index])}: its result cannot be read back: "
                            f"{type(exc).__name__}: {exc}")
                    if got is not None:
                        outcomes[got] = Outcome(value) if ok else Outcome(error=value)
                if outcomes[index] is None:
                    if w.process.sentinel not in ready and w.process.is_alive():
                        continue
                    w.process.join(KILL_WAIT_S)
                    outcomes[index] = Outcome(error=WorkerLost(
                        f"{describe(items[index])}: the worker process running it ended "
                        f"(exit code {w.process.exitcode})"))
                    w.conn.close()
                    busy.remove(w)
                    workers.remove(w)
                    if pending:                 # a fresh worker takes over what is left
                        w = _Worker(ctx)
                        workers.append(w)
                        busy.append(w)
                        give(w)
                    else:
                        w = None
                elif pending:
                    give(w)
                else:
                    w.task = None
                    busy.remove(w)
                done += 1
                if on_done is not None:
                    on_done(done, len(items))
        clean = True
        return outcomes
    finally:
        _stop(workers, kill=not clean)

