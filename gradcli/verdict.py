"""The verdict on a gradient computed below float64: as close to the exact
(float64) gradient as PyTorch's own, norm-wise.

Two float32 implementations of one model round differently: summing the
same terms in another order moves each element by a few units in the last
place, and a sum of terms that nearly cancel moves by much more, relative to
itself. An element-wise comparison with PyTorch's float32 gradient then fails
on a correct implementation. What is measurable is the distance of each to the
exact gradient: ``expect.reference`` holds the model's float64 gradients
(``gradcli export`` writes them, ``gradcli.bridges.torch.reference``), and

    d(g) = ||g - g64|| / ||g64||          (norm-wise relative error)

A gradient passes when gradcli's distance is within ``FACTOR`` times
PyTorch's (Note [The factor]), PyTorch's taken as at least the precision's
machine epsilon (a gradient PyTorch computed exactly leaves gradcli one
rounding), or when gradcli's root-mean-square error is within the absolute
floor (Note [The floor]).

Which gradients are judged so is measured, not read from the file's dtype:
``gradcli.precision`` finds the lowest floating dtype on each gradient's path.
float64 throughout: the element-wise check with the file's rtol/atol.

Note [The factor]: measured on 2026-11-25 on graphs written by ``gradcli
export`` (``scripts/verdict_distances.py``; the table is in
docs/graph-format.md), per parameter, ratio d(gradcli) / d(PyTorch), median /
max: torchvision resnet18 float32 (input 4x3x64x64, train) 0.76 / 1.00; an
``nn.TransformerEncoderLayer`` float32 1.00 / 1.30; a 2-layer ``nn.LSTM`` +
Linear float32 1.08 / 1.19 (1.45 with other inputs); a T5 encoder at float64
with its float32 layer-norm variance 0.75 / 1.34. A wrong formula moves the
gradient by O(1); 4 leaves a margin of 2.7 over the worst measured ratio and
stays orders of magnitude below a real error.

Note [The floor]: a gradient whose exact value is (nearly) zero, such as the
bias of a convolution followed by batch normalization in train mode, is
rounding noise in both implementations: its relative distances are large and
their ratio is chance. Such a gradient passes when gradcli's RMS error against
the reference is within ``FACTOR * eps * scale``, where ``scale`` is the
largest RMS of any reference gradient in the file: an error the size of the
rounding of the graph's largest gradient. The floor scales with the model (a
fixed atol such as 1e-6 would wave through a 10-fold float32 error on any
gradient whose elements are about 1) and is no looser than the norm-wise
bound on the largest gradient itself.

Note [The float64 floor]: on a path that is float64 throughout, the verdict
is element-wise (rtol 1e-7), and a fixed atol (export writes 1e-10) is the
only allowance for a gradient whose exact value is zero. Its rounding is not
fixed: it scales with the model's gradients. A bias followed by batch norm in
train mode has an exact gradient of 0; gradcli may compute 0 exactly and
PyTorch 1e-9 in a model whose gradients reach 1e4, where 1e-9 is the rounding
of a sum of such terms, not an error. So a float64 gradient that fails
element-wise also passes when its RMS error is within the same floor as
above at float64's epsilon, ``FACTOR * eps64 * S``, with ``S`` the largest
RMS of the file's expected float64 gradients: the rounding of the graph's
largest gradient, never more (a gradient of 1e-9 wrong in a graph whose
gradients are about 1 still fails, and so does an error of 1e-7 relative on
the largest gradient). ``--elementwise`` keeps the element-wise check alone.

Note [The float64 yardstick]: rounding is amplified by deep train-mode batch
norm. Measured on torchvision's resnet101 (train, float64, 2x3x64x64, 10
classes): gradcli's gradients are 3-4e-12 from PyTorch's norm-wise, and
PyTorch's are 3.8e-12 from its own when the same module runs channels-last
(another summation order), or 3.4e-12 when its input is scaled by 1 + 1e-15;
both fail the element-wise check on about 20 of 314 parameters, at elements
thousands of times smaller than their tensor's largest. So ``gradcli export``
measures PyTorch's own float64 spread (``expect.rounding.distance``): the
written graph replayed in PyTorch with every floating leaf multiplied by
``1 + eps64 * u``, ``u`` uniform in [-1, 1] (a seeded draw), and each
gradient's norm-wise distance to PyTorch's unperturbed one. Rounding errors
act as such perturbations of the intermediate values, so this is the size of
error rounding can give in this model. A float64 gradient that fails
element-wise and the floor above passes when its norm-wise distance to
PyTorch's is within ``FACTOR`` times that spread (at least eps64), the spread
read as at most ``ROUNDING_CAP`` (1e-8: a file cannot claim more), and the
message gives both numbers. A wrong formula moves a gradient by O(1); the
resnet's bound is 1.6e-11.

Note [The float32 yardstick]: PyTorch's distance to the float64 gradient is
one draw of its rounding, and a deep model's draws spread widely. Measured on
torchvision's efficientnet_b0 (train, float32, 2x3x64x64): the first
squeeze-excitation's ``fc1`` gradient is 1.5e-5 from float64 in PyTorch's run
as exported, and 6.2e-5, 4.4e-5 and 4.0e-5 in three replays of the same graph
with every floating leaf moved by one float32 ulp (gradcli: 6.9e-5, a ratio of
4.55 to the first draw and 1.1 to the largest); over its 213 gradients the
median ratio is 1.07 either way. So ``gradcli export`` of a graph below
float64 also replays it in PyTorch twice (``PERTURBED_DRAWS`` in
bridges/torch/reference.py) at its own
precision with every floating leaf multiplied by ``1 + eps * u`` (``eps`` of
the graph's lowest floating dtype, ``u`` uniform in [-1, 1], seeded) and
writes those gradients (``expect.reference.perturbed``); PyTorch's distance is
the largest over its runs, each recomputed from the arrays. A one-ulp move of
the leaves is what the rounding of the first op does anyway, so each replay
is a run PyTorch could as well have given; a wrong formula moves a gradient
by O(1) and still fails.
Note [Kinks]: relu's derivative jumps at 0. A pre-activation whose float64
value lies within float32's rounding of 0 lands on either side in a float32
run, by chance: PyTorch's and gradcli's float32 runs round differently and may
take different branches there. Measured on torchvision's densenet161 (eval,
float32, 2x3x32x32): one element of 1.2 million, float64 value 5.5e-7 where
that layer's float32 error is 7e-7 RMS, went the other way in gradcli and
moved the first convolution's gradient by 0.5% (PyTorch: 4.5e-7); densenet121
in train mode, one element at -1.3e-5. Both gradients are right for the
branches their runs took; the distance to the float64 gradient then measures
luck, not accuracy. So a gradient that fails the bound above is judged once
more (``gradcli.branches``): gradcli replays the graph at float64 twice, once
as it is and once steered onto the float32 run's branches at every op that
declares its pieces (Note [Branches] in ops/core.py); the difference of the
two float64 gradients, added to the reference, gives the float64 gradient on
float32's branches. gradcli's gradient is held to it with the same bound,
PyTorch's distance still measured to its own float64 gradient, and the
message names the op, the element count and the float64 value nearest the
kink. A flip is followed only where rounding explains it (``branches.NOISE``,
``branches.SANE``): a float32 forward that is wrong moves many elements by
far more, and is judged as before. A graph that draws random numbers or has
leaves on a device is not replayed. Max pooling's choice between two near-equal
elements of a window is a kink too (``ChosenBy``): where float64 chose another
element, both take their float32 values and the op runs again.
"""
from __future__ import annotations

