"""The engine: runs a backward graph the way ``torch/csrc/autograd/engine.cpp`` does.

One function per engine step: ``execute`` -> ``compute_dependencies`` /
``GraphTask.init_to_execute`` -> ``execute_with_graph_task`` ->
``thread_main`` -> ``evaluate_function`` -> ``call_function`` ->
``validate_outputs``. The calling thread drives its own CPU ready queue;
each accelerator device index has one long-lived worker thread and queue.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from time import perf_counter

import numpy as np

from ..devices import (CPU, CPU_DEVICE, NO_DEVICE, accelerator_types, device_of,
                       set_current_device, to_device, to_host)
from .graph_task import GraphTask
from .hooks import check_tensor_hook_result, check_tuple_result
from .input_buffer import DeterministicInputBuffer, FreshGrads, InputBuffer
from .node import GraphRoot
from .ready_queue import RUN, SHUTDOWN, ReadyQueue, _tiebreak, node_task, wakeup_task
from .graph_task import NodeCounter, _graph_task_ids
from heapq import heapify, heappop, heappush
from . import streams
from .state import ENGINE_TLS, STATE, graph_task_guard  # noqa: F401 - re-exported
from . import dispatch

_ndarray = np.ndarray   # (one global lookup on the fast path's check per output)


def _log():
    """The engine's logger (logging is imported only to warn at stop())."""
    import logging  # noqa: PLC0415

    return logging.getLogger("gradcli.engine")


def default_max_recursion_depth() -> int:
    """Reentrant backwards nested on one thread before the pool takes over.

    PyTorch uses 60. One level of nesting costs this engine about 9 Python
    frames (node -> backward op -> execute -> thread_main -> evaluate ->
    call_function -> node), so 60 levels stay far below Python's recursion
    limit of 1000 even when called from a deep stack (see
    tests/test_reentrant.py::test_default_depth_never_hits_recursion_limit).
    ``GRADCLI_MAX_REENTRANT_DEPTH`` overrides it.
    """
    env = os.environ.get("GRADCLI_MAX_REENTRANT_DEPTH")
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            pass
    return 60


TLS = ENGINE_TLS   # the engine's thread-locals (Note [Worker device] in state.py)


# -- forks -----------------------------------------------------------------
# Note [Engine threads and fork]: threads do not survive fork(). An engine
# that started threads remembers the pid that owns them; used in a forked
# child it fails at once instead of waiting forever on threads that are not
# there. An engine that never started a thread works in the child.
FORK_ERROR = ("Unable to handle autograd's threading in combination with fork-based "
              "multiprocessing. Use the 'spawn' start method, or run the child's backward "
              "with multithreading disabled on a fresh Engine.")


def default_shutdown_wait_limit() -> float:
    """Seconds stop() waits for device threads (``GRADCLI_SHUTDOWN_WAIT_LIMIT``, default 10)."""
    try:
        limit = float(os.environ.get("GRADCLI_SHUTDOWN_WAIT_LIMIT", "10"))
    except ValueError:
        return 10.0
    return limit if limit == limit else 10.0     # NaN: the default


# Note [Pool thread stacks]: a reentrant pool thread only nests up to
# max_recursion_depth (60) reentrant backwards before handing over to the next
# one, so it needs far less than the platform's default 8 MiB stack; a deep
# reentrant backward (PyTorch tests 8,193 levels: 137 pool threads) then fits
# in a few hundred MB of address space instead of a gigabyte. The size is set
# for the start of one thread only (threading.stack_size is process-wide).
POOL_THREAD_STACK_BYTES = 2 * 1024 * 1024
_stack_size_lock = threading.Lock()


def start_with_stack(thread, stack_bytes):
    """Start ``thread`` with a ``stack_bytes`` stack, restoring the default after."""
    with _stack_size_lock:
        try:
            prev = threading.stack_size(stack_bytes)
        except (ValueError, RuntimeError):        # platform cannot: default stack
            thread.start()
            return
        try:
            thread.start()
        finally:
            threading.stack_size(prev)


class _ThreadPoolShared:
    """The reentrant thread pool's shared state (``ThreadPoolShared``)."""

    def __init__(self):
        self.cv = threading.Condition()
        self.graphtasks_queue = deque()
        self.num_workers = 0           # idle workers waiting for a graph task
        self.threads = []


