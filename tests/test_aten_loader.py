"""ATen op entries in graph files, as the spec's "ATen ops" section lays them out:
``null`` for an absent optional tensor, nested lists for ``Tensor[]``, numbers as
wrapped scalars, ``output``/``outputs``, args by schema name with schema defaults,
``file:`` tensors taking the array's dtype; every mistake a one-line error naming the
file, the line and the op, at load (the op's infer: shapes and the memory budget)."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from gradcli import loader
from gradcli.loader.check import DocumentCheck
from gradcli.errors import GraphError


def doc(tensors, ops, roots="s"):
    return "version: 1\ntensors:\n" + "".join(f"  {t}\n" for t in tensors) + "ops:\n" + \
        "".join(f"  - {o}\n" for o in ops) + f"backward: {{roots: [{roots}]}}\n"


X = "x: {value: [[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], requires_grad: true}"
SUM = "{op: aten.sum.default, inputs: [y], output: s}"


def run(text, **kw):
    return loader.loads(text, **kw).run()


def names(result):
    return [r.node for r in result.order]


def test_wrapped_number_input_scales_and_gets_no_gradient():
    r = run(doc([X], ["{op: aten.mul.Tensor, inputs: [x, 0.25], output: y}", SUM]))
    np.testing.assert_array_equal(r.grads["x"], np.full((2, 3), 0.25))
    assert names(r) == ["SumBackward0", "MulBackward0", "AccumulateGrad"]


def test_int_wrapped_number_keeps_the_tensor_dtype():
    g = loader.loads(doc(["x: {value: [1.0, 2.0], dtype: float32, requires_grad: true}"],
                         ["{op: aten.mul.Tensor, inputs: [x, 3], output: y}", SUM]))
    assert g.forward()["y"].dtype == np.float32


def test_number_for_a_tensor_of_an_op_pytorch_refuses_it_for_is_a_graph_error():
    # Found by scripts/fuzz_cli.py: embedding's shape rule got the float and crashed
    # (exit 3, "internal error in op"); PyTorch refuses a number there.
    w = "w: {value: [[1.0, 2.0], [3.0, 4.0]], requires_grad: true}"
    for number in ("-.inf", "1", "0.5"):
        with pytest.raises(GraphError, match=r"<graph>:5: ops\[0\] \(aten.embedding.default\): "
                                             r"input 'indices' must be a tensor name, got .*"
                                             r"this op takes no number for a Tensor"):
            loader.loads(doc([w], [f"{{op: aten.embedding.default, inputs: [w, {number}], "
                                   "output: y}", SUM]))


def test_ops_taking_numbers_for_tensors_are_pytorchs():
    torch = pytest.importorskip("torch")
    from gradcli.ops.aten.registry import ATEN_OPS

    for name, op in ATEN_OPS.items():
        base = name.split(".")[1]
        assert op.numbers_as_tensors == torch._C._should_allow_numbers_as_tensors(base), name


def test_null_for_an_absent_optional_tensor():
    text = doc([X, "w: {value: [1.0, 2.0, 3.0], requires_grad: true}"],
               ["{op: aten.native_layer_norm.default, inputs: [x, w, null], outputs: [y, m, r], "
                "args: {normalized_shape: [3], eps: 1.0e-5}}", SUM])
    r = run(text)
    assert set(r.grads) == {"x", "w"}
    assert names(r)[1] == "NativeLayerNormBackward0"


def test_null_for_a_required_tensor_is_refused():
    with pytest.raises(GraphError, match=r"<graph>:5: ops\[0\] \(aten.mul.Tensor\): input 'other' "
                                         r"is not optional: null given"):
        loader.loads(doc([X], ["{op: aten.mul.Tensor, inputs: [x, null], output: y}", SUM]))


def test_nested_list_for_a_tensor_list():
    text = doc([X, "z: {value: [[1.0], [2.0]], requires_grad: true}"],
               ["{op: aten.cat.default, inputs: [[x, z, x]], output: y, args: {dim: 1}}", SUM])
    g = loader.loads(text)
    assert g.forward()["y"].shape == (2, 7)
    r = g.run()
    np.testing.assert_array_equal(r.grads["x"], np.full((2, 3), 2.0))
    assert names(r)[1] == "CatBackward0"


def test_a_name_where_a_tensor_list_goes_is_refused():
    with pytest.raises(GraphError, match=r"<graph>:5: .*aten.cat.default.*input 'tensors' is a "
                                         r"tensor list"):
        loader.loads(doc([X], ["{op: aten.cat.default, inputs: [x], output: y}", SUM]))


@pytest.mark.parametrize("op", ["aten.cat.default", "aten.stack.default"])
def test_an_empty_tensor_list_is_refused_at_load(op, gradcli_cli, tmp_path):
    """Was exit 3 "internal error: AttributeError ... grad_fn" (cat) and "list index
    out of range (inputs: )" (stack); PyTorch: "expected a non-empty list of Tensors"."""
    with pytest.raises(GraphError, match=rf"^<graph>:5: ops\[0\] \({op}\): input 'tensors': "
                                         r"expected a non-empty list of Tensors, got \[\]$"):
        loader.loads(doc([X], [f"{{op: {op}, inputs: [[]], output: y}}", SUM]))
    path = tmp_path / "empty.yaml"
    path.write_text(doc([X], [f"{{op: {op}, inputs: [[]], output: y}}", SUM]))
    result = gradcli_cli("run", path)
    assert result.exit_code == 2 and "expected a non-empty list of Tensors" in result.stderr


