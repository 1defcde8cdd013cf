"""``gradcli export`` on code as real models write it: keyword inputs, dtype moves,
detach, train-mode randomness, grouped-query attention, data-dependent control flow."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the gradcli[torch] extra)")
from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import from_module  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402


def _validate(graph, tmp_path):
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
    return graph.document


KEYWORDS = """\
import torch


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(10, 6)
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32)
        return self.fc(h)


def build():
    return Encoder()
"""


def test_cli_passes_keyword_inputs_by_name(tmp_path):
    (tmp_path / "enc.py").write_text(KEYWORDS)
    np.save(tmp_path / "ids.npy", np.array([[1, 2, 3], [4, 5, 0]], dtype=np.int64))
    np.save(tmp_path / "mask.npy", np.array([[1, 1, 0], [1, 1, 1]], dtype=np.int64))
    out = tmp_path / "out"
    result = CliRunner().invoke(gradcli_main, [
        "export", f"{tmp_path / 'enc.py'}:build", "--input", f"attention_mask={tmp_path / 'mask.npy'}",
        "--input", f"input_ids={tmp_path / 'ids.npy'}", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = (out / "graph.yaml").read_text()
    assert "input_ids:" in text and "attention_mask" in text     # leaves named by keyword
    result = CliRunner().invoke(gradcli_main, ["validate", str(out / "graph.yaml")])
    assert result.exit_code == 0, result.output


def test_keyword_input_given_twice_is_refused(tmp_path):
    (tmp_path / "enc.py").write_text(KEYWORDS)
    np.save(tmp_path / "ids.npy", np.array([[1, 2]], dtype=np.int64))
    result = CliRunner().invoke(gradcli_main, [
        "export", f"{tmp_path / 'enc.py'}:build", "--input", f"input_ids={tmp_path / 'ids.npy'}",
        "--input", f"input_ids={tmp_path / 'ids.npy'}", "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "the keyword input_ids is given twice" in result.output


class Moves(torch.nn.Module):
    """Rotary-embedding style code: ``.to(x.device)``, ``type_as``, ``.to(dtype)``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x).to(x.device)
        h = h.to(torch.float32).type_as(x) * 2
        return h.to(device="cpu", dtype=x.dtype)


def test_no_op_device_moves_and_dtype_moves_record_tocopy_as_pytorch(tmp_path):
    graph = from_module(Moves(), (torch.randn(3, 4),), dtype="float64")
    ops = [op for op in graph.document["ops"] if op["op"] == "aten._to_copy.default"]
    assert any(op.get("args", {}).get("device") == "cpu" for op in ops)
    assert "ToCopyBackward0" in graph.document["expect"]["order"]
    _validate(graph, tmp_path)


def test_a_real_device_move_as_an_aten_op_is_refused_naming_both_devices():
    from gradcli import loader
    from gradcli.errors import GraphError

    text = ("version: 1\ntensors:\n  x: {shape: [2], init: ones, requires_grad: true}\nops:\n"
            "  - {op: aten._to_copy.default, inputs: [x], output: y, args: {device: 'sim:0'}}\n"
            "  - {op: aten.sum.default, inputs: [y], output: s}\nbackward: {roots: [s]}\n")
    with pytest.raises(GraphError, match=r"a move to device='sim:0' of a tensor on cpu"):
        loader.loads(text).run()


class Refine(torch.nn.Module):
    """Iterative refinement: the state is detached every step, as such loops do."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        state = x
        for _ in range(3):
            state = torch.tanh(self.fc(state)) + x
            state = state.detach() if _ < 2 else state
        return state


def test_detach_on_the_gradient_path_stops_it_as_in_pytorch(tmp_path):
    graph = from_module(Refine(), (torch.randn(2, 4),), dtype="float64")
    assert sum(op["op"] == "aten.detach.default" for op in graph.document["ops"]) == 2
    # only the last step's nodes run: the detached steps are cut off, as in PyTorch
    assert graph.document["expect"]["order"].count("TanhBackward0") == 1
    _validate(graph, tmp_path)


class Routed(torch.nn.Module):
    """Data-dependent control flow: a count from nonzero picks how many rows go on,
    .item() picks a branch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        k = h.nonzero().shape[0] % 3 + 1          # how many rows: decided by the data
        out = h[:k]
        if out.sum().item() > 0:
            return out * 2
        return out - 1


