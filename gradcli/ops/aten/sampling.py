"""Core ATen random ops: ``rand``, ``randn``, ``randperm``, ``native_dropout``; and
``rrelu_with_noise`` (``nn.RReLU``), with its backward.

They draw from the running graph's generator (Note [the graph's generator] in rng.py): the
same numbers on every forward of one file, different ones for another ``seed``. Their values
can never equal PyTorch's for the same seed (another generator); what matches PyTorch is the
distribution, the shapes, the dtypes, the node and its gradient given the drawn mask.

Example::

    >>> import numpy as np
    >>> from gradcli.ops import OPS
    >>> OPS["aten.native_dropout.default"](np.ones(4), p=0.0, train=True)
    [array([1., 1., 1., 1.]), array([ True,  True,  True,  True])]
"""
from __future__ import annotations

import numpy as np

from .. import library as L
from ..aten_kernels._common import check_dtype
from ..library import _value
from ..rng import generator
from .factory import _FACTORY_ARGS, _check_size
from .pointwise import zeros
from .promotion import DEFAULT_FLOAT
from .registry import aten, defvjp, not_differentiable
from .tensor_iterator import lay_out

_LONG = np.dtype(np.int64)


def _float_dtype(name, dtype):
    dt = np.dtype(dtype) if dtype is not None else DEFAULT_FLOAT
    check_dtype(name, np.empty(0, dt))
    return dt


def _size_rule(name):
    def rule(size, dtype=None, **_):
        return [(_check_size(name, size), _float_dtype(name, dtype))]
    return rule


