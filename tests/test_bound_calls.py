"""ATen entries are bound to their args at load (Note [ATen calls bound at load]) and a
run on the loaded leaves does not repeat the checks load proved (Note [Checks proved at
load]): the same nodes, order and gradients as the unbound call."""
import os

import numpy as np
import pytest

from gradcli import loader
from gradcli.loader.bound_op import BoundOp
from gradcli.errors import GraphError
from gradcli.ops.aten.registry import AtenOp, Slot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["tiny_gpt", "cnn_batchnorm", "transformer_block"]


def _load(model):
    return loader.load(os.path.join(ROOT, "graphs", "models", model, "graph.yaml"))


@pytest.mark.parametrize("model", MODELS)
def test_bound_calls_record_what_unbound_calls_record(model):
    bound = _load(model)
    assert all(spec.call is not None for spec in bound.ops if spec.op.name.startswith("aten."))
    unbound = _load(model)
    for spec in unbound.ops:
        spec.call = None
    a, b = bound.run(), unbound.run()
    assert [r.node for r in a.order] == [r.node for r in b.order] == bound.expect.order
    assert a.grads.keys() == b.grads.keys()
    for name in a.grads:
        np.testing.assert_array_equal(a.grads[name], b.grads[name])


def test_a_run_does_no_per_call_schema_work(monkeypatch):
    """The bound call merges no defaults and lays out no inputs: the op's ``__call__``
    runs only for the entries whose layout needs them (a
    list, a null or a wrapped number to put in place), once each."""
    from collections import Counter

    graph = _load("tiny_gpt")
    calls = Counter()
    real_call = AtenOp.__call__

    def count_call(self, *a, **k):
        calls[self.name] += 1
        return real_call(self, *a, **k)
    monkeypatch.setattr(AtenOp, "__call__", count_call)
    graph.forward()
    laid_out = Counter(s.op.name for s in graph.ops if s.op.name.startswith("aten.")
                       and not (all(type(v) is Slot and v == k for k, v in enumerate(s.op.op.layout))
                                and s.op.op.op._list_pos is None and not s.op.op.op.mutated))
    assert calls == laid_out
    assert sum(1 for s in graph.ops if s.op.name.startswith("aten.")) > 2 * sum(laid_out.values())


def test_checks_are_skipped_only_on_the_loaded_leaves(monkeypatch):
    graph = _load("tiny_gpt")
    checks = []
    real = BoundOp.check_inputs
    monkeypatch.setattr(BoundOp, "check_inputs",
                        lambda self, inputs, args: checks.append(self.label) or real(self, inputs, args))
    graph.forward()
    assert all(s.op.checked is None for s in graph.ops if s.op.label in checks)
    # other leaves than the file's: every call checks again, and a misfit is refused
    leaf = graph.leaves["blocks.0.ln1.weight"]
    leaf.make = lambda shape=None: np.ones(31)
    checks.clear()
    with pytest.raises(GraphError, match="blocks.0.ln1.weight"):
        graph.forward()
    assert checks


EMBEDDING = """version: 1
tensors:
  w: {value: [[1.0, 2.0], [3.0, 4.0]], requires_grad: true}
  i: {value: [0, 5], dtype: int64}
ops:
  - {op: aten.embedding.default, inputs: [w, i], output: y}
  - {op: aten.sum.default, inputs: [y], output: s}
backward: {roots: [s]}
"""


def test_a_failure_on_proved_inputs_is_sorted_as_on_any_other():
    """The Graph calls a bound op itself on the loaded leaves (``call_proved``): a failure
    there is the same one-line error, naming the op and its inputs, as through
    ``BoundOp.run``; a library bug is still an OpBugError."""
    from gradcli.errors import OpBugError

    def failure(graph):
        with pytest.raises(GraphError) as info:
            graph.forward()
        return str(info.value)

    proved = loader.loads(EMBEDDING, name="g")
    assert proved.ops[0].call_proved is not None
    unproved = loader.loads(EMBEDDING, name="g")
    unproved.ops[0].call_proved = None
    message = failure(proved)
    assert message == failure(unproved)
    assert message.startswith("<g>:6: ops[0] (aten.embedding.default): ") and "(inputs: w [2, 2]" in message

    def broken(*inputs):
        raise AttributeError("'NoneType' object has no attribute 'shape'")
    proved.ops[0].call_proved = broken
    with pytest.raises(OpBugError, match="internal error in op 'aten.embedding.default'"):
        proved.forward()
