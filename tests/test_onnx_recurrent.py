"""ONNX's recurrent and control-flow operators: LSTM, GRU, RNN, If, Loop, Scan.

Gradients are checked against PyTorch (torch.nn.LSTM / GRU / RNN exported by torch's
dynamo exporter, compared with the module's own gradients) and against finite
differences (``validate --numeric``) for the attributes torch's exporter does not write
(sequence lengths, peepholes, clip, layout 1, linear_before_reset 0); forwards against
onnxruntime (``expect.forward``), and where onnxruntime has no kernel (layout 1) against
onnxruntime on a layout-0 twin of the file.
"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import gradcli  # noqa: E402
from gradcli.bridges.onnx import OnnxError, from_onnx  # noqa: E402
from gradcli.cli import main  # noqa: E402

pytestmark = pytest.mark.timeout(600)


def _validate(g, folder, *extra):
    res = CliRunner().invoke(main, ["validate", *extra, g.write(str(folder))])
    assert res.exit_code == 0, res.output
    return res.output


# -- torch.nn recurrent modules, exported by torch --------------------------------------------
# ONNX's gate order against PyTorch's, as blocks of hidden_size rows: ONNX block k holds
# PyTorch's block BLOCKS[kind][k] (LSTM: ONNX i o f c, PyTorch i f g o; GRU: ONNX z r h,
# PyTorch r z n).
BLOCKS = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


def _to_torch_order(a, kind, hidden):
    out = np.empty_like(a)
    for k, b in enumerate(BLOCKS[kind]):
        out[b * hidden:(b + 1) * hidden] = a[k * hidden:(k + 1) * hidden]
    return out


def _recurrent_modules():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    x_seq = torch.randn(5, 2, 3, generator=gen)
    return {
        # 2 layers, both directions, batch first, no initial state
        "lstm": (nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True), "LSTM",
                 (torch.randn(2, 5, 3, generator=gen),)),
        # initial states given (inputs of the file, gradients compared too)
        "lstm-state": (nn.LSTM(3, 4), "LSTM", (x_seq, (torch.randn(1, 2, 4, generator=gen),
                                                      torch.randn(1, 2, 4, generator=gen)))),
        "gru": (nn.GRU(3, 4, num_layers=2, bidirectional=True), "GRU",
                (x_seq, torch.randn(4, 2, 4, generator=gen))),
        # an initial state given: with none, the exporter folds the first step's
        # ``zeros @ W_hh.T + b_hh`` into a new initializer, a second copy of b_hh
        "rnn": (nn.RNN(3, 4, nonlinearity="relu", bidirectional=True), "RNN",
                (x_seq, torch.randn(2, 2, 4, generator=gen))),
    }


class _Wrap:
    """The module with its outputs flattened into one tuple (the file's outputs)."""

    def __init__(self, torch, module):
        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = module

            def forward(self, x, *state):
                y, h = self.m(x, *state) if state else self.m(x)
                return (y, *h) if isinstance(h, tuple) else (y, h)

        self.module = W()


def _export(torch, module, args, path):
    import warnings

    pytest.importorskip("onnxscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=True, verbose=False)


def _flat(args):
    out = []
    for a in args:
        out.extend(a if isinstance(a, tuple) else [a])
    return out


@pytest.mark.parametrize("name", ["lstm", "lstm-state", "gru", "rnn"])
def test_torch_recurrent_modules_give_the_modules_gradients(name, tmp_path):
    torch = pytest.importorskip("torch")
    module, kind, args = _recurrent_modules()[name]
    wrapped = _Wrap(torch, module).module.eval()
    flat = _flat(args)
    state = tuple(flat[1:]) if kind != "LSTM" else ((tuple(flat[1:]),) if len(flat) > 1
                                                    else ())
    path = tmp_path / f"{name}.onnx"
    _export(torch, wrapped, (flat[0], *state), path)
    model = onnx.load(str(path))
    if kind != "RNN":               # LSTM and GRU stay one ONNX node each (RNN: unrolled)
        assert kind in {n.op_type for n in model.graph.node}
    inputs = [i.name for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]
    feeds = {n: a.numpy() for n, a in zip(inputs, flat)}
    hidden = module.hidden_size
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-4)):
        g = from_onnx(str(path), inputs=feeds, dtype=dtype)
        if dtype == "float32":
            _validate(g, tmp_path / "f32")          # forward against onnxruntime
        grads = gradcli.load(g.write(str(tmp_path / dtype))).run().grads
        m = __import__("copy").deepcopy(wrapped).to(getattr(torch, dtype))
        tins = [torch.as_tensor(g.arrays[n]).requires_grad_(True) for n in inputs]
        st = tuple(tins[1:]) if kind != "LSTM" else ((tuple(tins[1:]),) if len(tins) > 1
                                                     else ())
        outs = m(tins[0], *st)
        loss = sum((o * torch.as_tensor(np.random.default_rng(k).standard_normal(
            tuple(o.shape)))).sum() for k, o in enumerate(outs))
        loss.backward()
        params = {k: p for k, p in m.named_parameters()}

        def close(got, ref, what):
            err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
            assert err <= tol, (name, dtype, what, err)

        for n, t in zip(inputs, tins):
            close(grads[n], t.grad.numpy(), n)
        matched = set()
        for leaf, spec in g.document["tensors"].items():
            if not spec.get("requires_grad") or leaf in inputs:
                continue
            value, grad = g.arrays[leaf], grads[leaf]
            # W, R: [directions, gates*hidden, *]; B: [directions, 2*gates*hidden]; the
            # unrolled RNN's own initializers are the parameters themselves (transposed)
            parts = []
            if value.ndim == 3:
                parts = [(value[d], grad[d]) for d in range(value.shape[0])]
            elif value.ndim == 2 and kind != "RNN" and value.shape[1] % (2 * hidden) == 0:
                half = value.shape[1] // 2
                parts = [(v[s], gr[s]) for v, gr in zip(value, grad)
                         for s in (slice(0, half), slice(half, None))]
            else:
                parts = [(value, grad), (value.T, grad.T)]
            for v, gr in parts:
                tv = _to_torch_order(v, kind, hidden) if kind != "RNN" else v
                tg = _to_torch_order(gr, kind, hidden) if kind != "RNN" else gr
                for pname, p in params.items():
                    if p.shape == tv.shape and np.array_equal(p.detach().numpy(), tv):
                        close(tg, p.grad.numpy(), (leaf, pname))
                        matched.add(pname)
        assert matched == set(params), sorted(set(params) - matched)