def test_data_dependent_control_flow_exports_the_path_the_inputs_took(tmp_path):
    graph = from_module(Routed(), (torch.randn(6, 4),), dtype="float64")
    said = graph.document["x-data-dependent"]
    assert any("aten.nonzero.default" in s for s in said)
    assert any("_local_scalar_dense" in s for s in said)
    assert "data-dependent: this graph is the path these inputs took" in graph.header
    _validate(graph, tmp_path)
    assert "x-data-dependent:" in (tmp_path / "graph.yaml").read_text()


class InplaceDropoutOnView(torch.nn.Module):
    """EfficientNet's classifier: flatten (a view), then Dropout(inplace=True) in train."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 6)
        self.drop = torch.nn.Dropout(0.5, inplace=True)
        self.out = torch.nn.Linear(6, 2)

    def forward(self, x):
        return self.out(self.drop(torch.flatten(self.fc(x).view(2, 1, 6), 1)))


def test_inplace_op_on_a_view_exports_with_pytorchs_copyslices(tmp_path):
    # PyTorch's own run records CopySlices for the in-place mul on the view; the file
    # keeps the in-place op (Note [In-place kept]), so its replay and gradcli's run
    # record the same CopySlices, node for node the module's order
    graph = from_module(InplaceDropoutOnView(), (torch.randn(2, 4),), dtype="float64",
                        train=True)
    order = graph.document["expect"]["order"]
    assert "CopySlices" in order
    assert "aten.mul_.Tensor" in [op["op"] for op in graph.document["ops"]]
    _validate(graph, tmp_path)


class TinyUNet(torch.nn.Module):
    """The layers of a diffusion or segmentation UNet: GroupNorm, a strided down
    convolution, ConvTranspose2d back up (output_padding), InstanceNorm, bilinear
    upsampling, PixelShuffle and a skip connection."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inc = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.gn = torch.nn.GroupNorm(4, 8)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)
        self.inorm = torch.nn.InstanceNorm2d(8, affine=True)
        self.shuffle = torch.nn.Sequential(torch.nn.Conv2d(8, 12, 1), torch.nn.PixelShuffle(2))
        self.out = torch.nn.ConvTranspose2d(3, 2, 2, stride=2, groups=1)

    def forward(self, x):
        h = torch.nn.functional.silu(self.gn(self.inc(x)))
        d = torch.relu(self.down(h))
        u = self.inorm(self.up(d)) + h                                  # skip connection
        s = self.shuffle(u)                                              # 2x by PixelShuffle
        s = torch.nn.functional.interpolate(s, scale_factor=0.5, mode="bilinear")
        return self.out(s)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_unet_with_transposed_convolutions_exports_and_validates(tmp_path, dtype):
    """Transposed convolution (Note [Transposed convolution]) is PyTorch's
    ConvolutionBackward0 with its gradients; float32 judged by the norm-wise verdict."""
    graph = from_module(TinyUNet(), (torch.randn(2, 3, 8, 8),), dtype=dtype)
    transposed = [op for op in graph.document["ops"] if op["op"] == "aten.convolution.default"
                  and op["args"]["transposed"]]
    assert len(transposed) == 2
    assert graph.document["expect"]["order"].count("ConvolutionBackward0") == 5
    _validate(graph, tmp_path)


