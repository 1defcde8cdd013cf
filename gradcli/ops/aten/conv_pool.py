"""ATen convolution and pooling entries; their arithmetic is ``gradcli.ops.aten_kernels``.

The entries hold what is PyTorch's autograd (schemas, node names, which
inputs get gradients, derivatives.yaml's formulas); the array work is the
vectorised kernels of ``aten_kernels`` (Note [im2col by strided view]),
which are tested against ``torch.ops.aten`` on their own.
"""
from __future__ import annotations

import numpy as np

from .. import aten_kernels as K
from .. import library as L
from ..aten_kernels.conv import _check_input, _out_size, _params
from ...devices import device_of, on_device
from ..core import ChosenBy, Op, defbranch
from ..core import defvjp as core_defvjp
from ..library import _value
from .nn import embedding
from .registry import aten, defvjp
from .shape import contiguous, view
from .tensor_iterator import channels_last, suggests_channels_last


# -- convolution ----------------------------------------------------------------------
def _out_channels(weight, transposed, groups):
    return weight.shape[1] * int(groups) if transposed else weight.shape[0]


def _convolution_meta(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The output's shape and dtype, with the kernel's own checks (nothing computed)."""
    d, stride, padding, dilation, output_padding = _params(weight, stride, padding, dilation,
                                                           output_padding)
    _check_input("convolution", input, weight, d, bool(transposed), int(groups))
    if transposed:
        for op, s, dl in zip(output_padding, stride, dilation):
            if op >= s and op >= dl:      # ATen: "output padding must be smaller than either
                raise ValueError(          # stride or dilation"
                    f"convolution: output_padding {list(output_padding)} must be smaller than "
                    f"either stride {list(stride)} or dilation {list(dilation)}")
        out = [(i - 1) * s - 2 * p + dl * (k - 1) + op + 1 for i, s, p, dl, k, op in zip(
            input.shape[2:], stride, padding, dilation, weight.shape[2:], output_padding)]
    else:
        out = _out_size(input.shape[2:], weight.shape[2:], stride, padding, dilation)
    if any(v <= 0 for v in out):
        raise ValueError(f"convolution: output size {list(out)} is empty for input "
                         f"{list(input.shape)} and weight {list(weight.shape)}")
    channels = _out_channels(weight, transposed, groups)
    dtypes = [input.dtype, weight.dtype]
    if bias is not None:
        if bias.shape != (channels,):
            raise ValueError(f"convolution: bias of shape {list(bias.shape)} does not match "
                             f"{channels} output channels")
        dtypes.append(bias.dtype)
    if input.shape[1] == 0:                 # Note [no input channels] (conv.py)
        channels = 0
    return [((input.shape[0], channels) + tuple(out), np.result_type(*dtypes))]


@aten("convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
      "SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
      "ConvolutionBackward0", meta=_convolution_meta)
def convolution_op(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:                          # the checks the kernel leaves to ATen's meta
        _convolution_meta(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                          groups)
    channels = _out_channels(weight, transposed, groups)
    if bias is not None and bias.shape != (channels,):
        raise ValueError(f"convolution: bias of shape {list(bias.shape)} does not match "
                         f"{channels} output channels")
    out = K.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if out.ndim == 4 and (suggests_channels_last(input) or suggests_channels_last(weight)):
        out = channels_last(out)         # Note [channels-last outputs] (tensor_iterator.py)
    return out


# Note [convolution double backward]: the two halves of convolution_backward are ops
# of their own (not in OPS: they are not graph-file ops), each linear in both its
# inputs, so their VJPs are convolutions and each other; that is PyTorch's
# _convolution_double_backward, and every order records itself. Their nodes carry
# PyTorch's name for convolution_backward's node.
def _conv_args(stride, padding, dilation, groups):
    return {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


def _shaped(shape, like):
    """A zero-stride stand-in of ``shape`` in ``like``'s dtype, on its device: the kernels
    read only its shape."""
    like = _value(like)
    xp = K.array_module(like)
    return on_device(xp.broadcast_to(xp.zeros((), like.dtype), tuple(shape)), device_of(like))


def _grad_input_fn(grad_output, weight, input_shape, stride, padding, dilation, groups):
    return K.convolution_backward(grad_output, _shaped(input_shape, grad_output), weight, None, stride, padding,
                                  dilation, False, [0] * len(stride), groups, (True, False, False))[0]


def _grad_weight_fn(grad_output, input, weight_shape, stride, padding, dilation, groups):
    return K.convolution_backward(grad_output, input, _shaped(weight_shape, grad_output), None, stride, padding,
                                  dilation, False, [0] * len(stride), groups, (False, True, False))[1]


conv_grad_input = Op("convolution_backward.grad_input", _grad_input_fn, "ConvolutionBackwardBackward0",
                     arity=2, public=False, doc="the input half of convolution_backward")
conv_grad_weight = Op("convolution_backward.grad_weight", _grad_weight_fn, "ConvolutionBackwardBackward0",
                      arity=2, public=False, doc="the weight half of convolution_backward")


def _conv(x, w, stride, padding, dilation, groups):
    return convolution_op(x, w, None, stride=stride, padding=padding, dilation=dilation, transposed=False,
                          output_padding=[0] * len(stride), groups=groups)


core_defvjp(conv_grad_input,
            # grad_output: conv(ggI, weight); weight: the weight gradient of (ggI, grad_output)
            lambda gg, ans, go, w, input_shape, **p: _conv(gg, w, **p),
            lambda gg, ans, go, w, input_shape, **p: conv_grad_weight(go, gg, weight_shape=tuple(w.shape), **p))
core_defvjp(conv_grad_weight,
            # grad_output: conv(input, ggW); input: the input gradient of (grad_output, ggW)
            lambda gg, ans, go, x, weight_shape, **p: _conv(x, gg, **p),
            lambda gg, ans, go, x, weight_shape, **p: conv_grad_input(go, gg, input_shape=tuple(x.shape), **p))


# input, weight, bias: "grad.defined() ? convolution_backward_symint(grad, input, weight, bias->sym_sizes(),
#   stride, padding, dilation, transposed, output_padding, groups, grad_input_mask) : ..."
#
# Note [Transposed convolution]: a transposed convolution is the input half of a plain
# one, y = conv_grad_input(x, w) with x in grad_output's place; so its input's gradient
# is the plain convolution of g with the same weight (its output has x's size: an
# output_padding below the stride adds rows the plain convolution's floor drops again)
# and its weight's is the weight half with the roles of x and g swapped. Both are the
# ops above, whose VJPs are each other's, so every order records itself as for the
# plain convolution (PyTorch's nodes are the same ConvolutionBackward0 and
# ConvolutionBackwardBackward0).
def _convolution_vjp_input(g, ans, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                           groups):
    if transposed:
        return _conv(g, weight, **_conv_args(stride, padding, dilation, groups))
    return conv_grad_input(g, weight, input_shape=tuple(input.shape),
                           **_conv_args(stride, padding, dilation, groups))


def _convolution_vjp_weight(g, ans, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                            groups):
    if transposed:
        return conv_grad_weight(input, g, weight_shape=tuple(weight.shape),
                                **_conv_args(stride, padding, dilation, groups))
    return conv_grad_weight(g, input, weight_shape=tuple(weight.shape),
                            **_conv_args(stride, padding, dilation, groups))


def _grad_bias_fn(grad_output, input, weight):
    if input.shape[1] == 0:          # zeros, one per output channel (Note [no input channels], conv.py)
        return K.array_module(grad_output).zeros_like(grad_output, shape=weight.shape[:1])
    return grad_output.sum(axis=(0,) + tuple(range(2, grad_output.ndim)))


def _grad_bias_vjp(gg, ans, go, x, w):
    # grad_output: ggb broadcast over the batch and spatial dims (none without input channels)
    if x.shape[1] == 0:
        return _zeros_for(go, gg)
    return L.expand(L.reshape(gg, shape=(1, go.shape[1]) + (1,) * (len(go.shape) - 2)), shape=tuple(go.shape))


# Its node has edges to input and weight too (no gradient flows there), as PyTorch's one
# ConvolutionBackwardBackward0 node: grad_bias requires grad when they do.
conv_grad_bias = Op("convolution_backward.grad_bias", _grad_bias_fn, "ConvolutionBackwardBackward0",
                    saves=False, arity=3, public=False, doc="the bias part of convolution_backward")
# grad_output: ggb broadcast over the batch and spatial dims; input, weight: none
core_defvjp(conv_grad_bias,
            _grad_bias_vjp,
            lambda gg, ans, go, x, w: None,
            lambda gg, ans, go, x, w: None)


def _convolution_vjp_bias(g, ans, input, weight, bias, **args):
    return None if bias is None else conv_grad_bias(g, input, weight)


defvjp(convolution_op, _convolution_vjp_input, _convolution_vjp_weight, _convolution_vjp_bias)


# -- pooling ------------------------------------------------------------------------------
# Note [pooling double backward]: each pooling backward is an ATen op of its own
# (PyTorch's node names), linear in grad_output: its VJP for grad_output is the
# pooling forward again (avg_pool2d, _adaptive_avg_pool2d) or a gather at the
# indices (max_pool_double_backward), and for self zeros (derivatives.yaml).
def _zeros_for(meta, g):
    return on_device(_shaped(meta.shape, g).copy(), device_of(_value(g)))


@aten("max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
      "int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)", "MaxPool2DWithIndicesBackward0",
      differentiable_outputs=(True, False))
def max_pool2d_with_indices_op(self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    return K.max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)


@aten("max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, "
      "int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor",
      "MaxPool2DWithIndicesBackwardBackward0")
def max_pool2d_with_indices_backward(grad_output, self, indices, kernel_size, stride, padding, dilation,
                                     ceil_mode):
    return K.max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
                                              ceil_mode, indices)


# self: max_pool2d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, result1)
defvjp(max_pool2d_with_indices_op,
       lambda gs, ans, self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False:
       max_pool2d_with_indices_backward(gs[0], _shaped(self.shape, gs[0]), _value(ans[1]), kernel_size=kernel_size,
                                        stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode))


defbranch(max_pool2d_with_indices_op, ChosenBy(1))   # a near tie picks either element


def _max_pool_double_backward(gg, ans, go, self, indices, **args):
    # grad_output: max_pool_double_backward(grad, indices, 2): grad gathered at each window's
    # argmax, written with ops (view + embedding) so that it records itself
    h, w = self.shape[-2:]
    idx = _value(indices)
    xp = K.array_module(idx)
    planes = 1
    for n in idx.shape[:-2]:
        planes *= n
    offsets = (xp.arange(planes, dtype=np.int64) * (h * w)).reshape(idx.shape[:-2] + (1, 1))
    rows = view(gg, size=[-1, 1])
    return view(embedding(rows, idx + offsets), size=list(idx.shape))


defvjp(max_pool2d_with_indices_backward, _max_pool_double_backward,
       lambda gg, ans, go, self, indices, **args: _zeros_for(self, gg), None)


@aten("adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)", "AdaptiveMaxPool2DBackward0",
      differentiable_outputs=(True, False))
def adaptive_max_pool2d_op(self, output_size):
    return K.adaptive_max_pool2d(self, output_size)


@aten("adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
      "AdaptiveMaxPool2DBackwardBackward0")
def adaptive_max_pool2d_backward(grad_output, self, indices):
    return K.adaptive_max_pool2d_backward(grad_output, self, indices)


defbranch(adaptive_max_pool2d_op, ChosenBy(1))   # Note [Branches] in ops/core.py
# self: adaptive_max_pool2d_backward(grad, self, result1)
defvjp(adaptive_max_pool2d_op,
       lambda gs, ans, self, output_size: adaptive_max_pool2d_backward(gs[0], _shaped(self.shape, gs[0]),
                                                                       _value(ans[1])))
# grad_output: max_pool_double_backward(grad, indices, 2); self: zeros_like(self), as max pooling's
defvjp(adaptive_max_pool2d_backward, _max_pool_double_backward,
       lambda gg, ans, go, self, indices, **args: _zeros_for(self, gg), None)


@aten("fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size, Tensor random_samples) "
      "-> (Tensor, Tensor)", "FractionalMaxPool2DBackward0", differentiable_outputs=(True, False))
def fractional_max_pool2d_op(self, random_samples, kernel_size, output_size):
    return K.fractional_max_pool2d(self, kernel_size, output_size, random_samples)


@aten("fractional_max_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, "
      "int[2] output_size, Tensor indices) -> Tensor", "FractionalMaxPool2DBackwardBackward0")
def fractional_max_pool2d_backward(grad_output, self, indices, kernel_size, output_size):
    return K.fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices)


defbranch(fractional_max_pool2d_op, ChosenBy(1))    # a near tie picks either element
# self: fractional_max_pool2d_backward(grad, self, kernel_size, output_size, result1);
# random_samples: not differentiable
defvjp(fractional_max_pool2d_op,
       lambda gs, ans, self, random_samples, kernel_size, output_size: fractional_max_pool2d_backward(
           gs[0], _shaped(self.shape, gs[0]), _value(ans[1]), kernel_size=kernel_size,
           output_size=output_size),
       None)
# grad_output: max_pool_double_backward(grad, indices, 2); self: zeros_like(self)
defvjp(fractional_max_pool2d_backward, _max_pool_double_backward,
       lambda gg, ans, go, self, indices, **args: _zeros_for(self, gg), None)


@aten("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, "
      "bool count_include_pad=True, int? divisor_override=None) -> Tensor", "AvgPool2DBackward0", saves=False)
def avg_pool2d_op(self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
    return K.avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@aten("avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "
      "bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor", "AvgPool2DBackwardBackward0",
      saves=False)
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return K.avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override)


# self: avg_pool2d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
defvjp(avg_pool2d_op,
       lambda g, ans, self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
       divisor_override=None: avg_pool2d_backward(
           g, _shaped(self.shape, g), kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
           count_include_pad=count_include_pad, divisor_override=divisor_override))
# grad_output: avg_pool2d(grad, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
# self: zeros_like(self)
defvjp(avg_pool2d_backward,
       lambda gg, ans, go, self, **args: avg_pool2d_op(gg, **args),
       lambda gg, ans, go, self, **args: _zeros_for(self, gg))


@aten("_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor", "AdaptiveAvgPool2DBackward0",
      saves=False)
def adaptive_avg_pool2d(self, output_size):
    return contiguous(K._adaptive_avg_pool2d(self, output_size))


@aten("_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor",
      "AdaptiveAvgPool2DBackwardBackward0", saves=False)
def adaptive_avg_pool2d_backward(grad_output, self):
    return K._adaptive_avg_pool2d_backward(grad_output, self)


# self: _adaptive_avg_pool2d_backward(grad, self)
defvjp(adaptive_avg_pool2d,
       lambda g, ans, self, output_size: adaptive_avg_pool2d_backward(g, _shaped(self.shape, g)))
# grad_output: _adaptive_avg_pool2d(grad, grad_output.sym_sizes().slice(-2)); self: zeros_like(self)
defvjp(adaptive_avg_pool2d_backward,
       lambda gg, ans, go, self: adaptive_avg_pool2d(gg, output_size=list(go.shape[-2:])),
       lambda gg, ans, go, self: _zeros_for(self, gg))
