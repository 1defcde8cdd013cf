"""ATen group norm: ``native_group_norm`` and ``native_group_norm_backward``.

The forwards are ``gradcli.ops.aten_kernels.group_norm``. Unlike batch and layer
norm, all three outputs of ``native_group_norm`` carry gradients in PyTorch (its
``mean`` and ``rstd`` have ``grad_fn``), so the VJP takes all three.
"""
from __future__ import annotations

from .. import library as L
from ..aten_kernels import group_norm as K
from ..library import _value
from .pointwise import scalar
from .registry import aten, defvjp, defvjp_joint


def _group_norm_meta(input, weight, bias, N, C, HxW, group, eps):
    K.check_group_norm(input, weight, bias, N, C, HxW, group)
    return [(tuple(input.shape), input.dtype), ((N, group), input.dtype), ((N, group), input.dtype)]


@aten("native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, "
      "float eps) -> (Tensor, Tensor, Tensor)", "NativeGroupNormBackward0", meta=_group_norm_meta)
def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    return list(K.native_group_norm(input, weight, bias, N, C, HxW, group, eps))


# Note [group norm statistics carry gradients]: derivatives.yaml differentiates
# native_group_norm with infinitely_differentiable_native_group_norm_backward(grads[0],
# grads[1], grads[2], input, result1, result2, weight, ...) whenever a gradient of the
# statistics is given or grad mode is on: the gradients of mean and rstd flow into the
# input (d mean/dx = 1/D, d rstd/dx = -rstd^2 xhat / D per group of D elements). The
# formula below is that function written with ops, with the saved outputs mean and rstd
# taken as they come (under create_graph they are the recording outputs, so a second
# derivative also flows back through them, as PyTorch's saved outputs do).
def _group_norm_vjp(gs, ans, input, weight, bias, N, C, HxW, group, eps, output_mask):
    g, g_mean, g_rstd = gs
    shape = tuple(input.shape)
    D = (C // group) * HxW
    grouped = (N, group, D)
    per_channel = (N, C, HxW)
    mean = L.reshape(ans[1], shape=(N, group, 1))
    rstd = L.reshape(ans[2], shape=(N, group, 1))
    xhat = L.mul(L.sub(L.reshape(input, shape=grouped), mean), rstd)
    like = _value(input)
    gi = gw = gb = None
    if output_mask[0]:
        terms = []
        if g is not None:
            gx = g if weight is None else L.mul(L.reshape(g, shape=per_channel), L.reshape(weight, shape=(1, C, 1)))
            gx = L.reshape(gx, shape=grouped)
            centred = L.sub(L.sub(gx, L.mean(gx, axis=2, keepdims=True)),
                            L.mul(xhat, L.mean(L.mul(gx, xhat), axis=2, keepdims=True)))
            terms.append(L.mul(rstd, centred))
        if g_mean is not None:
            terms.append(L.expand(L.div(L.reshape(g_mean, shape=(N, group, 1)), scalar(D, like)), shape=grouped))
        if g_rstd is not None:
            coeff = L.div(L.mul(L.reshape(g_rstd, shape=(N, group, 1)), L.mul(rstd, rstd)), scalar(D, like))
            terms.append(L.neg(L.mul(coeff, xhat)))
        if terms:
            total = terms[0]
            for t in terms[1:]:
                total = L.add(total, t)
            gi = L.reshape(total, shape=shape)
    if g is not None and output_mask[1] and weight is not None:
        gw = L.sum_(L.mul(L.reshape(g, shape=per_channel), L.reshape(xhat, shape=per_channel)), axis=(0, 2))
    if g is not None and output_mask[2] and bias is not None:
        gb = L.sum_(L.reshape(g, shape=per_channel), axis=(0, 2))
    return gi, gw, gb


defvjp_joint(native_group_norm, _group_norm_vjp, (True, True, True))


def _group_norm_backward_meta(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    _full_mask(output_mask)
    K.check_group_norm(input, weight, None, N, C, HxW, group)
    return [(tuple(input.shape), input.dtype), ((C,), input.dtype), ((C,), input.dtype)]


def _full_mask(output_mask):
    # Note [backward ops compute every output]: PyTorch leaves an output undefined where
    # output_mask is false (None in Python); a gradcli op's outputs are all arrays, so
    # an entry must ask for all three (a graph of the backward op names all three outputs)
    if not all(output_mask):
        raise ValueError(f"output_mask {list(output_mask)}: gradcli computes every output of this op; "
                         "give [true, true, true]")


@aten("native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, "
      "SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
      "torch::autograd::NotImplemented", meta=_group_norm_backward_meta)
def native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    _full_mask(output_mask)
    return list(K.native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask))


def _not_implemented(*_, **__):
    # derivatives.yaml has no formula for native_group_norm_backward: PyTorch records a
    # NotImplemented node that raises when the backward reaches it
    raise RuntimeError("derivative for aten::native_group_norm_backward is not implemented")


defvjp(native_group_norm_backward, *[_not_implemented] * 5)
