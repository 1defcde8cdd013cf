"""Op library, version 1: each op's forward beside its VJPs (HIPS autograd style).

Forward functions take raw arrays (NumPy, or CuPy through NumPy's dispatch
protocols). VJPs are written with the ops themselves. Node names follow
PyTorch where one PyTorch op corresponds.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..autograd.tensor import Tensor
from . import args as A
from . import shapes as S
from .core import Arg, declare, defbranch, defvjp, defvjp_all, primitive
from ..devices import reduce_mean, reduce_sum, scalar, xp_of_array

AXIS = {"axis": Arg(None, A.axis_or_none), "keepdims": Arg(False, A.boolean)}


def _normalize_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted(a % ndim if ndim else a for a in axes))


# -- helpers built from ops (work on arrays and on Tensors) ---------------------------
# Note [Differentiable VJPs]: with create_graph the engine runs each node's
# backward with grad mode on and hands the VJPs Tensors (the node's saved
# tensors, and gradients that carry grad_fns), so everything a gradient flows
# through is written with ops: they record themselves on Tensors and just
# compute on raw arrays. Masks computed from values (comparisons, signs,
# tie shares) read the raw array through ``_value``: no gradient flows
# through a comparison, exactly as in PyTorch's derivative formulas.
def _value(x):
    """The raw array of ``x`` (a Tensor's data, or ``x`` itself)."""
    return x.data if type(x) is Tensor else x


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def unbroadcast(g, shape):
    """Sum a gradient of a broadcast result back to an operand's ``shape`` (an array through
    the ops' own functions, a Tensor through the ops: Note [VJPs on arrays call forwards]
    in aten/shape.py)."""
    if g.shape == shape:
        return g
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    summed, reshaped = (sum_, reshape) if type(g) is Tensor else (sum_.fn, reshape.fn)
    if axes:
        g = summed(g, axis=axes, keepdims=True)
    return reshaped(g, shape=shape) if g.shape != shape else g


def expand_reduced(g, shape, axis, keepdims):
    """Broadcast the gradient of a reduction over ``axis`` back to ``shape``."""
    if not keepdims:
        axes = _normalize_axes(axis, len(shape))
        kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
        g = reshape(g, shape=kept)
    return expand(g, shape=shape)


# -- elementwise, binary ---------------------------------------------------------
@primitive("add", "AddBackward0", saves=False, arity=2, broadcasts=True)
def add(x, y):
    """x + y"""
    return np.add(x, y)


# Note [The chain's VJPs inline]: add, sub and mul are most of a chain's and a fan-in's
# nodes, and a VJP is a Python call per edge: theirs do the common cases of what they
# call in line (unbroadcast's gradient already of the operand's shape; ``mul``'s raw
# arrays, which Op.__call__ hands to NumPy's multiply as they are), and call the ops
# for everything else, Tensors under create_graph included (Note [Differentiable VJPs]).
def _add_vjp_x(g, ans, x, y):
    return g if g.shape == x.shape else unbroadcast(g, x.shape)


def _add_vjp_y(g, ans, x, y):
    return g if g.shape == y.shape else unbroadcast(g, y.shape)


defvjp(add, _add_vjp_x, _add_vjp_y)


@primitive("sub", "SubBackward0", saves=False, arity=2, broadcasts=True)
def sub(x, y):
    """x - y"""
    return np.subtract(x, y)


def _sub_vjp_y(g, ans, x, y):
    d = neg(g)
    return d if d.shape == y.shape else unbroadcast(d, y.shape)


defvjp(sub, _add_vjp_x, _sub_vjp_y)


@primitive("mul", "MulBackward0", arity=2, broadcasts=True)
def mul(x, y):
    """x * y"""
    return np.multiply(x, y)


def _mul_vjp_x(g, ans, x, y):
    d = mul(g, y) if type(g) is Tensor or type(y) is Tensor else np.multiply(g, y)
    return d if d.shape == x.shape else unbroadcast(d, x.shape)


def _mul_vjp_y(g, ans, x, y):
    d = mul(g, x) if type(g) is Tensor or type(x) is Tensor else np.multiply(g, x)
    return d if d.shape == y.shape else unbroadcast(d, y.shape)


defvjp(mul, _mul_vjp_x, _mul_vjp_y)


@primitive("div", "DivBackward0", arity=2, broadcasts=True)
def div(x, y):
    """x / y"""
    return np.divide(x, y)


defvjp(div, lambda g, ans, x, y: unbroadcast(div(g, y), x.shape),
       lambda g, ans, x, y: unbroadcast(neg(div(mul(g, ans), y)), y.shape))


@primitive("pow", "PowBackward1", arity=2, broadcasts=True)
def pow_(x, y):
    """x ** y"""
    return np.power(x, y)


def _pow_grad_exponent(g, ans, x, y):
    # d/dy x**y = x**y * log(x); PyTorch defines it as 0 where x == 0 and y >= 0.
    mask = (_value(x) == 0) & (_value(y) >= 0)
    safe_x = where(mask, scalar(1, x.dtype), x)
    return unbroadcast(where(mask, scalar(0, ans.dtype), mul(g, mul(ans, log(safe_x)))),
                       y.shape)


def _pow_grad_base(g, ans, x, y):
    # d/dx x**y = y * x**(y-1); 0 where y == 0 (PyTorch's pow_backward_self), not 0 * inf.
    zero = _value(y) == 0
    grad = mul(g, mul(y, pow_(x, sub(y, scalar(1, np.result_type(_value(y), 1))))))
    return unbroadcast(where(zero, scalar(0, ans.dtype), grad), x.shape)


defvjp(pow_, _pow_grad_base, _pow_grad_exponent)


@primitive("maximum", "MaximumBackward0", arity=2, broadcasts=True)
def maximum(x, y):
    """elementwise max; ties split the gradient in half (as PyTorch)"""
    return np.maximum(x, y)


@primitive("minimum", "MinimumBackward0", arity=2, broadcasts=True)
def minimum(x, y):
    """elementwise min; ties split the gradient in half (as PyTorch)"""
    return np.minimum(x, y)


def _select_grad(g, x, y, loses, shape):
    # PyTorch: half each on a tie, none to the operand that lost, all otherwise
    # (so a NaN operand, which neither wins nor loses, gets the whole gradient).
    x, y = _value(x), _value(y)
    share = np.where(x == y, 0.5, np.where(loses(x, y), 0.0, 1.0)).astype(g.dtype)
    return unbroadcast(mul(g, share), shape)


defvjp(maximum, lambda g, ans, x, y: _select_grad(g, x, y, np.less, x.shape),
       lambda g, ans, x, y: _select_grad(g, y, x, np.less, y.shape))
defvjp(minimum, lambda g, ans, x, y: _select_grad(g, x, y, np.greater, x.shape),
       lambda g, ans, x, y: _select_grad(g, y, x, np.greater, y.shape))


def _where_infer(shapes, dtypes):
    """PyTorch's where takes a bool condition only (a float one is refused, not cast)."""
    if dtypes[0] != np.bool_:
        raise S.ShapeMismatch(f"where expected condition {{0}} to be a boolean tensor, but got "
                              f"a tensor with dtype {dtypes[0]}")
    return [(S.broadcast(shapes), np.result_type(dtypes[1], dtypes[2]))]


@primitive("where", "WhereBackward0", arity=3, broadcasts=True, infer=_where_infer)
def where(cond, x, y):
    """cond ? x : y (cond is a bool tensor)"""
    return np.where(cond, x, y)


defvjp(where, lambda g, ans, c, x, y: None,
       lambda g, ans, c, x, y: unbroadcast(where(c, g, scalar(0, g.dtype)), x.shape),
       lambda g, ans, c, x, y: unbroadcast(where(c, scalar(0, g.dtype), g), y.shape))


# -- elementwise, unary ----------------------------------------------------------
@primitive("neg", "NegBackward0", saves=False, infer=S.ELEMENTWISE)
def neg(x):
    """-x"""
    return np.negative(x)


defvjp(neg, lambda g, ans, x: neg(g))


@primitive("exp", "ExpBackward0", infer=S.ELEMENTWISE)
def exp(x):
    """e ** x"""
    return np.exp(x)


defvjp(exp, lambda g, ans, x: mul(g, ans))


@primitive("log", "LogBackward0", infer=S.ELEMENTWISE)
def log(x):
    """natural logarithm"""
    return np.log(x)


defvjp(log, lambda g, ans, x: div(g, x))


@primitive("sin", "SinBackward0", infer=S.ELEMENTWISE)
def sin(x):
    """sine"""
    return np.sin(x)


@primitive("cos", "CosBackward0", infer=S.ELEMENTWISE)
def cos(x):
    """cosine"""
    return np.cos(x)


defvjp(sin, lambda g, ans, x: mul(g, cos(x)))
defvjp(cos, lambda g, ans, x: neg(mul(g, sin(x))))


@primitive("tanh", "TanhBackward0", infer=S.ELEMENTWISE)
def tanh(x):
    """hyperbolic tangent"""
    return np.tanh(x)


defvjp(tanh, lambda g, ans, x: mul(g, sub(scalar(1, ans.dtype), mul(ans, ans))))


@primitive("sigmoid", "SigmoidBackward0", infer=S.ELEMENTWISE)
def sigmoid(x):
    """1 / (1 + e ** -x)"""
    return np.reciprocal(np.add(np.exp(np.negative(x)), 1).astype(x.dtype, copy=False))


defvjp(sigmoid, lambda g, ans, x: mul(g, mul(ans, sub(scalar(1, ans.dtype), ans))))


@primitive("relu", "ReluBackward0", infer=S.ELEMENTWISE)
def relu(x):
    """max(x, 0); gradient 0 at 0 (as PyTorch)"""
    return np.maximum(x, scalar(0, x.dtype))


# Note [Recorded masks of relu and abs]: PyTorch writes relu's gradient as
# threshold_backward(grad, result, 0) and abs's as grad * self.sgn(): both
# record a node that reads the forward's tensor (ThresholdBackwardBackward0,
# SgnBackward0), so under create_graph the gradient requires grad even when
# grad does not (the seed), and its double backward gives zeros to x instead
# of "does not require grad". clamp, maximum/minimum, max/min and where mask
# with comparisons in PyTorch too: their gradient records only through g.
@primitive("threshold_backward", "ThresholdBackwardBackward0", arity=2, public=False,
           infer=lambda shapes, dtypes: [(shapes[0], dtypes[0])])
def threshold_backward(g, x):
    """g where x > 0, else 0 (a NaN x passes g on): the gradient of relu"""
    return np.where(x <= 0, scalar(0, g.dtype), g)


def _zeros_of(g, ans, *inputs, **args):
    """zeros_like(grad): the gradient of an input that a formula only compares."""
    gv = _value(g)
    from ..devices import xp_of_array   # a positive test: NumPy scalars are host values

    return xp_of_array(gv).zeros_like(gv)


defvjp(threshold_backward, lambda g, ans, gin, x: threshold_backward(g, x), _zeros_of)
defvjp(relu, lambda g, ans, x: threshold_backward(g, ans))
defbranch(relu, lambda x: x > 0)                   # Note [Branches] in core.py


@primitive("sgn", "SgnBackward0", saves=False, public=False, infer=S.ELEMENTWISE)
def sgn(x):
    """-1, 0 or 1: the sign of x (its gradient is zero)"""
    return np.sign(x)


defvjp(sgn, _zeros_of)


@primitive("abs", "AbsBackward0", infer=S.ELEMENTWISE)
def abs_(x):
    """|x|; gradient 0 at 0"""
    return np.abs(x)


defvjp(abs_, lambda g, ans, x: mul(g, sgn(x)))
defbranch(abs_, np.sign)


@primitive("sqrt", "SqrtBackward0", infer=S.ELEMENTWISE)
def sqrt(x):
    """square root"""
    return np.sqrt(x)


defvjp(sqrt, lambda g, ans, x: div(g, mul(ans, scalar(2, ans.dtype))))


@primitive("square", "PowBackward0", infer=S.ELEMENTWISE)
def square(x):
    """x ** 2"""
    return np.square(x)


defvjp(square, lambda g, ans, x: mul(g, mul(x, scalar(2, x.dtype))))


def _clamp_check(args):
    if args["min"] is None and args["max"] is None:
        raise ValueError("clamp needs at least one of the args min and max")


@primitive("clamp", "ClampBackward1", infer=S.ELEMENTWISE, check=_clamp_check,
           args={"min": Arg(None, A.number_or_none), "max": Arg(None, A.number_or_none)})
def clamp(x, min=None, max=None):  # noqa: A002 - the graph format's names
    """clip into [min, max]; gradient passes where min <= x <= max"""
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    # Note [clamp promotes]: torch.clamp's result dtype is the promotion of the tensor
    # with its bounds as wrapped numbers: a bool tensor with an int bound is int64, an
    # int tensor with a float bound the default float (float32); a float tensor keeps
    # its dtype. (gradcli kept the input's dtype: clamp(int64 x, min=0.5) stayed int64.)
    from .aten.promotion import result_type  # noqa: PLC0415 - aten imports this module

    bounds = [b for b in (min, max) if b is not None]
    dt = result_type(x, *bounds)
    info = np.iinfo(dt) if dt.kind in "iu" else np.finfo(dt) if dt.kind == "f" else None
    lo, hi = (None, None) if info is None else (info.min.item(), info.max.item()) \
        if dt.kind == "f" else (int(info.min), int(info.max))
    for b in bounds:
        finite = isinstance(b, int) or (b == b and abs(b) != float("inf"))
        if info is not None and finite and not lo <= b <= hi:
            raise ValueError(f"clamp: bound {b} cannot be converted to type {dt} without overflow")
    return np.clip(x.astype(dt, copy=False) if hasattr(x, "astype") else np.asarray(x, dt),
                   min, max).astype(dt, copy=False)


def _clamp_passes(x, min=None, max=None):  # noqa: A002
    """Where clamp's gradient passes: min <= x <= max (its piece, Note [Branches])."""
    mask = np.ones(np.shape(x), dtype=bool)
    if min is not None:
        mask &= x >= min
    if max is not None:
        mask &= x <= max
    return mask


def _clamp_vjp(g, ans, x, min=None, max=None):  # noqa: A002
    return mul(g, _clamp_passes(_value(x), min, max).astype(g.dtype))


defvjp(clamp, _clamp_vjp)
defbranch(clamp, _clamp_passes)


# -- reductions ------------------------------------------------------------------
def _sum_name(datas, args):
    return "SumBackward0" if args.get("axis") is None and not args.get("keepdims") else "SumBackward1"


@primitive("sum", _sum_name, saves=False, args=AXIS, infer=S.REDUCTION)
def sum_(x, axis=None, keepdims=False):
    """sum over axis (all by default)"""
    return reduce_sum(x, axis=axis, keepdims=keepdims)


defvjp(sum_, lambda g, ans, x, axis=None, keepdims=False: expand_reduced(g, x.shape, axis, keepdims))


def _mean_name(datas, args):
    return "MeanBackward0" if args.get("axis") is None and not args.get("keepdims") else "MeanBackward1"


@primitive("mean", _mean_name, saves=False, args=AXIS, infer=S.REDUCTION)
def mean(x, axis=None, keepdims=False):
    """mean over axis (all by default)"""
    return reduce_mean(x, axis=axis, keepdims=keepdims)


def _mean_vjp(g, ans, x, axis=None, keepdims=False):
    n = 1
    for a in _normalize_axes(axis, len(x.shape)):
        n *= x.shape[a]
    return expand_reduced(div(g, scalar(n, g.dtype)), x.shape, axis, keepdims)


defvjp(mean, _mean_vjp)


def _extreme_name(prefix):
    def name(datas, args):
        axis = args.get("axis")
        if axis is None:
            return f"{prefix}Backward1"
        return f"{prefix}Backward0" if isinstance(axis, int) else f"A{prefix.lower()}Backward0"
    return name


@primitive("max", _extreme_name("Max"), args=AXIS, infer=S.REDUCTION)
def max_(x, axis=None, keepdims=False):
    """maximum over axis; with an int axis the first maximum of each slice takes the gradient (torch.max(dim)), else ties share it evenly (amax)"""
    _check_extreme_of_empty("max", x, axis)
    return np.max(x, axis=axis, keepdims=keepdims)


def _check_extreme_of_empty(name, x, axis):
    """A max or min over no element has no value: PyTorch's errors, not NumPy's
    "zero-size array to reduction operation maximum which has no identity"."""
    if np.size(x) != 0:
        return
    if axis is None:
        raise ValueError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0 "
                         f"(input of shape {list(np.shape(x))})")
    for ax in _normalize_axes(axis, np.ndim(x)):
        if np.shape(x)[ax] == 0:
            raise ValueError(f"{name}(): Expected reduction dim {ax} to have non-zero size "
                             f"(input of shape {list(np.shape(x))})")


