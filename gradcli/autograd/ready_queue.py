"""ReadyQueue and NodeTask: the per-thread priority queues of the engine."""
from __future__ import annotations

import itertools
import threading
from heapq import heappop, heappush

from .waits import acquire

# A NodeTask is a tuple ``(kind, -reentrant_depth, -sequence_nr, tiebreak,
# graph_task, fn, input_buffer)`` so that ``heapq`` orders it with C-level
# tuple comparison (no rich-comparison objects on the hot path). The first
# four fields give PyTorch's CompareNodeTaskTime order:
#   1. shutdown tasks first,
#   2. then wake-up tasks (no function),
#   3. then the task of the deeper reentrant graph task,
#   4. then the higher sequence number (the node recorded later runs first).
# ``tiebreak`` is unique, so comparison never reaches the objects after it.
SHUTDOWN, WAKEUP, RUN = 0, 1, 2
_tiebreak = itertools.count()


def node_task(graph_task, fn, inputs):
    return (RUN, -graph_task.reentrant_depth, -fn.sequence_nr, next(_tiebreak),
            graph_task, fn, inputs)


def wakeup_task(graph_task):
    return (WAKEUP, 0, 0, next(_tiebreak), graph_task, None, None)


def shutdown_task():
    return (SHUTDOWN, 0, 0, next(_tiebreak), None, None, None)


class ReadyQueue:
    """A heap of NodeTasks with a blocking ``pop``.

    Note [ReadyQueue without a lock]
    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    ``heappush`` and ``heappop`` on tuples whose comparison never leaves C
    run under the GIL without releasing it, so the heap itself needs no
    lock. Only sleeping needs one: a popper that finds the heap empty first
    registers a waiter, then looks at the heap again, both under
    ``_lock``; a pusher pushes, then looks for waiters. Whichever order the
    two threads interleave in, either the popper sees the item or the pusher
    sees the waiter, so no wake-up is lost. (This relies on the GIL; a
    free-threaded build would need the lock around the heap as well.)
    """

    __slots__ = ("_heap", "_lock", "_waiters")

    def __init__(self):
        self._heap = []
        self._lock = threading.Lock()
        self._waiters = []

    def push(self, task):
        heappush(self._heap, task)
        if self._waiters:
            with self._lock:
                if self._waiters:
                    self._waiters.pop().release()

    def push_shutdown(self):
        self.push(shutdown_task())

    def pop(self):
        heap = self._heap
        while True:
            try:
                return heappop(heap)
            except IndexError:
                pass
            waiter = threading.Lock()
            waiter.acquire()
            with self._lock:
                self._waiters.append(waiter)
                if heap:
                    self._waiters.remove(waiter)
                    continue
            try:
                acquire(waiter)     # released by a push (Note [Waiting on the main thread])
            except BaseException:   # Ctrl-C on the main thread: no push may wake a dead waiter
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                raise

    def empty(self) -> bool:
        return not self._heap

    def __len__(self):
        return len(self._heap)
