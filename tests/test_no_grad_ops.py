"""Ops run with grad mode off (Note [Ops run with grad mode off] in
gradcli/loader/bound_op.py): an op entry's ``no_grad: true`` runs it as under
``torch.no_grad()``, and ``gradcli export`` writes it on the ops a module ran so: its own
``with torch.no_grad():`` blocks on activations, and the ops PyTorch's composite ops run
under a NoGradGuard (``F.cosine_similarity`` clamps its norms in place)."""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.errors import GraphError
from gradcli.loader import loads

# y = x*x; y.clamp_min_(2.5) and a = |x| with grad mode off; loss = sum(y * x * a)
NO_GRAD_YAML = """
version: 1
name: no-grad
tensors:
  x: {value: [1.0, -2.0, 3.0], requires_grad: true}
  eps: {value: 2.5}
ops:
  - {op: mul, inputs: [x, x], output: y}
  - {op: aten.clamp.Tensor, inputs: [y, eps, null], output: t, no_grad: true}
  - {op: aten.copy_.default, inputs: [y, t], output: z, no_grad: true}
  - {op: mul, inputs: [z, x], output: w}
  - {op: aten.abs.default, inputs: [x], output: a, no_grad: NOGRAD}
  - {op: mul, inputs: [w, a], output: v}
  - {op: sum, inputs: [v], output: loss}
backward: {roots: [loss]}
"""


def _run(text):
    graph = loads(text, name="no-grad")
    return graph, graph.run()


def test_no_grad_ops_change_values_not_history():
    """PyTorch 2.13 on the same code gives x.grad = [4.5, 24, 81]: the clamp writes y's
    values (y = [2.5, 4, 9]) but y's history is still MulBackward0 (d/dx of x*x, times
    x*a), and |x| takes no gradient."""
    graph, result = _run(NO_GRAD_YAML.replace("NOGRAD", "true"))
    np.testing.assert_array_equal(result.grads["x"], [4.5, 24.0, 81.0])
    assert [r.node for r in result.order] == [
        "SumBackward0", "MulBackward0", "MulBackward0", "MulBackward0", "AccumulateGrad"]
    assert not graph.values["t"].requires_grad and not graph.values["a"].requires_grad
    assert graph.values["z"].grad_fn.name == "MulBackward0"


def test_the_same_op_with_grad_mode_on_records_its_node():
    """|x| with grad mode on: AbsBackward0 runs and adds sign(x) * x*x*y to x's gradient
    (torch 2.13: [7, 32, 108])."""
    _, result = _run(NO_GRAD_YAML.replace("NOGRAD", "false"))
    assert "AbsBackward0" in [r.node for r in result.order]
    np.testing.assert_array_equal(result.grads["x"], [7.0, 32.0, 108.0])


def test_against_torch():
    """PyTorch's replay of the file runs the flagged ops under torch.no_grad()."""
    pytest.importorskip("torch")
    from gradcli.bridges.torch import compare

    import yaml

    replayed = compare.replay(yaml.safe_load(NO_GRAD_YAML.replace("NOGRAD", "true")))
    np.testing.assert_array_equal(replayed.grads["x"], [4.5, 24.0, 81.0])
    assert replayed.order[:4] == ["SumBackward0", "MulBackward0", "MulBackward0", "MulBackward0"]


def test_an_inplace_op_with_grad_mode_off_still_bumps_the_version():
    """As PyTorch: exp saves its result; changing it in place under no_grad invalidates
    ExpBackward0 all the same (torch 2.13: 'output 0 of ExpBackward0 ... version 1')."""
    text = """
version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
  two: {value: 2.0}
ops:
  - {op: exp, inputs: [x], output: y}
  - {op: aten.mul_.Tensor, inputs: [y, two], output: z, no_grad: true}
  - {op: sum, inputs: [z], output: loss}
backward: {roots: [loss]}
"""
    graph = loads(text, name="bump")
    with pytest.raises(Exception, match="modified by an inplace operation.*version 1; expected "
                                        "version 0"):
        graph.run()


@pytest.mark.parametrize("entry, words", [
    ("{op: exp, inputs: [x], output: y, no_grad: 3}", "no_grad must be true or false, got 3"),
    ("{op: exp, inputs: [x], output: y, no_grad: true, retain_grad: true}",
     "retain_grad on an op run with no_grad"),
])
def test_bad_no_grad_keys_are_one_line_errors(entry, words):
    text = ("version: 1\ntensors:\n  x: {value: [1.0], requires_grad: true}\nops:\n  - "
            + entry + "\n  - {op: sum, inputs: [x], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError) as info:
        loads(text, name="bad")
    assert words in str(info.value) and "ops[0]" in str(info.value)
    assert "\n" not in str(info.value)


# -- export -------------------------------------------------------------------------------------
class NoGradModule:
    """Built lazily (torch is optional): the three ways a module runs ops with grad mode
    off. ``cosine``: F.cosine_similarity (its norms clamped in place under PyTorch's
    NoGradGuard: clamp_min_ has no in-place kernel in gradcli, so the export writes
    clamp_min and a copy_ into the norm, both with no_grad); ``scale``: a statistic taken
    under ``torch.no_grad()``; ``inplace``: relu_ and clamp_ on an activation under
    ``torch.no_grad()``, then an op on it still under no_grad."""

    @staticmethod
    def build(kind):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.fc = torch.nn.Linear(6, 5)
                self.w = torch.nn.Parameter(torch.randn(3, 5))

            def forward(self, x):
                h = self.fc(x)
                if kind == "cosine":
                    return torch.nn.functional.cosine_similarity(h, self.w, dim=-1).sum()
                if kind == "scale":
                    with torch.no_grad():
                        s = h.abs().amax()
                    return (h / s * self.w).sum()
                with torch.no_grad():
                    h.relu_()
                    h.clamp_(max=0.5)
                    g = h * 2
                return (h * h * self.w).sum() + (g * self.w).sum()

        return M()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", ["cosine", "scale", "inplace"])
def test_export_writes_the_ops_run_with_grad_mode_off(kind, dtype, tmp_path):
    torch = pytest.importorskip("torch")
    from click.testing import CliRunner

    from gradcli.bridges.torch import from_module
    from gradcli.cli import main as gradcli_main

    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    graph = from_module(NoGradModule.build(kind), (x,), dtype=dtype)
    flagged = [op["op"] for op in graph.document["ops"] if op.get("no_grad")]
    assert flagged, graph.document["ops"]
    if kind == "cosine":
        assert "aten.copy_.default" in flagged and "aten.clamp_min.Tensor" in flagged
    if kind == "inplace":
        assert "aten.relu_.default" in flagged
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