@primitive("min", _extreme_name("Min"), args=AXIS, infer=S.REDUCTION)
def min_(x, axis=None, keepdims=False):
    """minimum over axis; with an int axis the first minimum of each slice takes the gradient (torch.min(dim)), else ties share it evenly (amin)"""
    _check_extreme_of_empty("min", x, axis)
    return np.min(x, axis=axis, keepdims=keepdims)


def _extreme_vjp(g, ans, x, axis=None, keepdims=False):
    shape = x.shape
    x, ans = _value(x), _value(ans)
    a = ans if keepdims else np.reshape(
        ans, tuple(1 if i in _normalize_axes(axis, len(shape)) else s for i, s in enumerate(shape)))
    hit = (x == a) | (np.isnan(x) & np.isnan(a))    # a NaN result came from the NaNs
    if isinstance(axis, int):
        # max(dim) returns one index per slice: the first maximum gets it all.
        first = np.cumsum(hit, axis=axis) == 1
        share = (hit & first).astype(g.dtype)
    else:
        count = np.sum(hit, axis=_normalize_axes(axis, len(shape)), keepdims=True)
        share = hit.astype(g.dtype) / count.astype(g.dtype)
    return mul(expand_reduced(g, shape, axis, keepdims), share)


defvjp(max_, _extreme_vjp)
defvjp(min_, _extreme_vjp)


