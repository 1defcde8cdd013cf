"""Note [Plain op entries] and Note [Lines on demand for ops]: the loader's fast path
builds what its general code builds, and refuses nothing differently."""
import json

import numpy as np
import pytest

from gradcli import loader
from gradcli.loader.check_ops import OpChecks
from gradcli.errors import GraphError


def _doc(n_ops=30):
    ops, y = [], "y0"
    for i in range(n_ops // 2):
        ops.append({"op": "mul", "inputs": [y, "c"], "output": f"m{i}"})
        ops.append({"op": "add", "inputs": [f"m{i}", "d"], "output": f"y{i + 1}",
                    **({"id": f"add{i}"} if i % 3 == 0 else {}),
                    **({"retain_grad": True} if i == 4 else {}),
                    **({"args": {}} if i == 5 else {})})
        y = f"y{i + 1}"
    ops.append({"op": "sum", "inputs": [y], "output": "loss"})
    return {"version": 1, "seed": 3, "tensors": {
        "y0": {"shape": [2, 3], "init": "normal", "requires_grad": True},
        "c": {"shape": [3], "init": {"dist": "full", "fill": 0.5}},
        "d": {"shape": [2, 3], "init": "ones"}},
        "ops": ops, "backward": {"roots": ["loss"]}}


def _load(tmp_path, doc, fast, monkeypatch, name="g.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=1))
    taken = []
    original = OpChecks.plain_op

    def spy(self, *args):
        spec = original(self, *args) if fast else None
        taken.append(spec is not None)
        return spec

    with monkeypatch.context() as m:
        m.setattr(OpChecks, "plain_op", spy)
        graph = loader.load(path)
    return graph, taken


def _fields(spec):
    op = spec.op
    return (spec.index, spec.id, spec.label, spec.inputs, spec.outputs, spec.args,
            spec.retain_grad, spec.line, op.op, op.label, op.file, op.line, op.input_names,
            op.max_bytes, op.checked)


def test_plain_entries_build_what_the_general_code_builds(tmp_path, monkeypatch):
    doc = _doc()
    fast, taken = _load(tmp_path, doc, True, monkeypatch)
    slow, _ = _load(tmp_path, doc, False, monkeypatch)
    assert sum(taken) >= 25                     # the fast path was taken for most entries
    assert [_fields(s) for s in fast.ops] == [_fields(s) for s in slow.ops]
    assert (fast.forward_bytes, fast.float64_forward_bytes) == (
        slow.forward_bytes, slow.float64_forward_bytes)
    a, b = fast.run(), slow.run()
    assert np.array_equal(a.grads["y0"], b.grads["y0"])
    assert [r.node for r in a.order] == [r.node for r in b.order]
    text = (tmp_path / "g.json").read_text().splitlines()
    entries = [n - 1 for n, line in enumerate(text, 1) if '"op":' in line]   # the "{" lines
    assert [s.line for s in fast.ops] == entries


@pytest.mark.parametrize("k, change, message", [
    (7, {"inputs": ["m3", "nope"]}, r"ops\[7\] 'add3' \(add\): input 'nope' is not defined"),
    (8, {"output": "y0"}, r"output 'y0' is already defined as a leaf tensor"),
    (8, {"output": "9bad"}, r"invalid tensor name '9bad'"),
    (9, {"inputs": ["m4"]}, r"takes 2 inputs, got 1"),
    (9, {"retain_grad": 1}, r"retain_grad must be true or false, got 1"),
    (9, {"args": {"alpha": 2}}, r"unknown arg 'alpha'"),
    (9, {"id": ""}, r"id must be a non-empty string"),
    (9, {"x-note": "ok", "output": "y5", "inputs": ["m4"]}, r"takes 2 inputs, got 1"),
    (10, {"inputs": ["y5", "e"]}, r"ops\[10\] \(mul\): .*cannot be broadcast"),
])
def test_entries_that_fail_a_check_get_the_general_codes_error(tmp_path, monkeypatch, k, change,
                                                               message):
    doc = _doc()
    doc["tensors"]["e"] = {"shape": [4], "init": "zeros"}
    doc["ops"][k] = {**doc["ops"][k], **change}
    errors = []
    for fast in (True, False):
        with pytest.raises(GraphError, match=message) as info:
            _load(tmp_path, doc, fast, monkeypatch)
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def test_the_graph_budget_is_checked_on_the_fast_path_too(tmp_path, monkeypatch):
    doc = _doc()
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    # 3 leaves (6 + 3 + 6 values) and 20 results of 6 float64 values fit; the 21st not
    budget = (15 + 6 * 20) * 8
    with pytest.raises(GraphError, match=r"ops\[20\] .*over the memory budget of "
                                         f"{budget} bytes for the whole graph"):
        loader.load(path, max_graph_bytes=budget)


def test_op_lines_are_found_on_demand_and_the_parsed_tree_is_dropped(tmp_path, monkeypatch):
    graph, _ = _load(tmp_path, _doc(), True, monkeypatch)
    spec = graph.ops[5]
    assert spec.lineno is None and spec.op.lineno is None       # not looked up at load
    finder = spec.find_line
    assert finder.doc.data is None                              # only the text is kept
    values = graph.forward()
    node = values["y3"].grad_fn
    assert spec.lineno is None                  # the forward stamps without finding it
    assert node.metadata == {"op_id": "ops[5]", "line": spec.line}
    assert spec.line == spec.op.line == finder(5) and spec.line > 5
    spec.line = 99                              # a spec's line can still be set
    assert spec.line == 99 and graph.forward()["y3"].grad_fn.metadata["line"] == 99


def _yaml(doc):
    lines = ["version: 1", "seed: 3", "tensors:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in doc["tensors"].items()]
    lines.append("ops:")
    lines += [f"  - {json.dumps(op)}" for op in doc["ops"]]
    lines.append("backward: {roots: [loss]}")
    return "\n".join(lines) + "\n"


def test_yaml_entries_get_their_lines_at_load_and_keep_no_document(monkeypatch):
    text = _yaml(_doc())
    graphs = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(OpChecks, "plain_op", lambda self, *args: None)
            graphs.append(loader.loads(text, format="yaml", name="g"))
    fast, slow = graphs
    assert [_fields(s) for s in fast.ops] == [_fields(s) for s in slow.ops]
    entries = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith("  - ")]
    assert [s.lineno for s in fast.ops] == entries          # taken at load
    assert all(s.find_line is None and s.op.find_line is None for s in fast.ops)
