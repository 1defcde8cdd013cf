"""``gradcli export`` and ``gradcli.bridges.torch.compare``: exported graphs replay as PyTorch's module.

The replay test runs each graph file's ops in PyTorch and checks it gives the
gradients and backward node order the file's ``expect`` section recorded from
the real module, so the export is proven faithful without gradcli's ATen ops.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")

from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import compare as compare_torch  # noqa: E402
from gradcli.document import read_document  # noqa: E402
from gradcli.bridges.torch import ExportError, from_module  # noqa: E402
from gradcli.bridges.torch import schema as S  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402
from gradcli.validate import Options, validate_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "graphs", "models")
EXAMPLES = ["mlp", "cnn_batchnorm", "transformer_block", "tiny_gpt"]
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def _examples_module():
    spec = importlib.util.spec_from_file_location(
        "export_examples", os.path.join(ROOT, "scripts", "export_examples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _expected(path):
    """(grads, order, rtol, atol) of a graph file's expect section, arrays read from its
    weights file (the .safetensors export writes by default, or an .npz)."""
    data = read_document(path).data
    base = os.path.dirname(path)
    grads = {}
    for name, spec in data["expect"]["grads"].items():
        file = os.path.join(base, spec["file"])
        if file.endswith(".safetensors"):
            from safetensors.numpy import load_file

            grads[name] = load_file(file)[spec["key"]]
            continue
        with np.load(file, allow_pickle=False) as z:
            grads[name] = z[spec["key"]]
    e = data["expect"]
    return grads, e["order"], e["rtol"], e["atol"]


def _module_run(module, inputs, loss):
    """Gradients and node order of the module's own backward (independent of the exporter)."""
    out = module(*inputs)
    value = loss(out)
    order = compare_torch.node_order([value], value.backward)
    return {k: p.grad.detach().numpy() for k, p in module.named_parameters()}, order


def _projection(out, seed=0):
    """The documented default loss: sum(out * R), R ~ default_rng(seed + 0) standard normal."""
    r = np.random.default_rng(seed).standard_normal(tuple(out.shape))
    return (out * torch.as_tensor(r).to(out.dtype)).sum()


