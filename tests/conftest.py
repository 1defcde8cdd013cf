"""Fixtures shared by the test files: paths, an engine that is always stopped,
the CLI in process (click's CliRunner) and in a subprocess."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root():
    """The repository root (graphs/, tests/bad_inputs/ ...)."""
    return ROOT


@pytest.fixture
def engine():
    """A fresh Engine, stopped after the test so that no thread outlives it."""
    from gradcli.autograd import Engine

    eng = Engine()
    yield eng
    eng.stop()


@pytest.fixture
def gradcli_cli():
    """``gradcli_cli(*args)``: run ``gradcli ARGS`` in process; returns click's
    Result (exit_code, stdout, stderr apart). Exceptions are not swallowed:
    the CLI's own guard must turn them into exit codes."""
    from click.testing import CliRunner

    from gradcli.cli import main

    def invoke(*args, input=None):  # noqa: A002 - click's name
        return CliRunner().invoke(main, [str(a) for a in args], input=input,
                                  catch_exceptions=False)

    return invoke


@pytest.fixture
def gradcli_proc():
    """``gradcli_proc(*args, env=None, timeout=120, **popen)``: run ``python -m
    gradcli ARGS`` in a subprocess from the repository root; returns the
    CompletedProcess with text stdout and stderr."""

    def run(*args, env=None, timeout=120, **kwargs):
        if "stdout" not in kwargs and "stderr" not in kwargs:
            kwargs.setdefault("capture_output", True)
        return subprocess.run([sys.executable, "-m", "gradcli", *[str(a) for a in args]],
                              text=True, timeout=timeout, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                              **kwargs)

    return run


# -- markers: `torch` (runs PyTorch; `make test-torch`) and `gpu` (needs CUDA; `make test-gpu`) --
def pytest_configure(config):
    config.addinivalue_line("markers", "torch: the test runs PyTorch (marked from its module)")
    config.addinivalue_line("markers", "gpu: the test needs a CUDA device and CuPy; skipped "
                                       "elsewhere")
    _interruptible()


def _interruptible():
    """Ctrl-C as an interactive start has it. A shell without job control starts a
    background command (``make test &``, ``nohup``) with SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: the tests of Ctrl-C (which send SIGINT to this
    process or to a gradcli they start, which inherits the disposition) would see none.
    Python's own handler is installed in its place; a child started after it gets the
    default disposition again (a handled signal is reset on exec)."""
    import signal
    import threading

    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def cuda_available() -> bool:
    """A CUDA device that CuPy can use (never True on CI's CPU machines)."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "no"
        return False


def pytest_collection_modifyitems(config, items):
    no_cuda = None
    for item in items:
        module = getattr(item, "module", None)
        if getattr(getattr(module, "torch", None), "__name__", None) == "torch":
            item.add_marker(pytest.mark.torch)
        if item.get_closest_marker("gpu") is not None:
            if no_cuda is None:
                no_cuda = not cuda_available()
            if no_cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device (CuPy); "
                                                        "run `make test-gpu` on a GPU machine"))
