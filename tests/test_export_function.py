"""Python ``torch.autograd.Function``s export as ``function.CLASS`` composites (spec:
"Python Functions"): the forward's ops, the Python backward's ops as PyTorch traced them,
and PyTorch's node name; gradcli's run, PyTorch's replay and the module agree."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")

from gradcli import loader  # noqa: E402
from gradcli.bridges.torch import ExportError, compare, from_module  # noqa: E402
from gradcli.errors import GraphError  # noqa: E402
from gradcli.validate import Options, validate_file  # noqa: E402


class Doubled(torch.autograd.Function):
    """A backward that is not the forward's derivative: twice tanh's."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return 2.0 * g * (1 - y * y)


class RoundSTE(torch.autograd.Function):
    """Straight-through rounding: two outputs (one not differentiable), a number
    argument, and a backward that passes the gradient on unchanged."""

    @staticmethod
    def forward(ctx, x, scale):
        count = (x > 0).sum()
        ctx.mark_non_differentiable(count)
        return torch.round(x * scale) / scale, count

    @staticmethod
    def backward(ctx, g, _):
        return g, None


class Gate(torch.autograd.Function):
    """Two tensor inputs, one without gradients (a mask); the same tensor twice."""

    @staticmethod
    def forward(ctx, a, b, mask):
        ctx.save_for_backward(a, b, mask)
        return a * b * mask

    @staticmethod
    def backward(ctx, g):
        a, b, mask = ctx.saved_tensors
        return g * b * mask, g * a * mask, None


class OneTuple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return (x * 3.0,)

    @staticmethod
    def backward(ctx, g):
        return g * 3.0


class Net(torch.nn.Module):
    def __init__(self, which):
        super().__init__()
        torch.manual_seed(0)
        self.which = which
        self.fc = torch.nn.Linear(4, 4)
        self.fc2 = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if self.which == "doubled":
            return self.fc2(Doubled.apply(h))
        if self.which == "ste":
            q, count = RoundSTE.apply(h, 4.0)
            return self.fc2(q) * (count > 0)
        if self.which == "gate":
            mask = (x > 0).to(x.dtype)
            return Gate.apply(h, h, mask) + Gate.apply(h, self.fc2(h), mask)
        (y,) = OneTuple.apply(h)
        return self.fc2(y)


NODES = {"doubled": ["DoubledBackward"], "ste": ["RoundSTEBackward"],
         "gate": ["GateBackward", "GateBackward"], "one_tuple": ["OneTupleBackward"]}


def _export(which, dtype="float64"):
    return from_module(Net(which), (torch.randn(3, 4, generator=torch.Generator().manual_seed(1)),),
                       dtype=dtype)


@pytest.mark.parametrize("which", sorted(NODES))
def test_a_python_function_exports_and_validates_as_pytorch_runs_it(which, tmp_path):
    graph = _export(which)
    entries = [op for op in graph.document["ops"] if op["op"].startswith("function.")]
    assert [e["composite"]["node"] for e in entries] == NODES[which]
    order = graph.document["expect"]["order"]
    assert [n for n in order if n in NODES[which]] == NODES[which]
    path = str(graph.write(tmp_path / "out"))
    report = validate_file(path, Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status != "pass"]
    grads = loader.load(path).backward()[0]
    theirs = compare.replay(path)
    assert theirs.order == order
    for name, g in theirs.grads.items():
        np.testing.assert_allclose(grads[name], g, rtol=1e-12, atol=1e-15)


def test_the_backward_written_is_the_functions_not_the_forwards_derivative(tmp_path):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1)).double()
    graph = from_module(Net("doubled"), (x,), dtype="float64", loss=lambda out: out.sum())
    got = loader.load(str(graph.write(tmp_path / "out"))).backward()[0]["fc.weight"]
    module = Net("doubled").double()
    module.fc2(torch.tanh(module.fc(x))).sum().backward()   # the forward's derivative
    np.testing.assert_allclose(got, 2 * module.fc.weight.grad.numpy(), rtol=1e-12)


def test_straight_through_gradient_is_the_incoming_one():
    graph = _export("ste")
    (entry,) = [op for op in graph.document["ops"] if op["op"] == "function.RoundSTE"]
    bwd = entry["composite"]["backward"]
    assert bwd["body"] == [] and bwd["outputs"] == [bwd["grads"][0]]
    assert bwd["grads"][1] is None              # the count is not differentiable


def test_function_composites_run_in_float32(tmp_path):
    graph = _export("gate", dtype="float32")
    report = validate_file(str(graph.write(tmp_path / "out")), Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status != "pass"]


