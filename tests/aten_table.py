"""A table of ATen op rows beside its family, and the checks every such table runs.

A table module (``tests/test_aten_more.py``, ``test_aten_more2.py``, ``test_aten_special.py``)
writes one line per case and takes the checks at its end::

    T = Table()
    row, forward, refuse = T.row, T.forward, T.refuse
    CASES, FORWARD_ONLY, REFUSED, GRADGRAD, NODE_NAME_DIFFERENCES = T.tables()
    row("aten.hypot.default", [R(2, 3), R(3, seed=1)])
    ...
    globals().update(checks(T))

- ``row``: a differentiable case, run by every check of ``tests/test_aten_ops.py`` (finite
  differences; PyTorch's values, gradients and node names in float64; values and dtypes in
  float32; the load-time shape rule), by ``tests/test_aten_gradgrad.py`` through ``GRADGRAD``
  (second derivatives, create_graph node names) and by gradients in float32 against PyTorch's;
- ``forward``: a case with no gradient (integer inputs): values and dtypes against PyTorch's,
  and no node recorded;
- ``refuse``: inputs PyTorch refuses, refused here with its message.

The module says ``ATEN_TABLE = True`` so that ``tests/test_aten_ops.py`` and
``tests/test_aten_gradgrad.py`` count its rows as the ops' rows.
"""
from __future__ import annotations

import numpy as np
import pytest

from gradcli.autograd import Tensor, grad
from gradcli.ops import OPS
from gradcli.ops.aten import ATEN_OPS
from test_aten_ops import PARAMS, _as_float32, _inferred, _ours, _theirs, _wrt, case, needs_torch, refused, torch
from test_aten_ops import test_float32_forward_dtype_matches_torch as _float32_check
from test_aten_ops import test_float64_forward_gradients_and_node_name_match_torch as _float64_check
from test_aten_ops import test_gradients_match_finite_differences as _fd_check
from test_aten_ops import test_inputs_torch_refuses_are_refused as _refused_check
from test_aten_ops import test_load_time_infer_matches_the_forward as _infer_check
from test_aten_ops import test_load_time_infer_never_computes_on_full_size_inputs as _infer_alloc_check


class Table:
    """The rows of one table module."""

    def __init__(self):
        self.cases = []                   # differentiable rows: every check
        self.forward_only = []            # rows with no gradient: values, dtypes, no grad_fn
        self.refused = []                 # inputs PyTorch refuses
        self.gradgrad = {}                # op -> (inputs, args, wrt): its second derivative
        self.node_name_differences = {}   # op -> why its create_graph node is not PyTorch's

    def tables(self):
        """CASES, FORWARD_ONLY, REFUSED, GRADGRAD, NODE_NAME_DIFFERENCES: the names the
        other ATen test files read from a table module."""
        return self.cases, self.forward_only, self.refused, self.gradgrad, self.node_name_differences

    def row(self, op, inputs, args=None, wrt=None, fd=True, id=None):  # noqa: A002
        case(op, inputs, args, wrt, fd, id, table=self.cases)

    def forward(self, op, inputs, args=None, id=None):  # noqa: A002
        case(op, inputs, args, [], False, id, table=self.forward_only)

    def refuse(self, op, inputs, args, match, static=True, id=None):  # noqa: A002
        refused(op, inputs, args, match, static, id, table=self.refused)


def nc(x):
    """``x`` as a non-contiguous view with the same values (a transposed copy, transposed back)."""
    y = np.ascontiguousarray(np.swapaxes(x, 0, -1)).swapaxes(0, -1) if x.ndim >= 2 else x.repeat(2)[::2]
    assert not y.flags.c_contiguous and np.array_equal(x, y)
    return y


