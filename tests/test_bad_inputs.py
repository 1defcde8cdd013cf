"""Bad graph files give one clear line (file, line, op, problem) and exit code 2.

The corpus is tests/bad_inputs/: one bad file per case, and expected.yaml
saying what the error must contain (``match``: a substring, or a regex after
``re:``), on which line (``line``), with which load options (``options``),
and whether it must fail fast (``fast``: alias bombs, deep nesting).

A ``fast`` file is checked here for what it must not do, expand or recurse: its
refusal stays within a memory bound (tracemalloc), and the test's timeout stops a
hang. How fast it is refused (about 0.05 s; expanding a billion-value alias bomb
takes minutes) is a benchmark: ``scripts/bench_bad_inputs.py``.
"""
from __future__ import annotations

import copy
import json
import re
import tracemalloc
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradcli
from gradcli.cli import main
from gradcli.errors import BackwardError, GraphError
from gradcli.loader import loads

CORPUS = Path(__file__).parent / "bad_inputs"
EXPECTED = yaml.safe_load((CORPUS / "expected.yaml").read_text())
NAMES = sorted(EXPECTED)
FAST = [n for n in NAMES if EXPECTED[n].get("fast")]


def _cuda_present():
    from gradcli.devices import cupy_module

    return cupy_module() is not None


def _skip_if_needed(name):
    if EXPECTED[name].get("requires_no_cuda") and _cuda_present():
        pytest.skip("CuPy and a GPU are present: cuda:0 is a valid device here")


def _check_message(name, msg):
    entry = EXPECTED[name]
    assert "\n" not in msg and "\r" not in msg, f"not one line: {msg!r}"
    assert "Traceback" not in msg
    path = str(CORPUS / name)
    assert msg.startswith(path), f"does not name the file {path}: {msg}"
    match = entry["match"]
    if match.startswith("re:"):
        assert re.search(match[3:], msg), f"{msg!r} does not match /{match[3:]}/"
    else:
        assert match in msg, f"{msg!r} does not contain {match!r}"
    if "line" in entry:
        assert msg.startswith(f"{path}:{entry['line']}: "), f"expected line {entry['line']}: {msg}"


def _cli_args(name):
    args = ["run", str(CORPUS / name)]
    for key, value in EXPECTED[name].get("options", {}).items():
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def test_corpus_is_complete():
    files = {p.name for p in CORPUS.iterdir() if p.name != "expected.yaml" and not p.name.startswith("data_")}
    assert len(EXPECTED) >= 45
    assert files == set(EXPECTED), "every bad file needs an entry in expected.yaml, and back"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", NAMES)
def test_api_raises_one_line_graph_error(name):
    _skip_if_needed(name)
    options = EXPECTED[name].get("options", {})
    with pytest.raises(GraphError) as info:   # any other exception type fails the test
        graph = gradcli.load(CORPUS / name, **options)
        graph.run()
    _check_message(name, str(info.value))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", NAMES)
def test_cli_exit_code_2_and_one_line(name):
    _skip_if_needed(name)
    result = CliRunner().invoke(main, _cli_args(name))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {type(result.exception).__name__}: {result.exception}")
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr
    assert "Traceback" not in result.output
    lines = err.splitlines()
    assert len(lines) == 1, f"stderr is not one line: {err!r}"
    assert lines[0].startswith("gradcli: error: ")
    _check_message(name, lines[0][len("gradcli: error: "):])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", FAST)