class Engine:
    """A backward engine with its own device threads and reentrant pool."""

    def __init__(self, max_recursion_depth=None):
        self.max_recursion_depth = (default_max_recursion_depth() if max_recursion_depth is None
                                    else max_recursion_depth)
        self.device_ready_queues: list[ReadyQueue] = []
        self.device_threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._device_threads_started = False
        self._thread_pool = _ThreadPoolShared()
        self._thread_count_cv = threading.Condition()
        self._non_reentrant_thread_count = 0
        self._device_graph_tasks = 0    # backwards in flight that use device queues
        self._threads_pid = None       # pid that owns this engine's threads
        self.stopped = False

    # -- execute ----------------------------------------------------------------
    def execute(self, root_edges, inputs, keep_graph, create_graph, accumulate_grad=True,
                outputs=(), trace=None, deterministic=False):
        """Run the backward from ``root_edges`` seeded with ``inputs``.

        ``outputs`` (edges) selects grad() semantics: the gradients flowing
        into them are captured and returned instead of accumulated.
        """
        if self.stopped and TLS.worker_device == NO_DEVICE:
            raise RuntimeError("this engine was stopped; create a new Engine")
        inputs = list(inputs)
        validate_outputs(root_edges, inputs, None)
        if not accumulate_grad and not outputs:
            raise ValueError("grad requires non-empty inputs.")

        tls = TLS
        if tls.local_ready_queue is None:
            tls.local_ready_queue = ReadyQueue()
        not_reentrant = tls.worker_device == NO_DEVICE
        parent = tls.current_graph_task
        if trace is None and parent is not None:
            trace = parent.trace
        state = STATE
        graph_task = GraphTask(
            keep_graph, create_graph,
            0 if not_reentrant else tls.total_depth + 1,
            tls.local_ready_queue, [e[0] for e in root_edges],
            multithreading=state.multithreading_enabled,
            anomaly=(state.anomaly_nan, state.anomaly_inf),
            deterministic=deterministic or (parent is not None and parent.deterministic),
            trace=trace)

        # A single root needs no GraphRoot node: its grad seeds its buffer.
        skip_dummy_node = len(root_edges) == 1
        graph_root = root_edges[0][0] if skip_dummy_node else GraphRoot(root_edges, inputs)
        if skip_dummy_node:
            graph_task.root_input_nr = root_edges[0][1]
        if (FAST_PATH and skip_dummy_node and not_reentrant and not outputs
                and _drop_failed_tasks(tls.local_ready_queue, None)):
            schedule = _SCHEDULES.get(graph_root)
            if (schedule is not None and schedule.input_nr == root_edges[0][1]
                    and _fast_path_applies(graph_task, None)):
                buffer = InputBuffer([None] * len(graph_root.input_metadata))
                buffer.add(root_edges[0][1], inputs[0], -1)
                self.replay_schedule(graph_task, graph_root, schedule, buffer)
                if graph_task.error is not None:
                    raise graph_task.error
                return graph_task.captured_vars
        min_topo_nr = min((e[0].topological_nr for e in outputs), default=0)
        self.compute_dependencies(graph_root, graph_task, min_topo_nr)
        if outputs:
            graph_task.init_to_execute(graph_root, outputs, accumulate_grad, min_topo_nr)

        buffer_type = DeterministicInputBuffer if graph_task.deterministic else InputBuffer
        buffer = buffer_type([None] * len(graph_root.input_metadata))
        if skip_dummy_node:
            buffer.add(root_edges[0][1], inputs[0], -1)
        uses_devices = graph_task.uses_devices
        if uses_devices:       # stop() waits for backwards that use the device threads
            with self._thread_count_cv:
                self._device_graph_tasks += 1
        try:
            self.execute_with_graph_task(graph_task, graph_root, buffer)
            graph_task.wait()
        except BaseException as exc:
            # Note [Interrupted backwards]: Ctrl-C (KeyboardInterrupt) reaches
            # the caller while device threads still work for this graph task.
            # Fail the graph task: its queued nodes are skipped, and a node
            # sleeping in sleep_unless_cancelled() wakes at once, so the device
            # threads go idle and stop() ends them instead of waiting.
            graph_task.set_exception(exc, None)
            raise
        finally:
            if uses_devices:
                with self._thread_count_cv:
                    self._device_graph_tasks -= 1
                    self._thread_count_cv.notify_all()
        if graph_task.error is not None:
            raise graph_task.error
        return graph_task.captured_vars

    def compute_dependencies(self, root, graph_task, min_topo_nr):
        """Count, for each node, the edges that will bring it a gradient."""
        dependencies = graph_task.dependencies   # doubles as the set of nodes seen
        stack = [root]
        push, pop = stack.append, stack.pop
        uses_devices = False
        stream_devices = set()
        while stack:
            fn = pop()
            if min_topo_nr and fn.topological_nr < min_topo_nr:   # (numbers start at 0)
                continue
            if fn.device is not CPU:
                uses_devices = True
                if fn.stream is not None:
                    stream_devices.add(fn.device)
            for edge in fn.next_edges:
                if edge is not None:
                    nxt = edge[0]
                    count = dependencies.get(nxt)
                    if count is None:
                        dependencies[nxt] = 1
                        push(nxt)
                    else:
                        dependencies[nxt] = count + 1
        graph_task.uses_devices = uses_devices or root.device is not CPU
        if stream_devices:
            # Remember the caller's current streams: leaves are synced to them.
            graph_task.caller_streams = streams.stash_current_streams(stream_devices)

    def execute_with_graph_task(self, graph_task, graph_root, input_buffer):
        self.initialize_device_threads_pool(graph_task)
        tls = TLS
        queue = self.ready_queue(graph_task, graph_root.device)
        graph_task.lock.acquire()
        if tls.worker_device == NO_DEVICE:
            # A plain backward: this thread becomes the CPU worker of the
            # graph task and drives it until it completes.
            tls.worker_device = CPU_DEVICE
            tls.engine = self
            graph_task.owner = CPU_DEVICE
            graph_task.outstanding_tasks += 1
            queue.push(node_task(graph_task, graph_root, input_buffer))
            graph_task.lock.release()
            prev_grad_mode = STATE.grad_enabled
            try:
                if FAST_PATH and _fast_path_applies(graph_task, queue):
                    self.thread_main_fast(graph_task)
                else:
                    self.thread_main(graph_task)
            finally:
                tls.worker_device = NO_DEVICE
                tls.engine = None
                STATE.grad_enabled = prev_grad_mode
        else:
            # Note [Reentrant backwards]
            # A node's backward called the engine. This thread must keep
            # serving its queue (the nested graph task's work lands there),
            # so it drives the nested graph task itself, recursively, up to
            # max_recursion_depth levels on its stack. Past that, a pool
            # thread takes the graph task over, sharing this thread's ready
            # queue, and this thread blocks until it completes.
            graph_task.owner = tls.worker_device
            graph_task.outstanding_tasks += 1
            queue.push(node_task(graph_task, graph_root, input_buffer))
            graph_task.lock.release()
            if tls.current_depth >= self.max_recursion_depth:
                self.add_thread_pool_task(graph_task)
            else:
                tls.total_depth += 1
                tls.current_depth += 1
                prev_grad_mode = STATE.grad_enabled
                try:
                    self.thread_main(graph_task)
                finally:
                    tls.current_depth -= 1
                    tls.total_depth -= 1
                    STATE.grad_enabled = prev_grad_mode

    # -- the worker loop ----------------------------------------------------------
    def thread_main(self, graph_task):
        """Pop and run tasks until ``graph_task`` completes (forever if None).

        Note [Graph tasks do not nest]: the tasks this loop pops need not
        belong to ``graph_task``: a reentrant call drives the whole queue, and
        an unrelated graph task's node may run inside it. Each task carries
        its own graph task; this loop only exits on its own one.
        """
        tls = TLS
        queue = tls.local_ready_queue
        state = STATE
        while graph_task is None or not graph_task.future_completed:
            task = queue.pop()
            if task[0] == SHUTDOWN:
                break
            local_task = task[4]
            fn = task[5]
            if fn is not None and not local_task.has_error:
                prev = tls.current_graph_task
                tls.current_graph_task = local_task
                state.grad_enabled = local_task.create_graph
                try:
                    if fn.stream is None:
                        done = self.evaluate_function(local_task, fn, task[6])
                    else:      # run on the stream the forward ran on
                        with fn.stream:
                            done = self.evaluate_function(local_task, fn, task[6])
                except Exception as exc:  # noqa: BLE001 - travels to the caller
                    self.thread_on_exception(local_task, fn, exc)
                    done = None
                tls.current_graph_task = prev
            else:
                done = None
            del task
            if done is None:
                # The task ended without dispatching (skipped, no outputs, an
                # error): count it off here. Otherwise evaluate_function did, under
                # the lock it already held (one lock per node on the hot path).
                with local_task.lock:
                    local_task.outstanding_tasks -= 1
                    done = local_task.completed()
            if done:
                local_task.mark_as_completed_and_run_post_processing()
                # Note [Wake-up tasks]: the owner of the graph task may be
                # asleep in pop() on its own queue with nothing left to do.
                # Send it an empty task so it wakes, sees the graph task
                # completed and returns. Not needed when we are the owner.
                owner = local_task.owner
                if tls.worker_device != owner:
                    with local_task.lock:
                        local_task.outstanding_tasks += 1
                    self.ready_queue_by_index(local_task, owner).push(wakeup_task(local_task))

    def thread_main_fast(self, graph_task):
        """``thread_main`` + ``evaluate_function`` for the common case (Note [Engine fast path]).

        Runs the nodes of ``graph_task`` in exactly the order, and with exactly the
        arithmetic, of the general loop; hands over to ``thread_main`` at the first
        task it does not handle itself.
        """
        tls = TLS
        state = STATE
        heap = tls.local_ready_queue._heap
        keep_graph = graph_task.keep_graph
        dependencies = graph_task.dependencies
        not_ready = graph_task.not_ready
        counter = graph_task.trace            # None or a NodeCounter
        depth = -graph_task.reentrant_depth
        tiebreak = _tiebreak
        prev = tls.current_graph_task
        tls.current_graph_task = graph_task   # set once: a reentrant call restores it
        state.grad_enabled = False            # create_graph is False here
        # Note [Schedules of retained graphs]: a retained graph with one root
        # records the order its nodes ran in, for the next backward to replay.
        roots = graph_task.graph_roots
        ran = ([] if keep_graph and len(roots) == 1 and roots[0] not in _SCHEDULES
               and len(heap) == 1 and type(heap[0][5]) is not GraphRoot else None)
        # the nodes run, counted here and added to ``counter`` as the loop ends; the
        # graph task's GraphRoot, if it has one, is its first task and is not counted
        runs = -1 if heap and type(heap[0][5]) is GraphRoot else 0
        # Note [The one ready task]: the node that will run next and its buffer, kept
        # out of the heap
        ready_fn = ready_buffer = None
        try:
            while not graph_task.future_completed:
                if ready_fn is not None:
                    fn, inputs = ready_fn, ready_buffer
                    ready_fn = ready_buffer = None
                    if graph_task.has_error or fn.stream is not None:
                        # the task it stands for, back where the general loop finds it
                        heappush(heap, node_task(graph_task, fn, inputs))
                        ran = None
                        break
                else:
                    if not heap:
                        break                 # never on one thread; the general loop waits
                    task = heappop(heap)
                    fn = task[5]
                    if (task[4] is not graph_task or fn is None or graph_task.has_error
                            or fn.stream is not None):
                        heappush(heap, task)  # not ours to run here: the general loop takes over
                        ran = None
                        break
                    inputs = task[6]
                    del task
                if ran is not None:
                    ran.append(fn)
                try:
                    runs += 1
                    # (call_plain_function inline; each output's check is in the loop below)
                    next_edges = fn.next_edges
                    if fn.hooks is None:
                        outputs = fn.apply(inputs)
                        if len(outputs) != len(next_edges):
                            validate_outputs(next_edges, outputs, fn.name)   # raises: the count
                    else:
                        outputs = call_function(graph_task, fn, inputs)
                except Exception as exc:  # noqa: BLE001 - travels to the caller
                    self._fast_node_failed(graph_task, fn, exc)
                    continue
                if state.grad_enabled:        # a node left grad mode on: as thread_main resets it
                    state.grad_enabled = False
                if not keep_graph:
                    fn.release_variables()
                if outputs:
                    # (outputs and next_edges have one length: validated above)
                    fresh = outputs.fresh if type(outputs) is FreshGrads else 0
                    i = -1
                    failed = None
                    for output, edge in zip(outputs, next_edges):
                        i += 1
                        if edge is None:
                            continue
                        nxt = edge[0]
                        if output is not None:
                            # Note [Outputs checked as they are handed on]
                            meta = nxt.input_metadata[edge[1]]
                            if not (type(output) is _ndarray and meta.device is CPU
                                    and output.shape == meta.shape and output.dtype is meta.dtype):
                                try:
                                    validate_outputs(next_edges, outputs, fn.name)
                                except Exception as exc:  # noqa: BLE001 - travels to the caller
                                    failed = exc
                                    break
                                output = outputs[i]
                        count = dependencies.get(nxt)
                        if count is None:
                            raise RuntimeError(f"dependency not found for {nxt.name}")
                        buffer = not_ready.get(nxt)
                        if buffer is None:
                            # A fresh buffer: InputBuffer.add's first contribution to a slot.
                            buffer = InputBuffer([None] * len(nxt.input_metadata))
                            if output is not None:
                                buffer[edge[1]] = output
                                if fresh and fresh >> i & 1:   # Note [Stealing gradients]
                                    buffer._owned = 1 << edge[1]
                            if count != 1:
                                not_ready[nxt] = buffer
                        else:
                            pos = edge[1]
                            old = buffer[pos]
                            if old is None or output is None:
                                buffer.add(pos, output, 0, 0, fresh and fresh >> i & 1)
                            else:
                                # InputBuffer.add's sum inline (every branch of a fan-in
                                # but the first): the buffer owns the sum it made
                                buffer[pos] = old + output
                                # (InputBuffer._bits inline: no call per branch)
                                buffer._owned = getattr(buffer, "_owned", 0) | (1 << pos)
                            if count == 1:
                                del not_ready[nxt]
                        if count == 1:
                            del dependencies[nxt]
                            graph_task.outstanding_tasks += 1
                            if ready_fn is None and not heap:
                                ready_fn, ready_buffer = nxt, buffer   # runs next
                            else:
                                if ready_fn is not None:              # a second one: both queue
                                    heappush(heap, node_task(graph_task, ready_fn, ready_buffer))
                                    ready_fn = ready_buffer = None
                                heappush(heap, (RUN, depth, -nxt.sequence_nr, next(tiebreak),
                                                graph_task, nxt, buffer))
                        else:
                            dependencies[nxt] = count - 1
                    if failed is not None:
                        self._fast_node_failed(graph_task, fn, failed)
                        continue
                graph_task.outstanding_tasks -= 1
                if graph_task.outstanding_tasks == 0:
                    graph_task.mark_as_completed_and_run_post_processing()
        finally:
            if ready_fn is not None:          # (an error or an interrupt ended the loop: queued)
                heappush(heap, node_task(graph_task, ready_fn, ready_buffer))
            tls.current_graph_task = prev
            if counter is not None and runs > 0:
                counter.count += runs
        if not graph_task.future_completed:
            self.thread_main(graph_task)
        elif (ran is not None and graph_task.error is None and not graph_task.has_error
                and next(_graph_task_ids) == graph_task.id + 1):
            # (no other backward started meanwhile: a node that ran a reentrant
            # backward may interleave with this queue's tasks; such graphs replay nothing)
            schedule = Schedule.of(ran, graph_task.root_input_nr)
            if schedule is not None:
                _SCHEDULES[roots[0]] = schedule

    def _fast_node_failed(self, graph_task, fn, exc):
        """thread_main_fast's end of a node that raised (or whose outputs did not validate)."""
        if STATE.grad_enabled:
            STATE.grad_enabled = False
        self.thread_on_exception(graph_task, fn, exc)
        graph_task.outstanding_tasks -= 1
        if graph_task.completed():
            graph_task.mark_as_completed_and_run_post_processing()

    def replay_schedule(self, graph_task, root, schedule, buffer):
        """Run a retained graph's backward again in its recorded order (Note [Schedules
        of retained graphs]): what thread_main_fast does per node, without the heap
        and the dependency counts."""
        tls = TLS
        state = STATE
        prev_grad_mode = state.grad_enabled
        tls.worker_device = CPU_DEVICE
        tls.engine = self
        graph_task.owner = CPU_DEVICE
        prev = tls.current_graph_task
        tls.current_graph_task = graph_task
        state.grad_enabled = False
        keep_graph = graph_task.keep_graph
        counter = graph_task.trace
        nodes, targets, slots = schedule.nodes, schedule.targets, schedule.slots
        buffers = [None] * len(nodes)
        buffers[0] = buffer
        graph_task.outstanding_tasks = 1
        try:
            for k in range(len(nodes)):
                fn = nodes[k] if k else root
                inputs = buffers[k]
                buffers[k] = None
                try:
                    if counter is not None:
                        counter.count += 1
                    outputs = call_plain_function(graph_task, fn, inputs)
                except Exception as exc:  # noqa: BLE001 - travels to the caller
                    self.thread_on_exception(graph_task, fn, exc)
                    return
                if state.grad_enabled:
                    state.grad_enabled = False
                if not keep_graph:
                    fn.release_variables()
                if outputs:
                    fresh = outputs.fresh if type(outputs) is FreshGrads else 0
                    i = -1
                    for output, target in zip(outputs, targets[k]):
                        i += 1
                        if target is None:
                            continue
                        j, pos = target
                        buf = buffers[j]
                        if buf is None:
                            buf = buffers[j] = InputBuffer([None] * slots[j])
                        buf.add(pos, output, 0, 0, fresh and fresh >> i & 1)
            graph_task.outstanding_tasks = 0
            graph_task.mark_as_completed_and_run_post_processing()
        finally:
            tls.current_graph_task = prev
            tls.worker_device = NO_DEVICE
            tls.engine = None
            state.grad_enabled = prev_grad_mode

    def thread_on_exception(self, graph_task, fn, exc):
        if getattr(exc, "gradcli_node", None) is None:
            try:
                exc.gradcli_node = fn        # the innermost node that failed
            except AttributeError:
                pass
        graph_task.set_exception(exc, fn)

    def evaluate_function(self, graph_task, fn, inputs):
        """Run ``fn`` and hand its outputs to the nodes they feed.

        Returns whether the graph task is complete when it counted this task
        off itself (after dispatching), or None when the caller must.
        """
        exec_info = graph_task.exec_info
        if graph_task.deterministic:
            inputs = inputs.variables()
        if exec_info:
            info = exec_info[fn]
            if not info.needed:
                # Tensor pre-hooks always run, but only once: when the node
                # runs, call_function runs them (Note [Hooks ordering]).
                inputs = call_tensor_pre_hooks(fn, list(inputs))
            if info.captures is not None:
                with graph_task.lock:
                    for input_idx, output_idx in info.captures:
                        graph_task.captured_vars[output_idx] = inputs[input_idx]
                        if isinstance(inputs, InputBuffer):    # returned: never stolen
                            inputs.disown(input_idx)
                    if fn.stream is not None:
                        graph_task.leaf_streams.add(fn.stream)
            if not info.needed:
                return

        trace = graph_task.trace
        if type(trace) is NodeCounter:        # only the number of nodes that ran
            if type(fn) is not GraphRoot:
                with graph_task.lock:
                    trace.count += 1
            outputs = call_function(graph_task, fn, inputs)
        elif trace is not None and type(fn) is not GraphRoot:   # the seed is not a graph node
            record = [fn, threading.get_ident(), perf_counter(), None, graph_task.id,
                      graph_task.reentrant_depth]
            trace.append(record)
            try:
                outputs = call_function(graph_task, fn, inputs)
            finally:
                record[3] = perf_counter()
        else:
            outputs = call_function(graph_task, fn, inputs)

        if not graph_task.keep_graph:
            fn.release_variables()
        if not outputs:
            if fn.stream is not None:        # a leaf: the caller syncs with it at the end
                with graph_task.lock:
                    graph_task.leaf_streams.add(fn.stream)
            return
        if graph_task.anomaly[0]:
            check_anomaly(fn, outputs, graph_task.anomaly[1])

        mt = graph_task.multithreading
        cpu_queue = graph_task.cpu_ready_queue
        buffer_type = DeterministicInputBuffer if graph_task.deterministic else InputBuffer
        seq = fn.sequence_nr
        next_edges = fn.next_edges
        stream = fn.stream
        fresh = outputs.fresh if type(outputs) is FreshGrads else 0
        with graph_task.lock:
            dependencies = graph_task.dependencies
            not_ready = graph_task.not_ready
            for i, output in enumerate(outputs):
                edge = next_edges[i]
                if edge is None:
                    continue
                nxt = edge[0]
                count = dependencies.get(nxt)
                if count is None:
                    raise RuntimeError(f"dependency not found for {nxt.name}")
                if count == 1:
                    del dependencies[nxt]
                    is_ready = True
                else:
                    dependencies[nxt] = count - 1
                    is_ready = False

                if stream is not None or nxt.stream is not None:
                    # Accumulate on the consumer's stream once the producer's
                    # work is done (Note [Streaming backwards]).
                    streams.sync(stream, nxt.stream)
                buffer = not_ready.get(nxt)
                if buffer is None:
                    if exec_info:
                        info = exec_info.get(nxt)
                        if info is None or not info.should_execute():
                            continue      # not on a path to an input of grad()
                    buffer = buffer_type([None] * len(nxt.input_metadata))
                    buffer.add(edge[1], output, seq, i, fresh and fresh >> i & 1)
                    if not is_ready:
                        not_ready[nxt] = buffer
                        continue
                else:
                    buffer.add(edge[1], output, seq, i, fresh and fresh >> i & 1)
                    if not is_ready:
                        continue
                    del not_ready[nxt]
                dev = nxt.device
                queue = cpu_queue if (dev is CPU or not mt) else self.device_ready_queues[dev.index]
                graph_task.outstanding_tasks += 1
                queue.push(node_task(graph_task, nxt, buffer))
            graph_task.outstanding_tasks -= 1      # this node's own task is done
            return graph_task.completed()

    # -- queues -----------------------------------------------------------------
    def ready_queue(self, graph_task, device):
        """CPU work goes to the graph task's CPU queue, device work to the device's."""
        if device is CPU or not graph_task.multithreading:
            return graph_task.cpu_ready_queue
        return self.device_ready_queues[device.index]

    def ready_queue_by_index(self, graph_task, device_index):
        if device_index == CPU_DEVICE:
            return graph_task.cpu_ready_queue
        return self.device_ready_queues[device_index]

    # -- device threads -------------------------------------------------------------
    def initialize_device_threads_pool(self, graph_task):
        self.check_not_forked()
        if graph_task.uses_devices and graph_task.multithreading and not self._device_threads_started:
            with self._start_lock:
                if not self._device_threads_started:
                    self.start_device_threads()
                    self._device_threads_started = True

    def check_not_forked(self):
        """Note [Engine threads and fork]: fail at once in a forked child whose
        parent started this engine's threads."""
        if self._threads_pid is not None and self._threads_pid != os.getpid():
            raise RuntimeError(FORK_ERROR)

    def start_device_threads(self):
        # Note [Allocating GPUs to autograd threads]: one thread per device
        # *index*, shared by the device types of that index (cuda:0 and
        # sim:0 run on one thread), as PyTorch colocates CUDA and XLA.
        counts = {kind.name: kind.count() for kind in accelerator_types()}
        num_devices = max(counts.values(), default=0)
        if num_devices == 0:
            return
        self._threads_pid = os.getpid()
        self.device_ready_queues = [ReadyQueue() for _ in range(num_devices)]
        for i in range(num_devices):
            label = "+".join(f"{t}:{i}" for t, n in counts.items() if n > i)
            thread = threading.Thread(target=self._device_thread_main,
                                      args=(i, self.device_ready_queues[i]),
                                      name=f"gradcli-device-{label}", daemon=True)
            try:
                thread.start()
            except (RuntimeError, MemoryError) as exc:
                # A device thread that cannot start: end those that did and
                # fail this backward (the engine may try again later).
                for queue in self.device_ready_queues[:i]:
                    queue.push_shutdown()
                self.device_threads = []
                raise RuntimeError(f"could not start the device thread for index {i} "
                                   f"({exc})") from exc
            self.device_threads.append(thread)
        with self._thread_count_cv:   # wait for the threads to start
            self._thread_count_cv.wait_for(lambda: self._non_reentrant_thread_count == num_devices)

    def _device_thread_main(self, index, queue):
        with self._thread_count_cv:
            self._non_reentrant_thread_count += 1
            self._thread_count_cv.notify_all()
        tls = TLS
        tls.worker_device = index
        tls.local_ready_queue = queue
        tls.engine = self
        set_current_device(index)     # CuPy work here goes to GPU `index`
        try:
            self.thread_main(None)
        finally:
            with self._thread_count_cv:
                self._non_reentrant_thread_count -= 1
                self._thread_count_cv.notify_all()

    # -- reentrant pool ----------------------------------------------------------
    def add_thread_pool_task(self, graph_task):
        pool = self._thread_pool
        with pool.cv:
            # Create a worker only when none is idle for this graph task.
            create_thread = pool.num_workers <= len(pool.graphtasks_queue)
            pool.graphtasks_queue.append(graph_task)
            pool.cv.notify()
        if create_thread:
            self._threads_pid = os.getpid()
            thread = threading.Thread(target=self._reentrant_thread_main,
                                      name=f"gradcli-reentrant-{len(pool.threads)}", daemon=True)
            try:
                start_with_stack(thread, POOL_THREAD_STACK_BYTES)
            except (RuntimeError, MemoryError) as exc:
                # Note [Pool threads that cannot start]: no thread will take
                # the graph task over. Take it back and fail it, so that the
                # caller (blocked in execute) raises instead of waiting forever.
                with pool.cv:
                    try:
                        pool.graphtasks_queue.remove(graph_task)
                    except ValueError:
                        return            # an idle worker took it after all
                graph_task.set_exception(RuntimeError(
                    f"could not start a reentrant backward thread ({exc}); "
                    f"{len(self.live_threads())} engine threads are running at reentrant "
                    f"depth {graph_task.reentrant_depth}"), None)
                return
            pool.threads.append(thread)

    def _reentrant_thread_main(self):
        pool = self._thread_pool
        tls = TLS
        tls.engine = self
        while True:
            with pool.cv:
                pool.num_workers += 1
                pool.cv.wait_for(lambda: pool.graphtasks_queue)
                pool.num_workers -= 1
                graph_task = pool.graphtasks_queue.popleft()
            if graph_task is None:       # shutdown
                return
            # Serve the owner's ready queue, from the owner's depth.
            tls.worker_device = graph_task.owner
            # reentrant_thread_init: run on the owner's device, as the owner does.
            set_current_device(graph_task.owner)
            tls.local_ready_queue = self.ready_queue_by_index(graph_task, graph_task.owner)
            tls.total_depth = graph_task.reentrant_depth
            tls.current_depth = 0
            self.thread_main(graph_task)

    # -- callbacks --------------------------------------------------------------
    @staticmethod
    def queue_callback(callback):
        graph_task = TLS.current_graph_task
        if graph_task is None:
            raise RuntimeError("Final callbacks can only be installed during backward pass.")
        with graph_task.final_callbacks_lock:
            graph_task.final_callbacks.append(callback)

    # -- shutdown -----------------------------------------------------------------
    def stop(self, wait_limit=None):
        """Stop the device threads and the reentrant pool (``Engine::stop``).

        Note [Engine shutdown]: a shutdown task outranks every other task, so
        pushing one while a backward still has device work would strand that
        work (the device thread would exit first). So wait, up to
        ``wait_limit`` seconds (default: GRADCLI_SHUTDOWN_WAIT_LIMIT, else 10), until no backward
        using the devices is in flight and every device queue is empty; then
        push a shutdown task to each queue and wait for the device threads
        within the same limit. If the limit runs out first, leave the threads
        and log a warning: they are daemon threads, never hold up the
        process's exit, and any backward still running completes.
        """
        if self.stopped:
            return
        self.stopped = True
        if wait_limit is None:
            wait_limit = default_shutdown_wait_limit()
        deadline = time.monotonic() + max(wait_limit, 0.0)
        forked = self._threads_pid is not None and self._threads_pid != os.getpid()
        if self.device_threads and not forked:
            cv = self._thread_count_cv
            def idle():
                return self._device_graph_tasks == 0 and all(
                    q.empty() for q in self.device_ready_queues)

            with cv:   # poll: a queue draining does not notify
                while not idle() and time.monotonic() < deadline:
                    cv.wait(min(0.01, max(0.0, deadline - time.monotonic())))
            if wait_limit <= 0:
                pass    # as PyTorch: a zero limit leaves the threads at once
            elif idle():
                for queue in self.device_ready_queues:
                    queue.push_shutdown()
                with cv:
                    if not cv.wait_for(lambda: self._non_reentrant_thread_count == 0,
                                       timeout=max(0.0, deadline - time.monotonic())):
                        _log().warning("gradcli engine: %d device thread(s) still busy after %.1fs; "
                                    "leaving them", self._non_reentrant_thread_count, wait_limit)
            else:
                _log().warning("gradcli engine: a backward was still using the device threads "
                            "after %.1fs at stop(); leaving them", wait_limit)
        pool = self._thread_pool
        with pool.cv:
            for _ in pool.threads:
                pool.graphtasks_queue.append(None)
            pool.cv.notify_all()
        if not forked and wait_limit > 0:
            for thread in pool.threads:
                thread.join(max(0.0, deadline - time.monotonic()))

    def live_threads(self):
        return [t for t in self.device_threads + self._thread_pool.threads if t.is_alive()]