class Targets(torch.nn.Module):
    """Buffers named as traced ops are (``t``, the transpose of a linear layer's weight)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(6, 5)
        self.register_buffer("t", torch.rand(4, 5))
        self.register_buffer("y", torch.tensor([1, 0, 4, 2]))

    def forward(self, x):
        z = self.fc(x)
        return torch.nn.functional.cross_entropy(z, self.y) + torch.nn.functional.mse_loss(z, self.t)


def test_an_op_named_like_a_buffer_is_named_apart(tmp_path):
    """Note [Op names apart from leaves]: the buffer keeps its name ``t``; the op's output
    is ``t.op``."""
    graph = from_module(Targets(), (torch.randn(4, 6),), dtype="float64")
    assert "t" in graph.document["tensors"]
    outputs = [op.get("output") for op in graph.document["ops"]]
    assert "t.op" in outputs and "t" not in outputs
    _validate(graph, tmp_path)


class MadeLeaf(torch.nn.Module):
    """wav2vec2's feature encoder: a tensor computed from the input is made to require
    grad in train mode (``requires_grad = True``, or ``requires_grad_()``)."""

    def __init__(self, method):
        super().__init__()
        torch.manual_seed(0)
        self.method = method
        self.conv = torch.nn.Conv1d(1, 4, 3)

    def forward(self, x):
        h = x[:, None]
        if self.method == "setter":
            h.requires_grad = True
        else:
            h = h.requires_grad_()
        return self.conv(h * 2.0)


@pytest.mark.parametrize("method", ["setter", "requires_grad_"])
def test_a_tensor_made_to_require_grad_is_a_leaf_as_in_pytorch(tmp_path, method):
    """Note [Leaves made in the forward]: its value is a constant leaf that requires grad;
    the mul that reads it records a node and its AccumulateGrad runs, as in PyTorch."""
    graph = from_module(MadeLeaf(method), (torch.randn(2, 9),), dtype="float64")
    made = [n for n, spec in graph.document["tensors"].items()
            if n.startswith("const.") and spec.get("requires_grad")]
    assert len(made) == 1
    order = graph.document["expect"]["order"]
    assert order.count("AccumulateGrad") == 3 and "MulBackward0" in order   # weight, bias, h
    _validate(graph, tmp_path)


class NumpyMask(torch.nn.Module):
    """A train-mode mask drawn from NumPy's global generator (as wav2vec2's SpecAugment)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(6, 6)
        self.fill = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        mask = torch.from_numpy(np.random.rand(*x.shape) < 0.5)
        return self.fc(torch.where(mask, self.fill.expand_as(x), x))


def test_numpys_draws_are_the_same_in_the_trace_and_the_modules_backward(tmp_path):
    """Note [Seeded draws]: both start from the export's seed."""
    np.random.seed(123)                       # whatever the caller's state
    graph = from_module(NumpyMask(), (torch.randn(4, 6),), dtype="float64")
    _validate(graph, tmp_path)


def test_rrelu_exports_in_eval_and_is_refused_as_random_in_training(tmp_path):
    """``nn.RReLU`` records ``rrelu_with_noise``: in eval it is leaky_relu with the mean slope
    and exports as the op (RreluWithNoiseBackward0, its ``noise`` input kept as written);
    in training it draws slopes, which a file cannot reproduce as PyTorch drew them."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.RReLU(0.1, 0.3), torch.nn.Linear(6, 3))
    x = torch.randn(5, 4, dtype=torch.float64)
    graph = from_module(m, (x,), dtype="float64", train=False)
    assert "aten.rrelu_with_noise.default" in [op["op"] for op in graph.document["ops"]]
    assert "RreluWithNoiseBackward0" in graph.document["expect"]["order"]
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
    with pytest.raises(Exception, match="rrelu_with_noise.*random op"):
        from_module(m, (x,), dtype="float64", train=True)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_fractional_max_pooling_exports_with_its_samples_as_a_constant(tmp_path, train):
    """``nn.FractionalMaxPool2d`` draws its window offsets with ``torch.rand`` outside the
    op: the trace folds the draw into a constant, so the file replays the module's windows."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.FractionalMaxPool2d(2, output_size=(4, 3)),
                            torch.nn.Flatten(), torch.nn.Linear(12 * 3, 2))
    x = torch.randn(2, 2, 9, 8, dtype=torch.float64)
    graph = from_module(m, (x,), dtype="float64", train=train)
    assert "aten.fractional_max_pool2d.default" in [op["op"] for op in graph.document["ops"]]
    assert "FractionalMaxPool2DBackward0" in graph.document["expect"]["order"]
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output