import numpy as np

FACTOR = 4.0


class Judgement:
    """The norm-wise verdict on one gradient: ``ok``, both distances, the RMS
    error, the bound it was held to and a one-line ``message``."""

    __slots__ = ("ok", "distance", "torch_distance", "rms", "bound", "floor", "message")

    def __init__(self, ok, distance, torch_distance, rms, bound, floor, message):
        self.ok = ok
        self.distance = distance
        self.torch_distance = torch_distance
        self.rms = rms
        self.bound = bound
        self.floor = floor
        self.message = message


def _distance(got, reference):
    err = float(np.linalg.norm((got - reference).ravel()))
    norm = float(np.linalg.norm(reference.ravel()))
    if norm == 0.0:
        return 0.0 if err == 0.0 else float("inf"), err
    return err / norm, err


def judge(name, actual, torch_grad, reference, dtype, why, scale=0.0,
          torch_reference=None, torch_perturbed=()) -> Judgement:
    """Judge gradcli's ``actual`` gradient of ``name`` against the float64
    ``reference``, with PyTorch's ``torch_grad`` (same precision) as the yardstick.

    ``dtype``: the lowest precision on the path; ``why``: how it was found, for the message;
    ``scale``: the largest RMS reference gradient of the graph (Note [The floor]).
    Example: ``judge("w", g32, torch32, g64, np.float32, "float32 leaf", 1.0).ok``.
    ``torch_reference``: PyTorch's own float64 gradient where ``reference`` is not it (the
    gradient on the branches gradcli's run took, Note [Kinks]); PyTorch is measured
    against it.
    ``torch_perturbed``: PyTorch's gradients with its leaves moved by one ulp (Note [The
    float32 yardstick]); PyTorch's distance is the largest of its runs'.
    Returns None when the reference or PyTorch's gradient is not finite (no norm to judge).
    """
    a = np.asarray(actual, dtype=np.float64)
    t = np.asarray(torch_grad, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    dname = str(np.dtype(dtype))
    eps = float(np.finfo(np.dtype(dtype)).eps)
    floor = FACTOR * eps * float(scale)
    if not (np.isfinite(r).all() and np.isfinite(t).all()):
        return None                  # no norm to speak of: the caller checks element-wise
    d_gc, e_gc = _distance(a, r)
    r_pt = r if torch_reference is None else np.asarray(torch_reference, dtype=np.float64)
    if not np.isfinite(r_pt).all():
        return None
    d_pt, e_pt = _distance(t, r_pt)
    d_first = d_pt
    for other in torch_perturbed:         # Note [The float32 yardstick]
        o = np.asarray(other, dtype=np.float64)
        if o.shape != r_pt.shape or not np.isfinite(o).all():
            continue
        d_o, e_o = _distance(o, r_pt)
        if e_o > e_pt:
            d_pt, e_pt = d_o, e_o
    rms = float(np.sqrt(np.mean((a - r) ** 2))) if a.size else 0.0
    bound = FACTOR * max(d_pt, eps)
    finite = bool(np.isfinite(a).all())
    # in absolute norms: the same bound, and defined for a reference of zero
    norm = float(np.linalg.norm(r.ravel()))
    within = finite and e_gc <= FACTOR * max(e_pt, eps * norm)
    floored = finite and not within and rms <= floor
    mine = "" if torch_reference is None else " (on its own branches)"
    spread = (f" (its largest over runs with its leaves moved by one ulp; {d_first:.3g} as "
              f"exported)" if d_pt > d_first else "")
    numbers = (f"distance to float64: gradcli {d_gc:.3g}{mine}, torch {d_pt:.3g}{spread} "
               f"(norm-wise relative error)")
    if within:
        message = f"{numbers}, within {FACTOR:g} x torch's; {why}"
    elif floored:
        message = (f"{numbers}; near zero: RMS error {rms:.3g} within the floor {floor:.3g} "
                   f"({FACTOR:g} x {dname} eps x the largest RMS gradient); {why}")
    else:
        message = (f"gradient of {name!r} is farther from the float64 reference than PyTorch's: "
                   f"{numbers}; allowed {FACTOR:g} x max(torch, eps {eps:.3g}) = {bound:.3g}, "
                   f"or an RMS error within {floor:.3g} (got {rms:.3g}); {why}")
    return Judgement(within or floored, d_gc, d_pt, rms, bound, floor, message)


ROUNDING_CAP = 1e-8         # Note [The float64 yardstick]


def within_spread(actual, expected, spread):
    """Note [The float64 yardstick]: ``(ok, distance, bound)``: whether ``actual`` is as
    close to PyTorch's float64 ``expected`` as PyTorch's own rounding spread allows.

    Example: ``within_spread(np.array([1.0, 1e-3 + 1e-9]), np.array([1.0, 1e-3]), 1e-9)[0]``
    is True; with a spread of 0 it is False.
    """
    d, _ = _distance(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64))
    eps = float(np.finfo(np.float64).eps)
    bound = FACTOR * max(eps, min(float(spread), ROUNDING_CAP))
    return d <= bound, d, bound


def rounding_floor(actual, expected, dtype, scale):
    """Note [The float64 floor]: ``(ok, rms, floor)``: whether the RMS error of
    ``actual`` against ``expected`` is within ``FACTOR * eps(dtype) * scale``, the
    rounding of a graph whose largest RMS gradient is ``scale``.

    Example: ``rounding_floor(np.zeros(3), np.full(3, 1e-9), np.float64, 1e7)[0]`` is True;
    with ``scale`` 1.0 it is False.
    """
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    floor = FACTOR * float(np.finfo(np.dtype(dtype)).eps) * float(scale)
    if not a.size or not (np.isfinite(a).all() and np.isfinite(e).all()):
        return False, float("nan"), floor
    rms = float(np.sqrt(np.mean((a - e) ** 2)))
    return rms <= floor, rms, floor