@primitive("logsumexp", "LogsumexpBackward0", args=AXIS, infer=S.REDUCTION)
def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over axis, computed stably"""
    if np.size(x) == 0:     # as torch.logsumexp: -inf over no element (no max to shift by)
        with np.errstate(divide="ignore"):
            out = np.log(np.sum(np.exp(x), axis=axis, keepdims=True))
        return out if keepdims else np.squeeze(out, axis=axis)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _logsumexp_vjp(g, ans, x, axis=None, keepdims=False):
    a = expand_reduced(ans, x.shape, axis, keepdims)
    return mul(expand_reduced(g, x.shape, axis, keepdims), exp(sub(x, a)))


defvjp(logsumexp, _logsumexp_vjp)


# -- shape -----------------------------------------------------------------------
@primitive("reshape", "ViewBackward0", saves=False, args={"shape": Arg(check=A.shape)},
           infer=S.reshape)
def reshape(x, shape):
    """reshape (one -1 allowed)"""
    if type(x) is np.ndarray:           # (np.reshape without its Python wrapper)
        return x.reshape(shape)
    return np.reshape(x, shape)


defvjp(reshape, lambda g, ans, x, shape: reshape(g, shape=x.shape))
reshape.aliases = True      # a view of a contiguous input (Note [Views that may copy])


@primitive("transpose", "PermuteBackward0", saves=False, args={"axes": Arg(None, A.axes_or_none)},
           infer=S.VIEW, view=True)
def transpose(x, axes=None):
    """permute axes (reverse them by default)"""
    if axes is not None:    # PyTorch's permute() checks (NumPy said "axes don't match array")
        nd = np.ndim(x)
        if len(axes) != nd:
            raise ValueError(f"transpose: axes {list(axes)} has {len(axes)} entries for an "
                             f"input of {nd} dims (it must list each dim once)")
        bad = [a for a in axes if not -nd <= a < nd]
        if bad:
            raise ValueError(f"transpose: axis {bad[0]} is out of range for an input of {nd} dims")
        if len({a % nd for a in axes}) != nd:
            raise ValueError(f"transpose: axes {list(axes)} repeat a dim (duplicate dims are not "
                             f"allowed)")
    return np.transpose(x, axes)


def _transpose_vjp(g, ans, x, axes=None):
    if axes is None:
        return transpose(g)
    inverse = tuple(int(i) for i in np.argsort([a % len(x.shape) for a in axes]))
    return transpose(g, axes=inverse)


defvjp(transpose, _transpose_vjp)


@primitive("expand", "ExpandBackward0", saves=False, args={"shape": Arg(check=A.shape)},
           infer=S.VIEW, view=True)
def expand(x, shape):
    """broadcast to shape (a view); -1 keeps that axis's size, as in PyTorch"""
    lead = len(shape) - x.ndim
    if lead < 0:
        raise ValueError(f"expand: shape {list(shape)} has fewer axes than the input {list(x.shape)}")
    full = tuple(x.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
    if any(s < 0 for s in full):
        raise ValueError(f"expand: -1 is not allowed for a new leading axis in {list(shape)}")
    for i, s in enumerate(np.shape(x)):     # PyTorch's check (NumPy's broadcast error before)
        if s != 1 and s != full[lead + i]:
            raise ValueError(f"expand: the expanded size of the tensor ({full[lead + i]}) must "
                             f"match the existing size ({s}) at non-singleton dimension "
                             f"{lead + i}.  Target sizes: {list(shape)}.  Tensor sizes: "
                             f"{list(np.shape(x))}")
    n = 1
    for s in full:
        n *= s
    if n * np.dtype(getattr(x, "dtype", np.float64)).itemsize > np.iinfo(np.intp).max:
        # a view allocates nothing, but NumPy cannot even describe it ("array is too big")
        raise ValueError(f"expand: the result of shape {list(full)} would span {n} elements, "
                         f"more than an array can address")
    if isinstance(x, np.ndarray):   # keeps a SimArray (and its device): subok
        return np.broadcast_to(x, full, subok=True)
    return np.broadcast_to(x, full)


defvjp(expand, lambda g, ans, x, shape: unbroadcast(g, x.shape))


@primitive("squeeze", lambda d, a: "SqueezeBackward0" if a.get("axis") is None else "SqueezeBackward1",
           saves=False, args={"axis": Arg(None, A.axis_or_none)}, infer=S.VIEW, view=True)
def squeeze(x, axis=None):
    """drop size-1 axes"""
    return np.squeeze(x, axis=axis)


@primitive("unsqueeze", "UnsqueezeBackward0", saves=False, args={"axis": Arg(check=A.int_axis)},
           infer=S.VIEW, view=True)
def unsqueeze(x, axis):
    """insert a size-1 axis"""
    return np.expand_dims(x, axis)


defvjp(squeeze, lambda g, ans, x, axis=None: reshape(g, shape=x.shape))
defvjp(unsqueeze, lambda g, ans, x, axis: reshape(g, shape=x.shape))


@primitive("concat", "CatBackward0", saves=False, arity=(1, None), args={"axis": Arg(0, A.int_axis)},
           infer=S.CONCAT)
def concat(*xs, axis=0):
    """join along an existing axis"""
    return np.concatenate(xs, axis=axis)


# Note [Concat offsets once per node]: each input's gradient is the slice of the output
# gradient it filled, which starts at the sum of the sizes before it along the axis.
# The offsets of all inputs are computed once per node (_concat_offsets) and every
# slice taken in the same call: CatBackward0 computes all its input gradients at once
# (Note [one call for all inputs' gradients] in core.py). One VJP per input, each
# handed all N inputs, was quadratic in N (30,000 inputs: 8 s).
def _concat_offsets(xs, axis):
    """Where each input starts along ``axis``, and where the last one ends."""
    return list(itertools.accumulate((x.shape[axis] for x in xs), initial=0))


def _concat_vjp_all(g, ans, xs, needed, args):
    axis = args.get("axis", 0)
    offsets = _concat_offsets(xs, axis)
    index = [slice(None)] * g.ndim
    out = []
    for i, need in enumerate(needed):
        if need:
            index[axis] = slice(offsets[i], offsets[i + 1])
            out.append(slice_(g, index=tuple(index)))
        else:
            out.append(None)
    return out


@primitive("stack", "StackBackward0", saves=False, arity=(1, None), args={"axis": Arg(0, A.int_axis)},
           infer=S.STACK)
def stack(*xs, axis=0):
    """join along a new axis"""
    return np.stack(xs, axis=axis)


def _stack_vjp_all(g, ans, xs, needed, args):
    axis = args.get("axis", 0)
    index = [slice(None)] * g.ndim
    out = []
    for i, need in enumerate(needed):
        if need:
            index[axis] = i
            out.append(slice_(g, index=tuple(index)))
        else:
            out.append(None)
    return out


defvjp_all(concat, _concat_vjp_all)      # one call per node (Note [Concat offsets once per node])
defvjp_all(stack, _stack_vjp_all)


def _split_points(n, sections=None, indices=None):
    if indices is not None:
        points = list(indices)
        if any(not 0 <= p <= n for p in points) or points != sorted(points):
            raise ValueError(f"split: indices {points} must be increasing and within [0, {n}]")
        return points
    if sections is None or sections < 1:
        raise ValueError("split needs sections (a positive int) or indices")
    if n % sections:
        raise ValueError(f"split: axis of size {n} does not divide into {sections} equal sections")
    step = n // sections
    return [step * k for k in range(1, sections)]


def _split_check(args):
    if args["sections"] is None and args["indices"] is None:
        raise ValueError("split needs the arg sections (a positive int) or indices (a list of ints)")


def _split_outputs(args):
    return args["sections"] if args["indices"] is None else len(args["indices"]) + 1


def _split_infer(shapes, dtypes, sections=None, indices=None, axis=0):
    (shape,), (dtype,) = shapes, dtypes
    if not -len(shape) <= axis < len(shape):
        raise S.ShapeMismatch(f"axis {axis} is out of bounds for {{0}} of shape {list(shape)}")
    axis %= len(shape)
    points = [0] + _split_points(shape[axis], sections, indices) + [shape[axis]]
    return [(shape[:axis] + (max(b - a, 0),) + shape[axis + 1:], dtype)
            for a, b in zip(points, points[1:])]


@primitive("split", lambda d, a: "SplitWithSizesBackward0" if a.get("indices") is not None else "SplitBackward0",
           saves=False, multi_output=True, check=_split_check, outputs=_split_outputs,
           infer=_split_infer, view=True,
           args={"sections": Arg(None, lambda v: v if v is None else A.positive_int(v)),
                 "indices": Arg(None, lambda v: v if v is None else A.int_list(v)),
                 "axis": Arg(0, A.int_axis)})
def split(x, sections=None, indices=None, axis=0):
    """split into equal sections or at indices; several outputs"""
    return np.split(x, _split_points(x.shape[axis], sections, indices), axis=axis)


defvjp(split, lambda gs, ans, x, sections=None, indices=None, axis=0: concat(*gs, axis=axis))


@primitive("slice", "SliceBackward0", saves=False, args={"index": Arg(check=A.index_string)},
           infer=S.VIEW, view=True)
def slice_(x, index):
    """basic indexing with a NumPy index string such as "1:3, ::2" """
    return x[index]


@primitive("slice_backward", "SliceBackwardBackward0", saves=False, public=False,
           args={"shape": Arg(check=A.shape), "index": Arg(check=A.index_string)},
           infer=lambda shapes, dtypes, shape, index: [(shape, dtypes[0])])
def slice_backward(g, shape, index):
    """scatter g into zeros of shape at index (the gradient of slice)"""
    from ..devices import xp_of_array   # a positive test: NumPy scalars are host values

    xp = xp_of_array(g)
    out = xp.zeros(shape, dtype=g.dtype)
    out[index] = g
    return out


defvjp(slice_, lambda g, ans, x, index: slice_backward(g, shape=x.shape, index=index))
defvjp(slice_backward, lambda g, ans, gin, shape, index: slice_(g, index=index))


@primitive("clone", "CloneBackward0", saves=False, infer=S.same)
def clone(x):
    """a copy"""
    return x.copy()


defvjp(clone, lambda g, ans, x: g)


# Note [Differentiable .grad, PyTorch's copy]: under create_graph, PyTorch's
# AccumulateGrad stores the first gradient of a leaf as a copy laid out like the
# leaf (``new_empty_strided(leaf's sizes and strides).copy_(grad)``) when the
# leaf's layout is dense, which records ``CopyBackwards`` with two edges: none for
# the new empty tensor, the gradient's node for the source. A leaf that is not
# dense gets a contiguous clone instead (``CloneBackward0``). ``grad_copy`` is
# that copy: ``dst`` is the empty array, ``src`` the gradient.
@primitive("grad_copy", "CopyBackwards", saves=False, arity=2, public=False,
           infer=lambda shapes, dtypes: [(shapes[0], dtypes[0])])
def grad_copy(dst, src):
    """src copied into the (empty) dst: the first .grad of a leaf under create_graph"""
    dst[...] = src
    return dst


defvjp(grad_copy, lambda g, ans, dst, src: None, lambda g, ans, dst, src: g)


# -- linear algebra -----------------------------------------------------------------
def _matmul_name(datas, args):
    a, b = datas
    if a.ndim == 2 and b.ndim == 2:
        return "MmBackward0"
    if a.ndim == 1 and b.ndim == 1:
        return "DotBackward0"
    if a.ndim == 2 and b.ndim == 1:
        return "MvBackward0"
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
        return "BmmBackward0"
    return "MatmulBackward0"


@primitive("matmul", _matmul_name, arity=2, infer=S.MATMUL)
def matmul(a, b):
    """matrix product with numpy.matmul's rules (1-D, 2-D, batched)"""
    return np.matmul(a, b)


def _swap_last(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes=tuple(axes))


def _matmul_operands(g, a, b):
    """a, b and g with 1-D operands promoted to matrices, as numpy.matmul does."""
    A2 = reshape(a, shape=(1,) + a.shape) if a.ndim == 1 else a
    B2 = reshape(b, shape=b.shape + (1,)) if b.ndim == 1 else b
    G = g
    if a.ndim == 1:
        G = unsqueeze(G, axis=-2 if b.ndim > 1 else 0)
    if b.ndim == 1:
        G = unsqueeze(G, axis=-1)
    return A2, B2, G


def _matmul_vjp_a(g, ans, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return mul(g, b)
    A2, B2, G = _matmul_operands(g, a, b)
    ga = unbroadcast(matmul(G, _swap_last(B2)), A2.shape)
    return reshape(ga, shape=a.shape) if a.ndim == 1 else ga


def _matmul_vjp_b(g, ans, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return mul(g, a)
    A2, B2, G = _matmul_operands(g, a, b)
    gb = unbroadcast(matmul(_swap_last(A2), G), B2.shape)
    return reshape(gb, shape=b.shape) if b.ndim == 1 else gb


defvjp(matmul, _matmul_vjp_a, _matmul_vjp_b)


# -- neural-net --------------------------------------------------------------------
@primitive("softmax", "SoftmaxBackward0", args={"axis": Arg(-1, A.int_axis)}, infer=S.KEEPS_SHAPE)
def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along axis"""
    if np.size(x) == 0:     # as torch.softmax: an empty result, not NumPy's max error
        return np.exp(x)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


defvjp(softmax, lambda g, ans, x, axis=-1: mul(ans, sub(g, sum_(mul(g, ans), axis=axis, keepdims=True))))


@primitive("log_softmax", "LogSoftmaxBackward0", args={"axis": Arg(-1, A.int_axis)},
           infer=S.KEEPS_SHAPE)
def log_softmax(x, axis=-1):
    """x - logsumexp(x) along axis"""
    return x - logsumexp.fn(x, axis=axis, keepdims=True)


defvjp(log_softmax,
       lambda g, ans, x, axis=-1: sub(g, mul(exp(ans), sum_(g, axis=axis, keepdims=True))))


def _check_target_layout(logits_shape, target_shape, target_dtype):
    if target_dtype.kind not in "iu":
        raise ValueError(f"cross_entropy: target must be an integer tensor of class indices, "
                         f"got dtype {target_dtype}")
    if len(logits_shape) != 2 or tuple(target_shape) != tuple(logits_shape[:1]):
        raise ValueError(f"cross_entropy: expected logits [N, C] and target [N], got "
                         f"{list(logits_shape)} and {list(target_shape)}")


def _cross_entropy_infer(shapes, dtypes):
    _check_target_layout(shapes[0], shapes[1], dtypes[1])
    return [((), cross_entropy.fn(np.zeros((1, 1), dtypes[0]), np.zeros(1, dtypes[1])).dtype)]


def _check_targets(logits, target):
    _check_target_layout(logits.shape, target.shape, target.dtype)
    if target.size and (target.min() < 0 or target.max() >= logits.shape[1]):
        raise ValueError(f"cross_entropy: target class out of range [0, {logits.shape[1]})")


@primitive("cross_entropy", "CrossEntropyBackward0", arity=2, infer=_cross_entropy_infer)
def cross_entropy(logits, target):
    """mean over the batch of -log_softmax(logits)[target] (logits [N, C], target [N] ints)"""
    _check_targets(logits, target)
    logp = log_softmax.fn(logits, axis=1)
    picked = np.take_along_axis(logp, target[:, None].astype(np.int64), axis=1)
    return -np.mean(picked)


def _cross_entropy_vjp(g, ans, logits, target):
    n = logits.shape[0]
    probs = softmax(logits, axis=1)
    xp = xp_of_array(_value(logits))
    onehot = (xp.arange(logits.shape[1])[None, :] == _value(target)[:, None]).astype(logits.dtype)
    return mul(sub(probs, onehot), div(g, scalar(n, logits.dtype)))


defvjp(cross_entropy, _cross_entropy_vjp, lambda g, ans, logits, target: None)


def _mse_loss_infer(shapes, dtypes):
    S.broadcast(shapes)
    return [((), mse_loss.fn(*[np.zeros((), d) for d in dtypes]).dtype)]


@primitive("mse_loss", "MseLossBackward0", arity=2, broadcasts=True, infer=_mse_loss_infer)
def mse_loss(a, b):
    """mean((a - b) ** 2)"""
    return np.mean(np.square(np.subtract(a, b)))


def _mse_vjp(sign):
    def vjp(g, ans, a, b):
        diff = sub(a, b)
        n = scalar(max(_numel(diff.shape), 1), diff.dtype)
        grad = mul(diff, div(mul(g, scalar(2 * sign, diff.dtype)), n))
        return unbroadcast(grad, (a if sign > 0 else b).shape)
    return vjp


defvjp(mse_loss, _mse_vjp(1), _mse_vjp(-1))


@primitive("layer_norm", "NativeLayerNormBackward0", infer=S.KEEPS_SHAPE,
           args={"axis": Arg(-1, A.axis_or_none), "eps": Arg(1e-5, A.positive_number)})
def layer_norm(x, axis=-1, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over axis (no affine weights: add mul/add ops)"""
    axes = _normalize_axes(axis, x.ndim)
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.var(x, axis=axes, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps)).astype(x.dtype, copy=False)


def _layer_norm_vjp(g, ans, x, axis=-1, eps=1e-5):
    # rstd depends on x, so it is built from ops (its gradient matters for
    # the second derivative); xhat is the saved output.
    axes = _normalize_axes(axis, x.ndim)
    centered = sub(x, mean(x, axis=axes, keepdims=True))
    var = mean(mul(centered, centered), axis=axes, keepdims=True)
    rstd = div(scalar(1, x.dtype), sqrt(add(var, scalar(eps, x.dtype))))
    xhat = ans
    mean_g = mean(g, axis=axes, keepdims=True)
    mean_gx = mean(mul(g, xhat), axis=axes, keepdims=True)
    return mul(rstd, sub(sub(g, mean_g), mul(xhat, mean_gx)))


defvjp(layer_norm, _layer_norm_vjp)


# -- type and place ------------------------------------------------------------------
@primitive("cast", "ToCopyBackward0", saves=False, args={"dtype": Arg(check=A.dtype)},
           dtype_arg="dtype", infer=lambda shapes, dtypes, dtype: [(shapes[0], np.dtype(dtype))])
def cast(x, dtype):
    """convert to dtype (integer results do not require grad)"""
    return x.astype(dtype)


defvjp(cast, lambda g, ans, x, dtype: cast(g, dtype=x.dtype.name))


@primitive("to", "ToCopyBackward0", saves=False, args={"device": Arg(check=A.string)},
           moves_device=True, infer=S.same)
def to(x, device):
    """copy to another device; the gradient goes back to the source device"""
    from ..devices import check_available, device as parse_device, to_device

    target = parse_device(device)
    check_available(target)         # a clear error now, not an IndexError mid-backward
    return to_device(x, target)


def _to_vjp(g, ans, x, device):
    from ..devices import to_device

    if type(g) is Tensor:          # create_graph: the copy back records ToCopyBackward0
        return to(g, device=str(x.device))
    return to_device(g, x.device)


defvjp(to, _to_vjp)
# a move to the device the input is on hands back its memory (PyTorch's returns the same
# tensor): an in-place op on the result must rebase the input (Note [Views that may copy])
to.aliases = True


# -- engine exercisers -----------------------------------------------------------------
class BackwardFailure(RuntimeError):
    """Raised by the backward of a ``fail`` op."""


MAX_DELAY_MS = 60_000       # a `delay` op may sleep at most this long per backward call


def _delay_ms(v):
    v = A.positive_number(v)
    if not 0 <= v <= MAX_DELAY_MS:        # also refuses nan and inf
        raise ValueError(f"must be between 0 and {MAX_DELAY_MS} milliseconds, got {v!r}")
    return v


def _delay_check(args):
    if args["ms"] + args["jitter_ms"] > MAX_DELAY_MS:
        raise ValueError(f"ms + jitter_ms must be at most {MAX_DELAY_MS} milliseconds, got "
                         f"{args['ms']!r} + {args['jitter_ms']!r}")


@primitive("delay", "DelayBackward0", saves=False, infer=S.same, view=True, check=_delay_check,
           backward_ms=lambda args: args["ms"] + args["jitter_ms"],
           args={"ms": Arg(0, _delay_ms), "jitter_ms": Arg(0, _delay_ms),
                 "seed": Arg(None, lambda v: v if v is None else A.positive_int(v))})
def delay(x, ms=0, jitter_ms=0, seed=None):
    """identity; its backward sleeps ms (plus seeded jitter) before passing the gradient on"""
    return x


def _delay_vjp(g, ans, x, ms=0, jitter_ms=0, seed=None):
    pause = ms
    if jitter_ms:
        import random  # noqa: PLC0415 - only for a jittered delay

        pause += (random.Random(seed) if seed is not None else random).uniform(0, jitter_ms)
    if pause:
        from ..autograd.engine import sleep_unless_cancelled   # wakes on Ctrl-C

        sleep_unless_cancelled(pause / 1000.0)
    return g


defvjp(delay, _delay_vjp)


@primitive("fail", "FailBackward0", saves=False, infer=S.same, view=True,
           args={"message": Arg("backward failed on purpose", A.string)})
def fail(x, message="backward failed on purpose"):
    """identity; its backward raises an error with message"""
    return x


def _fail_vjp(g, ans, x, message="backward failed on purpose"):
    raise BackwardFailure(message)


defvjp(fail, _fail_vjp)


@primitive("nan", "NanBackward0", saves=False, infer=S.same, view=True)
def nan(x):
    """identity; its backward returns NaN (for anomaly mode)"""
    return x


defvjp(nan, lambda g, ans, x: mul(g, scalar(np.nan, g.dtype)))


# -- ops the loader builds from more than args -------------------------------------------
declare("checkpoint", "run body (a list of ops) without keeping its activations; the backward "
        "re-runs it and calls the engine from inside the node (a reentrant backward)",
        node_name="CheckpointFunctionBackward", arity=(1, None), multi_output=True, has_body=True)
# ``custom`` (user code) is declared in ops/custom.py.