class RescalesOnce(torch.nn.Module):
    """Divides its own weight in place, under no_grad, on its first eval call (as RWKV's
    ``_rescale_layers``)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)
        self.rescaled = False

    def forward(self, x):
        if not self.training and not self.rescaled:
            with torch.no_grad():
                self.fc.weight.div_(2.0)
            self.rescaled = True
        return torch.tanh(self.fc(x))


def test_a_forward_that_writes_into_a_parameter_is_refused_naming_it(tmp_path):
    m = RescalesOnce()
    x = torch.randn(5, 4, dtype=torch.float64)
    with pytest.raises(Exception, match=r"writes into its parameter fc\.weight in place.*run the "
                                        r"module once before exporting"):
        from_module(m, (x,), dtype="float64", train=False)
    m.eval()(x.float())                     # the one-time setup, done: the export goes through
    graph = from_module(m, (x,), dtype="float64", train=False)
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output


def test_a_scalar_parameter_keeps_its_shape(tmp_path):
    """A 0-d parameter (CLIP's ``logit_scale``, a learnable temperature) is written with
    shape [] and takes a 0-d gradient, as in PyTorch (a C-contiguous copy of a 0-d array
    used to come back with shape [1], and the export's own check refused the graph)."""

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(4, 3)
            self.logit_scale = torch.nn.Parameter(torch.tensor(2.6592))

        def forward(self, x):
            return self.fc(x) * self.logit_scale.exp()

    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    doc = _validate(from_module(Scaled(), (x,), dtype="float64"), tmp_path)
    assert doc["tensors"]["logit_scale"]["shape"] == []
    weights = np.load(tmp_path / "weights.npz")
    assert weights["logit_scale"].shape == () and weights["grad:logit_scale"].shape == ()


def test_a_module_returning_values_and_indices_exports(tmp_path):
    """``torch.max(x, 1)`` returns values and int64 indices: the projection loss covers
    the floating output alone (the export stopped with a bare StopIteration: the trace
    had a placeholder for the indices' missing projection)."""

    class MaxOut(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(4, 6)

        def forward(self, x):
            return torch.max(self.fc(x), 1)

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    doc = _validate(from_module(MaxOut(), (x,), dtype="float64"), tmp_path)
    assert [n for n in doc["tensors"] if n.startswith("loss.projection")] == ["loss.projection.0"]
    assert "MaxBackward0" in doc["expect"]["order"]


class _Call(torch.nn.Module):
    """``fn(w)`` of one parameter ``w``."""

    def __init__(self, fn, w):
        super().__init__()
        self.fn = fn
        self.w = torch.nn.Parameter(w)

    def forward(self):
        return self.fn(self.w)


W = torch.tensor([[-1.5, 0.5, 2.0], [0.0, -0.25, 1.0]], dtype=torch.float64)


@pytest.mark.parametrize("name, fn", [
    # PyTorch's own gradient holds NaN (a negative base to a fractional power): the replay
    # holds it in the same places, and the export's check takes NaN for NaN
    ("nan-gradient", lambda w: torch.pow(w, 0.5) * 0 + torch.pow(-w.abs() - 1, w)),
    # a decomposition whose ops return Tensor[] (outputs, not output) in its body
    ("tensor-list-body", lambda w: torch.cat(torch.split_with_sizes_copy(w, [1, 2], dim=1), 1)),
    # PyTorch hands a ZeroTensor as sgn's gradient
    ("zero-tensor-gradient", lambda w: torch.sgn(w)),
])
def test_ops_pytorch_answers_unusually_export(name, fn, tmp_path):
    doc = _validate(from_module(_Call(fn, W.clone()), (), dtype="float64"), tmp_path)
    assert doc["expect"]["order"][-1] == "AccumulateGrad"


def test_bfloat16_is_refused_in_one_line():
    """NumPy holds no bfloat16: a bfloat16 parameter, or an op computing in bfloat16, is
    refused naming what and suggesting --dtype (the conversion used to raise a TypeError)."""
    from gradcli.bridges.torch import ExportError

    lin = torch.nn.Linear(3, 2).to(torch.bfloat16)
    with pytest.raises(ExportError, match=r"^weight is bfloat16, which graph files do not hold"):
        from_module(lin, (torch.randn(2, 3),))
    cast = _Call(lambda w: w.to(torch.bfloat16).float() * 2, W.clone())
    with pytest.raises(ExportError, match=r"it computes in bfloat16, which graph files do not "
                                          r"hold \(float16, float32, float64\): export with"):
        from_module(cast, (), dtype="float64")


def test_a_scalar_type_argument_replays_in_pytorch():
    """``_softmax_backward_data``'s ``input_dtype`` is a ScalarType that TorchScript types
    report as int: PyTorch's replay reads its real type (it passed the dtype's name)."""
    from gradcli.bridges.torch import compare

    doc = {"version": 1, "tensors": {"g": {"value": [[1.0, 2.0]], "requires_grad": True},
                                     "y": {"value": [[0.25, 0.75]]}},
           "ops": [{"op": "aten._softmax_backward_data.default", "inputs": ["g", "y"],
                    "output": "z", "args": {"dim": 1, "input_dtype": "float64"}},
                   {"op": "aten.sum.default", "inputs": ["z"], "output": "loss"}],
           "backward": {"roots": ["loss"]}}
    result = compare.replay(doc)
    np.testing.assert_allclose(result.grads["g"], [[0.0, 0.0]], atol=1e-15)
