"""The float64 gradient on the branches a float32 run took (Note [Kinks] in verdict.py).

``branch_reference(graph)`` runs a graph's forward three times side by side, op
by op: in its own precision (float32, say), and twice with every floating leaf
upcast to float64. One float64 run is left alone (*plain*); the other
(*follow*) is steered onto the float32 run's branches: before an op that has
kinks (``op.branch``, Note [Branches] in ops/core.py), where the float32 input
and the float64 input fall on different pieces, the follow run takes the float32
value for those elements (exact in float64), so both sit on the same piece of
the function; after a selecting op (max pooling) that chose another element of a
plane than the float32 run, both competing elements take their float32 values and
the op runs again. Both float64 runs then run their backward.

    >>> kinks = branch_reference(graph)      # doctest: +SKIP
    >>> kinks.flips[0].op, kinks.flips[0].count, kinks.correction["w"].shape

The difference of the two float64 gradients is what the float32 run's branches
change in the exact gradient: the caller adds it to the reference (PyTorch's
float64 gradients), so the two float64 runs' own rounding and whatever they
compute below float64 cancel.

A flip is taken only where float32 rounding explains it: the moved elements' error
``|x32 - x64|`` within ``NOISE`` times the RMS error of that input, and the input as a
whole within ``SANE`` of its float64 value (relative RMS). A float32 forward that is
wrong, not rounded, moves many elements by far more: ``Kinks.unexplained`` then
names the op and the caller judges as before.
"""
from __future__ import annotations

import numpy as np

from .records import Record

__all__ = ["Flip", "Kinks", "branch_reference"]

NOISE = 64.0      # a flipped element's error, in RMS errors of its input
SANE = 1e-3       # an input's relative RMS error that is still rounding at float32


class Flip(Record):
    """Elements that float32 put on another piece than float64 at one op: ``op`` (its
    label), ``line``, ``count``, and ``nearest``: how near its kink the closest of them
    lies in float64 (an element-wise op: its input's ``|x64|``; a selection: the gap
    between the two elements float32 and float64 chose)."""
    _fields = ("op", "line", "count", "nearest")

    def __init__(self, op, line, count, nearest):
        self.op = op
        self.line = line
        self.count = count
        self.nearest = nearest


class Kinks(Record):
    """``flips``: [Flip]; ``correction``: {name: float64 array} to add to the float64
    reference (empty without flips); ``unexplained``: None, or why a flip was refused."""
    _fields = ("flips", "correction", "unexplained")

    def __init__(self, flips, correction, unexplained=None):
        self.flips = flips
        self.correction = correction
        self.unexplained = unexplained


def _upcast(a):
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def _call(spec, inputs):
    if spec.call is not None:
        return spec.call(list(inputs), False)
    return spec.op(*inputs, **spec.args)


def _bind(values, spec, out):
    outs = out if isinstance(out, list) else [out]
    for name, t in zip(spec.outputs, outs):
        values[name] = t
    base = getattr(spec.op, "base", None)
    if base is not None and spec.inputs:     # in place: later readers of self see the result
        values[spec.inputs[0]] = outs[0]


def _rounding(x32, x64):
    """``(x32 - x64 as float64, its RMS, whether the input as a whole is within rounding)``:
    the yardstick both kinds of flip are held to (``NOISE`` times the RMS error for the
    moved elements, ``SANE`` for the input's relative RMS error)."""
    err = x32.astype(np.float64) - x64
    rms = float(np.sqrt(np.mean(err * err)))
    scale = float(np.sqrt(np.mean(x64 * x64))) or 1.0
    return err, rms, rms <= SANE * scale


def _steer(spec, branch, x32, x64):
    """(mask of flipped elements, None) or (None, why a flip is not rounding)."""
    flipped = np.asarray(branch(x32, **spec.args)) != np.asarray(branch(x64, **spec.args))
    if not flipped.any():
        return None, None
    err, rms, sane = _rounding(x32, x64)
    moved = float(np.abs(err[flipped]).max())
    if not sane or moved > NOISE * rms:
        return None, (f"{spec.label}: {int(flipped.sum())} element(s) on another piece than "
                      f"float64, moved by up to {moved:.3g} where the input's RMS error is "
                      f"{rms:.3g}: not rounding")
    return flipped, None


