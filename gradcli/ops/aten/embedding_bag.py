"""``_embedding_bag`` (what ``nn.EmbeddingBag`` and ``F.embedding_bag`` record) and its backward
ops ``_embedding_bag_backward`` (node ``EmbeddingBagBackwardBackward0``) and
``_embedding_bag_per_sample_weights_backward`` (arithmetic in
``gradcli.ops.aten_kernels.embedding_bag``, Note [bags]).

Only the first output (the bags) is differentiable; ``indices`` and ``offsets`` are not. The
backward ops have no derivative in PyTorch: differentiating the weight's create_graph gradient
raises PyTorch's error (Note [a backward without a derivative]), and the per-sample weights'
gradient records PyTorch's NotImplemented node.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten._embedding_bag.default"](np.arange(6.0).reshape(3, 2), np.array([0, 2, 1]),
    ...                                    np.array([0, 2]), None)[0].tolist()
    [[4.0, 6.0], [2.0, 3.0]]
"""
from __future__ import annotations

from ..aten_kernels import embedding_bag as K
from .registry import aten, defvjp, not_implemented


def _meta(weight, indices, offsets, per_sample_weights=None, scale_grad_by_freq=False, mode=0, sparse=False,
          include_last_offset=False, padding_idx=-1):
    return K.check(weight, indices, offsets, mode, per_sample_weights, include_last_offset, sparse, padding_idx)


@aten("_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, "
      "bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) "
      "-> (Tensor, Tensor, Tensor, Tensor)", "EmbeddingBagBackward0",
      differentiable_outputs=[True, False, False, False], meta=_meta)
def embedding_bag(weight, indices, offsets, per_sample_weights=None, scale_grad_by_freq=False, mode=0,
                  sparse=False, include_last_offset=False, padding_idx=-1):
    return K.embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           include_last_offset, padding_idx)


def _backward_meta(grad, indices, offsets, offset2bag, bag_size, maximum_indices, per_sample_weights, num_weights,
                   scale_grad_by_freq, mode, sparse, padding_idx=-1):
    if sparse:
        raise ValueError("_embedding_bag_backward: sparse=True is not supported: gradcli's gradients are dense")
    return [((int(num_weights), grad.shape[1]), grad.dtype)]


@aten("_embedding_bag_backward(Tensor grad, Tensor indices, Tensor offsets, Tensor offset2bag, Tensor bag_size, "
      "Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, int mode, bool sparse, "
      "Tensor? per_sample_weights, int padding_idx=-1) -> Tensor", "EmbeddingBagBackwardBackward0",
      meta=_backward_meta)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, per_sample_weights,
                           num_weights, scale_grad_by_freq, mode, sparse, padding_idx=-1):
    _backward_meta(grad, indices, offsets, offset2bag, bag_size, maximum_indices, per_sample_weights, num_weights,
                   scale_grad_by_freq, mode, sparse, padding_idx)
    return K.embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                                    scale_grad_by_freq, mode, per_sample_weights, padding_idx)


def _psw_meta(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    return [(tuple(indices.shape), grad.dtype)]


@aten("_embedding_bag_per_sample_weights_backward(Tensor grad, Tensor weight, Tensor indices, Tensor offsets, "
      "Tensor offset2bag, int mode, int padding_idx=-1) -> Tensor", "torch::autograd::NotImplemented",
      meta=_psw_meta)
def per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    return K.per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx)


# weight: _embedding_bag_backward_symint(grad, indices, offsets, result1, result2, result3, weight.sym_size(0),
#         scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
def _weight_vjp(g, ans, weight, indices, offsets, per_sample_weights=None, scale_grad_by_freq=False, mode=0,
                sparse=False, include_last_offset=False, padding_idx=-1):
    return embedding_bag_backward(g[0], indices, offsets, ans[1], ans[2], ans[3], per_sample_weights,
                                  num_weights=weight.shape[0], scale_grad_by_freq=scale_grad_by_freq, mode=mode,
                                  sparse=sparse, padding_idx=padding_idx)


# per_sample_weights: _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, result1, mode,
#                     padding_idx)
def _psw_vjp(g, ans, weight, indices, offsets, per_sample_weights=None, scale_grad_by_freq=False, mode=0,
             sparse=False, include_last_offset=False, padding_idx=-1):
    return per_sample_weights_backward(g[0], weight, indices, offsets, ans[1], mode=mode, padding_idx=padding_idx)


# indices, offsets: non_differentiable
defvjp(embedding_bag, _weight_vjp, None, None, _psw_vjp)
# grad, per_sample_weights: not_implemented("_embedding_bag_backward"); the rest non_differentiable
defvjp(embedding_bag_backward, not_implemented("_embedding_bag_backward"), None, None, None, None, None,
       not_implemented("_embedding_bag_backward"))


def _psw_not_implemented(*_, **__):
    # derivatives.yaml has no formula for it: PyTorch records a NotImplemented node
    raise RuntimeError("derivative for aten::_embedding_bag_per_sample_weights_backward is not implemented")


defvjp(per_sample_weights_backward, *[_psw_not_implemented] * 5)
