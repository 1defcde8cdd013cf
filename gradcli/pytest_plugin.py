"""The pytest plugin (entry point ``pytest11``: active once gradcli is installed).

``pytest --gradcli PATH`` collects every graph file under PATH (``.yaml``, ``.yml``,
``.json``) that has an ``expect:`` section: one test item per file, which runs what
``gradcli validate FILE`` runs. A failing item shows the failing checks as
``validate`` prints them, not a traceback. pytest's own ``-k``, ``-x``,
``--junitxml`` and pytest-xdist's ``-n N`` apply as to any test.

Each option of ``validate`` is a pytest option and an ini setting::

    pytest --gradcli graphs/ --gradcli-numeric --gradcli-device-map cuda=sim

    # pytest.ini / [tool.pytest.ini_options]
    gradcli_paths = graphs
    gradcli_numeric = true
    gradcli_device_map = cuda=sim

This module is imported by every pytest run once gradcli is installed: it imports
nothing of gradcli's at import time.
"""
from __future__ import annotations

import os
import re

import pytest

#: (option name, validate keyword, type, help). A flag's ini value is a bool.
OPTIONS = (
    ("numeric", "numeric", "flag", "also check the Jacobians against finite differences"),
    ("fast", "fast", "flag", "numeric check on random projections (implies numeric)"),
    ("eps", "eps", float, "finite-difference step (default 1e-6)"),
    ("atol", "atol", float, "absolute tolerance of the numeric check (default 1e-5)"),
    ("rtol", "rtol", float, "relative tolerance of the numeric check (default 1e-3)"),
    ("check-order", "check_order", "flag", "check the predicted execution order"),
    ("repeat", "repeat", int, "check that N backwards give N times the gradient"),
    ("no-multithreading", "multithreading", "noflag", "run every node on the calling thread"),
    ("detect-anomaly", "detect_anomaly", "flag", "fail on the first node that returns NaN"),
    ("check-inf", "check_inf", "flag", "with detect-anomaly, also fail on Inf"),
    ("device-map", "device_map", str, "remap device types, e.g. cuda=sim"),
    ("allow-code", "allow_code", "flag", "allow `custom` ops to run user code"),
    ("allow-outside-paths", "allow_outside_paths", "flag",
     "allow `file:` paths outside the graph file's folder"),
    ("max-tensor-bytes", "max_tensor_bytes", int, "refuse tensors larger than this"),
    ("max-document-bytes", "max_document_bytes", int, "memory the parsed document may take"),
    ("max-graph-bytes", "max_graph_bytes", int, "refuse graphs whose tensors add up to more"),
)
GRAPH_SUFFIXES = (".yaml", ".yml", ".json")
# A top-level `expect:` key in YAML (at the start of a line), `"expect":` in JSON.
_EXPECT = re.compile(rb'(?m)^expect[ \t]*:|"expect"\s*:')


def pytest_addoption(parser):
    group = parser.getgroup("gradcli", "graph files checked by gradcli validate")
    group.addoption("--gradcli", action="append", default=[], metavar="PATH",
                    help="collect the graph files with an `expect:` section under PATH "
                         "(repeatable): one test per file, as `gradcli validate`.")
    parser.addini("gradcli_paths", "graph folders or files collected as with --gradcli",
                  type="paths", default=[])
    for name, _, kind, text in OPTIONS:
        ini = "gradcli_" + name.replace("-", "_")
        if kind in ("flag", "noflag"):
            group.addoption(f"--gradcli-{name}", action="store_true", default=None, help=text)
            parser.addini(ini, text, type="bool", default=None)
        else:
            group.addoption(f"--gradcli-{name}", default=None, metavar="VALUE", help=text)
            parser.addini(ini, text, default=None)


def _graph_roots(config):
    paths = list(config.getoption("gradcli") or [])
    if not paths:
        paths = [str(p) for p in config.getini("gradcli_paths")]
    return paths


def pytest_configure(config):
    roots = _graph_roots(config)
    config._gradcli_roots = [os.path.abspath(p) for p in roots]
    if not roots:
        return
    config._gradcli_options = gradcli_options(config)   # a bad value stops the run here
    # Note [Graph paths are pytest's paths]: the paths are handed to pytest's own
    # collection, so -k, -x, xdist's distribution and the node ids work as for any
    # test file. Without positional arguments pytest would collect its testpaths
    # too; `pytest --gradcli graphs/` collects the graphs alone. xdist's workers
    # parse the same command line and come to the same list.
    explicit = getattr(config, "args_source", None) == pytest.Config.ArgsSource.ARGS
    args = list(config.args) if explicit else []
    for p in roots:
        if p not in args:
            args.append(p)
    config.args[:] = args


def gradcli_options(config) -> dict:
    """The ``validate`` options given on the command line, else in the ini file.

    >>> gradcli_options(config)       # pytest --gradcli-numeric  # doctest: +SKIP
    {'numeric': True}
    """
    out = {}
    for name, key, kind, _ in OPTIONS:
        value = config.getoption(f"gradcli_{name.replace('-', '_')}")
        if value is None:
            value = config.getini("gradcli_" + name.replace("-", "_"))
        if value is None or value == "":
            continue
        try:
            if kind == "noflag":
                value = not _bool(value)
            elif kind == "flag":
                value = _bool(value)
            else:
                value = kind(value)
        except ValueError:
            raise pytest.UsageError(f"--gradcli-{name}: {value!r} is not a valid "
                                    f"{getattr(kind, '__name__', kind)}") from None
        out[key] = value
    return out


def _bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def has_expect(path) -> bool:
    """Whether the graph file at ``path`` has an ``expect`` section.

    >>> has_expect("graphs/diamond.yaml")       # doctest: +SKIP
    True
    """
    try:
        with open(path, "rb") as fh:
            return _EXPECT.search(fh.read()) is not None
    except OSError:
        return False


def pytest_collect_file(file_path, parent):
    roots = getattr(parent.config, "_gradcli_roots", None)
    if not roots or file_path.suffix.lower() not in GRAPH_SUFFIXES:
        return None
    here = str(file_path)
    if not any(here == r or here.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
        return None
    if not has_expect(file_path):
        return None
    return GraphFile.from_parent(parent, path=file_path)


class GraphFile(pytest.File):
    """A graph file: one item, ``validate``."""

    def collect(self):
        yield GraphItem.from_parent(self, name="validate")


class GraphItem(pytest.Item):
    """``gradcli validate FILE`` as one test."""

    def runtest(self):
        from .testing import assert_backward_matches

        self.report = assert_backward_matches(str(self.path), **self.config._gradcli_options)

    def repr_failure(self, excinfo, style=None):
        from .testing import BackwardMismatch

        if isinstance(excinfo.value, BackwardMismatch):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"gradcli validate {self.path.name}"
