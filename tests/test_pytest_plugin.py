"""The pytest plugin (``pytest --gradcli PATH``) and ``gradcli.testing``.

The plugin is registered through the ``pytest11`` entry point of an installed
gradcli; where that entry point is not installed (an editable install made before
it existed), these tests load it explicitly (``-p gradcli.pytest_plugin``). Each
runs pytest in a subprocess started in a scratch folder, so that the repository's
own settings do not apply."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from gradcli import testing

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIAMOND = (ROOT / "graphs" / "diamond.yaml").read_text()
WRONG = DIAMOND.replace("x: {value: [5.0, 7.0, 9.0]}", "x: {value: [5.0, 7.5, 9.0]}")


def _entry_point_installed():
    from importlib import metadata

    return any(ep.value == "gradcli.pytest_plugin"
               for ep in metadata.entry_points(group="pytest11"))


# Where gradcli is installed with its entry point, pytest loads the plugin itself
# (and naming it again with -p would register it twice).
PLUGIN = [] if _entry_point_installed() else ["-p", "gradcli.pytest_plugin"]


def _pytest(cwd, *args, timeout=240):
    return subprocess.run([sys.executable, "-m", "pytest", *PLUGIN,
                           "-p", "no:cacheprovider", *map(str, args)], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def corpus(tmp_path):
    g = tmp_path / "graphs"
    (g / "sub").mkdir(parents=True)
    (g / "good.yaml").write_text(DIAMOND)
    (g / "sub" / "wrong.yaml").write_text(WRONG)
    (g / "noexpect.yaml").write_text(DIAMOND.split("expect:")[0])
    (g / "notes.txt").write_text("expect: nothing\n")
    return tmp_path


@pytest.mark.timeout(300)
def test_collects_one_item_per_graph_file_with_expect(corpus):
    proc = _pytest(corpus, "--gradcli", "graphs", "--collect-only", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    items = [line for line in proc.stdout.splitlines() if "::" in line]
    assert items == ["graphs/good.yaml::validate", "graphs/sub/wrong.yaml::validate"]


@pytest.mark.timeout(300)
def test_a_wrong_expectation_fails_naming_the_check_without_a_traceback(corpus):
    proc = _pytest(corpus, "--gradcli", "graphs", "-q", "--junitxml", "report.xml")
    assert proc.returncode == 1
    out = proc.stdout
    assert "1 failed, 1 passed" in out
    assert "grads[x]: gradient of 'x' differs from expect.grads" in out
    assert "worst element x[1]: got 7, expected 7.5" in out
    assert "wrong.yaml: FAIL: 3 checks, 2 passed, 1 failed" in out
    assert "Traceback" not in out and "gradcli/validate.py" not in out
    cases = ET.parse(corpus / "report.xml").getroot().iter("testcase")
    failures = {c.get("classname"): c.find("failure") for c in cases}
    assert failures["graphs.good.yaml"] is None
    assert "grads[x]" in failures["graphs.sub.wrong.yaml"].text


@pytest.mark.timeout(300)
def test_k_and_x_select_and_stop(corpus):
    (corpus / "graphs" / "sub" / "wrong2.yaml").write_text(WRONG)
    only = _pytest(corpus, "--gradcli", "graphs", "-q", "-k", "good")
    assert only.returncode == 0 and "1 passed, 2 deselected" in only.stdout
    first = _pytest(corpus, "--gradcli", "graphs", "-q", "-x")
    assert first.returncode == 1 and "1 failed, 1 passed" in first.stdout


@pytest.mark.timeout(300)
def test_xdist_gives_the_same_results(corpus):
    serial = _pytest(corpus, "--gradcli", "graphs", "-rA", "-q")
    dist = _pytest(corpus, "--gradcli", "graphs", "-rA", "-q", "-n", "2")
    assert serial.returncode == dist.returncode == 1
    assert "bringing up nodes" in dist.stdout
    summary = lambda out: sorted(tuple(line.split()[:4]) for line in out.splitlines()  # noqa: E731
                                 if line.startswith(("PASSED", "FAILED")))
    assert summary(dist.stdout) == summary(serial.stdout) == [
        ("FAILED", "graphs/sub/wrong.yaml::validate", "-", "grads[x]:"),
        ("PASSED", "graphs/good.yaml::validate")]


@pytest.mark.timeout(300)
def test_options_on_the_command_line_and_in_the_ini_file(corpus):
    (corpus / "graphs" / "gpu.yaml").write_text((ROOT / "graphs" / "gpu_mlp.yaml").read_text())
    no_map = _pytest(corpus, "--gradcli", "graphs/gpu.yaml", "-q")
    assert no_map.returncode == 1 and "INVALID" in no_map.stdout and "cuda=sim" in no_map.stdout
    mapped = _pytest(corpus, "--gradcli", "graphs/gpu.yaml", "-q", "--gradcli-device-map",
                     "cuda=sim")
    assert mapped.returncode == 0, mapped.stdout
    (corpus / "pytest.ini").write_text("[pytest]\ngradcli_paths = graphs/gpu.yaml\n"
                                       "gradcli_device_map = cuda=sim\ngradcli_numeric = true\n")
    ini = _pytest(corpus, "-q", "-rA")
    assert ini.returncode == 0, ini.stdout
    assert "PASSED graphs/gpu.yaml::validate" in ini.stdout
    bad = _pytest(corpus, "-q", "--gradcli-repeat", "two")
    assert bad.returncode == 4 and "--gradcli-repeat: 'two' is not a valid int" in bad.stderr


@pytest.mark.timeout(600)
def test_the_examples_give_validates_verdicts_serial_and_with_xdist(tmp_path):
    """`pytest --gradcli graphs/` on the repository's examples: each file passes
    exactly when `gradcli validate` passes it, with or without -n 2."""
    import json

    opts = ["--device-map", "cuda=sim", "--allow-code"]
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "graphs").rglob("*")
                   if p.suffix in (".yaml", ".json") and "expect:" in p.read_text()
                   or p.suffix == ".json" and '"expect"' in p.read_text())
    proc = subprocess.run([sys.executable, "-m", "gradcli", "validate", "--format", "json",
                           *opts, *files], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    want = {f["file"]: f["status"] == "pass" for f in json.loads(proc.stdout)["files"]}
    for extra in ([], ["-n", "2"]):
        run = _pytest(ROOT, "--gradcli", "graphs/", "-rA", "-q", "--gradcli-device-map",
                      "cuda=sim", "--gradcli-allow-code", "--rootdir", ROOT, *extra, timeout=500)
        got = {}
        for line in run.stdout.splitlines():
            if line.startswith(("PASSED ", "FAILED ")):
                word, node = line.split()[:2]
                got[node.split("::")[0]] = word == "PASSED"
        assert got == want, run.stdout[-3000:]


def test_assert_backward_matches():
    report = testing.assert_backward_matches(ROOT / "graphs" / "diamond.yaml", check_order=True)
    assert report.status == "pass" and [c.name for c in report.checks] == [
        "backward", "grads[x]", "order", "check-order"]


def test_assert_backward_matches_fails_as_validate_prints(tmp_path):
    bad = tmp_path / "wrong.yaml"
    bad.write_text(WRONG)
    with pytest.raises(AssertionError) as info:
        testing.assert_backward_matches(bad)
    text = str(info.value)
    assert text.splitlines()[0].startswith("grads[x]: gradient of 'x' differs from expect.grads")
    assert text.splitlines()[-1] == f"{bad}: FAIL: 3 checks, 2 passed, 1 failed"
    assert info.value.report.status == "fail"


def test_assert_backward_matches_load_options(tmp_path):
    gpu = ROOT / "graphs" / "gpu_mlp.yaml"
    with pytest.raises(AssertionError, match="INVALID: .*cuda=sim"):
        testing.assert_backward_matches(gpu)
    assert testing.assert_backward_matches(gpu, device_map="cuda=sim").status == "pass"
    assert testing.assert_backward_matches(gpu, device_map={"cuda": "sim"}).status == "pass"
    with pytest.raises(TypeError, match="unknown option.*numerik"):
        testing.assert_backward_matches(gpu, numerik=True)


def test_the_entry_point_is_declared_and_the_plugin_is_light():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["entry-points"]["pytest11"] == {"gradcli": "gradcli.pytest_plugin"}
    assert any(d.startswith("dask[distributed]") for d in meta["optional-dependencies"]["dask"])
    assert any(d.startswith("pytest-xdist") for d in meta["optional-dependencies"]["dev"])
    # Where gradcli is installed from this tree, the installed metadata says the same.
    from importlib import metadata

    try:
        eps = metadata.entry_points(group="pytest11")
        dist = metadata.distribution("gradcli")
    except metadata.PackageNotFoundError:
        dist = None
    if dist is not None and any(ep.group == "pytest11" for ep in dist.entry_points):
        assert "gradcli.pytest_plugin" in [ep.value for ep in eps if ep.name == "gradcli"]
    # Every pytest run imports the plugin: it must not pull in NumPy or the engine.
    code = ("import sys, gradcli.pytest_plugin\n"
            "print(sorted(m for m in ('numpy', 'gradcli.validate', 'gradcli.ops', 'click') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip() == "[]", proc.stderr
