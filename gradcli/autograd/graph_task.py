"""GraphTask: the state of one backward (``torch/csrc/autograd/graph_task.h``)."""
from __future__ import annotations

import itertools
import threading

from . import streams
from .state import graph_task_guard
from .waits import wait_event

_graph_task_ids = itertools.count()


class NodeCounter:
    """A ``trace`` that only counts the nodes that ran (not the seed GraphRoot):
    what ``gradcli run`` prints, without a record per node. Nested (reentrant)
    graph tasks count into their parent's counter, as they append to its trace."""

    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


class ExecInfo:
    """Note [Exec info]: whether a node must run in a ``grad()``-style backward.

    ``exec_info`` is empty for a plain ``backward()``: every node reachable
    from the roots runs. With ``inputs`` it holds an entry per node seen;
    only nodes with ``needed`` (on a path to an input) or ``captures`` (an
    input's gradient is read off their input buffer) run.
    """

    __slots__ = ("needed", "captures")

    def __init__(self):
        self.needed = False
        self.captures = None       # [(input_idx, output_idx)]

    def should_execute(self) -> bool:
        return self.needed or self.captures is not None


class GraphTask:
    """Metadata for one execution of backward()."""

    __slots__ = ("id", "keep_graph", "create_graph", "reentrant_depth", "cpu_ready_queue",
                 "graph_roots", "exit_on_error", "multithreading", "anomaly", "deterministic",
                 "outstanding_tasks", "has_error", "future_completed", "error",
                 "lock", "dependencies", "not_ready", "exec_info",
                 "captured_vars", "owner", "final_callbacks", "final_callbacks_lock",
                 "uses_devices", "trace", "leaf_streams", "caller_streams", "_done",
                 "root_input_nr")

    def __init__(self, keep_graph, create_graph, reentrant_depth, cpu_ready_queue, graph_roots,
                 multithreading=True, anomaly=(False, False), deterministic=False,
                 exit_on_error=False, trace=None):
        self.id = next(_graph_task_ids)
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        self.reentrant_depth = reentrant_depth
        self.cpu_ready_queue = cpu_ready_queue
        self.graph_roots = graph_roots
        self.exit_on_error = exit_on_error
        self.multithreading = multithreading
        self.anomaly = anomaly                # (check_nan, check_inf)
        self.deterministic = deterministic
        self.outstanding_tasks = 0            # guarded by ``lock``
        self.has_error = False
        self.future_completed = False
        self.error = None
        # Guards outstanding_tasks, dependencies, not_ready, captured_vars:
        # device threads and the owner update them concurrently, and a
        # read-modify-write is not atomic even under the GIL.
        self.lock = threading.Lock()
        self.dependencies = {}                # Node -> count of edges still to come
        self.not_ready = {}                   # Node -> InputBuffer
        self.exec_info = {}                   # Node -> ExecInfo (Note [Exec info])
        self.captured_vars = []
        self.owner = None                     # worker_device of the thread that created it
        self.final_callbacks = []
        self.final_callbacks_lock = threading.Lock()
        self.uses_devices = False             # some node runs on an accelerator queue
        self.trace = trace                    # list of run records, a NodeCounter, or None
        self.leaf_streams = set()             # streams leaves ran on (Note [Streaming backwards])
        self.caller_streams = None            # device id -> caller's current stream
        self._done = threading.Event()
        self.root_input_nr = None             # the input slot of a single root

    def completed(self) -> bool:
        """Every task is done, or an error ends the graph task early (call
        under ``lock``)."""
        return self.outstanding_tasks == 0 or (self.exit_on_error and self.has_error)

    def wait(self, timeout=None) -> bool:
        return wait_event(self._done, timeout)      # Note [Waiting on the main thread]

    # -- completion -----------------------------------------------------------
    def mark_as_completed_and_run_post_processing(self):
        with self.lock:
            if self.future_completed:
                already = True
            else:
                self.future_completed = True
                already = False
        if already:
            wait_event(self._done)
            return
        try:
            self.exec_post_processing()
        except Exception as exc:  # noqa: BLE001 - becomes the backward's error
            if self.error is None:
                self.error = exc
        self._done.set()

    def exec_post_processing(self):
        if self.not_ready:
            raise RuntimeError("could not compute gradients for some functions")
        if self.leaf_streams and self.caller_streams:
            streams.sync_leaf_streams(self.caller_streams, self.leaf_streams)
        # Final callbacks may queue more callbacks (from this or another
        # thread): index the list afresh each time round, unlocked while a
        # callback runs.
        with graph_task_guard(self):
            i = 0
            while True:
                with self.final_callbacks_lock:
                    if i >= len(self.final_callbacks):
                        break
                    callback = self.final_callbacks[i]
                callback()
                i += 1

    def set_exception(self, exc, fn):
        """Record the first error; the backward stops and re-raises it."""
        with self.lock:
            self.has_error = True
            if self.future_completed:
                return
            self.future_completed = True
            self.error = exc
        self._done.set()

    # -- grad() ---------------------------------------------------------------
    def init_to_execute(self, graph_root, outputs, accumulate_grad, min_topo_nr):
        """Mark the nodes on a path from ``graph_root`` to an edge in ``outputs``."""
        exec_info = self.exec_info
        output_idx = 0
        for fn, input_nr in outputs:
            info = exec_info.get(fn)
            if info is None:
                info = exec_info[fn] = ExecInfo()
            if accumulate_grad:
                info.needed = True
            else:
                if info.captures is None:
                    info.captures = []
                info.captures.append((input_nr, output_idx))
                output_idx += 1
        self.captured_vars = [None] * output_idx

        def should_execute(fn):
            info = exec_info.get(fn)
            return info is not None and info.should_execute()

        # An iterative depth-first search: a node is needed when a child is.
        # ``seen`` is not seeded with ``outputs``: two outputs may lie on one
        # path, and the search must go on past the first.
        seen = set()
        exec_info.setdefault(graph_root, ExecInfo())
        stack = [(graph_root, iter(graph_root.next_edges))]
        while stack:
            fn, edges = stack[-1]
            child = None
            for edge in edges:
                if edge is None:
                    continue
                if edge[0] in seen:
                    if should_execute(edge[0]):
                        exec_info.setdefault(fn, ExecInfo()).needed = True
                    continue
                child = edge[0]
                seen.add(child)
                break
            if child is not None:
                if child.topological_nr < min_topo_nr:
                    continue        # created before every output: no path to one
                stack.append((child, iter(child.next_edges)))
            else:
                stack.pop()
                if stack and should_execute(fn):
                    exec_info.setdefault(stack[-1][0], ExecInfo()).needed = True
