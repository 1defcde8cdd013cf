"""`gradcli import MODEL.onnx`: ONNX models in, PyTorch's gradients out.

ONNX files are made at test time (torch.onnx.export with the dynamo exporter, or
onnx.helper); gradients are compared with the PyTorch module's own.
"""
from __future__ import annotations

import logging
import os

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import gradcli  # noqa: E402
from gradcli.bridges.onnx import OnnxError, from_onnx  # noqa: E402
from gradcli.cli import main  # noqa: E402
from gradcli.ops import OPS  # noqa: E402

pytestmark = pytest.mark.timeout(600)


def _export(module, args, path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=True, verbose=False)
    return path


def _models():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 6, 5, padding=2)
            self.c2 = nn.Conv2d(6, 16, 5)
            self.f1 = nn.Linear(16 * 5 * 5, 32)
            self.f2 = nn.Linear(32, 10)

        def forward(self, x):
            x = nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
            x = nn.functional.avg_pool2d(torch.relu(self.c2(x)), 2)
            return self.f2(torch.relu(self.f1(x.flatten(1))))

    torch.manual_seed(0)
    return {
        "mlp": (nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)), (2, 4)),
        "lenet": (LeNet(), (2, 1, 28, 28)),
        "encoder": (nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True),
                    (2, 5, 16)),
        # ConvTranspose as a decoder upsamples (Note [Transposed convolution])
        "decoder": (nn.Sequential(nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1,
                                                     output_padding=1), nn.ReLU(),
                                  nn.ConvTranspose2d(4, 2, 2, stride=2, groups=2)), (2, 3, 4, 4)),
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch = pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("onnx")
    out = {}
    for name, (module, shape) in _models().items():
        # the exporter stores equal initializers once (two fresh LayerNorms' weights are
        # all ones, and the file would give one tensor both gradients): perturb them
        gen = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for p in module.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        module.eval()
        out[name] = (module, x, _export(module, (x,), folder / f"{name}.onnx"))
    return out


def _torch_grads(module, x, dtype, seed=0):
    """The module's gradients under the import's projection loss (Note [Projection loss])."""
    import copy

    import torch

    m = copy.deepcopy(module).to(dtype)
    xin = x.to(dtype).requires_grad_(True)
    out = m(xin)
    r = torch.as_tensor(np.random.default_rng(seed).standard_normal(tuple(out.shape))).to(dtype)
    (out * r).sum().backward()
    grads = {k: p.grad.numpy() for k, p in m.named_parameters()}
    grads["@input"] = xin.grad.numpy()
    params = {k: p.detach().numpy() for k, p in m.named_parameters()}
    return grads, params


def _match(name, value, params):
    """The module parameter an initializer holds: by name, or (the ONNX exporter folds
    ``t(weight)`` into a new initializer) its transpose by value."""
    name = name[2:] if name.startswith("m.") and name[2:] in params else name
    if name in params and params[name].shape == value.shape:
        # by value too: an initializer may keep a parameter's name for another value
        # (resnet's ``conv1.weight`` with its batch norm folded in)
        return (name, False) if np.array_equal(params[name], value) else (None, False)
    for k, p in params.items():
        if p.shape == value.shape and np.array_equal(p, value):
            return k, False
        if p.ndim == 2 and p.T.shape == value.shape and np.array_equal(p.T, value):
            return k, True
    return None, False


def _check_against_torch(module, x, path, dtype, tmp_path, rtol):
    torch = pytest.importorskip("torch")
    g = from_onnx(str(path), dtype=dtype)
    folder = g.write(str(tmp_path / f"out_{dtype}"))
    graph = gradcli.load(folder)
    result = graph.run()
    input_name = onnx.load(str(path)).graph.input[0].name
    x = torch.as_tensor(g.arrays[input_name])       # the import's seeded input
    want, params = _torch_grads(module, x, getattr(torch, dtype))
    compared = 0
    for name, spec in g.document["tensors"].items():
        if not spec.get("requires_grad"):
            continue
        got = result.grads[name]
        if name == input_name:
            ref = want["@input"]
        else:
            pname, transposed = _match(name, g.arrays[name], params)
            if pname is None:
                continue            # an exporter's own constant (a scale), not a parameter
            ref = want[pname].T if transposed else want[pname]
        err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
        assert err <= rtol, (name, err)
        compared += 1
    assert compared >= len(params) // 2 + 1
    return g, folder


