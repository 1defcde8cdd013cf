"""Write a backward's node runs as a Chrome Trace Event Format file.

One lane (``tid``) per engine thread that ran nodes: the caller, each device
thread, each reentrant pool thread. One complete event ("ph": "X") per node
evaluation, with the node, op, graph task id and reentrant depth in ``args``.
Opens in Perfetto (ui.perfetto.dev) and chrome://tracing. ``gradcli run
--trace`` writes it (with the CLI's one JSON writer).
"""
from __future__ import annotations

import os


def chrome_trace(result) -> dict:
    lanes = {}
    events = []
    for run in result.order:
        tid = lanes.setdefault(run.thread, len(lanes) + 1)
        events.append({
            "name": run.node, "cat": "backward", "ph": "X", "pid": os.getpid(), "tid": tid,
            "ts": run.start_s * 1e6, "dur": max(run.end_s - run.start_s, 0.0) * 1e6,
            "args": {"op": run.op, "graph_task": run.graph_task, "reentrant_depth": run.depth,
                     "sequence_nr": run.sequence_nr, "device": run.device},
        })
    meta = [{"name": "process_name", "ph": "M", "pid": os.getpid(),
             "args": {"name": f"gradcli backward: {result.graph}"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": tid,
              "args": {"name": name}} for name, tid in lanes.items()]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}