def test_bombs_are_refused_with_bounded_memory(name):
    # refused before anything is expanded: the peak stays far below what expanding would take
    # (the time to refuse is measured by scripts/bench_bad_inputs.py, not asserted here)
    tracemalloc.start()
    try:
        with pytest.raises(GraphError) as info:
            gradcli.load(CORPUS / name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _check_message(name, str(info.value))
    assert peak < 32 * 2**20, f"peak memory {peak} bytes"


def test_the_refusal_benchmark_covers_the_fast_corpus():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_bad_inputs", CORPUS.parents[1] / "scripts" /
                                                  "bench_bad_inputs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.fast_entries() == FAST and FAST
    assert bench.time_refusal(FAST[0]) >= 0


@pytest.mark.timeout(30)
def test_tiny_budget_refuses_before_allocating():
    # A tensor of 8 TB is refused by its shape alone, under any budget.
    with pytest.raises(GraphError, match="over the memory budget"):
        gradcli.load(CORPUS / "huge_tensor.yaml", max_tensor_bytes=2**40)
    text = "version: 1\ntensors:\n  x: {shape: [10, 10], requires_grad: true}\n" \
           "ops:\n  - {op: sum, inputs: [x], output: loss}\nbackward: {roots: [loss]}\n"
    loads(text, max_tensor_bytes=800).run()              # exactly at the budget: fine
    with pytest.raises(GraphError, match=r"<graph>:3: tensors.x: .*799 bytes"):
        loads(text, max_tensor_bytes=799)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", ["run", "validate"])
def test_named_pipe_is_refused_without_blocking(tmp_path, command):
    """A FIFO as the graph path is refused before it is opened for reading: opening
    it would block until a writer comes. Nobody writes here; if
    the reader blocked, the test opens the FIFO for writing to release it, and fails."""
    import os
    import threading

    fifo = tmp_path / "graph.yaml"
    os.mkfifo(fifo)
    outcome = {}

    def attempt():
        try:
            gradcli.load(fifo)
        except GraphError as exc:
            outcome["error"] = str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["other"] = exc
    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)   # release the blocked reader
        os.close(fd)
        worker.join(10)
        pytest.fail("loading a named pipe blocked")
    assert outcome.get("error") == f"{fifo}: is a named pipe, not a regular file: graph " \
                                   "files must be regular files", outcome
    result = CliRunner().invoke(main, [command, str(fifo)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"gradcli: error: {outcome['error']}"]


@pytest.mark.timeout(30)
def test_device_file_is_refused():
    with pytest.raises(GraphError, match=r"^/dev/null: is a device, not a regular file"):
        gradcli.load("/dev/null")


# -- property: mutated documents load and run, or fail with a GraphError ------------------------
BASE = {
    "version": 1, "name": "base", "seed": 3,
    "tensors": {
        "x": {"shape": [4, 3], "init": "normal"},
        "W": {"shape": [3, 5], "init": {"dist": "uniform", "low": -1, "high": 1},
              "requires_grad": True},
        "b": {"value": [0.1, 0.2, 0.3, 0.4, 0.5], "requires_grad": True, "dtype": "float64"},
        "y": {"value": [0, 1, 2, 1], "dtype": "int64"},
        "s": {"value": 2.0, "requires_grad": True},
        "F": {"file": "data_ok.npy"},
        "Z": {"file": "data_ok.npz", "key": "a", "dtype": "float64"},
    },
    "ops": [
        {"op": "matmul", "inputs": ["x", "W"], "output": "h", "id": "fc"},
        {"op": "add", "inputs": ["h", "b"], "output": "h1"},
        {"op": "relu", "inputs": ["h1"], "output": "a", "retain_grad": True},
        {"op": "mul", "inputs": ["a", "s"], "output": "a2"},
        {"op": "split", "inputs": ["a2"], "outputs": ["p", "q"], "args": {"indices": [2], "axis": 1}},
        {"op": "slice", "inputs": ["q"], "output": "q1", "args": {"index": "1:3, ::2"}},
        {"op": "sum", "inputs": ["q1"], "output": "t", "args": {"axis": None}},
        {"op": "to", "inputs": ["p"], "output": "ps", "device": "sim:1"},
        {"op": "log_softmax", "inputs": ["ps"], "output": "lp", "args": {"axis": 1}},
        {"op": "to", "inputs": ["lp"], "output": "lpc", "device": "cpu"},
        {"op": "mean", "inputs": ["lpc"], "output": "m"},
        {"op": "clamp", "inputs": ["h"], "output": "hc", "args": {"min": -0.5}},
        {"op": "mul", "inputs": ["x", "F"], "output": "xf"},
        {"op": "cross_entropy", "inputs": ["a2", "y"], "output": "ce"},
        {"op": "add", "inputs": ["ce", "t"], "output": "l1"},
        {"op": "add", "inputs": ["l1", "m"], "output": "loss"},
    ],
    "backward": {"roots": ["loss"], "retain_graph": False},
    "expect": {"rtol": 1e-6, "numeric": False},
}

VOCAB = sorted({
    "x", "W", "b", "y", "s", "F", "Z", "h", "h1", "a", "a2", "p", "q", "loss", "ce", "t",
    "version", "tensors", "ops", "backward", "expect", "shape", "dtype", "device", "value",
    "init", "file", "key", "requires_grad", "op", "inputs", "output", "outputs", "args", "id",
    "roots", "grad_roots", "retain_graph", "allow_unused", "axis", "keepdims", "sections",
    "indices", "index", "min", "max", "matmul", "add", "sum", "relu", "split", "slice", "to",
    "reshape", "expand", "transpose", "concat", "stack", "where", "cast", "softmax", "layer_norm",
    "mse_loss", "pow", "log", "squeeze", "unsqueeze", "float32", "int64", "bool", "cpu", "sim:0",
    "sim:1", "cuda:0", "normal", "uniform", "zeros", "full", "x-note", "data_ok.npy",
    "data_ok.npz", "../x.npy", "1:", "::-1, 0", "...", "None",
})
SCALARS = (st.none() | st.booleans() | st.integers(-3, 8) | st.integers()
           | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(VOCAB)
           | st.text(max_size=6))
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(VOCAB) | st.text(max_size=4), inner, max_size=3),
    max_leaves=8)


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