@aten(f"rand(SymInt[] size, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_size_rule("rand"))
def rand(size, dtype=None, layout=None, device=None, pin_memory=None):
    (shape, dt), = _size_rule("rand")(size, dtype)
    return generator().random(shape).astype(dt)           # uniform on [0, 1)


@aten(f"randn(SymInt[] size, *, {_FACTORY_ARGS}) -> Tensor", None, saves=False, meta=_size_rule("randn"))
def randn(size, dtype=None, layout=None, device=None, pin_memory=None):
    (shape, dt), = _size_rule("randn")(size, dtype)
    return generator().standard_normal(shape).astype(dt)


def _randperm_rule(n, dtype="int64", **_):
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    dt = np.dtype(dtype)
    if dt.kind == "b" or (dt.kind == "f" and n > 2 ** np.finfo(dt).nmant + 1):
        raise ValueError(f"randperm: n is too large for result tensor type {dt} (n={n})")
    return [((n,), dt)]


@aten(f"randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, "
      "bool? pin_memory=None) -> Tensor", None, saves=False, meta=_randperm_rule)
def randperm(n, dtype="int64", layout=None, device=None, pin_memory=None):
    (_, dt), = _randperm_rule(n, dtype)
    return generator().permutation(n).astype(dt)


for _op in (rand, randn, randperm):
    not_differentiable(_op)


def _dropout_rule(input, p, train):  # noqa: A002 - PyTorch's name
    check_dtype("native_dropout", input)
    if not 0 <= p <= 1:
        raise ValueError(f"native_dropout: dropout probability has to be between 0 and 1, but got {p}")
    shape = tuple(input.shape)
    # Note [dropout of an empty tensor]: PyTorch returns (input, empty_like(input)), so the mask
    # of an empty input has the input's dtype, not bool
    empty = 0 in shape
    return [(shape, np.dtype(input.dtype)), (shape, np.dtype(input.dtype) if empty else np.dtype(bool))]


@aten("native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)", "NativeDropoutBackward0",
      differentiable_outputs=[True, False], meta=_dropout_rule)
def native_dropout(input, p, train):  # noqa: A002
    _dropout_rule(input, p, train)
    if input.size == 0:                # Note [dropout of an empty tensor]
        return [np.array(input, copy=True), np.empty(np.shape(input), input.dtype)]
    if train is False:                # eval: clone and ones_like, both in the input's layout
        return [np.array(input, copy=True), np.ones_like(input, dtype=bool)]
    keep = generator().random(np.shape(input)) < (1.0 - p)       # bernoulli(1 - p)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    # PyTorch: the mask empty_like(input), and input.mul(mask): both in the input's layout
    return [lay_out(np.asarray(input * keep * scale, dtype=input.dtype), [input]), lay_out(keep, [input])]


def _dropout_vjp(g, ans, input, p, train):  # noqa: A002
    # input: native_dropout_backward(grad, result1, scale) = grad * (mask * scale), with
    # scale = (!train.has_value() || !train.value()) ? 1 : (p == 1 ? 0.0 : 1.0 / (1.0 - p)).
    # Note [dropout with train unset]: with train=None the forward drops and scales by 1 / (1 - p)
    # but the backward scales by 1, exactly as PyTorch 2.13's formula (a quirk kept, not fixed)
    scale = 1.0 if train is not True else (0.0 if p == 1 else 1.0 / (1.0 - p))
    gv = _value(g[0])
    mask = np.asarray(_value(ans[1])).astype(gv.dtype) * gv.dtype.type(scale)
    return L.mul(g[0], mask)


defvjp(native_dropout, _dropout_vjp)

# -- rrelu_with_noise (nn.RReLU) --------------------------------------------------------------
# Training: each non-positive element is multiplied by a slope drawn uniformly from [lower,
# upper], and ``noise`` (a tensor of the input's shape, written in place) keeps the slope of
# every element (1 where the input is positive). Eval: leaky_relu with the mean slope, noise
# untouched. PyTorch's formulas (derivatives.yaml): the backward is grad * noise in training
# (when upper - lower > 1e-6), else leaky_relu's backward with the mean slope. The forward
# gives a contiguous result whatever the input's layout (as PyTorch's); the backward, a
# TensorIterator op there, follows its input's.
_graph_generator = generator     # the schema's ``generator`` argument (always None) shadows it
_RRELU = ("Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, "
          "Generator? generator=None")


def _rrelu_rule(self, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    check_dtype("rrelu_with_noise", self)
    if training and tuple(noise.shape) != tuple(self.shape):
        raise ValueError(f"rrelu_with_noise: noise of shape {list(noise.shape)} does not match the "
                         f"input's {list(self.shape)}")
    return [(tuple(self.shape), np.dtype(self.dtype))]


@aten(f"rrelu_with_noise(Tensor self, Tensor(b!) noise, {_RRELU}) -> Tensor", "RreluWithNoiseBackward0",
      meta=_rrelu_rule, mutates=("noise",))
def rrelu_with_noise(self, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    _rrelu_rule(self, noise, lower, upper, training)
    dt = np.dtype(self.dtype)
    if not training:
        slope = (lower + upper) / 2
        return np.ascontiguousarray(np.where(self > 0, self, self * slope), dtype=dt)
    r = _graph_generator().uniform(lower, upper, np.shape(self)).astype(dt)
    negative = self <= 0
    noise[...] = np.where(negative, r, dt.type(1)).astype(noise.dtype)
    return np.ascontiguousarray(np.where(negative, self * r, self), dtype=dt)


def _rrelu_backward_rule(grad_output, self, noise, lower, upper, training, self_is_result):
    return [(tuple(self.shape), np.result_type(grad_output.dtype, self.dtype))]


@aten("rrelu_with_noise_backward(Tensor grad_output, Tensor self, Tensor noise, Scalar lower, "
      "Scalar upper, bool training, bool self_is_result) -> Tensor", "RreluWithNoiseBackwardBackward0",
      meta=_rrelu_backward_rule)
def rrelu_with_noise_backward(grad_output, self, noise, lower, upper, training, self_is_result):
    (_, dt), = _rrelu_backward_rule(grad_output, self, noise, lower, upper, training, self_is_result)
    if training and upper - lower > 1e-6:
        out = grad_output * noise
    else:
        out = np.where(self > 0, grad_output, grad_output * ((lower + upper) / 2))
    return lay_out(np.asarray(out, dtype=dt), [self])


# self: rrelu_with_noise_backward(grad, self, noise, lower, upper, training, false)
defvjp(rrelu_with_noise,
       lambda g, ans, self, noise, lower=0.125, upper=1 / 3, training=False, generator=None:
       rrelu_with_noise_backward(g, self, noise, lower=lower, upper=upper, training=training,
                                 self_is_result=False),
       None)
# grad_output: rrelu_with_noise_backward(grad, self, noise, lower, upper, training, false);
# self: zeros_like(grad)
defvjp(rrelu_with_noise_backward,
       lambda gg, ans, go, self, noise, lower, upper, training, self_is_result:
       rrelu_with_noise_backward(gg, self, noise, lower=lower, upper=upper, training=training,
                                 self_is_result=False),
       lambda gg, ans, go, self, noise, lower, upper, training, self_is_result: zeros(self.shape, gg),
       None)

for _op in (rand, randn, randperm, native_dropout, rrelu_with_noise):
    _op.draws_random = True       # the graph runs its forward under its seed (ops/rng.py)
