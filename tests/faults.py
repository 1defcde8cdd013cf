"""Planted faults, for proving that `gradcli stress` catches real engine bugs.

The product carries no fault switches: this test-only module monkeypatches
the engine in the process it runs in, then runs the gradcli CLI there. The
stress-fault tests start it as a subprocess:

    python tests/faults.py FAULT[,FAULT...] stress --scenario ...

Each fault breaks on purpose what one stress scenario checks:

    lost_wakeup        drop the wake-up task a device thread sends to a graph
                       task's owner (Note [Wake-up tasks]): the owner hangs
    racy_accumulate    AccumulateGrad read-modify-writes .grad without its lock
    no_reentrant_pool  nest every reentrant backward on the caller's stack
                       (the pool never takes over): deep reentrancy overflows
    swallow_errors     a node's exception is dropped instead of recorded
    no_shutdown_tasks  Engine.stop() never pushes shutdown tasks
    no_fork_check      an engine's threads are trusted after fork()
    no_version_check   a node never compares its saved tensors' versions
"""
from __future__ import annotations

import os
import sys
import time

_DROPPED = object()


def lost_wakeup():
    from gradcli.autograd import engine
    from gradcli.autograd.ready_queue import ReadyQueue

    engine.wakeup_task = lambda graph_task: _DROPPED
    push = ReadyQueue.push

    def dropping_push(self, task):
        if task is not _DROPPED:
            push(self, task)

    ReadyQueue.push = dropping_push


def racy_accumulate():
    from gradcli.autograd.node import AccumulateGrad

    def racy_apply(self, grads):
        new_grad = grads[0]
        if new_grad is None:
            return []
        var = self.variable
        old = var.grad
        time.sleep(0.001)          # lets another thread's update be lost
        var.grad = new_grad.copy() if old is None else old + new_grad
        return []

    AccumulateGrad.apply = racy_apply


def no_reentrant_pool():
    from gradcli.autograd import engine

    engine.default_max_recursion_depth = lambda: 10**9


def swallow_errors():
    from gradcli.autograd.engine import Engine

    Engine.thread_on_exception = lambda self, graph_task, fn, exc: None


def no_shutdown_tasks():
    from gradcli.autograd.ready_queue import ReadyQueue

    ReadyQueue.push_shutdown = lambda self: None


def no_fork_check():
    from gradcli.autograd.engine import Engine

    Engine.check_not_forked = lambda self: None


def no_version_check():
    from gradcli.ops.core import OpBackward

    OpBackward._check_versions = lambda self, saved: None


FAULTS = {f.__name__: f for f in (lost_wakeup, racy_accumulate, no_reentrant_pool,
                                  swallow_errors, no_shutdown_tasks, no_fork_check,
                                  no_version_check)}


def main(argv):
    names, args = argv[0], argv[1:]
    for name in filter(None, names.split(",")):
        FAULTS[name]()
    from gradcli.cli import main as cli_main

    cli_main(args=args, prog_name="gradcli")


if __name__ == "__main__":
    # Run from the repository root: gradcli is imported from there.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1:])