# -- the committed examples ---------------------------------------------------------------------
@pytest.mark.parametrize("model", EXAMPLES)
def test_example_has_the_structure_the_spec_requires(model):
    path = os.path.join(MODELS, model, "graph.yaml")
    data = read_document(path).data
    assert data["version"] == 1
    assert set(data) == {"version", "name", "tensors", "ops", "backward", "expect"}
    weights = os.path.join(MODELS, model, "weights.npz")
    assert os.path.getsize(weights) < 1_000_000
    with np.load(weights, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    defined = set()
    for name, spec in data["tensors"].items():
        assert NAME_RE.match(name), name
        assert spec["file"] == "weights.npz" and spec["key"] in arrays
        arr = arrays[spec["key"]]
        assert list(arr.shape) == spec["shape"] and str(arr.dtype) == spec["dtype"]
        if arr.dtype.kind == "f":
            assert arr.dtype == np.float64, name
        assert spec.get("requires_grad", False) in (True, False)
        defined.add(name)
    ids = set()
    for op in data["ops"]:
        m = re.fullmatch(r"aten\.(\w+)\.(\w+)", op["op"])
        assert m, op
        overload = getattr(getattr(torch.ops.aten, m.group(1)), m.group(2))
        # in-place ops are kept on activations (Note [In-place kept]): each writes its first
        # argument only, which an op above defined
        mutated = S.mutated_arguments(overload._schema)
        assert not mutated or mutated == [0] or m.group(1) == "native_batch_norm", \
            f"in-place op writing another argument in the file: {op['op']}"
        if mutated == [0] and m.group(1) != "native_batch_norm":
            assert op["inputs"][0] not in data["tensors"], f"in-place op on a leaf: {op}"
        assert m.group(1) not in ("detach", "empty"), op
        tensor_args = [a for a in overload._schema.arguments if S.tensor_kind(a)]
        other_args = {a.name for a in overload._schema.arguments if not S.tensor_kind(a)}
        assert len(op["inputs"]) == len(tensor_args), op
        assert set(op.get("args", {})) <= other_args, op
        for a, value in zip(tensor_args, op["inputs"]):
            names = value if S.tensor_kind(a) == "list" else [value]
            for n in names:
                assert n is None or isinstance(n, (int, float)) or n in defined, (op, n)
            if S.tensor_kind(a) == "tensor":
                assert value is not None, op
        assert ("output" in op) != ("outputs" in op), op
        outs = op["outputs"] if "outputs" in op else [op["output"]]
        if "outputs" in op and len(overload._schema.returns) > 1:
            assert len(outs) == len(overload._schema.returns), op
        for n in outs:
            assert NAME_RE.match(n) and n not in defined, (op, n)
            defined.add(n)
        assert op["id"] not in ids
        ids.add(op["id"])
    assert data["backward"]["roots"][0] in defined
    grads = data["expect"]["grads"]
    assert set(grads) == {n for n, s in data["tensors"].items() if s.get("requires_grad")}
    for spec in grads.values():
        assert spec["file"] == "weights.npz" and spec["key"] in arrays
    assert data["expect"]["rtol"] == 1e-7
    order = data["expect"]["order"]
    assert order.count("AccumulateGrad") == len(grads)
    assert all(isinstance(n, str) and n.endswith(("Backward0", "Backward1", "AccumulateGrad"))
               for n in order)


@pytest.mark.parametrize("model", EXAMPLES)
def test_example_replays_in_pytorch_with_the_modules_gradients_and_order(model):
    path = os.path.join(MODELS, model, "graph.yaml")
    grads, order, rtol, atol = _expected(path)
    result = compare_torch.replay(path)
    assert result.order == order
    assert set(result.grads) == set(grads)
    for name, g in grads.items():
        np.testing.assert_allclose(result.grads[name], g, rtol=1e-7, atol=atol, err_msg=name)
    cmp = compare_torch.compare(result.grads, result.order, compare_torch.TorchResult(grads, order),
                                rtol=rtol, atol=atol)
    assert cmp.ok, cmp.format()


def test_examples_cover_what_the_models_need():
    ops = {}
    for model in EXAMPLES:
        data = read_document(os.path.join(MODELS, model, "graph.yaml")).data
        ops[model] = {op["op"] for op in data["ops"]}
        tensors = data["tensors"]
    assert {"aten.convolution.default", "aten.native_batch_norm.default",
            "aten.max_pool2d_with_indices.default", "aten.nll_loss_forward.default"} <= \
        ops["cnn_batchnorm"]
    assert {"aten.embedding.default", "aten.native_layer_norm.default",
            "aten.gelu.default", "aten._softmax.default"} <= ops["tiny_gpt"]
    assert "aten._safe_softmax.default" in ops["transformer_block"]
    cnn = read_document(os.path.join(MODELS, "cnn_batchnorm", "graph.yaml")).data
    assert not any("num_batches_tracked" in n for n in cnn["tensors"])
    assert all(op["args"]["training"] is True for op in cnn["ops"]
               if op["op"] == "aten.native_batch_norm.default")
    # the GPT's position ids (arange) and causal mask are folded into constants
    assert any(n.startswith("const.") for n in tensors)


def test_committed_examples_are_what_the_script_writes(tmp_path):
    examples = _examples_module()
    examples.export_all(str(tmp_path))
    for model in EXAMPLES:
        with open(os.path.join(MODELS, model, "graph.yaml")) as a, \
                open(tmp_path / model / "graph.yaml") as b:
            # the header names the torch that wrote the file (the locked one for the
            # committed files): any tested release writes the same graph
            def same_torch(text):
                return re.sub(r"\(torch [^)]*\)", "(torch)", text, count=1)
            assert same_torch(a.read()) == same_torch(b.read()), model
        with np.load(os.path.join(MODELS, model, "weights.npz")) as a, \
                np.load(tmp_path / model / "weights.npz") as b:
            assert sorted(a.files) == sorted(b.files), model
            for k in a.files:
                if k.startswith("grad:"):
                    # PyTorch's own gradients: its float64 kernels sum in an order
                    # that depends on the CPU's vector width, so another machine
                    # writes them a few ulps apart
                    np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-15,
                                               err_msg=f"{model}: {k}")
                else:
                    np.testing.assert_array_equal(a[k], b[k], err_msg=f"{model}: {k}")


# -- export from modules --------------------------------------------------------------------------
def test_round_trip_gradients_and_order_equal_the_modules():
    examples = _examples_module()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    graph = from_module(examples.build_mlp(), (x,), dtype="float64")
    result = compare_torch.replay(graph.document, arrays=graph.file_arrays())
    module = examples.build_mlp().double()
    grads, order = _module_run(module, (x,), _projection)
    assert result.order == order == graph.document["expect"]["order"]
    assert result.order[:3] == ["SumBackward0", "MulBackward0", "AddmmBackward0"]
    assert set(result.grads) == {"m." + k for k in grads}   # "0.weight" is not a graph name
    for k in grads:
        np.testing.assert_allclose(result.grads["m." + k], grads[k], rtol=1e-7, atol=0)
        np.testing.assert_array_equal(graph.arrays["grad:m." + k], grads[k])