# float64: exact up to summation order, except where the ONNX file itself holds a float32
# rounding of a constant PyTorch computes in float64 (the encoder's attention multiplies
# q and k by sqrt(scale), an initializer of the file): gradcli reads the file's value.
F64 = {"mlp": 1e-12, "lenet": 1e-12, "encoder": 1e-7, "decoder": 1e-12}


@pytest.mark.parametrize("name", ["mlp", "lenet", "encoder", "decoder"])
def test_torch_exported_models_give_the_modules_gradients(exported, name, tmp_path):
    module, x, path = exported[name]
    _check_against_torch(module, x, path, "float64", tmp_path, F64[name])
    _check_against_torch(module, x, path, "float32", tmp_path, 1e-4)


def test_ops_are_named_after_the_onnx_nodes(exported):
    _module, _x, path = exported["lenet"]
    model = onnx.load(str(path))
    node_names = {n.name for n in model.graph.node}
    g = from_onnx(str(path))
    ids = [op["id"] for op in g.document["ops"] if not op["id"].startswith("loss")]
    assert ids and all(i.split("#")[0] in node_names for i in ids)
    assert {n.name for n in model.graph.node if n.op_type == "Conv"} <= set(ids)


def test_validate_checks_the_forward_against_onnxruntime(exported, tmp_path):
    pytest.importorskip("onnxruntime")
    _module, _x, path = exported["encoder"]
    g = from_onnx(str(path), dtype="float64")
    forward = g.document["expect"]["forward"]
    assert forward["values"]
    good = g.write(str(tmp_path / "good"))
    res = CliRunner().invoke(main, ["validate", good])
    assert res.exit_code == 0, res.output
    assert "forward[" in res.output
    key = next(iter(forward["values"].values()))["key"]
    g.arrays[key] = g.arrays[key] + 0.5           # onnxruntime's values, tampered
    bad = g.write(str(tmp_path / "bad"))
    res = CliRunner().invoke(main, ["validate", bad])
    assert res.exit_code != 0
    assert "differs from expect.forward" in res.output


def test_numeric_gradients_agree(exported, tmp_path):
    _module, _x, path = exported["mlp"]
    folder = from_onnx(str(path), dtype="float64").write(str(tmp_path / "mlp"))
    res = CliRunner().invoke(main, ["validate", "--numeric", folder])
    assert res.exit_code == 0, res.output


def test_cli_import_writes_a_graph(exported, tmp_path):
    _module, _x, path = exported["mlp"]
    res = CliRunner().invoke(main, ["import", str(path), "--loss", "sum", "--requires-grad",
                                    "0.weight", "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    graph = gradcli.load(str(tmp_path / "o" / "graph.yaml"))
    # ``0.weight`` is not a graph-file name: it becomes ``m.0.weight``, as export names it
    assert sorted(graph.run().grads) == ["m.0.weight"]


# -- files made with onnx.helper -----------------------------------------------------------
def _model(nodes, inputs, outputs, initializers=(), opset=18, path=None):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if path is not None:
        onnx.save(model, str(path))
    return model


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _import_error(tmp_path, model_path, *extra):
    res = CliRunner().invoke(main, ["import", str(model_path), *extra, "-o",
                                    str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    return lines[0]


def test_unsupported_operators_are_listed_at_once_with_their_opset(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("Det", ["x"], ["y"], name="a"),
            helper.make_node("Relu", ["y"], ["z"]),
            helper.make_node("FancyOp", ["z"], ["o"], domain="com.example", name="b")],
           [_f("x", [1, 2, 3])], [_f("o", None)], path=path, opset=17)
    line = _import_error(tmp_path, path)
    assert "Det (opset 17)" in line and "com.example.FancyOp" in line


def test_shape_derived_constants_and_constant_if_branches_fold(tmp_path):
    path = tmp_path / "m.onnx"
    then_g = helper.make_graph([helper.make_node("Mul", ["r", "two"], ["t"])], "then", [],
                               [_f("t", None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["t2"])], "else", [],
                               [_f("t2", None)])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value_ints=[0]),
        helper.make_node("Gather", ["s", "zero"], ["n"]),
        helper.make_node("Constant", [], ["neg1"], value_ints=[-1]),
        helper.make_node("Concat", ["n", "neg1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Size", ["x"], ["size"]),
        helper.make_node("Constant", [], ["six"], value_int=6),
        helper.make_node("Equal", ["size", "six"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    _model(nodes, [_f("x", [2, 3, 1])], [_f("y", None)], path=path)
    g = from_onnx(str(path), dtype="float64", loss="sum")
    ops = [op["op"] for op in g.document["ops"]]
    assert ops[:2] == ["aten.view.default", "aten.mul.Tensor"]
    folder = g.write(str(tmp_path / "o"))
    grads = gradcli.load(folder).run().grads
    np.testing.assert_array_equal(grads["x"], np.full((2, 3, 1), 2.0))


def test_unknown_and_mistyped_attributes_are_one_line_errors(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axiz=1)],
           [_f("x", [2, 3])], [_f("y", None)], path=path)
    line = _import_error(tmp_path, path)
    assert "node sm (Softmax)" in line and "unknown attribute 'axiz'" in line
    _model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.5)],
           [_f("x", [2, 3])], [_f("y", None)], path=path)
    line = _import_error(tmp_path, path)
    assert "attribute 'axis' must be int" in line


