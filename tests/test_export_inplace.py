"""Exports keep in-place ops as traced (Note [In-place kept]): in-place ops on views of
activations whose base is read afterwards, ``x[mask] = v``, ``x += y`` on a slice, fresh memory filled through its slices (circular padding). The
module's own backward holds CopySlices / AsStridedBackward0 nodes; the written file
keeps the in-place ATen ops, so PyTorch's replay of it and gradcli's run record the same
nodes: the export's own check (gradients, and the order node for node) passes, and
``gradcli validate`` passes on the written file."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from gradcli.bridges.torch import compare as compare_torch  # noqa: E402
from gradcli.bridges.torch import from_module  # noqa: E402
from gradcli.cli import main as gradcli_main  # noqa: E402


class ReluOnSlice(torch.nn.Module):
    """``out[:, :k].relu_()`` then ``out`` used again."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.fc = torch.nn.Linear(4, 6)

    def forward(self, x):
        out = self.fc(x)
        out[:, :3].relu_()
        return out * out


class MaskedWrite(torch.nn.Module):
    """``h[mask] = v``: index_put_ on an activation."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.fc = torch.nn.Linear(4, 5)
        self.register_buffer("mask", torch.tensor([[True, False, True, False, False]] * 3))

    def forward(self, x):
        h = self.fc(x)
        h[self.mask] = h[self.mask] * 3.0
        return h * h


class AddOnSlice(torch.nn.Module):
    """``h[:, 1:] += y``: add_ on a slice, then the write-back copy_ on another slice."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.fc = torch.nn.Linear(4, 4)
        self.fc2 = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = self.fc(x)
        h[:, 1:] += self.fc2(x)
        return torch.tanh(h)


class ViewOfViewThenChain(torch.nn.Module):
    """In-place ops on a view of a view, then on the base itself (ReLU(inplace=True))."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.fc = torch.nn.Linear(4, 8)
        self.act = torch.nn.ReLU(inplace=True)

    def forward(self, x):
        h = self.fc(x)
        v = h.view(3, 2, 4)[:, 1]
        v.mul_(2.0)
        return self.act(h).sum(1)


class ZeroOnCloneSlice(torch.nn.Module):
    """swin_v2's attention bias: ``b = bias.clone(); b[k:2 * k].zero_()``, then ``b`` read."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.fc = torch.nn.Linear(4, 6)
        self.bias = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        b = self.bias.clone()
        b[2:4].zero_()
        return torch.tanh(self.fc(x) + b)


class CircularPad(torch.nn.Module):
    """``nn.CircularPad2d``: ``new_empty`` filled by ``copy_`` into its slices from the
    input, then from some of its slices into others (Note [Fresh memory written in place])."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.fc = torch.nn.Linear(4, 8)
        self.pad = torch.nn.CircularPad2d((1, 2, 1, 0))

    def forward(self, x):
        return torch.tanh(self.pad(self.fc(x).view(3, 2, 2, 2)))


class FilledFromParts(torch.nn.Module):
    """``out = h.new_zeros(...)``, then ``out[:, :4] = h`` and ``out[:, 4:] = 2 * h``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        out = h.new_zeros(3, 8)
        out[:, :4] = h
        out[:, 4:] = 2 * h
        return out * out


MODULES = {"circular-pad": (CircularPad, {"aten.new_empty.default", "aten.copy_.default"}),
           "filled-from-parts": (FilledFromParts, {"aten.new_zeros.default", "aten.copy_.default"}),
           "relu-on-slice": (ReluOnSlice, {"aten.relu_.default"}),
           "masked-write": (MaskedWrite, {"aten.index_put_.default"}),
           "add-on-slice": (AddOnSlice, {"aten.add_.Tensor", "aten.copy_.default"}),
           "view-of-view": (ViewOfViewThenChain, {"aten.mul_.Tensor", "aten.relu_.default"}),
           "zero-on-clone-slice": (ZeroOnCloneSlice, {"aten.zero_.default"})}


def LOSS(out):  # noqa: N802 - the loss of every export here
    return (out * torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view(out.shape)).sum()