def test_a_function_applied_by_keyword_is_refused_naming_it():
    class ByKeyword(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return Doubled.apply(x=self.fc(x))

    try:
        Doubled.apply(x=torch.randn(2, requires_grad=True))
    except TypeError:
        pytest.skip("this torch release takes no keyword arguments in Function.apply")
    with pytest.raises(ExportError) as info:
        from_module(ByKeyword(), (torch.randn(2, 4),))
    msg = str(info.value)
    assert "DoubledBackward" in msg and "by position" in msg and "\n" not in msg


FILE = """\
version: 1
tensors:
  x: {value: [0.5, -1.0, 2.0], requires_grad: true}
ops:
  - op: function.Scaled
    inputs: [x]
    output: y
    composite:
      node: ScaledBackward
      body:
        - {op: aten.mul.Tensor, inputs: [x, 3.0], output: y}
      backward:
        grads: [gy]
        body:
          - {op: aten.mul.Tensor, inputs: [gy, 5.0], output: gx}
        outputs: [gx]
  - {op: aten.sum.default, inputs: [y], output: loss}
backward: {roots: [loss]}
"""


def test_gradcli_runs_the_written_backward_not_the_bodys_derivative():
    ours = loader.loads(FILE).run()
    np.testing.assert_allclose(ours.grads["x"], [5.0, 5.0, 5.0])
    assert "ScaledBackward" in [n.node for n in ours.order]
    theirs = compare.replay(yaml.safe_load(FILE))
    np.testing.assert_allclose(theirs.grads["x"], [5.0, 5.0, 5.0])
    assert theirs.order == [n.node for n in ours.order]


def test_function_composite_backward_refuses_to_record_a_graph_and_a_second_run():
    from gradcli.autograd import backward

    g = loader.loads(FILE)
    values = g.forward()
    with pytest.raises(RuntimeError, match="ScaledBackward: a composite op's backward cannot"):
        backward([values["loss"]], create_graph=True)
    g = loader.loads(FILE)
    values = g.forward()
    backward([values["loss"]])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        backward([values["loss"]])


@pytest.mark.parametrize("change, message", [
    (lambda t: t[:t.index("      backward:")] + t[t.index("  - {op: aten.sum"):],
     r"function composite needs composite.backward"),
    (lambda t: t.replace("outputs: [gx]", "outputs: [gx, gx]"),
     r"one gradient \(or null\) per tensor input: 1"),
    (lambda t: t.replace("grads: [gy]", "grads: [gy, gz]"),
     r"one name \(or null\) per output: 1"),
    (lambda t: t.replace("outputs: [gx]", "outputs: [nowhere]"),
     r"gradient 'nowhere' is not defined by the backward"),
    (lambda t: t.replace("inputs: [gy, 5.0], output: gx", "inputs: [gy], output: gx, "
                         "args: {dim: [0]}").replace("aten.mul.Tensor, inputs: [gy",
                                                     "aten.sum.dim_IntList, inputs: [gy"),
     r"gradient 'gx' of input 'x' has shape \[\], not the input's \[3\]"),
    (lambda t: t.replace("grads: [gy]", "grads: [x]"),
     r"grads name 'x' is already an input of the backward"),
    (lambda t: t.replace("op: function.Scaled", "op: aten.mul.Tensor"),
     r"composite.backward is for function.CLASS composites only"),
    (lambda t: t.replace("op: function.Scaled", "op: function.Not-a-class"),
     r"named function.CLASS, not 'function.Not-a-class'"),
])
def test_bad_function_composites_are_one_line_load_errors(change, message):
    with pytest.raises(GraphError, match=message) as info:
        loader.loads(change(FILE))
    assert "\n" not in str(info.value)


def test_an_input_written_in_place_after_the_function_fails_its_backward(monkeypatch):
    # the node keeps its inputs as ctx.save_for_backward does: PyTorch's version check, also
    # when no in-place op had run before the save (so no version was taken then)
    from gradcli.autograd import dispatch

    monkeypatch.setattr(dispatch, "SAVED_CHECKS", False)
    text = FILE.replace("[x]", "[h]").replace("[x, 3.0]", "[h, 3.0]").replace(
        "ops:\n", "ops:\n  - {op: aten.mul.Tensor, inputs: [x, 2.0], output: h}\n").replace(
        "  - {op: aten.sum.default, inputs: [y], output: loss}",
        "  - {op: aten.add_.Tensor, inputs: [h, 1.0], output: h2}\n"
        "  - {op: aten.sum.default, inputs: [y], output: loss}")
    with pytest.raises(Exception, match="modified by an inplace operation"):
        loader.loads(text).run()
