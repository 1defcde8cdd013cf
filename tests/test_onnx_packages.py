"""ONNX files that ship inside packages on the registry, imported as a user would.

- silero-vad (MIT): six voice-activity models (LSTM cells, an ``If`` on the sample
  rate, a short-time Fourier transform as a convolution, reflection padding);
- rapidocr-onnxruntime (Apache-2.0): PaddleOCR's text-direction classifier and text
  recognizer (opset 11: Paddle's HardSigmoid slope, Softmax before opset 13, Resize by
  scales, weights as ``Constant`` nodes).

Each imports, and its forward matches onnxruntime's (``expect.forward`` via ``gradcli
validate``). Gradients: against finite differences (``validate --numeric``, or ``--fast``:
random projections, for the larger files),
and against onnx2torch + PyTorch autograd where onnx2torch 1.5.15 converts the file (the
classifier, its ``Constant`` weights made initializers on both sides; onnx2torch converts
neither silero file: ``If`` and ``LSTM`` have no converter). The packages are never
gradcli dependencies: each test is skipped, saying why, where its package is absent.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import gradcli  # noqa: E402
from gradcli.bridges.onnx import from_onnx  # noqa: E402
from gradcli.cli import main  # noqa: E402

pytestmark = pytest.mark.timeout(900)


def _shipped(package, folder, name):
    """The path of a file inside an installed package (found without importing it: the
    packages import torch or other runtimes at import time)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (pip install {package.replace('_', '-')})")
    path = os.path.join(list(spec.submodule_search_locations)[0], folder, name)
    if not os.path.exists(path):
        pytest.skip(f"this release of {package} ships no {folder}/{name}")
    return path


def _validate(g, folder, *extra):
    res = CliRunner().invoke(main, ["validate", *extra, g.write(str(folder))])
    assert res.exit_code == 0, res.output
    return res.output


STATE = {"input": (1, 512), "state": (2, 1, 128)}
SILERO = {
    "silero_vad.onnx": (dict(input_shapes=STATE), {"sr": 16000}),
    "silero_vad_16k_op15.onnx": (dict(input_shapes=STATE), {"sr": 16000}),
    "silero_vad_half.onnx": (dict(input_shapes=STATE), {}),
    "silero_vad_op18_ifless.onnx": (dict(input_shapes=STATE), {"sr": 16000}),
    "silero_vad_16k_sequence.onnx": (dict(input_shapes={"input": (3, 576)}), {}),
    "silero_vad_openvino_16k.onnx": ({}, {}),
}


@pytest.mark.parametrize("name", sorted(SILERO))
def test_silero_vad_files_import_and_match_onnxruntime(name, tmp_path):
    path = _shipped("silero_vad", "data", name)
    kwargs, ints = SILERO[name]
    g = from_onnx(path, inputs={k: np.array(v) for k, v in ints.items()}, **kwargs)
    assert g.document["expect"]["forward"]["values"]
    out = _validate(g, tmp_path / "o")
    assert "forward[" in out
    if "LSTM" in {n.op_type for n in onnx.load(path).graph.node}:
        ops = {op["op"] for op in g.document["ops"]}
        assert {"aten.sigmoid.default", "aten.tanh.default", "aten.mm.default"} <= ops


def test_silero_vad_gradients_agree_with_finite_differences(tmp_path):
    # the LSTM file at float64, gradients of the audio and the recurrent state
    path = _shipped("silero_vad", "data", "silero_vad_16k_op15.onnx")
    g = from_onnx(path, inputs={"sr": np.array(16000)}, input_shapes=STATE, dtype="float64",
                  requires_grad="input,state")
    _validate(g, tmp_path / "o", "--numeric")


OCR = {"ch_ppocr_mobile_v2.0_cls_infer.onnx": (1, 3, 48, 192),
       "ch_PP-OCRv4_rec_infer.onnx": (1, 3, 48, 160),
       "ch_PP-OCRv4_det_infer.onnx": (1, 3, 64, 64)}      # its upsampling: ConvTranspose


@pytest.mark.parametrize("name", sorted(OCR))
def test_rapidocr_models_import_and_match_onnxruntime(name, tmp_path):
    path = _shipped("rapidocr_onnxruntime", "models", name)
    g = from_onnx(path, input_shapes={"x": OCR[name]})
    assert "forward[" in _validate(g, tmp_path / "o")
    g64 = from_onnx(path, input_shapes={"x": OCR[name]}, dtype="float64")
    _validate(g64, tmp_path / "n", "--fast")      # gradients: random projections v^T J u


def _constants_as_initializers(model):
    """Paddle's exporter writes weights as ``Constant`` nodes (constants to gradcli and
    to onnx2torch); as initializers they are parameters on both sides."""
    from onnx import numpy_helper

    keep = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            array = numpy_helper.to_array(node.attribute[0].t)
            if array.dtype == np.float32 and array.size > 1:
                model.graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
                continue
        keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model


def test_rapidocr_classifier_gives_onnx2torchs_gradients(tmp_path):
    torch = pytest.importorskip("torch")
    onnx2torch = pytest.importorskip("onnx2torch", reason="onnx2torch (a test-only "
                                     "reference, with torchvision) is not installed")
    model = _constants_as_initializers(onnx.load(_shipped(
        "rapidocr_onnxruntime", "models", "ch_ppocr_mobile_v2.0_cls_infer.onnx")))
    path = tmp_path / "cls.onnx"
    onnx.save(model, str(path))
    g = from_onnx(str(path), input_shapes={"x": (2, 3, 48, 192)}, dtype="float64")
    grads = gradcli.load(g.write(str(tmp_path / "o"))).run().grads
    module = onnx2torch.convert(model).double().eval()
    x = torch.as_tensor(g.arrays["x"]).requires_grad_(True)
    out = module(x)
    r = torch.as_tensor(np.random.default_rng(0).standard_normal(tuple(out.shape)))
    (out * r).sum().backward()

    # gradcli reads a float attribute as the decimal the exporter meant (the batch norms'
    # eps 1e-5, HardSigmoid's slope 0.2), onnx2torch as its float32 value (0.200000003):
    # over some fifty layers the float64 results part near 1e-7, not at the last bit
    # (Note [Float attributes])
    def close(got, ref, what):
        err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300)
        assert err <= 1e-6, (what, err)

    close(grads["x"], x.grad.numpy(), "x")
    refs = {k: p for k, p in module.named_parameters()}
    matched = 0
    for leaf, grad in grads.items():
        if leaf == "x":
            continue
        value = g.arrays[leaf]
        hits = [p for p in refs.values() if p.shape == value.shape and np.array_equal(
            p.detach().numpy(), value) and p.grad is not None]
        if hits:
            close(grad, hits[0].grad.numpy(), leaf)
            matched += 1
    # every convolution and linear weight (53 + 1) and batch norm scale and bias (2 x 35)
    assert matched >= 100, matched