# -- node evaluation (free functions, as in engine.cpp) ---------------------------
# Note [Engine fast path]
# ~~~~~~~~~~~~~~~~~~~~~~~
# Most backwards are a plain ``backward()`` on the CPU: no device, no grad()
# inputs (exec_info), no create_graph, no anomaly mode, no --trace records, no
# deterministic buffers, started outside any other backward. For those,
# ``thread_main_fast`` replaces ``thread_main`` + ``evaluate_function`` and
# does per node only what they do in that case:
# - the same heap: it pops and pushes the thread's own ReadyQueue heap, with the
#   same NodeTask tuples (so the same order: PyTorch's CompareNodeTaskTime),
#   without ReadyQueue.push's waiter check: only this thread waits on its own
#   CPU queue, and it is busy here. A reentrant backward started by a node sees
#   the outer tasks in that queue exactly as in the general loop (the one task
#   it may keep out of the heap is never held while a node runs: Note [The one
#   ready task]);
# - no graph task lock: with no device in the graph task no other thread
#   touches its counters, buffers or dependencies (device threads only serve
#   device nodes; a reentrant graph task nested here is a graph task of its own);
# - thread-locals set once per backward: the current graph task (a nested
#   backward restores it) and grad mode, which is reset after a node only when
#   the node left it on (thread_main sets it before every node);
# - validate_outputs' common case (an ndarray of the input's shape and dtype on
#   the CPU) checked inline; anything else goes through validate_outputs itself,
#   which leaves the arrays that pass unchanged (Note [Outputs checked as they
#   are handed on]);
# - hooks: a node with any hook goes through call_function, as in the general
#   path.
# Any task it does not expect (another graph task's, a wake-up task, a node on a
# stream, an error) is pushed back and the general ``thread_main`` takes over
# from the same state. ``GRADCLI_ENGINE_FAST_PATH=0`` (or ``engine.FAST_PATH =
# False``) turns it off; tests/test_engine_fast_path.py runs every example graph
# both ways and compares the order and the gradients bit for bit.
FAST_PATH = os.environ.get("GRADCLI_ENGINE_FAST_PATH", "1") != "0"