# -- handmade files: the attributes torch does not write ---------------------------------------
def _save(path, nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]),
              str(path))
    return path


def _f(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(rng, name, shape, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                   name)


def _recurrent_file(tmp_path, kind, *, direction="forward", layout=0, lens=None, peep=False,
                    clip=None, before=None, acts=None, state=True):
    rng = np.random.default_rng(0)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    dirs = 2 if direction == "bidirectional" else 1
    seq, batch, size, hidden = 4, 3, 2, 3
    inits = [_init(rng, "W", (dirs, gates * hidden, size)),
             _init(rng, "R", (dirs, gates * hidden, hidden)),
             _init(rng, "B", (dirs, 2 * gates * hidden))]
    names = ["x", "W", "R", "B"]
    inputs = [_f("x", [seq, batch, size] if layout == 0 else [batch, seq, size])]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.asarray(lens, np.int32), "lens"))
    names.append("lens" if lens is not None else "")
    sshape = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    if state:
        inputs.append(_f("h0", sshape))
        names.append("h0")
        if kind == "LSTM":
            inputs.append(_f("c0", sshape))
            names.append("c0")
    if peep:
        names += [""] * (7 - len(names)) + ["P"]
        inits.append(_init(rng, "P", (dirs, 3 * hidden)))
    attrs = dict(hidden_size=hidden, direction=direction, layout=layout)
    if clip is not None:
        attrs["clip"] = clip
    if before is not None:
        attrs["linear_before_reset"] = before
    if acts is not None:
        attrs["activations"] = acts
    outs = ["y", "yh"] + (["yc"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outs, name="cell", **attrs)
    path = _save(tmp_path / f"{kind}.onnx", [node], inputs, [_f(o, None) for o in outs], inits)
    feeds = {"x": rng.standard_normal(inputs[0].type.tensor_type.shape.dim and
                                      [d.dim_value for d in
                                       inputs[0].type.tensor_type.shape.dim]).astype(np.float32)}
    if state:
        for n in names[5:7]:
            if n in ("h0", "c0"):
                feeds[n] = rng.standard_normal(sshape).astype(np.float32)
    return path, feeds


CASES = {
    "lstm-reverse-lens-peepholes": ("LSTM", dict(direction="reverse", lens=[4, 2, 3],
                                                 peep=True)),
    "lstm-bidirectional-clip": ("LSTM", dict(direction="bidirectional", clip=0.7)),
    "lstm-layout1": ("LSTM", dict(direction="bidirectional", layout=1, lens=[1, 4, 3])),
    "gru-linear-before-reset-0": ("GRU", dict(direction="bidirectional", before=0,
                                              lens=[3, 4, 2])),
    "gru-linear-before-reset-1": ("GRU", dict(before=1, state=False)),
    "gru-layout1": ("GRU", dict(layout=1, before=1)),
    "rnn-relu-bidirectional": ("RNN", dict(direction="bidirectional", acts=["Relu", "Tanh"],
                                           lens=[4, 1, 2])),
    "rnn-layout1": ("RNN", dict(layout=1, state=False)),
}


def _onnxruntime(path, feeds):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("case", sorted(CASES))
def test_recurrent_attributes_match_onnxruntime_and_finite_differences(case, tmp_path):
    kind, kwargs = CASES[case]
    path, feeds = _recurrent_file(tmp_path, kind, **kwargs)
    g = from_onnx(str(path), inputs=feeds, dtype="float64")
    got = _forward(g, g.write(str(tmp_path / "o")))
    if kwargs.get("layout") == 1:
        # onnxruntime has no batch-first kernel: the import says so and writes no
        # expect.forward; the same weights in a layout-0 file, on the transposed inputs,
        # give onnxruntime's values
        assert "forward" not in g.document.get("expect", {})
        assert "no expect.forward: onnxruntime cannot run the model" in g.header
        (tmp_path / "twin").mkdir()
        twin, _ = _recurrent_file(tmp_path / "twin", kind, **dict(kwargs, layout=0))
        want = _onnxruntime(twin, {k: v.transpose(1, 0, 2) for k, v in feeds.items()})
        want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    else:
        assert g.document["expect"]["forward"]["values"]
        want = _onnxruntime(path, feeds)
    assert len(got) == len(want)
    # onnxruntime runs the file's float32 numbers; gradcli runs them in float64
    for w, v in zip(want, got):
        np.testing.assert_allclose(v, w, rtol=1e-5, atol=1e-6)
    _validate(g, tmp_path / "n", "--numeric")


def _forward(g, folder):
    """The values of the file's graph outputs (what the loss reads), in order."""
    values = gradcli.load(str(folder)).forward()
    reads = [op["inputs"][0] for op in g.document["ops"] if op["id"].startswith("loss.")
             and op["op"] == "aten.mul.Tensor"]
    return [values[n].numpy() for n in reads]


def test_sequence_lengths_keep_the_state_and_zero_the_outputs(tmp_path):
    path, feeds = _recurrent_file(tmp_path, "GRU", lens=[4, 0, 2], before=1)
    g = from_onnx(str(path), inputs=feeds, dtype="float64", reference=False)
    y, yh = _forward(g, g.write(str(tmp_path / "o")))
    assert y.shape == (4, 1, 3, 3)
    assert not y[2:, 0, 2].any() and not y[:, 0, 1].any()      # past each length: zeros
    np.testing.assert_array_equal(yh[0, 1], feeds["h0"][0, 1])  # length 0: the initial state
    np.testing.assert_array_equal(yh[0, 2], y[1, 0, 2])         # the last valid step's state


def test_bad_recurrent_files_are_one_line_errors(tmp_path):
    path, feeds = _recurrent_file(tmp_path, "LSTM", acts=["Sigmoid", "Softsign", "Tanh"])
    with pytest.raises(OnnxError, match="activation 'Softsign' is not supported"):
        from_onnx(str(path), inputs=feeds, reference=False)
    path, feeds = _recurrent_file(tmp_path, "RNN", lens=[4, 9, 1])
    with pytest.raises(OnnxError, match=r"node cell \(RNN\): sequence_lens \[4, 9, 1\]"):
        from_onnx(str(path), inputs=feeds, reference=False)
    rng = np.random.default_rng(0)
    bad = _save(tmp_path / "bad.onnx", [helper.make_node(
        "GRU", ["x", "W", "R"], ["y"], hidden_size=3, name="g")], [_f("x", [2, 1, 2])],
        [_f("y", None)], [_init(rng, "W", (1, 9, 2)), _init(rng, "R", (1, 8, 3))])
    with pytest.raises(OnnxError, match=r"R has shape \[1, 8, 3\], expected \[1, 9, 3\]"):
        from_onnx(str(bad), reference=False)


# -- If, Loop, Scan ---------------------------------------------------------------------------
def _branch(name, nodes, out):
    return helper.make_graph(nodes, name, [], [_f(out, None)])


def test_an_if_on_the_data_takes_its_path_and_says_so(tmp_path):
    then_g = _branch("then", [helper.make_node("Mul", ["x", "w"], ["t"])], "t")
    else_g = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], "e")
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value_float=0.0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g,
                              name="branch")]
    rng = np.random.default_rng(0)
    path = _save(tmp_path / "if.onnx", nodes, [_f("x", [3])], [_f("y", None)],
                 [_init(rng, "w", (3,))])
    for x, taken in ((np.array([1.0, 2.0, -0.5], np.float32), "then"),
                     (np.array([-1.0, 0.2, -0.5], np.float32), "else")):
        g = from_onnx(str(path), inputs={"x": x}, dtype="float64", loss="sum")
        assert g.document["x-data-dependent"] == [
            f"If branch: took its {taken}_branch (the condition, computed from the inputs, "
            f"was {'true' if taken == 'then' else 'false'})"]
        folder = g.write(str(tmp_path / taken))
        assert "data-dependent: this graph is the path these inputs took" in \
            open(folder).read()
        ids = [op["id"] for op in g.document["ops"] if not op["id"].startswith("loss")]
        assert ids[-1].startswith(f"branch/{taken}/")      # the If's name, then the branch's
        grads = gradcli.load(folder).run().grads
        want = g.arrays["w"] if taken == "then" else -np.ones(3)
        np.testing.assert_array_equal(grads["x"], want)
        _validate(g, tmp_path / f"v{taken}", "--numeric")    # forward vs onnxruntime too