def test_symbolic_input_shapes_need_an_input_shape(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("Tanh", ["x"], ["y"])], [_f("x", ["batch", 3])],
           [_f("y", None)], path=path)
    line = _import_error(tmp_path, path)
    assert "input 'x' has no fixed shape ([?, 3])" in line and "--input-shape" in line
    res = CliRunner().invoke(main, ["import", str(path), "--input-shape", "x=4,3", "-o",
                                    str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert gradcli.load(str(tmp_path / "o" / "graph.yaml")).run().grads["x"].shape == (4, 3)
    line = _import_error(tmp_path, path, "--input-shape", "x=4,5")
    assert "has shape [?, 3], not [4, 5]" in line


# -- hostile files ----------------------------------------------------------------------------
def test_garbage_is_not_an_onnx_model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x0a\xff\xff\xff\xff\x0fgarbage")
    assert "not an ONNX model" in _import_error(tmp_path, path)


def _raw(name, dims, data):
    t = TensorProto()
    t.name, t.data_type, t.raw_data = name, TensorProto.FLOAT, data
    t.dims.extend(dims)
    return t


def test_declared_initializer_sizes_are_bounded_before_allocation(tmp_path):
    path = tmp_path / "m.onnx"
    w = _raw("w", [1 << 20, 1 << 20], b"")
    _model([helper.make_node("Add", ["x", "w"], ["y"])], [_f("x", [1])], [_f("y", None)],
           [w], path=path)
    line = _import_error(tmp_path, path)
    assert "initializer 'w'" in line and "over the tensor budget" in line


def test_raw_data_must_match_the_declared_shape(tmp_path):
    path = tmp_path / "m.onnx"
    w = _raw("w", [4], np.zeros(3, np.float32).tobytes())
    _model([helper.make_node("Add", ["x", "w"], ["y"])], [_f("x", [4])], [_f("y", None)],
           [w], path=path)
    assert "raw_data holds 12 bytes, its shape [4] needs 16" in _import_error(tmp_path, path)


def _external(tmp_path, location, length=16, offset=0):
    path = tmp_path / "m.onnx"
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [0.0] * 4)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = w.external_data.add()
        e.key, e.value = k, v
    _model([helper.make_node("Add", ["x", "w"], ["y"])], [_f("x", [4])], [_f("y", None)],
           [w], path=path)
    return path


def test_external_data_cannot_leave_the_model_folder(tmp_path):
    (tmp_path / "secret.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    inner = tmp_path / "inner"
    inner.mkdir()
    path = _external(inner, "../secret.bin")
    line = _import_error(inner, path)
    assert "must be a relative path below the model's folder" in line
    path = _external(inner, str(tmp_path / "secret.bin"))
    assert "relative path" in _import_error(inner, path)
    os.symlink(tmp_path / "secret.bin", inner / "link.bin")
    path = _external(inner, "link.bin")
    assert "leaves the model's folder" in _import_error(inner, path)


def test_external_data_is_read_within_its_file(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    path = _external(tmp_path, "w.bin")
    g = from_onnx(str(path), loss="sum", reference=False)
    np.testing.assert_array_equal(g.arrays["w"], np.arange(4, dtype=np.float32))
    path = _external(tmp_path, "w.bin", offset=8)
    assert "has 16 bytes, the tensor reads bytes 8 to 24" in _import_error(tmp_path, path)


def test_constant_shapes_are_bounded(tmp_path):
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("Constant", [], ["s"], value_ints=[1 << 30, 1 << 30]),
             helper.make_node("ConstantOfShape", ["s"], ["big"]),
             helper.make_node("Add", ["x", "big"], ["y"])]
    _model(nodes, [_f("x", [1])], [_f("y", None)], path=path)
    line = _import_error(tmp_path, path)
    assert "ConstantOfShape" in line and "over the tensor budget" in line


# -- operators that need ATen ops being added --------------------------------------------------
def _needs(op):
    return pytest.mark.skipif(op not in OPS, reason=f"gradcli has no {op} yet")


@_needs("aten.erf.default")
def test_erf_maps_onto_aten_erf(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("Erf", ["x"], ["y"])], [_f("x", [3])], [_f("y", None)], path=path)
    g = from_onnx(str(path), dtype="float64", loss="sum")
    grads = gradcli.load(g.write(str(tmp_path / "o"))).run().grads
    x = g.arrays["x"]
    np.testing.assert_allclose(grads["x"], 2 / np.sqrt(np.pi) * np.exp(-x * x), rtol=1e-12)


@_needs("aten.constant_pad_nd.default")
def test_constant_pad_maps_onto_constant_pad_nd(tmp_path):
    path = tmp_path / "m.onnx"
    pads = helper.make_tensor("p", TensorProto.INT64, [4], [0, 1, 0, 2])
    _model([helper.make_node("Pad", ["x", "p"], ["y"])], [_f("x", [2, 3])], [_f("y", None)],
           [pads], path=path)
    g = from_onnx(str(path), dtype="float64", loss="sum")
    assert g.document["ops"][0]["args"]["pad"] == [1, 2]
    grads = gradcli.load(g.write(str(tmp_path / "o"))).run().grads
    np.testing.assert_array_equal(grads["x"], np.ones((2, 3)))


SILERO = os.path.join(os.path.dirname(__file__), "onnx_files", "silero_vad_op18_ifless.onnx")


@_needs("aten.reflection_pad1d.default")
def test_silero_vad_imports_and_matches_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    g = from_onnx(SILERO, inputs={"sr": np.array(16000)},
                  input_shapes={"input": (1, 512), "state": (2, 1, 128)})
    res = CliRunner().invoke(main, ["validate", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output


def test_expect_forward_is_checked_by_the_loader(tmp_path):
    text = """\
version: 1
tensors:
  x: {value: [1.0, 2.0], requires_grad: true}
ops:
  - {op: sum, inputs: [x], output: s}
backward: {roots: [s]}
expect:
  forward: {values: {%s: {value: %s}}, rtol: 0.0, atol: 0.0}
"""
    path = tmp_path / "g.yaml"
    path.write_text(text % ("s", "3.0"))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 0 and "forward[s]" in res.output, res.output
    path.write_text(text % ("s", "3.5"))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code != 0 and "differs from expect.forward" in res.output
    path.write_text(text % ("nope", "3.0"))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 2 and "expected value for 'nope', which is not defined" in res.output


# -- transformers models (the any-model families): BERT and ViT ----------------------------------
def _hf_models():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    small = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, attn_implementation="eager")
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=50, max_position_embeddings=16, **small))
    vit = transformers.ViTModel(transformers.ViTConfig(
        image_size=8, patch_size=4, num_channels=3, **small))
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():               # no two equal initializers (see ``exported``)
        for model in (bert, vit):
            for p in model.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16, use_cache=False,
        attn_implementation="eager"))
    with torch.no_grad():
        for p in gpt2.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    ids = torch.as_tensor(np.random.default_rng(3).integers(0, 50, (2, 6)))
    return {"bert": (bert, ids), "vit": (vit, torch.randn(2, 3, 8, 8)), "gpt2": (gpt2, ids)}


