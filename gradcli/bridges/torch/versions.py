"""The torch releases the PyTorch bridge is tested on, and what differs between them.

gradcli itself never imports torch to run a graph: its node names and formulas are
PyTorch's, as of the oldest tested release. The bridge (``gradcli export``,
``validate --against torch``) runs the installed torch, so it needs to know which
releases it was tested on and where they behave differently.

>>> release("2.14.1+cu130")
(2, 14)
>>> untested_warning("2.14.1") is None, untested_warning("2.15.0")[:40]
(True, 'torch 2.15.0 is outside the tested range')
>>> differs("norm_third_order_refused", "2.13.0"), differs("norm_third_order_refused", "2.14.1")
(False, True)
"""
from __future__ import annotations

__all__ = ["TESTED", "DIFFERENCES", "release", "tested_range", "untested_warning", "differs"]

# The (major, minor) releases the test suite passes on (`make test-torch TORCH=...`).
TESTED = ((2, 13), (2, 14))

# Where the tested releases differ in what the bridge or the tests see: the first release
# that behaves the new way, and how. gradcli keeps the oldest release's behaviour; the
# tests ask differs() instead of hoping the case never comes up.
DIFFERENCES = {
    "norm_third_order_refused": (
        (2, 14), "native_batch_norm's double backward refuses a third derivative "
                 "('batch_norm does not support 3rd+ order derivatives'); 2.13 computed one, "
                 "and gradcli keeps 2.13's formula"),
    "group_norm_non_contiguous_accepted": (
        (2, 14), "native_group_norm accepts a non-contiguous input (it computes on a "
                 "contiguous copy); 2.13 refused it ('Expected X.is_contiguous(memory_format)'), "
                 "and gradcli still refuses it"),
    "replication_pad_empty_output_refused": (
        (2, 14), "replication_pad2d refuses padding that leaves an empty output ('Calculated "
                 "output H: 2 W: 0 must be >= 1'); 2.13 returned the empty tensor, and gradcli "
                 "still does"),
    "group_norm_backward_none_weight_accepted": (
        (2, 14), "native_group_norm_backward with weight None and output_mask [True, False, "
                 "True] returns (grad_input, None, grad_bias); 2.13 refused it ('tensor does "
                 "not have a device'), and gradcli still refuses a partial output_mask"),
    "clamp_tensor_grad_masked_fill": (
        (2, 14), "clamp.Tensor's create_graph gradients for self and min/max are "
                 "MaskedFillBackward0 nodes; 2.13 recorded WhereBackward0 (same values), and "
                 "gradcli keeps 2.13's WhereBackward0"),
    "pdist_backward_grad_output": (
        (2, 14), "_pdist_backward names its first argument grad_output (2.13: grad); gradcli keeps "
                 "2.13's schema (graph files give tensor inputs by position)"),
    "pdist_double_backward": (
        (2, 14), "_pdist_backward has a derivative (torch.pdist's second derivative is computed); "
                 "2.13 raised 'the derivative for '_pdist_backward' is not implemented.', and "
                 "gradcli still raises it"),
    "embedding_bag_freq_by_own_count": (
        (2, 14), "_embedding_bag's backward with scale_grad_by_freq divides an index's rows by that "
                 "index's own count; 2.13 divided by the count of the value at the index's group "
                 "position in the sorted indices, and gradcli keeps 2.13's"),
    "fmax_fmin_grad_split_at_ties": (
        (2, 14), "fmax/fmin's gradients split the gradient in two at ties and give it to both "
                 "inputs where one is NaN; 2.13 gave it all to self at ties (self >= other) and "
                 "to the number where one is NaN, and gradcli keeps 2.13's formula"),
    "make_fx_detach_as_alias": (
        (2, 14), "make_fx records Tensor.detach() as aten.alias.default (2.13: "
                 "aten.detach.default), and its nodes carry no requires_grad; the exporter "
                 "takes an alias in a module's trace as the detach it was, and still writes "
                 "aten.detach.default"),
}


def release(version: str) -> tuple:
    """(major, minor) of a torch version string such as '2.14.1+cu130'."""
    head = version.split("+")[0].split(".")
    try:
        return int(head[0]), int("".join(ch for ch in head[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def tested_range() -> str:
    lo, hi = TESTED[0], TESTED[-1]
    return f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"


def untested_warning(version: str):
    """One line to print where ``version`` is outside the tested range, else None."""
    if release(version) in TESTED:
        return None
    return (f"torch {version} is outside the tested range {tested_range()}; "
            "going on, but node names or formulas may differ")


def differs(name: str, version: str) -> bool:
    """True where torch ``version`` already has the difference ``name``."""
    since, _ = DIFFERENCES[name]
    return release(version) >= since
