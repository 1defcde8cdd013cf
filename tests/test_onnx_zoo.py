"""scripts/onnx_zoo.py: how it finds a parameter in an exported file, and its table."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script():
    spec = importlib.util.spec_from_file_location(
        "onnx_zoo", os.path.join(ROOT, "scripts", "onnx_zoo.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_folded_copies_map_their_gradients_back_to_the_parameter():
    match = _script()._match
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)), "table": rng.standard_normal((10, 4)),
              "cls": rng.standard_normal((1, 1, 4)), "norm": rng.standard_normal(4)}
    g = rng.standard_normal
    # by name (a graph-file name got ``m.``), and a transposed copy
    name, back = match("m.w", params["w"], params)
    assert name == "w" and back(params["w"]) is params["w"]
    name, back = match("val_1", params["w"].T.copy(), params)
    grad = g((4, 3))
    assert name == "w" and np.array_equal(back(grad), grad.T)
    # Gemma's 1 + weight
    name, back = match("val_2", params["norm"] + 1, params)
    assert name == "norm"
    # rows 2..7 of a position table, expanded to a batch of 3
    window = np.broadcast_to(params["table"][2:7], (3, 5, 4)).copy()
    name, back = match("val_3", window, params)
    grad = g((3, 5, 4))
    want = np.zeros((10, 4))
    want[2:7] = grad.sum(axis=0)
    assert name == "table" and np.allclose(back(grad), want)
    # a class token expanded to the batch
    name, back = match("val_4", np.broadcast_to(params["cls"], (2, 1, 4)).copy(), params)
    grad = g((2, 1, 4))
    assert name == "cls" and np.allclose(back(grad), grad.sum(axis=0, keepdims=True))
    # an exporter's own constant matches nothing
    assert match("val_5", g((2, 2)), params) == (None, None)


def test_write_docs_lists_every_run_and_the_models_not_run(tmp_path):
    zoo = _script()
    doc = tmp_path / "onnx.md"
    doc.write_text("# ONNX\n\nintro\n")
    versions = {"gradcli": "abc1234", "torch": "2.13", "transformers": "5.x", "onnx": "1.x",
                "onnxscript": "0.x", "onnxruntime": "1.x", "python": "3.11"}
    results = {"parts": [{"command": "python scripts/onnx_zoo.py", "date": "2026-11-25",
                          "versions": versions}],
               "runs": {"bert:float32": {"model": "bert", "dtype": "float32", "status": "pass",
                                         "worst_rel_err": 1.5e-6, "params_matched": 39,
                                         "params_with_grad": 39, "forward_checks": 2,
                                         "nodes": 120, "detail": ""},
                        "t5:float32": {"model": "t5-encoder", "dtype": "float32",
                                       "status": "export-error", "detail": "ValueError: a|b"}}}
    zoo.write_docs(results, str(doc))
    text = doc.read_text()
    assert text.startswith("# ONNX\n\nintro\n")
    assert "2 runs: 1 export-error, 1 pass." in text
    assert "| bert | float32 | pass | 1.5e-06 | 39 of 39 | 2 | 120 |  |" in text
    assert "ValueError: a\\|b" in text
    assert "Not run yet (" in text and "llama" in text
    zoo.write_docs(results, str(doc))
    assert doc.read_text() == text                  # the table is replaced, not appended
