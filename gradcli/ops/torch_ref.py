"""Version-1 ops in PyTorch: for each op, the PyTorch call that records the same
backward node (``gradcli validate --against torch`` replays graph files with
these). Each entry is ``fn(torch, inputs, args) -> tensor(s)``; torch is passed
in, never imported here. An op absent from the table has no PyTorch equivalent
(the engine exercisers, ``to``).
"""
from __future__ import annotations

from .args import parse_index


def torch_reference(name):
    """``fn(torch, inputs, args)`` replaying op ``name`` in PyTorch, or None."""
    return _V1_OPS.get(name)


def _axis(a):
    return tuple(a) if isinstance(a, list) else a


def _reduce(method):
    def fn(torch, xs, args):
        axis = args.get("axis")
        if axis is None:
            return getattr(xs[0], method)()
        return getattr(xs[0], method)(dim=_axis(axis), keepdim=bool(args.get("keepdims", False)))
    return fn


def _extreme(which):
    def fn(torch, xs, args):
        axis, keep = args.get("axis"), bool(args.get("keepdims", False))
        if axis is None:
            return getattr(xs[0], which)()
        if isinstance(axis, int):
            return getattr(torch, which)(xs[0], dim=axis, keepdim=keep).values
        return getattr(torch, "a" + which)(xs[0], dim=tuple(axis), keepdim=keep)
    return fn


def _split(torch, xs, args):
    x, axis = xs[0], args.get("axis", 0)
    n = x.shape[axis]
    if args.get("indices") is not None:
        points = [0] + [min(max(int(i), 0), n) for i in args["indices"]] + [n]
        return torch.split(x, [b - a for a, b in zip(points, points[1:])], dim=axis)
    return torch.split(x, n // int(args["sections"]), dim=axis)


def _layer_norm(torch, xs, args):
    x = xs[0]
    axis = args.get("axis", -1)
    axes = [axis] if isinstance(axis, int) else list(axis)
    start = min(a % x.dim() for a in axes)
    return torch.nn.functional.layer_norm(x, x.shape[start:], eps=args.get("eps", 1e-5))


def _matmul(torch, xs, args):
    return torch.matmul(xs[0], xs[1])


_V1_OPS = {
    "add": lambda t, xs, a: t.add(xs[0], xs[1]),
    "sub": lambda t, xs, a: t.sub(xs[0], xs[1]),
    "mul": lambda t, xs, a: t.mul(xs[0], xs[1]),
    "div": lambda t, xs, a: t.div(xs[0], xs[1]),
    "pow": lambda t, xs, a: t.pow(xs[0], xs[1]),
    "maximum": lambda t, xs, a: t.maximum(xs[0], xs[1]),
    "minimum": lambda t, xs, a: t.minimum(xs[0], xs[1]),
    "where": lambda t, xs, a: t.where(xs[0].bool(), xs[1], xs[2]),
    "neg": lambda t, xs, a: t.neg(xs[0]),
    "exp": lambda t, xs, a: t.exp(xs[0]),
    "log": lambda t, xs, a: t.log(xs[0]),
    "sin": lambda t, xs, a: t.sin(xs[0]),
    "cos": lambda t, xs, a: t.cos(xs[0]),
    "tanh": lambda t, xs, a: t.tanh(xs[0]),
    "sigmoid": lambda t, xs, a: t.sigmoid(xs[0]),
    "relu": lambda t, xs, a: t.relu(xs[0]),
    "abs": lambda t, xs, a: t.abs(xs[0]),
    "sqrt": lambda t, xs, a: t.sqrt(xs[0]),
    "square": lambda t, xs, a: t.square(xs[0]),
    "clamp": lambda t, xs, a: t.clamp(xs[0], min=a.get("min"), max=a.get("max")),
    "sum": _reduce("sum"),
    "mean": _reduce("mean"),
    "max": _extreme("max"),
    "min": _extreme("min"),
    "logsumexp": lambda t, xs, a: t.logsumexp(
        xs[0], dim=tuple(range(xs[0].dim())) if a.get("axis") is None else _axis(a["axis"]),
        keepdim=bool(a.get("keepdims", False))),
    "reshape": lambda t, xs, a: xs[0].reshape(a["shape"]),
    "transpose": lambda t, xs, a: xs[0].permute(
        a["axes"] if a.get("axes") is not None else list(reversed(range(xs[0].dim())))),
    "expand": lambda t, xs, a: xs[0].expand(a["shape"]),
    "squeeze": lambda t, xs, a: xs[0].squeeze() if a.get("axis") is None else
    xs[0].squeeze(_axis(a["axis"])),
    "unsqueeze": lambda t, xs, a: xs[0].unsqueeze(a["axis"]),
    "concat": lambda t, xs, a: t.cat(xs, dim=a.get("axis", 0)),
    "stack": lambda t, xs, a: t.stack(xs, dim=a.get("axis", 0)),
    "split": _split,
    "slice": lambda t, xs, a: xs[0][parse_index(a["index"])],
    "clone": lambda t, xs, a: xs[0].clone(),
    "matmul": _matmul,
    "softmax": lambda t, xs, a: t.softmax(xs[0], dim=a.get("axis", -1)),
    "log_softmax": lambda t, xs, a: t.log_softmax(xs[0], dim=a.get("axis", -1)),
    "cross_entropy": lambda t, xs, a: t.nn.functional.cross_entropy(xs[0], xs[1].long()),
    "mse_loss": lambda t, xs, a: t.nn.functional.mse_loss(xs[0], xs[1]),
    "layer_norm": _layer_norm,
    "cast": lambda t, xs, a: xs[0].to(getattr(t, a["dtype"])),
}
