"""``gradcli export`` of a model with a CTC loss (``F.ctc_loss`` records ``aten._ctc_loss.Tensor``),
validated end to end against PyTorch's gradients and backward order."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import from_module  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402


class SpeechHead(torch.nn.Module):
    """Linear -> log_softmax -> F.ctc_loss over a batch of different lengths: one target empty, one
    impossible (longer than its input) when ``impossible``, padded or concatenated targets."""

    def __init__(self, reduction, zero_infinity, concatenated, impossible):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 5)
        self.reduction, self.zero_infinity, self.concatenated = reduction, zero_infinity, concatenated
        self.target_lengths = [3, 1, 0, 5 if impossible else 2]

    def forward(self, x):
        log_probs = self.fc(x).log_softmax(-1).transpose(0, 1)          # [T, N, C]
        padded = torch.tensor([[1, 2, 2, 4, 1], [3, 0, 0, 0, 0], [0, 0, 0, 0, 0], [4, 4, 2, 1, 3]])
        lengths = torch.tensor(self.target_lengths)
        targets = torch.cat([padded[b, :k] for b, k in enumerate(self.target_lengths)]) if self.concatenated \
            else padded
        return torch.nn.functional.ctc_loss(log_probs, targets, torch.tensor([6, 4, 5, 3]), lengths,
                                            reduction=self.reduction, zero_infinity=self.zero_infinity)


class Unbatched(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        log_probs = self.fc(x).log_softmax(-1)                           # [T, C]
        return torch.nn.functional.ctc_loss(log_probs, torch.tensor([1, 3]), torch.tensor(5), torch.tensor(2))


def _validate(module, x, tmp_path):
    graph = from_module(module, (x,), dtype="float64")
    assert any(op["op"] == "aten._ctc_loss.Tensor" for op in graph.document["ops"])
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
    assert "CtcLossBackward1" in graph.document["expect"]["order"]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_a_ctc_loss_model_exports_and_validates(reduction, concatenated, tmp_path):
    _validate(SpeechHead(reduction, False, concatenated, impossible=False), torch.randn(4, 6, 4), tmp_path)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_an_impossible_alignment_under_zero_infinity_exports_and_validates(reduction, tmp_path):
    _validate(SpeechHead(reduction, True, False, impossible=True), torch.randn(4, 6, 4), tmp_path)


def test_an_unbatched_ctc_loss_exports_and_validates(tmp_path):
    _validate(Unbatched(), torch.randn(6, 4), tmp_path)


@pytest.mark.parametrize("position, value, match", [
    (3, [10 ** 13, 1, 0, 2], "to have size at least 10000000000000 at dimension 1, but got size 5"),
    (2, [6, 4, -5, 3], "input_lengths to have value at least 0, but got value -5"),
])
def test_hostile_lengths_in_a_graph_file_are_refused_in_one_line(position, value, match, tmp_path):
    import numpy as np

    graph = from_module(SpeechHead("sum", False, False, impossible=False), (torch.randn(4, 6, 4),), dtype="float64")
    graph.write(str(tmp_path))
    entry = next(op for op in graph.document["ops"] if op["op"] == "aten._ctc_loss.Tensor")
    key = graph.document["tensors"][entry["inputs"][position]]["key"]
    arrays = dict(np.load(tmp_path / "weights.npz"))
    arrays[key] = np.array(value)
    np.savez(tmp_path / "weights.npz", **arrays)
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    error = [line for line in result.output.splitlines() if line.startswith("gradcli: error:")]
    assert len(error) == 1 and "graph.yaml" in error[0] and "aten._ctc_loss.Tensor" in error[0]
    assert match in error[0]