# Note [The one ready task]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# When a node makes exactly one task ready and the heap is empty, that task is
# the one the next pop would return: the fast path keeps its node and buffer in
# two locals and runs it next, without building its NodeTask tuple, pushing and
# popping it (a chain of nodes, the body of most models' backward, is all such
# steps). A second task made ready, or any task while the heap holds one,
# first pushes the kept one as the task it stands for, with a tie-break number
# drawn before the new task's: the heap then holds what it would have held, in
# the same order. The task is kept only from the outputs' loop to the loop's
# next turn, which takes it: no node runs (so no reentrant backward, hook or
# error handler looks at the queue) while it is out of the heap, and a loop
# ended by an error or an interrupt puts it back on the heap before the general
# loop or the caller can see the queue.

# Note [Outputs checked as they are handed on]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The fast path checks a node's output against its edge's input metadata in the
# loop that hands it to the next node's InputBuffer, not in a loop of its own
# before (one pass over the outputs per node instead of two). At the first
# output that is not the common case, validate_outputs runs on all of them, as
# the general path does: it leaves those that pass as they are and fixes up the
# others in the list (summed to a broadcast shape, cast), so the outputs still
# to be handed on are the fixed ones. When it raises, the outputs before that
# one were already handed on: the graph task fails with the same error as on
# the general path, and the tasks they made ready are never run: the failed
# graph task is completed at once, and thread_main skips any task of a graph
# task with an error, as PyTorch's does.


