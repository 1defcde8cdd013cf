"""The ``gradcli`` process's entry point, which may end without tearing down.

Note [Exit without teardown]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``gradcli run`` on a 1,000,000-op graph keeps the loaded graph and its last run
(millions of small objects, about 2 GB) until it ends. Freeing them one by one,
when the command returns and again when the interpreter shuts down, took about
0.6 s of CPU (3% of the run) and serves nothing: the process is ending. So a
command hands what it keeps to ``keep_until_exit`` (held here instead of freed
when the command returns), and the process started by ``python -m gradcli`` or
the ``gradcli`` script ends with ``os._exit`` once everything is written,
skipping the interpreter's teardown. Before that it does what the normal exit
would have done that anyone can observe: it runs the atexit callbacks (the
engine's device threads stopped, logging flushed) and flushes stdout and
stderr. It is taken only when something was kept, the exit code is an int (the
command's own), no thread other than daemon threads is running (the normal exit
would wait for it) and flushing succeeds; otherwise the process exits as
before, which reports what only it can (a failed flush). Commands keep nothing
when user code ran (``--allow-code``: its open files are flushed only by the
interpreter's teardown). ``gradcli.cli.main`` itself, the library API and
click's test runner never take this exit: only ``main`` here does.
"""
from __future__ import annotations

import os
import sys

_kept = []


def keep_until_exit(*objects) -> None:
    """Hold ``objects`` (the last ones handed; earlier ones are released) so that they
    are not freed before the process ends (Note [Exit without teardown])."""
    _kept[:] = [objects]


def main() -> None:
    """``python -m gradcli`` and the ``gradcli`` script: the CLI, then the exit."""
    from . import main as cli_main

    try:
        cli_main(prog_name="gradcli")
    except SystemExit as exc:
        if _kept:
            _exit_now(exc.code)   # returns only when that exit is not safe
        raise


def _exit_now(code) -> None:
    """End the process with ``code`` without teardown when it is safe (else return)."""
    import threading

    if code is None:
        code = 0
    if not isinstance(code, int) or isinstance(code, bool):
        return
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive()
           for t in threading.enumerate()):
        return
    import atexit

    atexit._run_exitfuncs()       # then cleared: the normal exit would not run them again
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return                    # the normal exit reports it
    os._exit(code)