def test_in_place_ops_without_a_kept_self_become_out_of_place_under_new_names():
    """Note [In-place kept]: ``h += x`` stays ``aten.add_.Tensor``; ``transpose_`` (no
    in-place kernel) is written as ``transpose.int`` under a new name, so the ``relu_``
    on its result is written out of place too (its self is no longer the traced memory)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            h += x
            h.transpose_(0, 1)
            return h.relu_()

    x = torch.randn(3, 4, dtype=torch.float64)
    graph = from_module(M(), (x,), dtype="float64")
    ops = [op["op"] for op in graph.document["ops"]]
    assert {"aten.relu.default", "aten.add_.Tensor", "aten.transpose.int"} <= set(ops)
    assert [o for o in ops if o.split(".")[1].endswith("_")] == ["aten.add_.Tensor"]
    outputs = [op.get("output") for op in graph.document["ops"]]
    assert len(set(outputs)) == len(outputs)
    # the module's own run records TransposeBackward1 for transpose_; the file, as the spec
    # says, records TransposeBackward0 for transpose.int
    torch.manual_seed(0)
    module = M().double()
    _, module_order = _module_run(module, (x,), lambda out: _projection(out))
    assert "TransposeBackward1" in module_order
    assert graph.document["expect"]["order"] == [
        "TransposeBackward0" if n == "TransposeBackward1" else n for n in module_order]
    result = compare_torch.replay(graph.document, arrays=graph.file_arrays())
    assert result.order == graph.document["expect"]["order"]


def test_constants_are_folded_and_dropout_masks_replay_exactly():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 6)
            self.drop = torch.nn.Dropout(0.5)
            self.register_buffer("scale", torch.full((6,), 2.0))

        def forward(self, x):
            offsets = torch.arange(6, dtype=x.dtype) * self.scale + 1.0
            return self.drop(self.fc(x)) * offsets

    x = torch.randn(4, 6, dtype=torch.float64)
    module = M().double()
    graph = from_module(module, (x,), dtype="float64", seed=3)
    doc = graph.document
    dynamic = {n for n, s in doc["tensors"].items() if s.get("requires_grad") or n == "input"}
    for op in doc["ops"]:       # every op reads something derived from a parameter or input
        flat = [v for v in op["inputs"] for v in (v if isinstance(v, list) else [v])]
        assert any(isinstance(v, str) and v in dynamic for v in flat), op
        dynamic.update(op.get("outputs", [op.get("output")]))
    consts = [n for n in doc["tensors"] if n.startswith("const.")]
    assert len(consts) == 2       # the dropout mask and the offsets
    offsets = [graph.arrays[n] for n in consts if graph.arrays[n].shape == (6,)]
    np.testing.assert_array_equal(offsets[0], np.arange(6) * 2.0 + 1.0)
    mask = [graph.arrays[n] for n in consts if graph.arrays[n].shape == (4, 6)][0]
    assert set(np.unique(mask)) <= {0.0, 2.0}
    # the module's own run with the same seed draws the same mask: gradients equal
    torch.manual_seed(3)
    grads, _ = _module_run(module, (x,), lambda out: _projection(out, seed=3))
    result = compare_torch.replay(doc, arrays=graph.file_arrays())
    for k, g in grads.items():
        np.testing.assert_allclose(result.grads[k], g, rtol=1e-7, atol=0)


def test_cross_entropy_loss_with_target():
    model = torch.nn.Linear(5, 3)
    x = torch.randn(4, 5)
    target = np.array([0, 2, 1, 2])
    graph = from_module(model, (x,), loss="cross_entropy", target=target, dtype="float64")
    assert graph.document["tensors"]["target"]["dtype"] == "int64"
    assert graph.document["expect"]["order"][:2] == ["NllLossBackward0", "LogSoftmaxBackward0"]
    m = model.double()
    out = m(x.double())
    torch.nn.functional.cross_entropy(out, torch.as_tensor(target)).backward()
    np.testing.assert_allclose(graph.arrays["grad:weight"], m.weight.grad.numpy(), rtol=1e-12)


def test_a_callable_loss_and_tensor_literals_in_forward():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x) * torch.tensor([1.0, -2.0, 0.5], dtype=x.dtype)

    x = torch.randn(2, 3, dtype=torch.float64)
    module = M().double()
    graph = from_module(module, (x,), loss=lambda out: out.pow(2).mean())
    ops = [op["op"] for op in graph.document["ops"]]
    assert ops[-2:] == ["aten.pow.Tensor_Scalar", "aten.mean.default"]
    consts = [n for n in graph.document["tensors"] if n.startswith("const.")]
    assert len(consts) == 1
    np.testing.assert_array_equal(graph.arrays[consts[0]], [1.0, -2.0, 0.5])
    (module(x) ** 2).mean().backward()
    np.testing.assert_allclose(graph.arrays["grad:fc.weight"], module.fc.weight.grad.numpy(),
                               rtol=1e-12)


def test_batch_norm_train_writes_running_stats_as_before_the_forward():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3))
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    graph = from_module(m, (torch.randn(2, 2, 5, 5),), dtype="float64", train=True)
    np.testing.assert_array_equal(graph.arrays["m.1.running_mean"],
                                  m[1].running_mean.double().numpy())
    np.testing.assert_array_equal(graph.arrays["m.1.running_var"],
                                  m[1].running_var.double().numpy())
    assert "m.1.num_batches_tracked" not in graph.arrays


def test_batch_norm_eval_has_no_running_stat_update_and_module_is_untouched():
    m = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    graph = from_module(m, (torch.randn(2, 2, 5, 5),), dtype="float64", train=False)
    bn = [op for op in graph.document["ops"] if "batch_norm" in op["op"]]
    assert bn and bn[0]["args"]["training"] is False
    for k, v in m.state_dict().items():           # the caller's module is not changed
        assert torch.equal(v, before[k]) and v.dtype == before[k].dtype, k


def test_attention_without_dropout_uses_the_fused_cpu_kernel():
    # the kernel is tagged random (it can draw a dropout mask) but draws nothing at dropout_p 0
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    graph = from_module(layer, (torch.randn(2, 3, 8),), dtype="float64")
    ops = {op["op"] for op in graph.document["ops"]}
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops
    result = compare_torch.replay(graph.document, arrays=graph.file_arrays())
    assert result.order == graph.document["expect"]["order"]


def test_refuses_a_dtype_graph_files_do_not_have():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x) * torch.ones(4, dtype=torch.uint8)

    with pytest.raises(ExportError, match="dtype uint8, which graph files do not have"):
        from_module(M(), (torch.randn(2, 4),))


# -- refusals ----------------------------------------------------------------------------------
def _module_file(tmp_path, body, name="model.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(f"m_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return path, mod


RANDOM_OP = """\
    import torch


    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            p = torch.sigmoid(self.fc(x))
            return torch.bernoulli(p) * p


    def build_model():
        return M()
    """


def test_refuses_an_op_it_cannot_express_naming_op_and_line(tmp_path):
    path, mod = _module_file(tmp_path, RANDOM_OP)
    with pytest.raises(ExportError) as info:
        from_module(mod.build_model(), (torch.randn(2, 4),))
    msg = str(info.value)
    assert "aten.bernoulli.default" in msg
    assert f"{path}:11" in msg and "torch.bernoulli(p)" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("forward, op, line", [
    ("return torch.cumsum(self.fc(x), 0)", "aten.cumsum.default", "torch.cumsum(self.fc(x), 0)"),
    ("return self.fc(x).split([1, 3], 1)[1] * 2", "aten.split_with_sizes.default",
     "self.fc(x).split([1, 3], 1)[1] * 2"),
])
def test_refuses_an_op_gradcli_cannot_run_naming_op_and_line(tmp_path, forward, op, line,
                                                            monkeypatch):
    """PyTorch replays these, gradcli would refuse the written file.
    (The registry is asked: should gradcli gain the op, the test still removes it.)"""
    from gradcli.ops import OPS

    monkeypatch.delitem(OPS, op, raising=False)
    body = RANDOM_OP.replace("p = torch.sigmoid(self.fc(x))", "pass").replace(
        "return torch.bernoulli(p) * p", forward)
    path, mod = _module_file(tmp_path, body)
    with pytest.raises(ExportError) as info:
        from_module(mod.build_model(), (torch.randn(2, 4),))
    msg = str(info.value)
    assert msg.startswith("cannot export: gradcli has no op for 1 core ATen op without a kernel")
    assert f"{op} (at {path}:11 (return {line}))" in msg and "\n" not in msg


DETACH_ON_GRAD_PATH = RANDOM_OP.replace(
    "p = torch.sigmoid(self.fc(x))", "p = self.fc(x)").replace(
    "return torch.bernoulli(p) * p", "return p * p.detach()")
# (in place on a view of the model's input, which the file holds as a leaf: kept in place
# only on activations, Note [In-place kept]; written out of place, fc's read of x after
# the update cannot be expressed)
ALIASING_MUTATION = RANDOM_OP.replace(
    "p = torch.sigmoid(self.fc(x))", "v = x.view(-1)").replace(
    "return torch.bernoulli(p) * p", "v.add_(1.0); return self.fc(x) * 2.0")


def test_detach_on_the_gradient_path_is_written_as_detach(tmp_path):
    path, mod = _module_file(tmp_path, DETACH_ON_GRAD_PATH)
    graph = from_module(mod.build_model(), (torch.randn(2, 4),))
    assert [op["op"] for op in graph.document["ops"]].count("aten.detach.default") == 1
    assert "aten.alias.default" not in [op["op"] for op in graph.document["ops"]]


WHOLE_DIM_SLICE_AND_DETACH = RANDOM_OP.replace(
    "p = torch.sigmoid(self.fc(x))", "p = self.fc(x); q = p[..., :p.shape[-1]]").replace(
    "return torch.bernoulli(p) * p", "return q * q + p * p.detach()")


def test_a_slice_over_a_whole_dim_keeps_the_gradient_beside_a_detach(tmp_path):
    # Note [detach traced as alias]: torch 2.14 traces both the whole-dim slice (as Phi-3's
    # partial rotary embedding takes it) and the detach as aten.alias; only the detach
    # stops the gradient, so the file has one aten.detach and the slice as an alias,
    # and the export's own replay check (gradients and order) passes
    path, mod = _module_file(tmp_path, WHOLE_DIM_SLICE_AND_DETACH)
    graph = from_module(mod.build_model(), (torch.randn(2, 4),), dtype="float64")
    ops = [op["op"] for op in graph.document["ops"]]
    assert ops.count("aten.detach.default") == 1 and ops.count("aten.alias.default") == 1
    report = validate_file(str(graph.write(tmp_path / "out")), Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status != "pass"]


EXPERTS_SUMMED_INTO_ZEROS = RANDOM_OP.replace(
    "p = torch.sigmoid(self.fc(x))", "p = self.fc(x); out = torch.zeros_like(x)").replace(
    "return torch.bernoulli(p) * p",
    "out.index_add_(0, torch.tensor([1, 0]), p); out.index_add_(0, torch.tensor([1, 1]), p * p); "
    "return out")


def test_a_constant_written_in_place_is_captured_as_the_op_read_it(tmp_path):
    # Note [Constants written in place]: a mixture-of-experts layer sums its experts into
    # zeros_like(x) with index_add_; the file's constant is the zeros the first index_add_
    # read, not what it left behind (else the export's replay check fails on the gradients)
    path, mod = _module_file(tmp_path, EXPERTS_SUMMED_INTO_ZEROS)
    graph = from_module(mod.build_model(), (torch.randn(2, 4),), dtype="float64")
    consts = [name for name in graph.document["tensors"] if name.startswith("const.")]
    assert consts and all(not graph.arrays[name].any() for name in consts if "zeros" in name)
    report = validate_file(str(graph.write(tmp_path / "out")), Options())
    assert report.status == "pass", [c.message for c in report.checks if c.status != "pass"]


PYTHON_FUNCTION = """\
    import torch


    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2.0 * x * g


    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return Square.apply(Square.apply(self.fc(x))).sum(-1)


    def build_model():
        return M()
    """


def test_a_python_autograd_function_exports_from_the_command_line(tmp_path):
    # Note [Python Functions as composites]: each application is a function.Square
    # composite recording PyTorch's SquareBackward node; validate passes
    path, _ = _module_file(tmp_path, PYTHON_FUNCTION)
    out = tmp_path / "out"
    res = CliRunner().invoke(gradcli_main, ["export", f"{path}:build_model", "--input-shape", "2,4",
                                              "--dtype", "float64", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = read_document(str(out / "graph.yaml")).data
    assert [op["op"] for op in doc["ops"]].count("function.Square") == 2
    assert doc["expect"]["order"].count("SquareBackward") == 2
    res = CliRunner().invoke(gradcli_main, ["validate", str(out / "graph.yaml")])
    assert res.exit_code == 0 and "PASS" in res.output, res.output


def test_make_fx_records_detach_as_the_tested_release_does():
    # Note [detach traced as alias]: 2.13 records aten.detach, 2.14 aten.alias; the test
    # above checks that the file says aten.detach either way
    from torch.fx.experimental.proxy_tensor import make_fx

    from gradcli.bridges.torch.versions import differs

    gm = make_fx(lambda x: x * x.detach())(torch.randn(3))
    traced = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    expected = "aten.alias.default" if differs("make_fx_detach_as_alias", torch.__version__) else "aten.detach.default"
    assert traced == [expected, "aten.mul.Tensor"]


@pytest.mark.parametrize("body, words", [
    (ALIASING_MUTATION, ["aten.add_.Tensor", "aliasing mutation", ":11 (v.add_(1.0)"]),
])
def test_refuses_aliasing_mutation(tmp_path, body, words):
    path, mod = _module_file(tmp_path, body)
    with pytest.raises(ExportError) as info:
        from_module(mod.build_model(), (torch.randn(2, 4),))
    for w in words:
        assert w in str(info.value)
    assert str(path) in str(info.value)


# -- the command -----------------------------------------------------------------------------------
def test_command_writes_a_graph_that_replays(tmp_path):
    path, _ = _module_file(tmp_path, """\
        import torch

        def build_model():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.GELU(), torch.nn.Linear(5, 2))
        """)
    out = tmp_path / "out"
    res = CliRunner().invoke(gradcli_main, ["export", f"{path}:build_model", "--input-shape", "4,3",
                                              "--dtype", "float64", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output
    graph = out / "graph.yaml"
    grads, order, _, _ = _expected(str(graph))
    result = compare_torch.replay(str(graph))
    assert result.order == order and "GeluBackward0" in order
    for k in grads:
        np.testing.assert_allclose(result.grads[k], grads[k], rtol=1e-7)
    assert read_document(str(graph)).data["tensors"]["input"]["shape"] == [4, 3]


def test_command_cross_entropy_with_target_file(tmp_path):
    path, _ = _module_file(tmp_path, """\
        import torch

        def build_model():
            return torch.nn.Linear(3, 4)
        """)
    np.save(tmp_path / "t.npy", np.array([1, 3]))
    out = tmp_path / "out"
    res = CliRunner().invoke(gradcli_main, ["export", f"{path}:build_model", "--input-shape", "2,3",
                                              "--loss", "cross_entropy", "--target",
                                              str(tmp_path / "t.npy"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = read_document(str(out / "graph.yaml")).data
    assert data["ops"][-1]["op"] == "aten.nll_loss_forward.default"


@pytest.mark.parametrize("args, text", [
    (["missing.py:build_model", "--input-shape", "2,4"], "missing.py: no such file"),
    (["{path}:nope", "--input-shape", "2,4"], "has no attribute 'nope'"),
    (["{path}:build_model"], "give the inputs"),
    (["{path}:build_model", "--input-shape", "2,4", "--loss", "cross_entropy"], "needs --target"),
    (["{path}:build_model", "--input-shape", "2,4"], "aten.bernoulli.default"),
    (["{path}:build_model", "--input-shape", "2,5"], "running the module failed: RuntimeError"),
    (["{path}:build_model", "--input-shape", "100000,100000,100000"],   # was exit 3 (allocator)
     "--input-shape 100000,100000,100000: the input needs 4000000000000000 bytes, over the "
     "tensor budget"),
])
def test_command_errors_exit_2_with_one_line(tmp_path, args, text):
    path, _ = _module_file(tmp_path, RANDOM_OP)
    args = [a.format(path=path) for a in args] + ["-o", str(tmp_path / "out")]
    res = CliRunner().invoke(gradcli_main, ["export", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gradcli: error: ") and text in lines[0], \
        res.output


def test_command_allocation_failure_of_an_input_exits_2(tmp_path, monkeypatch):
    """Under the budget, the allocator may still refuse (memory in use): exit 2, one line."""
    path, _ = _module_file(tmp_path, RANDOM_OP)

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: "
                           "not enough memory: you tried to allocate 64 bytes.")

    monkeypatch.setattr(torch, "randn", refuse)
    res = CliRunner().invoke(gradcli_main, ["export", f"{path}:build_model", "--input-shape",
                                            "2,4", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--input-shape: cannot allocate the inputs" in lines[0], res.output


# -- compare ---------------------------------------------------------------------------------------
def test_compare_reports_the_first_difference():
    theirs = compare_torch.TorchResult({"w": np.array([1.0, 2.0]), "b": np.array([3.0])},
                                       ["SumBackward0", "MmBackward0", "AccumulateGrad"])
    same = compare_torch.compare({"w": np.array([1.0, 2.0]), "b": np.array([3.0])},
                                 list(theirs.order), theirs)
    assert same.ok and same.first_difference is None
    grad_off = compare_torch.compare({"w": np.array([1.0, 2.5]), "b": np.array([3.0])},
                                     list(theirs.order), theirs)
    assert not grad_off.ok and grad_off.first_difference.startswith("grads[w] at [1]")
    assert "DIFF w" in grad_off.format()
    order_off = compare_torch.compare(dict(theirs.grads),
                                      ["SumBackward0", "AccumulateGrad", "MmBackward0"], theirs)
    assert order_off.first_difference == "order[1]: gradcli AccumulateGrad, torch MmBackward0"
    assert "<-- differs" in order_off.format()
    missing = compare_torch.compare({"w": np.array([1.0, 2.0])}, list(theirs.order), theirs)
    assert missing.first_difference == "grads[b]: no gradient from gradcli"


def test_replays_version_1_ops_with_their_aten_equivalents():
    doc = {"version": 1, "tensors": {
        "x": {"value": [[1.0, -2.0], [3.0, 4.0]]},
        "W": {"value": [[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], "requires_grad": True},
        "b": {"value": [0.1, 0.2, 0.3], "requires_grad": True}},
        "ops": [{"op": "matmul", "inputs": ["x", "W"], "output": "h"},
                {"op": "add", "inputs": ["h", "b"], "output": "h1"},
                {"op": "relu", "inputs": ["h1"], "output": "a"},
                {"op": "sum", "inputs": ["a"], "output": "loss", "args": {"axis": None}}],
        "backward": {"roots": ["loss"]}}
    result = compare_torch.replay(doc)
    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=torch.float64)
    W = torch.tensor(doc["tensors"]["W"]["value"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(doc["tensors"]["b"]["value"], dtype=torch.float64, requires_grad=True)
    (x @ W + b).relu().sum().backward()
    np.testing.assert_array_equal(result.grads["W"], W.grad.numpy())
    np.testing.assert_array_equal(result.grads["b"], b.grad.numpy())
    assert result.order == ["SumBackward0", "ReluBackward0", "AddBackward0", "AccumulateGrad",
                            "MmBackward0", "AccumulateGrad"]


def test_replay_refuses_what_pytorch_cannot_run():
    doc = {"version": 1, "tensors": {"x": {"shape": [2], "init": "normal", "requires_grad": True}},
           "ops": [{"op": "sum", "inputs": ["x"], "output": "s"}],
           "backward": {"roots": ["s"]}}
    result = compare_torch.replay(doc, leaves={"x": np.array([1.0, 2.0])})
    np.testing.assert_array_equal(result.grads["x"], [1.0, 1.0])
    doc["ops"] = [{"op": "delay", "inputs": ["x"], "output": "s", "args": {"ms": 1}}]
    with pytest.raises(compare_torch.CompareError, match="'delay' has no PyTorch equivalent"):
        compare_torch.replay(doc, leaves={"x": np.array([1.0, 2.0])})
    doc["ops"] = [{"op": "aten.nonexistent_op.default", "inputs": ["x"], "output": "s"}]
    with pytest.raises(compare_torch.CompareError, match="unknown ATen op"):
        compare_torch.replay(doc, leaves={"x": np.array([1.0, 2.0])})


def test_replay_takes_its_leaves_from_gradclis_loader(tmp_path):
    """Note [Replayed leaves]: no second leaf reader. A random init replays with the
    values gradcli's loader draws (it was refused: "pass its values in leaves="), and
    what the loader refuses (a missing .npz member) is refused."""
    import gradcli

    doc = {"version": 1, "tensors": {"x": {"shape": [3], "init": {"dist": "normal", "seed": 3},
                                           "requires_grad": True}},
           "ops": [{"op": "mul", "inputs": ["x", "x"], "output": "y"},
                   {"op": "sum", "inputs": ["y"], "output": "s"}],
           "backward": {"roots": ["s"]}}
    x = gradcli.loads(json.dumps(doc), format="json").leaves["x"]
    drawn = x.make(x.shape)
    np.testing.assert_array_equal(compare_torch.replay(doc).grads["x"], 2 * drawn)
    np.save(tmp_path / "w.npy", np.array([1.0, 2.0], dtype=np.float32))
    np.savez(tmp_path / "a.npz", w=np.array([3.0]))
    doc["tensors"] = {"x": {"file": "w.npy", "requires_grad": True}}
    result = compare_torch.replay(doc, base_dir=str(tmp_path))
    assert result.grads["x"].dtype == np.float32
    np.testing.assert_array_equal(result.grads["x"], [2.0, 4.0])
    doc["tensors"] = {"x": {"file": "a.npz", "key": "nope", "requires_grad": True}}
    with pytest.raises(compare_torch.CompareError, match="gradcli cannot load the graph: .*nope"):
        compare_torch.replay(doc, base_dir=str(tmp_path))


# -- light imports -----------------------------------------------------------------------------------
def test_gradcli_and_its_help_do_not_import_torch():
    code = textwrap.dedent("""\
        import sys
        import gradcli, gradcli.bridges.torch, gradcli.cli.cmd_export, gradcli.bridges.torch.compare
        from gradcli.cli import main
        try:
            main(["--help"])
        except SystemExit:
            pass
        try:
            main(["export", "--help"])
        except SystemExit:
            pass
        print("TORCH" if "torch" in sys.modules else "NO-TORCH")
        """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("NO-TORCH"), out.stdout
    assert "MODULE.py:FUNCTION" in out.stdout


def test_a_graph_that_does_not_replay_as_the_module_is_an_exporter_bug(tmp_path, monkeypatch):
    real = compare_torch.replay

    def swapped_order(*args, **kwargs):
        result = real(*args, **kwargs)
        result.order[0], result.order[1] = result.order[1], result.order[0]
        return result

    monkeypatch.setattr(compare_torch, "replay", swapped_order)
    from gradcli.bridges.torch import ExportMismatch

    with pytest.raises(ExportMismatch, match="backward order differs"):
        from_module(torch.nn.Linear(3, 2), (torch.randn(2, 3),))
    path, _ = _module_file(tmp_path, "import torch\n\ndef build_model():\n"
                                     "    return torch.nn.Linear(3, 2)\n")
    res = CliRunner().invoke(gradcli_main, ["export", f"{path}:build_model", "--input-shape", "2,3",
                                              "-o", str(tmp_path / "out")])
    assert res.exit_code == 3 and "bug in gradcli export" in res.output, res.output


# -- the tested torch range (gradcli/bridges/torch/versions.py) ----------------------------------
@pytest.mark.parametrize("version, warned", [("2.13.0+cpu", False), ("2.14.1+cu130", False),
                                             ("2.12.1", True), ("2.15.0", True)])
def test_export_and_against_torch_warn_once_outside_the_tested_range(tmp_path, monkeypatch,
                                                                     version, warned):
    from gradcli.bridges.torch.versions import tested_range

    path, _ = _module_file(tmp_path, """\
        import torch

        def build_model():
            torch.manual_seed(0)
            return torch.nn.Linear(3, 2)
        """)
    monkeypatch.setattr(torch, "__version__", version)
    out = tmp_path / "out"
    runs = [CliRunner().invoke(gradcli_main, ["export", f"{path}:build_model", "--input-shape",
                                                "2,3", "--dtype", "float64", "-o", str(out)])]
    runs.append(CliRunner().invoke(gradcli_main, ["validate", "--against", "torch",
                                                    str(out / "graph.yaml")]))
    for res in runs:
        assert res.exit_code == 0, res.output       # it goes on either way
        lines = [ln for ln in res.stderr.splitlines() if "warning" in ln]
        if warned:
            assert lines == [f"gradcli: warning: torch {version} is outside the tested range "
                             f"{tested_range()}; going on, but node names or formulas may differ"]
        else:
            assert lines == []


def test_exported_weights_are_stored_for_mapping(tmp_path):
    """The export writes its weights uncompressed, so that a run maps them (Note
    [Weights read once]): every member is stored, and the loaded leaves share the map."""
    import mmap
    import zipfile

    from gradcli.loader import load

    torch.manual_seed(0)
    path = from_module(torch.nn.Linear(3, 2), (torch.randn(4, 3),), dtype="float64").write(str(tmp_path))
    with zipfile.ZipFile(tmp_path / "weights.npz") as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    graph = load(path)
    graph.run()
    leaf = next(t.data for t in graph.values.values() if t.is_leaf and t.requires_grad)
    base = leaf
    while isinstance(base.base, np.ndarray):
        base = base.base
    assert isinstance(base.base.obj, mmap.mmap)