@pytest.mark.parametrize("name", ["bert", "vit", "gpt2"])
def test_transformers_models_give_the_modules_gradients(name, tmp_path):
    torch = pytest.importorskip("torch")
    module, x = _hf_models()[name]
    module.eval()
    path = _export(module, (x,), tmp_path / f"{name}.onnx")
    input_name = onnx.load(str(path)).graph.input[0].name
    inputs = {input_name: x.numpy()} if name != "vit" else None
    g = from_onnx(str(path), dtype="float64", inputs=inputs)
    res = CliRunner().invoke(main, ["validate", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output           # forward matches onnxruntime
    grads = gradcli.load(str(tmp_path / "o" / "graph.yaml")).run().grads

    import copy

    m = copy.deepcopy(module).double()
    xin = torch.as_tensor(g.arrays[input_name]) if name == "vit" else x
    if name == "vit":
        xin.requires_grad_(True)
    outs = m(xin).to_tuple()
    loss = sum((o * torch.as_tensor(np.random.default_rng(i).standard_normal(tuple(o.shape))))
               .sum() for i, o in enumerate(outs))
    loss.backward()
    params = {k: p.detach().numpy() for k, p in m.named_parameters()}
    compared = 0
    for leaf, spec in g.document["tensors"].items():
        if not spec.get("requires_grad"):
            continue
        if leaf == input_name:
            ref = xin.grad.numpy()
        else:
            pname, transposed = _match(leaf, g.arrays[leaf], params)
            if pname is None:
                continue
            p = dict(m.named_parameters())[pname].grad.numpy()
            ref = p.T if transposed else p
        # BERT's key bias gets a zero gradient up to rounding (softmax does not see a shift
        # common to all keys): those compare absolutely; the file's float32 attention scale
        # (an initializer) bounds float64 agreement near 1e-7 (see F64)
        err = np.linalg.norm(grads[leaf] - ref) / max(np.linalg.norm(ref), 1.0)
        assert err <= 1e-6, (leaf, err)
        compared += 1
    assert compared >= 10


def test_resnet18_gives_the_modules_gradients(tmp_path):
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    module = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    path = _export(module, (x,), tmp_path / "resnet18.onnx")
    g = from_onnx(str(path), dtype="float64")
    res = CliRunner().invoke(main, ["validate", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output           # forward matches onnxruntime
    grads = gradcli.load(str(tmp_path / "o" / "graph.yaml")).run().grads
    input_name = onnx.load(str(path)).graph.input[0].name
    import copy

    m = copy.deepcopy(module).double()
    xin = torch.as_tensor(g.arrays[input_name]).requires_grad_(True)
    out = m(xin)
    (out * torch.as_tensor(np.random.default_rng(0).standard_normal(tuple(out.shape)))).sum() \
        .backward()
    # The exporter folds each eval-mode batch norm into its convolution, in float32 (new
    # initializers): the input's gradient and the classifier's compare one to one, to the
    # float32 rounding of those folded weights.
    def close(got, ref):
        return np.linalg.norm(got - ref) <= 1e-6 * np.linalg.norm(ref)

    params = {k: p.detach().numpy() for k, p in m.named_parameters()}
    assert close(grads[input_name], xin.grad.numpy())
    matched = 0
    for leaf in grads:
        pname, transposed = _match(leaf, g.arrays[leaf], params)
        if pname is not None:
            ref = dict(m.named_parameters())[pname].grad.numpy()
            assert close(grads[leaf], ref.T if transposed else ref), leaf
            matched += 1
    assert matched >= 2


# -- a file that did not come from PyTorch, against onnx2torch + PyTorch autograd -------------
def _handmade(path):
    from onnx import numpy_helper

    rng = np.random.default_rng(0)

    def init(name, shape, shift=0.0):
        data = rng.standard_normal(shape).astype(np.float32) * 0.3
        return numpy_helper.from_array(np.abs(data) + shift if shift else data, name)

    inits = [init("conv.w", (4, 2, 3, 3)), init("conv.b", (4,)), init("bn.scale", (4,)),
             init("bn.bias", (4,)), init("bn.mean", (4,), 0.5), init("bn.var", (4,), 0.5),
             init("fc.w", (5, 64)), init("fc.b", (5,)), init("ln.g", (5,)), init("ln.b", (5,)),
             numpy_helper.from_array(np.array([0, -1], np.int64), "shape2")]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1],
                         strides=[2, 2], name="conv"),
        helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
                         ["b"], epsilon=1e-3, name="bn"),
        helper.make_node("Sigmoid", ["b"], ["s"], name="sig"),
        helper.make_node("Mul", ["b", "s"], ["swish"], name="swish"),
        helper.make_node("Reshape", ["swish", "shape2"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["h"], transB=1, name="fc"),
        helper.make_node("LayerNormalization", ["h", "ln.g", "ln.b"], ["n"], name="ln"),
        helper.make_node("Constant", [], ["two"], value_float=2.0, name="two"),
        helper.make_node("Pow", ["n", "two"], ["p"], name="pow"),
        helper.make_node("Tanh", ["p"], ["t"], name="tanh"),
        helper.make_node("Softmax", ["t"], ["y"], axis=1, name="softmax"),
    ]
    _model(nodes, [_f("x", [3, 2, 8, 8])], [_f("y", None)], inits, opset=17, path=path)
    return path


def test_a_handmade_file_gives_onnx2torchs_gradients(tmp_path):
    torch = pytest.importorskip("torch")
    onnx2torch = pytest.importorskip("onnx2torch")      # a test-only reference
    path = _handmade(tmp_path / "small.onnx")
    g = from_onnx(str(path), dtype="float64")
    grads = gradcli.load(g.write(str(tmp_path / "o"))).run().grads
    assert "bn.mean" not in grads and "bn.var" not in grads     # running statistics
    module = onnx2torch.convert(str(path)).double().eval()
    x = torch.as_tensor(g.arrays["x"]).requires_grad_(True)
    out = module(x)
    r = torch.as_tensor(np.random.default_rng(0).standard_normal(tuple(out.shape)))
    (out * r).sum().backward()
    params = {k: p.detach().numpy() for k, p in module.named_parameters()}
    refs = dict(module.named_parameters())
    # gradcli differs from onnx2torch on purpose in one place: a float attribute (the eps of
    # the batch and layer norms) is the decimal the file's writer meant, 1e-3, where
    # onnx2torch keeps its float32 value 0.0010000000475 (Note [Float attributes]): the
    # float64 results agree to about 1e-9, not to the last bit.
    tol = dict(rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(grads["x"], x.grad.numpy(), **tol)
    matched = 0
    for leaf in grads:
        pname, transposed = _match(leaf, g.arrays[leaf], params)
        if pname is None:
            continue
        ref = refs[pname].grad.numpy()
        np.testing.assert_allclose(grads[leaf], ref.T if transposed else ref, **tol)
        matched += 1
    assert matched == 8


def test_a_handmade_file_imports_with_its_node_names(tmp_path):
    path = _handmade(tmp_path / "small.onnx")
    g = from_onnx(str(path), dtype="float64")
    ids = [op["id"] for op in g.document["ops"]]
    assert ids[:3] == ["conv", "bn", "sig"] and "softmax" in ids
    tensors = g.document["tensors"]
    assert tensors["conv.w"]["requires_grad"] and not tensors["bn.mean"].get("requires_grad")
    res = CliRunner().invoke(main, ["order", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0 and "softmax" in res.output and "ConvolutionBackward0" in res.output


def test_a_value_defined_twice_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("Relu", ["x"], ["y"], name="r1"),
            helper.make_node("Tanh", ["x"], ["y"], name="r2")],
           [_f("x", [2])], [_f("y", None)], path=path)
    line = _import_error(tmp_path, path)
    assert "node r2 (Tanh)" in line and "defines 'y'" in line


def test_a_node_reading_an_undefined_value_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")],
           [_f("x", [2])], [_f("y", None)], path=path)
    assert "node add (Add): reads 'nowhere'" in _import_error(tmp_path, path)


def test_one_element_initializers_are_constants_unless_named(tmp_path):
    from onnx import numpy_helper

    path = tmp_path / "m.onnx"
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    _model([helper.make_node("Pow", ["x", "two"], ["y"], name="pow")],
           [_f("x", [3])], [_f("y", None)], [two], path=path)
    g = from_onnx(str(path), loss="sum", reference=False)
    assert g.document["ops"][0]["op"] == "aten.pow.Tensor_Scalar"
    assert g.document["ops"][0]["args"] == {"exponent": 2.0}
    if "aten.pow.Tensor_Tensor" in OPS:
        g = from_onnx(str(path), loss="sum", reference=False, requires_grad="x,two")
        assert g.document["ops"][0]["op"] == "aten.pow.Tensor_Tensor"
        assert g.document["tensors"]["two"]["requires_grad"]
    else:
        with pytest.raises(OnnxError, match="aten.pow.Tensor_Tensor"):
            from_onnx(str(path), loss="sum", reference=False, requires_grad="x,two")


def test_a_matmul_whose_product_is_too_large_is_refused_before_it_is_made(tmp_path):
    path = tmp_path / "m.onnx"
    _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
           [_f("a", [1 << 16, 1]), _f("b", [1, 1 << 16])], [_f("y", None)], path=path)
    from gradcli.bridges.onnx.convert import from_onnx as convert

    with pytest.raises(OnnxError, match=r"node mm \(MatMul\): its result: shape \[65536, 65536\]"):
        convert(str(path), reference=False, max_tensor_bytes=1 << 30)


