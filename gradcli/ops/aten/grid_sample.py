"""``grid_sampler_2d`` and ``grid_sampler_3d`` (what ``F.grid_sample`` records for a 4-D and a 5-D
input), their backward ops ``grid_sampler_{2,3}d_backward`` (nodes
``GridSampler{2,3}DBackwardBackward0``) and those ops' derivatives, derivatives.yaml's
``grid_sampler_{2,3}d_double_backward`` (arithmetic in ``gradcli.ops.aten_kernels.grid_sample``,
Note [grid sampling as taps]; the 3-D sampler has no bicubic mode, as PyTorch's).

The double backward computes on arrays: a third derivative, which PyTorch computes (its
double backward is made of differentiable ops), raises a one-line error instead (Note [a
derivative gradcli does not go beyond]).

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.grid_sampler_2d.default"](np.arange(4.0).reshape(1, 1, 2, 2), np.zeros((1, 1, 1, 2)),
    ...     interpolation_mode=0, padding_mode=0, align_corners=True).tolist()
    [[[[1.5]]]]
"""
from __future__ import annotations

from ..aten_kernels import grid_sample as K
from ..library import _value
from .registry import aten, defvjp, defvjp_joint


def _family(dims):
    name = f"grid_sampler_{dims}d"

    def meta(input, grid, interpolation_mode, padding_mode, align_corners):
        return [(K.check(input, grid, interpolation_mode, padding_mode, dims), input.dtype)]

    def forward(input, grid, interpolation_mode, padding_mode, align_corners):
        meta(input, grid, interpolation_mode, padding_mode, align_corners)
        return K.grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)
    forward.__name__ = name
    op = aten(f"{name}(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) "
              "-> Tensor", f"GridSampler{dims}DBackward0", meta=meta)(forward)

    def full_mask(output_mask):
        if list(output_mask) != [True, True]:
            raise ValueError(f"{name}_backward: output_mask {list(output_mask)} is not supported (gradcli "
                             "computes every output: [true, true])")

    def backward_meta(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        full_mask(output_mask)
        out = K.check(input, grid, interpolation_mode, padding_mode, dims)
        if tuple(grad_output.shape) != out:
            raise ValueError(f"{name}_backward: grad_output has shape {list(grad_output.shape)}, the output "
                             f"{list(out)}")
        return [(tuple(input.shape), input.dtype), (tuple(grid.shape), grid.dtype)]

    def backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        backward_meta(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask)
        return K.grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
                                          align_corners)
    backward.__name__ = name + "_backward"
    backward_op = aten(f"{name}_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, "
                       "int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)",
                       f"GridSampler{dims}DBackwardBackward0", meta=backward_meta)(backward)

    # input, grid: grid_sampler_{2,3}d_backward(grad, input, grid, interpolation_mode, padding_mode,
    # align_corners, grad_input_mask); gradcli computes both (its backward op refuses a partial mask)
    # and hands out those asked for
    def vjp(g, ans, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
        gi, gg = backward_op(g, input, grid, interpolation_mode=interpolation_mode, padding_mode=padding_mode,
                             align_corners=align_corners, output_mask=[True, True])
        return [gi if output_mask[0] else None, gg if output_mask[1] else None]

    defvjp_joint(op, vjp, [True, True])

    # grad_output, input, grid: grid_sampler_{2,3}d_double_backward(grads[0], grads[1], grad_output, input,
    # grid, interpolation_mode, padding_mode, align_corners, grad_input_mask)
    def double_vjp(k):
        def vjp(g, ans, grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
            ggi, ggg = (None if x is None else _value(x) for x in g)
            return K.grid_sampler_2d_double_backward(ggi, ggg, _value(grad_output), _value(input), _value(grid),
                                                     interpolation_mode, padding_mode, align_corners)[k]
        return vjp

    defvjp(backward_op, double_vjp(0), double_vjp(1), double_vjp(2),
           first_order_only=f"{name}_double_backward",
           beyond=f"gradcli computes {name}'s derivatives to the second order only (its double backward "
                  "is not differentiable in gradcli; PyTorch differentiates it)")
    return op, backward_op


grid_sampler_2d, grid_sampler_2d_backward = _family(2)
grid_sampler_3d, grid_sampler_3d_backward = _family(3)
