"""ATen convolution and pooling entries; their arithmetic is ``gradcli.ops.aten_kernels``.

The entries hold what is PyTorch's autograd (schemas, node names, which
inputs get gradients, derivatives.yaml's formulas); the array work is the
vectorised kernels of ``aten_kernels`` (Note [im2col by strided view]),
which are tested against ``torch.ops.aten`` on their own.
"""
from __future__ import annotations

import numpy as np

from .. import aten_kernels as K
from ..aten_kernels.conv import _check_input, _out_size, _params
from .registry import aten, defvjp, defvjp_joint


def stand_in(meta, like):
    """An array of ``meta``'s shape and dtype owning one element, in ``like``'s array
    module: what a kernel reads of an input the node did not save (saves=False)."""
    xp = K.array_module(like)
    return xp.broadcast_to(xp.zeros((), meta.dtype), tuple(meta.shape))


# -- convolution ----------------------------------------------------------------------
def _convolution_meta(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The output's shape and dtype, with the kernel's own checks (nothing computed)."""
    if transposed:
        raise ValueError("convolution: transposed convolution is not supported")
    d, stride, padding, dilation, _ = _params(weight, stride, padding, dilation, output_padding)
    _check_input("convolution", input, weight, d, False, int(groups))
    out = _out_size(input.shape[2:], weight.shape[2:], stride, padding, dilation)
    if any(v <= 0 for v in out):
        raise ValueError(f"convolution: output size {list(out)} is empty for input "
                         f"{list(input.shape)} and weight {list(weight.shape)}")
    dtypes = [input.dtype, weight.dtype]
    if bias is not None:
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"convolution: bias of shape {list(bias.shape)} does not match "
                             f"{weight.shape[0]} output channels")
        dtypes.append(bias.dtype)
    return [((input.shape[0], weight.shape[0]) + tuple(out), np.result_type(*dtypes))]


@aten("convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
      "SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
      "ConvolutionBackward0", meta=_convolution_meta)
def convolution_op(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise ValueError("convolution: transposed convolution is not supported")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"convolution: bias of shape {list(bias.shape)} does not match "
                         f"{weight.shape[0]} output channels")
    return K.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


def _convolution_vjp(g, ans, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                     groups, output_mask):
    # input, weight, bias: "grad.defined() ? convolution_backward_symint(grad, input, weight, bias->sym_sizes(),
    #   stride, padding, dilation, transposed, output_padding, groups, grad_input_mask) : ..."
    mask = list(output_mask[:2]) + [output_mask[2] and bias is not None]
    return K.convolution_backward(g, input, weight, None if bias is None else bias.shape, stride, padding,
                                  dilation, transposed, output_padding, groups, mask)


defvjp_joint(convolution_op, _convolution_vjp, (True, True, True))


# -- pooling ------------------------------------------------------------------------------
@aten("max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, "
      "int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)", "MaxPool2DWithIndicesBackward0",
      differentiable_outputs=(True, False))
def max_pool2d_with_indices_op(self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    return K.max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)


# self: max_pool2d_with_indices_backward(grad, self, kernel_size, stride, padding, dilation, ceil_mode, result1)
defvjp(max_pool2d_with_indices_op,
       lambda gs, ans, self, kernel_size, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False:
       K.max_pool2d_with_indices_backward(gs[0], self, kernel_size, stride, padding, dilation, ceil_mode,
                                          ans[1]),
       first_order_only=True)


@aten("avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, "
      "bool count_include_pad=True, int? divisor_override=None) -> Tensor", "AvgPool2DBackward0", saves=False)
def avg_pool2d_op(self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
    return K.avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# self: avg_pool2d_backward(grad, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
defvjp(avg_pool2d_op,
       lambda g, ans, self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True,
       divisor_override=None: K.avg_pool2d_backward(g, stand_in(self, g), kernel_size, stride, padding,
                                                    ceil_mode, count_include_pad, divisor_override),
       first_order_only=True)


@aten("_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor", "AdaptiveAvgPool2DBackward0",
      saves=False)
def adaptive_avg_pool2d(self, output_size):
    return K._adaptive_avg_pool2d(self, output_size)


# self: _adaptive_avg_pool2d_backward(grad, self)
defvjp(adaptive_avg_pool2d,
       lambda g, ans, self, output_size: K._adaptive_avg_pool2d_backward(g, stand_in(self, g)),
       first_order_only=True)