def test_wrong_number_of_inputs_names_the_schema_inputs():
    with pytest.raises(GraphError, match=r"<graph>:5: .*takes 2 tensor inputs \(self, other\), got 1"):
        loader.loads(doc([X], ["{op: aten.mul.Tensor, inputs: [x], output: y}", SUM]))


def test_undefined_input_name_is_refused():
    with pytest.raises(GraphError, match=r"<graph>:5: .*input 'q' is not defined above this op"):
        loader.loads(doc([X], ["{op: aten.mul.Tensor, inputs: [x, q], output: y}", SUM]))


def test_unknown_aten_op_is_refused_at_load_naming_it():
    with pytest.raises(GraphError, match=r"<graph>:5: ops\[0\] \(aten.frobnicate.default\): "
                                         r"unknown op 'aten.frobnicate.default'"):
        loader.loads(doc([X], ["{op: aten.frobnicate.default, inputs: [x], output: y}", SUM]))


def test_args_by_schema_name_with_schema_defaults():
    # sum.dim_IntList's keepdim defaults to False (schema): omitted here
    g = loader.loads(doc([X], ["{op: aten.sum.dim_IntList, inputs: [x], output: y, args: {dim: [1]}}",
                               SUM]))
    assert g.forward()["y"].shape == (2,)
    with pytest.raises(GraphError, match=r"<graph>:5: .*unknown arg 'keep_dim' \(did you mean "
                                         r"'keepdim'"):
        loader.loads(doc([X], ["{op: aten.sum.dim_IntList, inputs: [x], output: y, "
                               "args: {dim: [1], keep_dim: true}}", SUM]))


def test_minus_infinity_arg():
    text = doc([X, "b: {value: [[true, false, false], [false, false, true]], dtype: bool}"],
               ["{op: aten.masked_fill.Scalar, inputs: [x, b], output: y, args: {value: -.inf}}",
                "{op: aten._softmax.default, inputs: [y], output: p, args: {dim: 1, half_to_float: false}}",
                "{op: aten.sum.dim_IntList, inputs: [p], output: s, args: {dim: [0]}}"])
    g = loader.loads(text)
    p = g.forward()["p"].data
    assert p[0, 0] == 0 and p[1, 2] == 0 and np.allclose(p.sum(axis=1), 1)


def test_outputs_list_and_output_for_one():
    text = doc([X], ["{op: aten.split.Tensor, inputs: [x], outputs: [a, b], args: {split_size: 2, dim: 1}}",
                     "{op: aten.sum.default, inputs: [a], outputs: [s]}"])
    r = run(text)
    np.testing.assert_array_equal(r.grads["x"], [[1, 1, 0], [1, 1, 0]])
    with pytest.raises(GraphError, match=r"<graph>:5: .*produces 2 outputs but 3 names are given"):
        loader.loads(doc([X], ["{op: aten.split.Tensor, inputs: [x], outputs: [a, b, c], "
                               "args: {split_size: 2, dim: 1}}", SUM]))


def test_int64_constant_tensor_indexes_an_embedding():
    text = doc(["w: {value: [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad: true}",
                "i: {value: [2, 0, 2], dtype: int64}"],
               ["{op: aten.embedding.default, inputs: [w, i], output: y}", SUM])
    r = run(text)
    np.testing.assert_array_equal(r.grads["w"], [[1, 1], [0, 0], [2, 2]])
    assert names(r) == ["SumBackward0", "EmbeddingBackward0", "AccumulateGrad"]


