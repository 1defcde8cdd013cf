"""``gradcli validate --against torch``: gradcli's gradients and node order beside
PyTorch's replay of the same file, the first difference named; exit 1 on a difference,
2 (one line) when torch is missing or the file cannot be replayed."""
from __future__ import annotations

import json

import pytest

try:
    import torch
except ImportError:          # pragma: no cover - torch is an optional extra
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (the gradcli[torch] extra)")

CNN = "graphs/models/cnn_batchnorm/graph.yaml"


@needs_torch
def test_an_exported_model_is_the_same_as_torch(gradcli_cli, repo_root):
    res = gradcli_cli("validate", "--against", "torch", repo_root / CNN)
    assert res.exit_code == 0, res.output
    assert "SAME AS TORCH: 8 gradients within rtol=1e-07, atol=1e-10, 21 nodes in the same order" in res.stdout
    assert "ConvolutionBackward0" in res.stdout and "differs" not in res.stdout


@needs_torch
def test_json_sets_each_node_beside_torchs(gradcli_cli, repo_root):
    res = gradcli_cli("validate", "--against", "torch", "--format", "json", repo_root / CNN)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "pass" and doc["first_difference"] is None
    assert doc["order"][0] == {"index": 0, "gradcli": "NllLossBackward0", "torch": "NllLossBackward0",
                               "same": True}
    assert {g["tensor"] for g in doc["grads"]} >= {"conv1.weight", "fc.bias"}
    assert all(g["status"] == "pass" and g["max_abs_err"] < 1e-12 for g in doc["grads"])


@needs_torch
def test_a_different_node_order_is_the_first_difference_and_exits_1(gradcli_cli, repo_root):
    # version-1 cross_entropy is one node in gradcli, LogSoftmax + NllLoss in PyTorch
    res = gradcli_cli("validate", "--against", "torch", repo_root / "graphs/mlp.yaml")
    assert res.exit_code == 1, res.output
    assert ("DIFFERS FROM TORCH: first difference: order[0]: gradcli CrossEntropyBackward0, "
            "torch NllLossBackward0") in res.stdout
    res = gradcli_cli("validate", "--against", "torch", "--format", "json", repo_root / "graphs/mlp.yaml")
    doc = json.loads(res.stdout)
    assert doc["status"] == "fail" and doc["order"][0]["same"] is False
    assert all(g["status"] == "pass" for g in doc["grads"])     # the gradients agree


@needs_torch
def test_a_different_gradient_is_named_with_its_worst_element(gradcli_cli, repo_root, monkeypatch):
    from gradcli.bridges.torch import compare as compare_torch

    real = compare_torch.replay

    def off_by_a_bit(*args, **kwargs):
        result = real(*args, **kwargs)
        g = result.grads["fc.bias"].copy()
        g[3] *= 1 + 1e-5
        result.grads["fc.bias"] = g
        return result

    monkeypatch.setattr(compare_torch, "replay", off_by_a_bit)
    res = gradcli_cli("validate", "--against", "torch", repo_root / CNN)
    assert res.exit_code == 1, res.output
    assert "first difference: grads[fc.bias] at [3]: gradcli" in res.stdout
    assert "DIFF" in res.stdout


@needs_torch
def test_a_graph_torch_cannot_replay_is_one_error_line(gradcli_cli, repo_root):
    res = gradcli_cli("validate", "--against", "torch", "--device-map", "cuda=sim",
                      repo_root / "graphs/multi_device.yaml")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("gradcli: error: ")
    assert "graphs/multi_device.yaml" in res.stderr and "not replayed in PyTorch" in res.stderr


def test_without_torch_it_says_so_in_one_line_and_exits_2(gradcli_proc, tmp_path, repo_root):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    proc = gradcli_proc("validate", "--against", "torch", CNN,
                        env={"PYTHONPATH": f"{tmp_path}:{repo_root}"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "validate --against torch needs PyTorch, which is not installed" in proc.stderr
    assert "pip install 'gradcli[torch]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_against_takes_only_torch(gradcli_cli, repo_root):
    res = gradcli_cli("validate", "--against", "jax", repo_root / CNN)
    assert res.exit_code == 2
    assert "'torch'" in res.output
