"""The `gpu` marker (tests/conftest.py): where no CUDA device is seen, the tests that need
one are reported as skipped, with the reason, never as passed."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cuda_available

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is here: the gpu tests run")
@pytest.mark.timeout(300)
def test_without_cuda_the_gpu_tests_are_reported_as_skipped_not_passed():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           "-m", "gpu", str(REPO / "tests" / "test_streams.py")],
                          capture_output=True, text=True, timeout=280, cwd=REPO)
    assert "1 skipped" in proc.stdout and "passed" not in proc.stdout, proc.stdout
    assert "needs a CUDA device" in proc.stdout