def test_file_tensor_without_dtype_takes_the_arrays_dtype(tmp_path):
    np.savez(tmp_path / "w.npz", idx=np.array([1, 0], np.int64), w=np.ones((2, 3), np.float32))
    text = doc(["w: {file: w.npz, key: w, requires_grad: true}", "i: {file: w.npz, key: idx}"],
               ["{op: aten.embedding.default, inputs: [w, i], output: y}", SUM])
    g = loader.loads(text, base_dir=tmp_path)
    assert g.leaves["i"].dtype == np.int64 and g.leaves["w"].dtype == np.float32
    r = g.run()
    assert r.grads["w"].dtype == np.float32


def test_file_tensor_dtype_must_agree_with_the_array(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    with pytest.raises(GraphError, match=r"<graph>:3: tensors.a: dtype float64 does not match "
                                         r"'a.npy' of dtype float32"):
        loader.loads(doc(["a: {file: a.npy, dtype: float64}", X], [SUM.replace("[y]", "[x]")]),
                     base_dir=tmp_path)
    np.save(tmp_path / "i.npy", np.ones(3, np.int64))
    with pytest.raises(GraphError, match=r"tensors.i: only floating point tensors can require "
                                         r"gradients"):
        loader.loads(doc(["i: {file: i.npy, requires_grad: true}", X], [SUM.replace("[y]", "[x]")]),
                     base_dir=tmp_path)


def test_shapes_are_checked_at_load_from_the_ops_infer():
    text = doc([X, "w: {value: [[1.0, 2.0]]}"],
               ["{op: aten.mm.default, inputs: [x, w], output: y}", SUM])
    with pytest.raises(GraphError, match=r"<graph>:6: ops\[0\] \(aten.mm.default\): .*"
                                         r"\(inputs: x \[2, 3\] float64, w \[1, 2\] float64\)"):
        loader.loads(text)


def test_load_infers_aten_outputs_without_running():
    g = loader.loads(doc([X], ["{op: aten.t.default, inputs: [x], output: y}", SUM]))
    assert g.ops[0].op.checked == [((2, 3), np.dtype(np.float64))]


def test_memory_budget_covers_aten_results():
    text = doc(["x: {shape: [1000, 1], init: ones, requires_grad: true}",
                "z: {shape: [1, 1000], init: ones}"],
               ["{op: aten.expand.default, inputs: [x], output: e, args: {size: [1000, 1000]}}",
                "{op: aten.clone.default, inputs: [e], output: y}", SUM])
    loader.loads(text, max_tensor_bytes=8 * 10**6)           # exactly at the budget: fine
    with pytest.raises(GraphError, match=r"<graph>:6: ops\[0\] \(aten.expand.default\): the result "
                                         r"of shape \[1000, 1000\] needs 8000000 bytes, over the "
                                         r"memory budget"):
        loader.loads(text, max_tensor_bytes=8 * 10**6 - 1)


def test_batch_norm_running_statistics_survive_the_load_check():
    # infer runs the forward on stand-ins: the real running statistics are not touched
    text = doc(["x: {value: [[[1.0, 2.0]], [[3.0, 5.0]]], requires_grad: true}",
                "rm: {value: [0.0]}", "rv: {value: [1.0]}"],
               ["{op: aten.native_batch_norm.default, inputs: [x, null, null, rm, rv], "
                "outputs: [y, m, v], args: {training: true, momentum: 0.5, eps: 0.0}}", SUM])
    g = loader.loads(text)
    vals = g.forward()
    np.testing.assert_allclose(vals["rm"].data, [0.5 * 2.75])


# -- the exported example models through the CLI -------------------------------------------------
MODELS = sorted((pathlib.Path(__file__).resolve().parent.parent / "graphs" / "models").glob("*/graph.yaml"))


@pytest.mark.parametrize("graph", MODELS, ids=[p.parent.name for p in MODELS])
def test_example_model_validates_against_pytorchs_expectations(graph, gradcli_cli):
    res = gradcli_cli("validate", graph, "--format", "json")
    assert res.exit_code == 0, res.output
    checks = {c["name"]: c for c in json.loads(res.stdout)["files"][0]["checks"]}
    assert checks["order"]["status"] == "pass"
    assert sum(n.startswith("grads[") for n in checks) == len(loader.load(graph).expect.grads) > 0


@pytest.mark.parametrize("graph", MODELS, ids=[p.parent.name for p in MODELS])
def test_example_model_runs_and_orders_as_pytorch(graph, gradcli_cli):
    expect = loader.load(graph).expect
    res = gradcli_cli("order", graph, "--format", "json")
    assert res.exit_code == 0, res.output
    assert [r["node"] for r in json.loads(res.stdout)] == expect.order
    res = gradcli_cli("run", graph, "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["order"] == expect.order
    for name, leaf in expect.grads.items():
        np.testing.assert_allclose(np.asarray(out["grads"][name]["data"], dtype=np.float64),
                                   leaf.make(None), rtol=1e-7, atol=1e-12)


def test_a_result_that_cannot_be_allocated_is_a_one_line_error():
    text = doc(["a: {shape: [3000000, 1], init: zeros, requires_grad: true}",
                "b: {shape: [1, 3000000], init: zeros}"],
               ["{op: aten.add.Tensor, inputs: [a, b], output: y}", SUM])
    with pytest.raises(GraphError, match=r"<graph>:6: ops\[0\] \(aten.add.Tensor\): .*(does not fit in "
                                         r"memory|over the memory budget)"):
        loader.loads(text)


def test_null_in_a_tensor_list_is_refused_unless_the_list_is_optional():
    with pytest.raises(GraphError, match=r"<graph>:5: ops\[0\] \(aten.cat.default\): input 'tensors' holds "
                                         r"tensors \(a Tensor\[\]: only a Tensor\?\[\] takes nulls\): null given"):
        loader.loads(doc([X], ["{op: aten.cat.default, inputs: [[x, null]], output: y}", SUM]))
    # a Tensor?[] argument (aten.index.Tensor's `indices`) takes nulls: the layout keeps them
    from gradcli.document import parse_yaml
    from gradcli.ops.aten.registry import AtenCall, Slot
    from gradcli.ops.aten.schema import Schema

    class IndexLike:          # only what the loader asks of an ATen op
        tensor_inputs = Schema("index.Tensor(Tensor self, Tensor?[] indices) -> Tensor").tensors
        doc = "ATen index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"

        def bind(self, layout):
            return AtenCall(self, layout)

    text = "inputs: [x, [null, i, null]]\n"
    ld = DocumentCheck(parse_yaml(text, "<t>"), ".", "t", loader.LoadOptions())
    names, call = ld.schema_inputs(IndexLike(), IndexLike.tensor_inputs, ld.doc.data["inputs"],
                                   (), "ops[0]")
    assert names == ["x", "i"]
    assert call.layout == [Slot(0), [None, Slot(1), None]]
    assert call.structure(["X", "I"]) == ("X", [None, "I", None])


def test_numeric_check_runs_aten_entries_on_raw_arrays(gradcli_cli, repo_root):
    # gradcheck calls each op's fn on the entries' named arrays: the bound layout puts the
    # nulls and wrapped numbers back (cnn_batchnorm has null biases, tiny_gpt wrapped numbers)
    for model in ("cnn_batchnorm", "tiny_gpt"):
        res = gradcli_cli("validate", "--fast", "--format", "json",
                          repo_root / "graphs" / "models" / model / "graph.yaml")
        assert res.exit_code == 0, res.output
        checks = json.loads(res.stdout)["files"][0]["checks"]
        assert any(c["kind"] == "numeric" and c["status"] == "pass" for c in checks), checks


@pytest.mark.parametrize("grad_shape, dtype, match", [
    ("[3, 1]", "float64", "expected dimensions 4 for grad_output but got dimensions 2"),
    ("[6, 3, 1]", "float64", "expected dimensions 4 for grad_output but got dimensions 3"),
    ("[4, 6, 3, 1]", "float32", "expected dtype float64 for grad_output but got dtype float32"),
    # PyTorch does not check the leading dims (it reads a smaller grad_output past its
    # end): gradcli refuses them, a deliberate difference
    ("[2, 6, 3, 1]", "float64", r"grad_output \[2, 6, 3, 1\] must have the leading dims of self"),
])
def test_adaptive_avg_pool2d_backward_checks_grad_output(grad_shape, dtype, match):
    # Found by scripts/fuzz_cli.py: a 2-D grad_output made a [5, 4] result where the
    # shape rule promised [4, 6, 5, 4]; the backward then failed (exit 3), and a 3-D
    # one gave a gradient where PyTorch refuses
    text = doc([f"g: {{shape: {grad_shape}, dtype: {dtype}, init: normal, requires_grad: true}}",
                "x: {shape: [4, 6, 5, 4], init: normal, requires_grad: true}"],
               ["{op: aten._adaptive_avg_pool2d_backward.default, inputs: [g, x], output: y}", SUM])
    with pytest.raises(GraphError, match=r"<graph>:6: ops\[0\] \(aten._adaptive_avg_pool2d_backward"
                                         r".default\): _adaptive_avg_pool2d_backward: " + match):
        loader.loads(text)
    ok = text.replace(grad_shape, "[4, 6, 3, 1]").replace(dtype, "float64")
    assert run(ok).grads["g"].shape == (4, 6, 3, 1)


POOL_ARGS = "kernel_size: [2, 2], stride: [2, 2], padding: [0, 0], ceil_mode: false"


@pytest.mark.parametrize("op, args, extra, grad_shape, match", [
    ("avg_pool2d_backward", POOL_ARGS + ", count_include_pad: true, divisor_override: null", [],
     "[4, 6, 3, 1]", r"grad_output \[4, 6, 3, 1\] must have the shape of the pooling's output "
                     r"\[4, 6, 2, 2\] \(self \[4, 6, 5, 4\]\)"),
    ("avg_pool2d_backward", POOL_ARGS + ", count_include_pad: true, divisor_override: null", [],
     "[2, 2]", r"grad_output \[2, 2\] must have the shape"),
    ("max_pool2d_with_indices_backward", POOL_ARGS + ", dilation: [1, 1]",
     ["i: {shape: [4, 6, 2, 2], init: zeros, dtype: int64}"], "[4, 6, 3, 1]",
     r"grad_output \[4, 6, 3, 1\] must have the shape"),
    ("max_pool2d_with_indices_backward", POOL_ARGS + ", dilation: [1, 1]",
     ["i: {shape: [3], init: zeros, dtype: int64}"], "[4, 6, 2, 2]",
     r"indices \[3\] must have the shape of the pooling's output \[4, 6, 2, 2\]"),
])
def test_pool_backward_checks_grad_output_and_indices_shapes(op, args, extra, grad_shape, match):
    # Found by scripts/fuzz_cli.py: the error was NumPy's ("operands could not be
    # broadcast together", "cannot reshape array of size 3"); PyTorch checks each dim
    inputs = "g, x, i" if extra else "g, x"
    text = doc([f"g: {{shape: {grad_shape}, init: normal, requires_grad: true}}",
                "x: {shape: [4, 6, 5, 4], init: normal, requires_grad: true}", *extra],
               [f"{{op: aten.{op}.default, inputs: [{inputs}], output: y, args: {{{args}}}}}", SUM])
    line = 7 if extra else 6
    with pytest.raises(GraphError, match=rf"<graph>:{line}: ops\[0\] \(aten.{op}.default\): {op}: "
                                         + match):
        loader.loads(text)
    ok = text.replace(f"g: {{shape: {grad_shape}", "g: {shape: [4, 6, 2, 2]") \
        .replace("i: {shape: [3]", "i: {shape: [4, 6, 2, 2]")
    assert run(ok).grads["g"].shape == (4, 6, 2, 2)


@pytest.mark.parametrize("value", [2**63, -2**63 - 1, 2**64])
def test_int_scalar_past_int64_is_refused(value):
    # Found by scripts/fuzz_cli.py: NumPy's "Python int too large to convert to C long".
    # Deliberate difference: PyTorch takes 2**63 .. 2**64 - 1 as a uint64 Scalar
    # (wrapping it into an integer tensor's dtype); gradcli refuses every int past int64
    x = "x: {value: [1.0, 2.0], requires_grad: true}"
    text = doc([x], [f"{{op: aten.mul.Scalar, inputs: [x], output: y, args: {{other: {value}}}}}",
                     SUM])
    with pytest.raises(GraphError, match=rf"<graph>:5: ops\[0\] \(aten.mul.Scalar\): bad arg 'other': "
                                         rf"expected a number, got the int {value} past int64"):
        loader.loads(text)
    r = run(text.replace(str(value), str(float(value))))
    np.testing.assert_array_equal(r.grads["x"], np.full(2, float(value)))
    run(text.replace(str(value), str(2**63 - 1)))


def test_embedding_of_zero_width_weight_has_a_backward():
    # Found by scripts/fuzz_cli.py: a [3, 0] weight made the backward fail (exit 3) with
    # NumPy's "cannot reshape array of size 0 into shape (0)" (reshape(-1, 0))
    text = doc(["w: {shape: [3, 0], init: normal, requires_grad: true}",
                "i: {value: [[1, 2], [0, 1]], dtype: int64}"],
               ["{op: aten.embedding.default, inputs: [w, i], output: y}", SUM])
    r = run(text)
    assert r.grads["w"].shape == (3, 0)
    torch = pytest.importorskip("torch")
    w = torch.zeros(3, 0, dtype=torch.float64, requires_grad=True)
    torch.ops.aten.embedding.default(w, torch.tensor([[1, 2], [0, 1]])).sum().backward()
    assert tuple(w.grad.shape) == r.grads["w"].shape


@pytest.mark.parametrize("indices, num_weights, match", [
    ("{shape: [4, 3, 2], init: normal}", 4, "indices must be an int64 or int32 tensor, got float64"),
    ("{value: [0, 1, 2, 3, 0], dtype: int64}", 4,
     r"shape '\[5, 8\]' is invalid for input of size 192"),
    ("{shape: [4, 3, 2], init: zeros, dtype: int64}", -1, "num_weights must be non-negative, got -1"),
])
def test_embedding_dense_backward_checks_its_inputs(indices, num_weights, match):
    # Found by scripts/fuzz_cli.py: NumPy's "cannot reshape array of size 192 into shape
    # (192,8)"; PyTorch views grad_output as [indices.numel(), D]
    text = doc(["g: {shape: [4, 3, 2, 8], init: normal, requires_grad: true}", f"i: {indices}"],
               ["{op: aten.embedding_dense_backward.default, inputs: [g, i], output: y, args: "
                f"{{num_weights: {num_weights}, padding_idx: -1, scale_grad_by_freq: false}}}}", SUM])
    with pytest.raises(GraphError, match=r"<graph>:6: ops\[0\] \(aten.embedding_dense_backward"
                                         r".default\): embedding_dense_backward: " + match):
        loader.loads(text)
    ok = text.replace(indices, "{shape: [4, 3, 2], init: zeros, dtype: int64}").replace(
        f"num_weights: {num_weights}", "num_weights: 4")
    assert run(ok).grads["g"].shape == (4, 3, 2, 8)
    # a numel-compatible indices tensor is fine in the forward, as in PyTorch ([24] for a
    # [4, 3, 2, 8] grad); its double backward then fails as PyTorch's does
    flat = loader.loads(ok.replace("shape: [4, 3, 2], init: zeros", "shape: [24], init: zeros"))
    assert flat.forward()["y"].shape == (4, 8)


@pytest.mark.parametrize("op, args", [
    ("_softmax", "dim: 0, half_to_float: false"), ("_log_softmax", "dim: 1, half_to_float: false"),
    ("_safe_softmax", "dim: 0"),
])
def test_aten_softmaxes_of_empty_tensors_are_empty(op, args):
    # Found by scripts/fuzz_cli.py: NumPy's "zero-size array to reduction operation
    # maximum which has no identity" (exit 2) where PyTorch returns an empty tensor
    text = doc(["x: {shape: [0, 3], init: normal, requires_grad: true}"],
               [f"{{op: aten.{op}.default, inputs: [x], output: y, args: {{{args}}}}}", SUM])
    g = loader.loads(text)
    assert run(text).grads["x"].shape == (0, 3)
    assert g.forward()["y"].shape == (0, 3)
    torch = pytest.importorskip("torch")
    fn = getattr(torch.ops.aten, op).default
    kw = dict(a.split(": ") for a in args.split(", "))
    call = [int(kw["dim"])] + ([False] if "half_to_float" in kw else [])
    assert tuple(fn(torch.empty(0, 3, dtype=torch.float64), *call).shape) == (0, 3)


def test_rrelu_in_training_writes_a_copy_of_its_shared_noise_leaf():
    """rrelu_with_noise declares ``noise`` written (Note [Copy on write of leaves]): each run of
    a loaded graph writes into its own copy, so runs agree and the leaf keeps its zeros."""
    graph = loader.loads(doc([X, "n: {value: [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]}"],
                             ["{op: aten.rrelu_with_noise.default, inputs: [x, n], output: y, "
                              "args: {lower: 0.2, upper: 0.2, training: true}}", SUM]))
    first, second = graph.run(), graph.run()
    np.testing.assert_array_equal(first.grads["x"], [[1.0, 0.2, 1.0], [1.0, 1.0, 0.2]])
    np.testing.assert_array_equal(second.grads["x"], first.grads["x"])
    assert not graph.leaves["n"].array().any()
    assert names(first)[0] == "SumBackward0" and "RreluWithNoiseBackward0" in names(first)