def checks(table, value_shaped=frozenset(), float32_gradients="all", shape_rule_rows=(),
           rows_without_a_gradient=True):
    """The checks of a table module as test functions, for ``globals().update``; call it after
    the last row.

    - ``value_shaped``: ops whose result's shape the values decide (the loader's shape rule
      answers unknown for them, never a guess);
    - ``float32_gradients``: "all" rows, the "fd" rows (those finite differences check: not the
      rows of special values, poles, infinities, NaN, ties), or None;
    - ``shape_rule_rows``: more rows for the load-time shape rule's checks alone (random ops,
      whose values are not PyTorch's);
    - ``rows_without_a_gradient``: False where the module checks its FORWARD_ONLY rows itself.
    """
    cases, forward_only, refused_rows = table.cases, table.forward_only, table.refused
    shaped = cases + forward_only + list(shape_rule_rows)

    @pytest.mark.parametrize(PARAMS, [c for c in cases if c.values[4]])
    def test_gradients_match_finite_differences(op_name, inputs, args, wrt, fd):
        _fd_check(op_name, inputs, args, wrt, fd)

    @needs_torch
    @pytest.mark.parametrize(PARAMS, cases)
    def test_float64_forward_gradients_and_node_name_match_torch(op_name, inputs, args, wrt, fd):
        _float64_check(op_name, inputs, args, wrt, fd)

    @needs_torch
    @pytest.mark.parametrize(PARAMS, cases)
    def test_float32_forward_dtype_matches_torch(op_name, inputs, args, wrt, fd):
        _float32_check(op_name, inputs, args, wrt, fd)

    @needs_torch
    @pytest.mark.parametrize(PARAMS, [c for c in cases if float32_gradients == "all" or c.values[4]])
    def test_float32_gradients_match_torch(op_name, inputs, args, wrt, fd):
        inputs32 = _as_float32(inputs)
        wrt = _wrt(inputs32, wrt)
        flat, outs = _ours(op_name, inputs32, args, wrt)
        tflat, touts = _theirs(op_name, inputs32, args, wrt)
        used = [k for k, t in enumerate(touts) if t.grad_fn is not None]
        vs = [np.random.default_rng(k).standard_normal(touts[k].shape).astype(np.float32) for k in used]
        ours = grad([outs[k] for k in used], [flat[i] for i in wrt], grad_outputs=vs)
        theirs = torch.autograd.grad([touts[k] for k in used], [tflat[i] for i in wrt],
                                     [torch.tensor(v) for v in vs])
        for a, b in zip(ours, theirs):
            assert a.dtype == np.float32
            np.testing.assert_allclose(a, b.numpy(), rtol=2e-5, atol=2e-5)

    @pytest.mark.parametrize(PARAMS, shaped)
    def test_load_time_infer_matches_the_forward(op_name, inputs, args, wrt, fd):
        if op_name in value_shaped:
            assert _inferred(op_name, inputs, args) is None
            return
        _infer_check(op_name, inputs, args, wrt, fd)

    @pytest.mark.parametrize(PARAMS, [c for c in shaped if c.values[0] not in value_shaped])
    def test_load_time_infer_never_computes_on_full_size_inputs(op_name, inputs, args, wrt, fd, monkeypatch):
        _infer_alloc_check(op_name, inputs, args, wrt, fd, monkeypatch)

    @pytest.mark.parametrize("op_name, inputs, args, match, static", refused_rows)
    def test_inputs_torch_refuses_are_refused(op_name, inputs, args, match, static):
        _refused_check(op_name, inputs, args, match, static)

    @needs_torch
    @pytest.mark.parametrize(PARAMS, forward_only)
    def test_rows_without_a_gradient_match_torch_and_record_no_node(op_name, inputs, args, wrt, fd):
        rows_without_a_gradient_match_torch(op_name, inputs, args)

    def test_every_op_of_this_table_has_a_row_and_a_second_derivative_line():
        assert {p.values[0] for p in cases + forward_only} <= set(ATEN_OPS)
        assert sorted({p.values[0] for p in cases} - set(table.gradgrad)) == []

    tests = {name: fn for name, fn in locals().items() if name.startswith("test_")}
    if float32_gradients is None:
        del tests["test_float32_gradients_match_torch"]
    if not rows_without_a_gradient:
        del tests["test_rows_without_a_gradient_match_torch_and_record_no_node"]
    return tests


def rows_without_a_gradient_match_torch(op_name, inputs, args):
    """A row with no gradient, at its dtypes and in float32: PyTorch's values and dtypes, and
    no node recorded."""
    for cast in (lambda x: x, lambda x: x.astype(np.float32) if x.dtype == np.float64 else x):
        arrays = [cast(x) if isinstance(x, np.ndarray) else x for x in inputs]
        ours = OPS[op_name](*[Tensor(x.copy()) if isinstance(x, np.ndarray) else x for x in arrays], **args)
        _, theirs = _theirs(op_name, arrays, args, [])
        ours = list(ours) if OPS[op_name].multi_output else [ours]
        for o, t in zip(ours, theirs):
            assert o.dtype == np.dtype(str(t.dtype).removeprefix("torch.")) and o.shape == tuple(t.shape)
            np.testing.assert_array_equal(o.data, t.numpy())
            assert o.grad_fn is None