# Note [Schedules of retained graphs]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A fast-path backward (Note [Engine fast path]) of a retained graph from one
# root (retain_graph, ``--repeat N --retain-graph``) records the order its nodes
# ran in and, for each node, where each of its outputs goes (the position of the
# consumer in that order and the consumer's input slot). The graph below a root
# never changes once recorded (edges and sequence numbers are fixed when a node
# is made), and on the fast path the order depends on nothing else, so the next
# fast-path backward from the same root and input slot replays it, as compiled
# autograd replays a captured graph: the same nodes, the same order, the same
# contributions summed in the same order into the same InputBuffers (bit-
# identical gradients), without dependency counting or the ready queue. Hooks
# are honoured per node as on the fast path. Schedules are kept in a
# WeakKeyDictionary keyed by the root node and hold every node but the root
# (which they get from the caller), so they live exactly as long as the graph.
# A backward the fast path does not take (grad(), create_graph, anomaly, devices,
# a trace, a reentrant call, several roots) neither records nor replays, nor
# does one during which another backward started (a node's reentrant backward
# shares the ready queue with the outer tasks, which a replay does not hold).
import weakref  # noqa: E402

_SCHEDULES = weakref.WeakKeyDictionary()


class Schedule:
    """A retained graph's recorded order (Note [Schedules of retained graphs])."""

    __slots__ = ("input_nr", "nodes", "targets", "slots")

    @classmethod
    def of(cls, ran, input_nr):
        index = {fn: k for k, fn in enumerate(ran)}
        if len(index) != len(ran):
            return None                      # a node ran twice: not a plain graph
        targets = []
        for fn in ran:
            row = []
            for edge in fn.next_edges:
                if edge is None:
                    row.append(None)
                    continue
                k = index.get(edge[0])
                if k is None:
                    return None              # a consumer that never ran
                row.append((k, edge[1]))
            targets.append(tuple(row))
        self = cls()
        self.input_nr = input_nr
        self.nodes = [None] + ran[1:]        # not the root: the cache's key
        self.targets = targets
        self.slots = [len(fn.input_metadata) for fn in ran]
        return self