def test_a_conv_transpose_whose_output_is_too_large_is_refused(tmp_path):
    from onnx import numpy_helper

    path = tmp_path / "m.onnx"
    w = numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "w")
    _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up",
                             strides=[1 << 20, 1 << 20])],
           [_f("x", [1, 1, 4, 4])], [_f("y", None)], [w], path=path)
    assert "over the tensor budget" in _import_error(tmp_path, path)


# -- torch.export programs (.pt2) -----------------------------------------------------------------
def test_a_torch_export_program_imports_with_pytorchs_gradients(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(m, (torch.randn(2, 4),)), str(path))
    res = CliRunner().invoke(main, ["import", str(path), "--dtype", "float64", "-o",
                                    str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    folder = str(tmp_path / "o" / "graph.yaml")
    res = CliRunner().invoke(main, ["validate", folder])     # PyTorch's grads and order
    assert res.exit_code == 0, res.output
    grads = gradcli.load(folder).run().grads
    assert grads["m.0.weight"].shape == (8, 4)
    res = CliRunner().invoke(main, ["import", str(path), "--input-shape", "nope=2,4", "-o",
                                    str(tmp_path / "p")])
    assert res.exit_code == 2 and "has no input 'nope'" in res.output


def test_a_file_that_is_not_a_program_is_a_one_line_error(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "bad.pt2"
    path.write_bytes(b"not a zip")
    line = _import_error(tmp_path, path)
    assert "not a torch.export program" in line


def test_a_file_that_is_not_a_program_logs_nothing(tmp_path):
    # Note [torch.export.load's log]: torch's loader logs a traceback for such a file (to a
    # handler that, under torch 2.14, writes it into the command's own output)
    pytest.importorskip("torch")
    from gradcli.bridges.torch.errors import ExportError
    from gradcli.bridges.torch.program import from_program

    path = tmp_path / "bad.pt2"
    path.write_bytes(b"not a zip")
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    log = logging.getLogger("torch.export")     # torch's loggers do not propagate to caplog's
    log.addHandler(handler)
    try:
        with pytest.raises(ExportError, match="not a torch.export program"):
            from_program(str(path))
    finally:
        log.removeHandler(handler)
    assert records == []


def test_gather_nd_maps_onto_advanced_indexing(tmp_path):
    path = tmp_path / "m.onnx"
    idx = helper.make_tensor("i", TensorProto.INT64, [2, 2], [0, 2, 1, -1])
    _model([helper.make_node("GatherND", ["x", "i"], ["y"], name="g")], [_f("x", [2, 3, 2])],
           [_f("y", None)], [idx], path=path)
    g = from_onnx(str(path), dtype="float64", loss="sum")
    assert [op["op"] for op in g.document["ops"]][0] == "aten.index.Tensor"
    folder = g.write(str(tmp_path / "o"))
    want = np.zeros((2, 3, 2))
    want[0, 2] = want[1, 2] = 1.0           # x[0, 2] and x[1, -1]
    np.testing.assert_array_equal(gradcli.load(folder).run().grads["x"], want)
    res = CliRunner().invoke(main, ["validate", "--numeric", folder])
    assert res.exit_code == 0, res.output   # and the forward against onnxruntime


@pytest.mark.parametrize("op", ["Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
                                "Atanh", "Acosh"])
def test_elementwise_functions_match_onnxruntime_and_finite_differences(op, tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    _model([helper.make_node(op, ["x"], ["y"], name="f")], [_f("x", [5])], [_f("y", None)],
           path=path)
    # inside each function's domain (acosh: x > 1)
    x = np.linspace(1.2, 2.0, 5) if op == "Acosh" else np.linspace(-0.8, 0.7, 5)
    g = from_onnx(str(path), inputs={"x": x.astype(np.float32)}, dtype="float64")
    assert g.document["ops"][0]["op"] == f"aten.{op.lower()}.default"
    res = CliRunner().invoke(main, ["validate", "--numeric", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output     # forward against onnxruntime, and gradients


def test_nan_inf_checks_and_round_fold_or_map(tmp_path):
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("IsNaN", ["x"], ["n"]), helper.make_node("IsInf", ["x"], ["i"]),
             helper.make_node("Or", ["n", "i"], ["bad"]), helper.make_node("Round", ["x"], ["r"]),
             helper.make_node("Constant", [], ["z"], value_float=0.0),
             helper.make_node("Where", ["bad", "z", "x"], ["clean"]),
             helper.make_node("Add", ["clean", "r"], ["y"])]
    _model(nodes, [_f("x", [4])], [_f("y", None)], path=path)
    x = np.array([np.nan, 1.5, -np.inf, 2.5], np.float32)
    g = from_onnx(str(path), inputs={"x": x}, dtype="float64", loss="sum")
    ops = [op["op"] for op in g.document["ops"]]
    assert {"aten.isnan.default", "aten.isinf.default", "aten.round.default"} <= set(ops)
    grads = gradcli.load(g.write(str(tmp_path / "o"))).run().grads
    np.testing.assert_array_equal(grads["x"], [0.0, 1.0, 0.0, 1.0])     # round: no gradient


def test_paddle_style_operators_map_with_their_own_semantics(tmp_path):
    # what Paddle's exporter writes (opset 11): HardSigmoid with slope 0.2, Softmax over the
    # dims from axis on (the pre-13 rule), Resize by scales, an input size of -1
    pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    roi = helper.make_tensor("roi", TensorProto.FLOAT, [0], [])
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], alpha=0.2, beta=0.5),
             helper.make_node("Resize", ["h", "roi", "scales"], ["r"], mode="nearest",
                              coordinate_transformation_mode="asymmetric",
                              nearest_mode="floor"),
             helper.make_node("Softmax", ["r"], ["y"], axis=1)]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 2, 2, 3])
    _model(nodes, [x_info], [_f("y", None)], [scales, roi], opset=11, path=path)
    x = (np.random.default_rng(0).standard_normal((1, 2, 2, 3)) * 4).astype(np.float32)
    g = from_onnx(str(path), inputs={"x": x}, dtype="float64")
    ops = [op["op"] for op in g.document["ops"] if not op["id"].startswith("loss")]
    assert "aten.hardtanh.default" in ops and "aten.hardsigmoid.default" not in ops
    softmax = next(op for op in g.document["ops"] if op["op"] == "aten._softmax.default")
    assert softmax["args"]["dim"] == 1          # on a [1, 2*4*6] view
    res = CliRunner().invoke(main, ["validate", "--numeric", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output     # forward against onnxruntime, and gradients


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_onnxruntime_and_finite_differences(exclusive, reverse, tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    _model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                             reverse=reverse)], [_f("x", [2, 4])], [_f("y", None)], [axis],
           path=path)
    g = from_onnx(str(path), dtype="float64")
    assert "aten.cumsum.default" in [op["op"] for op in g.document["ops"]]
    res = CliRunner().invoke(main, ["validate", "--numeric", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output


def test_constants_the_reference_cannot_fold_fold_with_the_mapping(tmp_path):
    # torch's exporter writes BERT's token types as GatherElements of a [1, 64] buffer by
    # [1, 8] indices; onnx.reference (numpy.choose) refuses more than 32 choices
    from onnx import numpy_helper

    path = tmp_path / "m.onnx"
    data = numpy_helper.from_array(np.arange(70, dtype=np.int64).reshape(1, 70) * 10, "data")
    idx = numpy_helper.from_array(np.array([[2, 0, 65]], np.int64), "idx")
    nodes = [helper.make_node("GatherElements", ["data", "idx"], ["g"], axis=1),
             helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "gf"], ["y"])]
    _model(nodes, [_f("x", [1, 3])], [_f("y", None)], [data, idx], path=path)
    g = from_onnx(str(path), dtype="float64", loss="sum")
    grads = gradcli.load(g.write(str(tmp_path / "o"))).run().grads
    np.testing.assert_array_equal(grads["x"], [[20.0, 0.0, 650.0]])


