"""The loader's two steps: the check (what a bad file meets) reads no weight data and
binds no op; the build (what a run meets) refuses nothing and reads no weight data
either: the first run does, once."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.document import parse_yaml
from gradcli.errors import GraphError
from gradcli.loader.bound_op import BoundOp
from gradcli.loader.build import build
from gradcli.loader.check import DocumentCheck
from gradcli.loader.options import LoadOptions

DOC = """\
version: 1
tensors:
  w: {file: w.npy, requires_grad: true}
  x: {shape: [2, 3], init: ones}
ops:
  - {op: mul, inputs: [w, x], output: p}
  - op: checkpoint
    inputs: [p]
    outputs: [q]
    body:
      - {op: exp, inputs: [p], output: q}
  - {op: sum, inputs: [q], output: loss}
backward: {roots: [loss]}
"""


def _check(tmp_path, text=DOC):
    np.save(tmp_path / "w.npy", np.arange(6.0).reshape(2, 3))
    return DocumentCheck(parse_yaml(text, str(tmp_path / "g.yaml")), str(tmp_path), "g",
                         LoadOptions()).check()


def test_the_check_reads_only_headers_and_binds_nothing(tmp_path):
    checked = _check(tmp_path)
    assert [leaf.name for leaf, _, _ in checked.sources] == ["w", "x"]
    assert all(leaf.make is None for leaf, _, _ in checked.sources)
    assert checked.leaves["w"].shape == (2, 3)                 # from the header alone
    assert checked.weights._arrays == {}                       # no data read
    assert not any(isinstance(spec.op, BoundOp) for spec, _, _ in checked.unbound)
    assert checked.ops[1].op is None                           # the checkpoint: the build's
    # the checkpoint's body is bound with the rest (its entry comes before its own)
    assert [spec.id for spec, _, _ in checked.unbound] == ["ops[0]", "ops[1].body[0]",
                                                           "ops[1]", "ops[2]"]


def test_the_build_binds_every_entry_and_the_first_run_reads_the_weights(tmp_path):
    checked = _check(tmp_path)
    graph = build(checked)
    assert checked.weights._arrays == {}                       # not at build
    assert all(isinstance(spec.op, BoundOp) for spec in graph.ops if spec.op.name != "checkpoint")
    assert type(graph.ops[1].op).__name__ == "CheckpointOp"
    grads = graph.run().grads
    assert list(checked.weights._arrays) == [(str(tmp_path / "w.npy"), None)]
    w = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(grads["w"], np.exp(w))


def test_a_bad_file_stops_at_the_check(tmp_path):
    bad = DOC.replace("inputs: [w, x], output: p", "inputs: [w, nope], output: p")
    with pytest.raises(GraphError, match=r"g\.yaml:6: ops\[0\] \(mul\): input 'nope' is not "
                                         r"defined above this op"):
        _check(tmp_path, bad)