def _fast_path_applies(graph_task, queue):
    trace = graph_task.trace
    return (not graph_task.uses_devices and not graph_task.exec_info
            and not graph_task.create_graph and not graph_task.anomaly[0]
            and not graph_task.deterministic
            and (queue is None or _drop_failed_tasks(queue, graph_task))
            and (trace is None or type(trace) is NodeCounter))


def _drop_failed_tasks(queue, graph_task):
    """True when ``queue`` holds only ``graph_task``'s tasks (none for None) once the
    tasks of failed graph tasks are dropped. A backward that failed leaves its other
    tasks in its thread's queue; the general loop pops and skips them (counting them
    off) whenever it meets them, which nothing can observe, so dropping them here
    changes nothing but lets this thread's next backwards take the fast path."""
    heap = queue._heap
    if not heap or (len(heap) == 1 and heap[0][4] is graph_task):
        return True
    stale = [t for t in heap if t[4] is not graph_task]
    if any(t[4] is None or not t[4].has_error for t in stale):
        return False
    for t in stale:
        failed = t[4]
        with failed.lock:
            failed.outstanding_tasks -= 1
    heap[:] = [t for t in heap if t[4] is graph_task]
    heapify(heap)
    return True


def call_tensor_pre_hooks(fn, inputs):
    hooks = fn.hooks
    if hooks is None:
        return inputs
    if hooks.tensor_pre:
        for input_nr, hook in list(hooks.tensor_pre):
            original = inputs[input_nr]
            _shown(inputs, input_nr)
            result = hook(original)
            if result is not None:       # Note [Hook results]
                _replace(inputs, input_nr, check_tensor_hook_result(original, result, hook))
    retains = hooks.retains_grad
    if retains:
        for input_nr, hook in list(retains.items()):
            if inputs[input_nr] is not None:
                _shown(inputs, input_nr)
                result = hook(inputs[input_nr])
                if result is not None:
                    _replace(inputs, input_nr, result)
    return inputs


