"""``convolution_backward`` as a graph op of its own (PyTorch's node
``ConvolutionBackwardBackward0``); the arithmetic is ``aten_kernels.conv``.

Its VJP is PyTorch's _convolution_double_backward, built from the halves of
convolution_backward that conv_pool.py defines (Note [convolution double backward]):
for the gradients ``ggI``, ``ggW``, ``ggb`` of its three outputs, grad_output gets
``conv(ggI, weight) + conv(input, ggW) + ggb`` (broadcast), input gets the input half
of (grad_output, ggW), weight the weight half of (grad_output, ggI).
"""
from __future__ import annotations

from .. import aten_kernels as K
from .. import library as L
from .conv_pool import _conv, _convolution_meta, conv_grad_input, conv_grad_weight
from .group_norm import _full_mask
from .registry import aten, defvjp


def _check(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
           output_mask):
    _full_mask(output_mask)
    if transposed:           # its VJPs below are the plain convolution's double backward
        raise ValueError("convolution_backward: transposed=True is not supported as an op of a graph "
                         "file (aten.convolution with transposed=True is)")
    (shape, _), = _convolution_meta(input, weight, None, stride, padding, dilation, transposed, output_padding,
                                    groups)
    if tuple(grad_output.shape) != tuple(shape):
        raise ValueError(f"convolution_backward: grad_output of shape {list(grad_output.shape)} does not match the "
                         f"convolution's output {list(shape)}")
    if bias_sizes is not None and list(bias_sizes) != [weight.shape[0]]:
        raise ValueError(f"convolution_backward: bias_sizes {list(bias_sizes)} must be [{weight.shape[0]}]")
    if len({grad_output.dtype, input.dtype, weight.dtype}) > 1:
        raise TypeError("convolution_backward: grad_output, input and weight must have one dtype")


def _meta(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
          output_mask):
    _check(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
           output_mask)
    return [(tuple(input.shape), input.dtype), (tuple(weight.shape), input.dtype), ((weight.shape[0],), input.dtype)]


@aten("convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, "
      "SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, "
      "SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)", "ConvolutionBackwardBackward0",
      meta=_meta)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    _check(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
           output_mask)
    return list(K.convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                       transposed, output_padding, groups, (True, True, True)))


def _p(args):
    return {k: args[k] for k in ("stride", "padding", "dilation", "groups")}


def _vjp_grad_output(gs, ans, go, x, w, **args):
    ggi, ggw, ggb = gs
    terms = []
    if ggi is not None:
        terms.append(_conv(ggi, w, **_p(args)))
    if ggw is not None:
        terms.append(_conv(x, ggw, **_p(args)))
    if ggb is not None:
        terms.append(L.expand(L.reshape(ggb, shape=(1, go.shape[1]) + (1,) * (len(go.shape) - 2)),
                              shape=tuple(go.shape)))
    if not terms:
        return None
    total = terms[0]
    for t in terms[1:]:
        total = L.add(total, t)
    return total


def _vjp_input(gs, ans, go, x, w, **args):
    return None if gs[1] is None else conv_grad_input(go, gs[1], input_shape=tuple(x.shape), **_p(args))


def _vjp_weight(gs, ans, go, x, w, **args):
    return None if gs[0] is None else conv_grad_weight(go, gs[0], weight_shape=tuple(w.shape), **_p(args))


defvjp(convolution_backward, _vjp_grad_output, _vjp_input, _vjp_weight)