def test_argmax_indexes_without_a_gradient_of_its_own(tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=1),
             helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)]
    _model(nodes, [_f("x", [3, 4])], [_f("y", None)], path=path)
    x = np.random.default_rng(0).permutation(12).reshape(3, 4).astype(np.float32)
    g = from_onnx(str(path), inputs={"x": x}, dtype="float64", loss="sum")
    assert g.document["ops"][0]["op"] == "aten.argmax.default"
    folder = g.write(str(tmp_path / "o"))
    want = (x == x.max(axis=1, keepdims=True)).astype(np.float64)
    np.testing.assert_array_equal(gradcli.load(folder).run().grads["x"], want)
    res = CliRunner().invoke(main, ["validate", folder])
    assert res.exit_code == 0, res.output       # the forward against onnxruntime


def test_a_float32_island_in_a_float64_model_sets_the_forward_tolerance(tmp_path):
    pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    x64 = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])
    nodes = [helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
             helper.make_node("Sin", ["x32"], ["s32"]),
             helper.make_node("Cast", ["s32"], ["s"], to=TensorProto.DOUBLE),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    _model(nodes, [x64], [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
           path=path)
    g = from_onnx(str(path))
    assert g.lowest_float == "float32"
    assert "computes part of its path in float32" in g.header
    forward = g.document["expect"]["forward"]
    assert (forward["rtol"], forward["atol"]) == (1e-4, 1e-5)     # float32's, not 1e-6
    res = CliRunner().invoke(main, ["validate", g.write(str(tmp_path / "o"))])
    assert res.exit_code == 0, res.output
    whole = from_onnx(str(path), dtype="float64")   # --dtype makes every cast float64
    assert whole.lowest_float == "float64"
    assert whole.document["expect"]["forward"]["rtol"] == 1e-6
