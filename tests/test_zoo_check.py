"""scripts/zoo_check.py: its model selection and the generated table of docs/models.md."""
from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _zoo():
    spec = importlib.util.spec_from_file_location(
        "zoo_check", os.path.join(ROOT, "scripts", "zoo_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_transformers_zoo_covers_the_architectures_asked_for():
    zoo = _zoo()
    names = [m for _, m in zoo._models("transformers", None)]
    assert len(names) >= 20
    for arch in ("llama", "qwen2", "mistral-eager", "mistral-sdpa", "gemma", "phi3", "gpt2",
                 "gpt-neox", "opt", "falcon", "bloom", "bert", "roberta", "deberta-v2",
                 "electra", "albert", "distilbert", "t5-encoder", "bart", "vit", "clip-text",
                 "whisper-encoder"):
        assert arch in names
    assert [m for _, m in zoo._models("transformers", "^(bert|gpt2)$")] == ["gpt2", "bert"]


def test_write_docs_replaces_only_the_generated_table(tmp_path):
    zoo = _zoo()
    doc = tmp_path / "models.md"
    doc.write_text("# Models\n\nintro\n")
    versions = {"gradcli": "abc1234", "torch": "2.x", "torchvision": "0.x", "transformers": "5.x",
                "python": "3.11"}
    results = {"parts": [{"command": "python scripts/zoo_check.py --zoo transformers",
                          "date": "2026-11-25 05:00 UTC", "versions": versions}],
               "runs": {"a": {"zoo": "transformers", "model": "bert", "mode": "eval",
                              "dtype": "float64", "status": "pass", "nodes": 50, "detail": ""},
                        "b": {"zoo": "transformers", "model": "roberta", "mode": "eval",
                              "dtype": "float64", "status": "missing-core-op",
                              "ops": ["aten.ne.Scalar"], "detail": "x"}}}
    zoo.write_docs(results, str(doc), [("transformers", "bert"), ("transformers", "gpt2")])
    first = doc.read_text()
    assert "Not run yet (1): gpt2." in first
    assert first.startswith("# Models\n\nintro\n")
    assert "**transformers**: 2 runs: 1 missing-core-op, 1 pass." in first
    assert "| roberta | eval | float64 | missing-core-op |  | core ops without a kernel: " \
           "`aten.ne.Scalar` |" in first
    assert "gradcli abc1234, torch 2.x" in first
    results["runs"]["a"]["status"] = "fail"
    zoo.write_docs(results, str(doc))
    second = doc.read_text()
    assert second.count("<!-- zoo table:") == 1 and "1 fail, 1 missing-core-op" in second


def test_verdict_summary_states_the_measured_precision_and_the_norm_wise_ratio():
    from gradcli.validate import Check

    zoo = _zoo()
    checks = [Check(name="backward", kind="backward", status="pass"),
              Check(name="grads[w]", kind="grad", status="pass", precision="float32",
                    distance=3e-8, torch_distance=2e-8),
              Check(name="grads[b]", kind="grad", status="pass", precision="float64")]
    # a float64 file with a float32 island: judged at float32, one gradient norm-wise
    assert zoo.verdict_summary(checks, "float64") == {"precision": "float32", "normwise": 1,
                                                      "worst_ratio": 1.5}
    exact = [Check(name="grads[b]", kind="grad", status="pass", precision="float64")]
    assert zoo.verdict_summary(exact, "float64") == {"precision": "float64", "normwise": 0}