def _shown(inputs, input_nr):
    """A hook sees the gradient and may keep it: the buffer no longer owns that slot
    (Note [Stealing gradients])."""
    if isinstance(inputs, InputBuffer):
        inputs.disown(input_nr)


def _replace(inputs, input_nr, value):
    """A hook's result replaces a gradient: the buffer no longer owns that slot
    (Note [Stealing gradients])."""
    if value is not inputs[input_nr]:
        inputs[input_nr] = value
        _shown(inputs, input_nr)


def call_pre_hooks(fn, inputs):
    for hook in list(fn.hooks.pre):
        for pos in range(len(inputs)):
            _shown(inputs, pos)
        grads = tuple(inputs)
        result = hook(grads)
        if result is not None:           # Note [Hook results]
            inputs = check_tuple_result(grads, result, hook)
    return inputs


def call_post_hooks(fn, outputs, inputs):
    outputs = list(outputs)       # a hook sees them and may keep them: none is fresh now
    for hook in list(fn.hooks.post):
        grads = tuple(outputs)
        result = hook(grads, tuple(inputs))
        if result is not None:           # Note [Hook results]
            outputs = check_tuple_result(grads, result, hook)
    return outputs


def call_plain_function(graph_task, fn, inputs):
    """call_function for the fast path and replayed schedules (Note [Engine fast path]):
    a node without hooks is applied directly and validate_outputs' common case (a CPU
    array of the expected shape and dtype) is checked inline; anything else goes
    through the general call_function / validate_outputs."""
    if fn.hooks is not None:
        return call_function(graph_task, fn, inputs)
    outputs = fn.apply(inputs)
    next_edges = fn.next_edges
    if len(outputs) != len(next_edges):
        validate_outputs(next_edges, outputs, fn.name)     # raises: the count is wrong
    for i, grad in enumerate(outputs):
        edge = next_edges[i]
        if edge is None or grad is None:
            continue
        meta = edge[0].input_metadata[edge[1]]
        if not (type(grad) is np.ndarray and meta.device is CPU
                and grad.shape == meta.shape and grad.dtype is meta.dtype):
            validate_outputs(next_edges, outputs, fn.name)
            break
    return outputs


def call_function(graph_task, fn, inputs):
    # Note [Hooks ordering]: tensor pre-hooks, then retains_grad hooks, then
    # node pre-hooks, then the node, then its post-hooks.
    hooks = fn.hooks
    if hooks is not None:
        if hooks.tensor_pre or hooks.retains_grad:
            inputs = call_tensor_pre_hooks(fn, inputs)
        if hooks.pre:
            inputs = call_pre_hooks(fn, inputs)
    outputs = fn.apply(inputs)
    validate_outputs(fn.next_edges, outputs, fn.name)
    if hooks is not None and hooks.post:
        outputs = call_post_hooks(fn, outputs, inputs)
    return outputs


def validate_outputs(edges, grads, fn_name):
    """Check (and fix up) the gradients a node sends along its edges.

    Count must match; a gradient of a broadcast shape is summed back to the
    input's shape; a different dtype is cast; a 0-dim gradient on another
    device is moved, any other fails. Messages are PyTorch's, prefixed with
    "Function <name> returned an " for node outputs.
    """
    if len(grads) != len(edges):
        raise RuntimeError(_format(fn_name, f"invalid number of gradients - expected "
                                            f"{len(edges)}, but got {len(grads)}"))
    for i, grad in enumerate(grads):
        edge = edges[i]
        if edge is None or grad is None:
            continue
        meta = edge[0].input_metadata[edge[1]]
        if (type(grad) is np.ndarray and meta.device is CPU and grad.shape == meta.shape
                and grad.dtype is meta.dtype):
            continue                 # the common case: nothing to check or fix
        if type(grad) is dispatch.Tensor:
            grads[i] = _validate_tensor_grad(grad, meta, i, fn_name)
            continue
        shape = getattr(grad, "shape", None)
        if shape is None:
            raise RuntimeError(_format(fn_name, f"invalid gradient at index {i} - expected an "
                                                f"array but got {type(grad).__name__}"))
        if shape != meta.shape:
            if meta.is_expandable_to_shape(shape):
                grad = meta.reduce_grad(grad)
            else:
                raise RuntimeError(_format(fn_name, meta.incompatible_shape_error_message(i, grad)))
        if grad.dtype != meta.dtype:
            grad = grad.astype(meta.dtype)
        if meta.device is not CPU or type(grad) is not np.ndarray:
            dev = device_of(grad)
            if dev is not meta.device:
                if grad.ndim == 0:
                    grad = to_device(grad, meta.device)
                else:
                    raise RuntimeError(_format(fn_name, f"invalid gradient at index {i} - "
                                                        f"expected device {meta.device} but got {dev}"))
        grads[i] = grad