def branch_reference(graph):
    """The float64 gradients' correction for the float32 run's branches (``Kinks``), or
    None where the graph cannot be replayed so (it draws random numbers, or a leaf is
    not on the host)."""
    from .autograd import Tensor, no_grad, set_grad_enabled

    if graph.draws_random():
        return None
    low, plain, follow = {}, {}, {}
    for name, leaf in graph.leaves.items():
        a = leaf.array()
        if type(a) is not np.ndarray:          # on a device (sim: an array of its own type)
            return None
        low[name] = Tensor(a, name=name)
        for values in (plain, follow):
            values[name] = Tensor(_upcast(np.array(a)), requires_grad=leaf.requires_grad,
                                  name=name)
    flips = []
    with set_grad_enabled(True):
        for spec in graph.ops:
            ins32 = [low[n] for n in spec.inputs]
            insp = [plain[n] for n in spec.inputs]
            insf = [follow[n] for n in spec.inputs]
            op = getattr(spec.op, "base", spec.op)
            branch = getattr(op, "branch", None)
            lowered = branch is not None and insf and _lowered(ins32[0].data, insf[0].data)
            if lowered and callable(branch):
                x32, x64 = ins32[0].data, insf[0].data
                flipped, why = _steer(spec, branch, x32, x64)
                if why is not None:
                    return Kinks(flips, {}, why)
                if flipped is not None:
                    delta = np.where(flipped, x32.astype(np.float64) - x64, 0.0)
                    insf[0] = _shift(insf[0], delta)
                    flips.append(Flip(spec.label, spec.line, int(flipped.sum()),
                                      float(np.abs(x64[flipped]).min())))
            with no_grad():
                out32 = _call(spec, ins32)
            _bind(low, spec, out32)
            _bind(plain, spec, _call(spec, insp))
            outf = _call(spec, insf)
            if lowered and not callable(branch):
                outf, why = _follow_choice(spec, branch.output, ins32, insf, out32, outf, flips)
                if why is not None:
                    return Kinks(flips, {}, why)
            _bind(follow, spec, outf)
    if not flips:
        return Kinks([], {})
    gp = _gradients(graph, plain)
    gf = _gradients(graph, follow)
    correction = {name: np.asarray(gf[name], np.float64) - np.asarray(gp[name], np.float64)
                  for name in gf if gf[name] is not None and gp.get(name) is not None}
    return Kinks(flips, correction)


def _lowered(x32, x64):
    return x32.dtype.kind == "f" and x32.dtype.itemsize < 8 and x64.dtype == np.float64


def _follow_choice(spec, k, ins32, insf, out32, outf, flips):
    """A selecting op (``ChosenBy(k)``, max pooling): where the float64 run chose another
    element of a plane than the float32 run, both competing elements take their float32
    values (exact in float64, so the same comparison picks the same one) and the op runs
    again on the steered input. ``(outputs, None)`` or ``(None, why it is not rounding)``."""
    chose32, chosef = out32[k].data, outf[k].data
    differ = chose32 != chosef
    if not differ.any():
        return outf, None
    x32, x64 = ins32[0].data, insf[0].data
    plane = x64.shape[-2] * x64.shape[-1]
    per_plane = chose32.shape[-2] * chose32.shape[-1]
    base = (np.arange(chose32.size).reshape(chose32.shape) // per_plane) * plane
    a, b = (base + chose32)[differ], (base + chosef)[differ]
    err, rms, sane = _rounding(x32.reshape(-1), x64.reshape(-1))
    flat64 = x64.reshape(-1)
    gap = np.abs(flat64[a] - flat64[b])
    if not sane or float(gap.max()) > NOISE * rms:
        return None, (f"{spec.label}: {int(differ.sum())} choice(s) other than float64's between "
                      f"values up to {float(gap.max()):.3g} apart where the input's RMS error is "
                      f"{rms:.3g}: not rounding")
    delta = np.zeros(flat64.shape)
    delta[a], delta[b] = err[a], err[b]
    insf[0] = _shift(insf[0], delta.reshape(x64.shape))
    outf = _call(spec, insf)
    if (outf[k].data != chose32).any():
        return None, f"{spec.label}: its choices still differ from float32's once steered"
    flips.append(Flip(spec.label, spec.line, int(differ.sum()), float(gap.min())))
    return outf, None


def _shift(t, delta):
    """``t + delta`` with ``delta`` a constant (the gradient flows through ``t``)."""
    from .autograd import Tensor
    from .ops import library as L

    return L.add(t, Tensor(delta))


def _gradients(graph, values):
    grads, _, _ = graph._backward(values, None, None, None, False, True, None, order=False)
    return grads