@st.composite
def mutated_documents(draw):
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["drop", "retype", "insert", "replace", "truncate",
                                       "shuffle", "duplicate"]))
        if not path:
            if action == "replace" and draw(st.booleans()):
                doc = draw(JSON_VALUES)
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        value = parent[key]
        if action == "drop":
            del parent[key]
        elif action == "retype":
            kinds = {"list": st.lists(SCALARS, max_size=3), "dict": st.dictionaries(
                st.sampled_from(VOCAB), SCALARS, max_size=2), "str": st.sampled_from(VOCAB),
                "int": st.integers(-2, 6), "float": st.floats(), "bool": st.booleans(),
                "null": st.none()}
            parent[key] = draw(st.sampled_from(sorted(kinds)).flatmap(lambda k: kinds[k]))
        elif action == "insert" and isinstance(value, dict):
            value[draw(st.sampled_from(VOCAB) | st.text(max_size=5))] = draw(JSON_VALUES)
        elif action == "replace":
            parent[key] = draw(JSON_VALUES)
        elif action == "truncate" and isinstance(value, list):
            del value[draw(st.integers(0, len(value))):]
        elif action == "shuffle" and isinstance(value, list):
            parent[key] = draw(st.permutations(value))
        elif action == "duplicate" and isinstance(value, list) and value:
            value.append(copy.deepcopy(draw(st.sampled_from(value))))
    return doc


def _legitimate_backward_failure(exc):
    from gradcli.ops import BackwardFailure

    return isinstance(exc.cause, BackwardFailure)


def test_base_document_runs():
    result = loads(json.dumps(BASE), format="json", base_dir=str(CORPUS)).run()
    assert set(result.grads) >= {"W", "b", "s", "a"}


@pytest.mark.timeout(300)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents())
def test_mutated_documents_fail_only_with_graph_error(doc):
    text = json.dumps(doc)
    try:
        graph = loads(text, format="json", base_dir=str(CORPUS), max_tensor_bytes=2**24)
        graph.run()
    except GraphError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith("<graph>")
    except BackwardError as exc:
        assert _legitimate_backward_failure(exc), f"backward failed: {exc}"