def test_a_constant_if_records_no_decision(tmp_path):
    then_g = _branch("then", [helper.make_node("Neg", ["x"], ["t"])], "t")
    else_g = _branch("else", [helper.make_node("Relu", ["x"], ["e"])], "e")
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        np.array(True))), helper.make_node("If", ["c"], ["y"], then_branch=then_g,
                                           else_branch=else_g)]
    path = _save(tmp_path / "c.onnx", nodes, [_f("x", [2])], [_f("y", None)])
    g = from_onnx(str(path), loss="sum")
    assert "x-data-dependent" not in g.document
    assert [op["op"] for op in g.document["ops"]][0] == "aten.neg.default"


def _loop_file(tmp_path, trips=3, cond_from_data=False):
    """y = x; repeat: y = tanh(y * w) + x, scanning each y; ends after ``trips``. With
    ``cond_from_data``: y = tanh(y * w) + x + y, until sum(y) >= 12 (a condition computed
    from the data)."""
    body_nodes = [helper.make_node("Mul", ["y_in", "w"], ["m"]),
                  helper.make_node("Tanh", ["m"], ["t"])]
    if cond_from_data:
        body_nodes += [helper.make_node("Add", ["t", "x"], ["a"]),
                       helper.make_node("Add", ["a", "y_in"], ["y_out"]),
                       helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
                       helper.make_node("Constant", [], ["lim"], value_float=12.0),
                       helper.make_node("Less", ["s", "lim"], ["cond_out"])]
    else:
        body_nodes += [helper.make_node("Add", ["t", "x"], ["y_out"]),
                       helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    body_nodes.append(helper.make_node("Identity", ["y_out"], ["scan"]))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _f("y_in", [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _f("y_out", [3]),
         _f("scan", [3])])
    rng = np.random.default_rng(1)
    inits = [_init(rng, "w", (3,)), numpy_helper.from_array(np.array(trips, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "go")]
    loop = helper.make_node("Loop", ["M", "go", "x"], ["y", "ys"], body=body, name="loop")
    return _save(tmp_path / "loop.onnx", [loop], [_f("x", [3])], [_f("y", None),
                                                                 _f("ys", None)], inits)


def test_a_loop_unrolls_with_its_scan_outputs(tmp_path):
    path = _loop_file(tmp_path)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    g = from_onnx(str(path), inputs={"x": x}, dtype="float64")
    assert "x-data-dependent" not in g.document
    ids = [op["id"] for op in g.document["ops"] if not op["id"].startswith("loss")]
    assert {i.split("/")[1] for i in ids if i.startswith("loop/")} == {"0", "1", "2"}
    y, ys = _forward(g, g.write(str(tmp_path / "o")))
    w, want, seq = g.arrays["w"], x.astype(np.float64), []
    for _ in range(3):
        want = np.tanh(want * w) + x
        seq.append(want)
    np.testing.assert_allclose(y, want, rtol=1e-12)
    np.testing.assert_allclose(ys, np.stack(seq), rtol=1e-12)
    _validate(g, tmp_path / "v", "--numeric")       # and the forward against onnxruntime


def test_a_loop_ended_by_the_data_says_so(tmp_path):
    path = _loop_file(tmp_path, trips=50, cond_from_data=True)
    g = from_onnx(str(path), inputs={"x": np.array([1.5, 1.2, 1.4], np.float32)},
                  dtype="float64")
    (line,) = g.document["x-data-dependent"]
    runs = int(line.split("ran ")[1].split(" ")[0])
    assert 1 < runs < 50 and line.startswith("Loop loop:")
    _validate(g, tmp_path / "v", "--numeric")


def test_loop_unrolling_is_bounded(tmp_path, monkeypatch):
    from gradcli.bridges.onnx import registry

    monkeypatch.setattr(registry, "MAX_UNROLLED", 20)
    path = _loop_file(tmp_path, trips=10**12)
    res = CliRunner().invoke(main, ["import", str(path), "--input-shape", "x=3", "-o",
                                    str(tmp_path / "o")])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert "node loop (Loop)" in line and "more than 20 iterations" in line


def test_recurrent_unrolling_is_bounded(tmp_path, monkeypatch):
    from gradcli.bridges.onnx import registry

    monkeypatch.setattr(registry, "MAX_UNROLLED", 7)
    path, feeds = _recurrent_file(tmp_path, "GRU", direction="bidirectional")  # 2 x 4 steps
    with pytest.raises(OnnxError, match=r"node cell \(GRU\): .* more than 7 iterations"):
        from_onnx(str(path), inputs=feeds, reference=False)


def test_a_scan_unrolls_in_both_directions(tmp_path):
    # state s; for each row r of x (reversed for the second input): s = s * w + r; out s
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "w"], ["m"]), helper.make_node("Add", ["m", "r"], ["a"]),
         helper.make_node("Add", ["a", "q"], ["s_out"]),
         helper.make_node("Sigmoid", ["s_out"], ["o"])],
        "body", [_f("s_in", [2]), _f("r", [2]), _f("q", [2])], [_f("s_out", [2]), _f("o", [2])])
    rng = np.random.default_rng(0)
    scan = helper.make_node("Scan", ["s0", "x", "x"], ["s", "os"], body=body, num_scan_inputs=2,
                            scan_input_directions=[0, 1], scan_output_axes=[1],
                            scan_output_directions=[1], name="scan")
    path = _save(tmp_path / "scan.onnx", [scan], [_f("s0", [2]), _f("x", [4, 2])],
                 [_f("s", None), _f("os", None)], [_init(rng, "w", (2,))])
    feeds = {"s0": rng.standard_normal(2).astype(np.float32),
             "x": rng.standard_normal((4, 2)).astype(np.float32)}
    g = from_onnx(str(path), inputs=feeds, dtype="float64")
    got = _forward(g, g.write(str(tmp_path / "o")))
    for w, v in zip(_onnxruntime(path, feeds), got):
        np.testing.assert_allclose(v, w, rtol=1e-5)
    assert got[1].shape == (2, 4)
    _validate(g, tmp_path / "v", "--numeric")
