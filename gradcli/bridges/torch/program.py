"""``torch.export.save`` files (ExportedProgram, ``.pt2``) as graph files of ATen ops.

The program's module (``ExportedProgram.module()``) is traced as ``gradcli export``
traces a module (``exporter.from_module``): the same ATen ops, leaf names, loss,
``expect`` section and replay check. Its inputs are the program's own example inputs
unless given by name (``input_specs`` of kind USER_INPUT, in order).

Note [Programs are code]: ``torch.export.load`` is PyTorch's loader; a ``.pt2`` file is
trusted as the module file of ``gradcli export`` is (it may hold custom ops and
pickled constants). The importer bounds its size and reports its failures in one line.
"""
from __future__ import annotations

import contextlib
import logging
import os

import numpy as np
import torch

from ..errors import SUM_LOSS
from .errors import ExportError
from .exporter import from_module


# Note [torch.export.load's log]: the loader logs a warning with a whole traceback on the
# "torch.export" logger when a file is not a .pt2 archive, before its fallback raises
# (under torch 2.14 that handler writes into the command's own output); the importer's
# error stays one line, so the logger is held at ERROR while the file loads.
@contextlib.contextmanager
def _quiet_export_log():
    log = logging.getLogger("torch.export")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def from_program(path, *, inputs=None, input_shapes=None, loss="projection", dtype=None,
                 seed=0, name=None, max_file_bytes=None):
    """Trace the ExportedProgram saved at ``path``; returns an ``ExportedGraph``.

    ``inputs``: ``{name: array}``; ``input_shapes``: ``{name: shape}`` (seeded standard
    normal); other inputs are the program's example inputs. ``loss``: ``"projection"``
    or ``"sum"`` (of every floating output).

    >>> from_program("mlp.pt2", dtype="float64").write("out")     # doctest: +SKIP
    'out/graph.yaml'
    """
    from ...loader import default_max_graph_bytes

    limit = max_file_bytes or default_max_graph_bytes()
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise ExportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if size > limit:
        raise ExportError(f"{path}: the file has {size} bytes, over the budget of {limit} bytes")
    try:
        with _quiet_export_log():
            program = torch.export.load(path)
    except Exception as exc:  # noqa: BLE001 - torch's loader refusing the file, in one line
        text = str(exc).strip().splitlines()
        raise ExportError(f"{path}: not a torch.export program: {type(exc).__name__}: "
                          f"{text[0] if text else ''}") from None
    from torch.export.graph_signature import InputKind

    names = [s.arg.name for s in program.graph_signature.input_specs
             if s.kind == InputKind.USER_INPUT]
    inputs, input_shapes = dict(inputs or {}), dict(input_shapes or {})
    for k in list(inputs) + list(input_shapes):
        if k not in names:
            raise ExportError(f"{path}: the program has no input {k!r} (inputs: "
                              f"{', '.join(names) or 'none'})")
    examples = (program.example_inputs or ((), {}))[0]
    gen = torch.Generator().manual_seed(seed)
    args = []
    for i, n in enumerate(names):
        if n in inputs:
            args.append(torch.as_tensor(np.asarray(inputs[n])))
        elif n in input_shapes:
            args.append(torch.randn(tuple(input_shapes[n]), generator=gen))
        elif i < len(examples) and isinstance(examples[i], torch.Tensor):
            args.append(examples[i])
        else:
            raise ExportError(f"{path}: input {n!r} has no example value in the file: give "
                              f"--input {n}=FILE.npy or --input-shape {n}=N,C,...")
    if loss == SUM_LOSS:
        def loss_fn(out):
            leaves = [o for o in torch.utils._pytree.tree_leaves(out)
                      if isinstance(o, torch.Tensor) and o.is_floating_point()]
            return sum(o.sum() for o in leaves)
        loss = loss_fn
    return from_module(program.module(), tuple(args), loss=loss, dtype=dtype, seed=seed,
                       name=name or os.path.splitext(os.path.basename(path))[0])