def _validate_tensor_grad(grad, meta, i, fn_name):
    """validate_outputs for a Tensor gradient (create_graph): the same checks,
    and fix-ups made with ops so that they record (Note [Differentiable VJPs])."""
    ops = dispatch.ops               # Note [Core dispatch]
    data = grad.data
    if data.shape != meta.shape:
        if not meta.is_expandable_to_shape(data.shape):
            raise RuntimeError(_format(fn_name, meta.incompatible_shape_error_message(i, data)))
        grad = ops.unbroadcast(grad, meta.shape)
    if grad.dtype != meta.dtype:
        grad = ops.cast(grad, dtype=meta.dtype.name)
    dev = device_of(grad.data)
    if dev is not meta.device:
        if grad.ndim != 0:
            raise RuntimeError(_format(fn_name, f"invalid gradient at index {i} - "
                                                f"expected device {meta.device} but got {dev}"))
        grad = ops.to(grad, device=str(meta.device))
    return grad


def _format(fn_name, msg):
    return msg if fn_name is None else f"Function {fn_name} returned an {msg}"


def sleep_unless_cancelled(seconds):
    """Sleep up to ``seconds`` inside a node; return early when the graph task
    the calling thread works for has ended (an error or an interrupt:
    Note [Interrupted backwards]). Outside a backward, a plain sleep."""
    graph_task = TLS.current_graph_task
    if graph_task is None:
        time.sleep(seconds)
    else:
        graph_task.wait(seconds)


def check_anomaly(fn, outputs, check_inf):
    for i, out in enumerate(outputs):
        if out is None:
            continue
        data = to_host(out.data if type(out) is dispatch.Tensor else out)
        if np.isnan(data).any():
            raise AnomalyError(f"Function '{fn.name}' returned nan values in its {i}th output.", fn)
        if check_inf and np.isinf(data).any():
            raise AnomalyError(f"Function '{fn.name}' returned inf values in its {i}th output.", fn)


class AnomalyError(RuntimeError):
    def __init__(self, message, fn):
        super().__init__(message)
        self.gradcli_node = fn


# -- the default engine ----------------------------------------------------------
_default_engine = None
_default_lock = threading.Lock()


def current_engine() -> Engine:
    """The engine running on this thread (for reentrant calls), else the default one."""
    return TLS.engine or get_default_engine()


def get_default_engine() -> Engine:
    global _default_engine
    engine = _default_engine
    if engine is None or engine.stopped:
        with _default_lock:
            if _default_engine is None or _default_engine.stopped:
                _default_engine = Engine()
            engine = _default_engine
    return engine


def set_default_engine(engine: Engine | None) -> None:
    global _default_engine
    _default_engine = engine


def _stop_default_engine_at_exit():
    engine = _default_engine
    if engine is not None and not engine.stopped and engine.device_threads:
        engine.stop()


import atexit  # noqa: E402

atexit.register(_stop_default_engine_at_exit)


def get_current_graph_task_execution_order():
    """The nodes of the current backward in the order a single thread runs them.

    Valid only during a backward with multithreading disabled.
    """
    graph_task = TLS.current_graph_task
    if graph_task is None:
        raise RuntimeError("get_current_graph_task_execution_order should only be called "
                           "during the backward pass")
    if graph_task.multithreading:
        raise RuntimeError(
            "get_current_graph_task_execution_order expects the current backward to be "
            "executed with multithreading disabled, e.g. by running:\n\n"
            ">>> with gradcli.autograd.set_multithreading_enabled(False):\n"
            "...     gradcli.autograd.grad(...)\n")
    return _simulate_order(graph_task.graph_roots, graph_task.exec_info)


def predicted_execution_order(roots, inputs=None):
    """The nodes a single-threaded backward from ``roots`` would run, in order.

    ``roots`` are nodes or gradient edges ``(node, input_nr)``; ``inputs``
    (edges, or None for a plain backward) selects grad() semantics: only the
    nodes on a path to an input run (Note [Exec info]). The engine's own
    GraphRoot (the seed node of a backward with several roots) is never part
    of the order: it is not a node of the user's graph.
    """
    root_edges = [r if isinstance(r, tuple) else (r, 0) for r in roots]
    root_nodes = [e[0] for e in root_edges]
    if not inputs:
        return _simulate_order(root_nodes)
    graph_root = root_nodes[0] if len(root_edges) == 1 else GraphRoot(root_edges, [])
    task = GraphTask(False, False, 0, None, root_nodes)
    task.init_to_execute(graph_root, list(inputs), False,
                         min(e[0].topological_nr for e in inputs))
    return [fn for fn in _simulate_order(root_nodes, task.exec_info)
            if task.exec_info[fn].needed]


def _simulate_order(roots, exec_info=None):
    """Simulate a single-threaded backward from the nodes ``roots``.

    Like the engine, a node becomes ready when every edge into it has
    delivered (dependency counts), and among ready nodes the highest
    sequence_nr runs first. Nodes that ``exec_info`` rules out are skipped.
    """
    import heapq  # noqa: PLC0415

    def wanted(fn):
        if not exec_info:
            return True
        info = exec_info.get(fn)
        return info is not None and info.should_execute()

    dependencies = {}
    stack, seen = list(roots), set(roots)
    for root in roots:
        dependencies[root] = dependencies.get(root, 0) + 1   # the virtual GraphRoot's edge
    while stack:
        fn = stack.pop()
        for edge in fn.next_edges:
            if edge is None:
                continue
            nxt = edge[0]
            dependencies[nxt] = dependencies.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    out, heap, tiebreak = [], [], 0

    def deliver(fn):
        nonlocal tiebreak
        dependencies[fn] -= 1
        if dependencies[fn] == 0 and wanted(fn):
            heapq.heappush(heap, (-fn.sequence_nr, tiebreak, fn))
            tiebreak += 1

    for root in dict.fromkeys(roots):
        for _ in range(roots.count(root)):
            deliver(root)
    while heap:
        _, _, fn = heapq.heappop(heap)
        out.append(fn)
        for edge in fn.next_edges:
            if edge is not None:
                deliver(edge[0])
    return out