def _module_run(module, x):
    loss = LOSS(module(x))
    order = compare_torch.node_order([loss], loss.backward)
    return order, {k: p.grad.numpy() for k, p in module.named_parameters()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_inplace_ops_are_kept_and_replay_node_for_node(name, tmp_path):
    cls, kept = MODULES[name]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    graph = from_module(cls(), (x,), dtype="float64", train=False, loss=LOSS)
    ops = [op["op"] for op in graph.document["ops"]]
    assert kept <= set(ops), ops
    order = graph.document["expect"]["order"]
    assert "CopySlices" in order or name == "masked-write"
    # the module's own backward, run here: the written file's order is it, node for node
    module_order, grads = _module_run(cls().double(), x)
    assert order == module_order
    replayed = compare_torch.replay(graph.document, arrays=graph.file_arrays())
    assert replayed.order == module_order
    for k, g in grads.items():
        np.testing.assert_allclose(replayed.grads[k], g, rtol=1e-10)
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output


class SelectedThenWritten(torch.nn.Module):
    """In-place ops on outputs their nodes did not save (Note [What a node saved] in
    ops/uses.py): Mixtral's router divides topk's values in place (TopkBackward0 saves
    the indices alone), sort's and max.dim's values are scaled in place, and relu_ runs
    on max pooling's output (MaxPool2DWithIndicesBackward0 saves the input and indices).
    PyTorch's backward runs; gradcli's must too."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.fc = torch.nn.Linear(4, 8)

    def forward(self, x):
        h = self.fc(x)
        w, idx = torch.topk(torch.softmax(h, -1), 2, dim=-1)
        w /= w.sum(-1, keepdim=True)
        s, _ = torch.sort(h, dim=-1)
        s.mul_(2.0)
        m, _ = torch.max(h, dim=-1)
        m.add_(1.0)
        p = torch.nn.functional.max_pool2d(h.view(3, 2, 2, 2), 2)
        p.relu_()
        return torch.cat([w * idx.to(w.dtype), s, m[:, None], p.flatten(1)], 1)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_inplace_on_an_output_the_node_did_not_save(dtype, tmp_path):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    graph = from_module(SelectedThenWritten(), (x,), dtype=dtype, train=False, loss=LOSS)
    ops = {op["op"] for op in graph.document["ops"]}
    assert {"aten.div_.Tensor", "aten.mul_.Tensor", "aten.add_.Tensor",
            "aten.relu_.default"} <= ops, ops
    order = graph.document["expect"]["order"]
    assert {"TopkBackward0", "SortBackward0", "MaxBackward0",
            "MaxPool2DWithIndicesBackward0"} <= set(order)
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output


def test_inplace_on_an_output_the_node_saved_still_fails():
    """The other side of Note [What a node saved]: exp saves its result, and PyTorch's
    backward fails once that result is changed in place; so does gradcli's."""
    import gradcli.ops as O
    from gradcli.autograd import Tensor

    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = O.exp(x)
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match="output 0 of Exp, is at version 1"):
        O.sum(y).backward()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_relu_in_place_after_group_norm(dtype, tmp_path):
    """timm's BiT (ResNetV2) runs GroupNorm then relu_ on its output: PyTorch's
    NativeGroupNormBackward0 saves input, weight, mean and rstd (result1, result2), not the
    normalized output. group norm's one formula for all inputs reads ans[1] and ans[2]
    alone (Note [What a node saved]); gradcli's node checked every output and refused."""

    class GroupNormAct(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 8, 3)
            self.gn = torch.nn.GroupNorm(2, 8)

        def forward(self, x):
            h = self.gn(self.conv(x))
            h.relu_()
            return h

    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    graph = from_module(GroupNormAct(), (x,), dtype=dtype)
    assert "NativeGroupNormBackward0" in graph.document["expect"]["order"]
    graph.write(str(tmp_path))
    result = CliRunner().invoke(gradcli_main, ["validate", str(tmp_path / "graph.yaml")])
    assert result.exit_code == 0, result.output
