"""``gradcli ops --missing``: the core ATen overloads (``torch.Tag.core``) that have no op yet,
from torch where it is installed, else from the list shipped in ``gradcli/ops/aten/core_opset.py``."""
from __future__ import annotations

import builtins
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gradcli.cli import main
from gradcli.ops.aten import ATEN_OPS, core_opset

try:
    import torch
except ImportError:          # pragma: no cover - torch is an optional extra
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (the gradcli[torch] extra)")


def _run(*args):
    result = CliRunner().invoke(main, ["ops", "--missing", *args])
    assert result.exit_code == 0, result.output
    return result.output


@needs_torch
def test_the_shipped_core_opset_is_the_installed_torchs():
    from gradcli.bridges.torch.opset import core_aten_overloads, torch_version
    from gradcli.bridges.torch.versions import release

    if release(torch_version()) != release(core_opset.TORCH_VERSION):
        # another tested release: the shipped list is not its, so `ops --missing` reads torch's
        _check_missing_reads_the_installed_torch(torch_version())
        return
    assert core_opset.TORCH_VERSION == torch_version()
    assert set(core_opset.CORE_ATEN) <= set(core_aten_overloads())    # others' imports may tag more
    # the generator script agrees byte for byte (it is how the list is made)
    check = subprocess.run([sys.executable, "scripts/gen_core_opset.py", "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def _check_missing_reads_the_installed_torch(version):
    # both in a fresh process: modules imported by other tests may tag more overloads core
    code = "from gradcli.bridges.torch.opset import core_aten_overloads as c; print('\\n'.join(c()))"
    installed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout.split()
    out = subprocess.run([sys.executable, "-m", "gradcli", "ops", "--missing", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["source"] == f"the installed torch {version}"
    assert data["core_count"] == len(installed) > 0
    assert data["missing"] == sorted(set(installed) - set(ATEN_OPS))


def test_missing_lists_exactly_the_core_overloads_without_an_op():
    # in a fresh process: modules imported by other tests may tag more overloads core
    out = subprocess.run([sys.executable, "-m", "gradcli", "ops", "--missing", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    core = set(core_opset.CORE_ATEN)
    assert data["core_count"] == len(core)
    assert data["missing"] == sorted(core - set(ATEN_OPS))
    assert data["missing_count"] == len(data["missing"])
    assert "aten.add.Tensor" not in data["missing"]            # an op gradcli has
    assert "aten.sin.default" not in data["missing"]


def test_every_core_aten_overload_has_an_op():
    # the whole core opset is covered: an op that goes missing (unregistered, renamed, its
    # module no longer imported) fails here by name
    assert core_opset.missing() == []
    assert len(core_opset.CORE_ATEN) == 189


@needs_torch
def test_every_core_overload_of_the_installed_torch_has_an_op():
    # in a fresh process, as `gradcli ops --missing` reads the installed torch
    out = subprocess.run([sys.executable, "-m", "gradcli", "ops", "--missing", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["missing"] == [] and data["missing_count"] == 0


def test_missing_prints_one_name_a_line_and_the_count(monkeypatch):
    from gradcli.bridges.torch import opset

    monkeypatch.setattr(opset, "core_aten_overloads", lambda: list(core_opset.CORE_ATEN))
    lines = _run().splitlines()
    absent = core_opset.missing()
    assert lines[:-1] == absent
    assert lines[-1].startswith(f"{len(absent)} of {len(core_opset.CORE_ATEN)} core ATen overloads have no op")


def test_missing_falls_back_to_the_shipped_list_without_torch(monkeypatch):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    data = json.loads(_run("--format", "json"))
    assert data["source"] == f"the list shipped with gradcli (torch {core_opset.TORCH_VERSION})"
    assert data["missing"] == core_opset.missing()
