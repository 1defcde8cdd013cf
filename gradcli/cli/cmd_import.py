"""``gradcli import``: an ONNX model into DIR/graph.yaml + DIR/weights.npz.

Only click and the standard library at import time: onnx, NumPy and the bridge are
imported inside the command's body, so ``gradcli --help`` stays light. Exit codes: 0
written, 2 invalid input (a file, operator, attribute, shape or option the importer
cannot use), with a one-line message.
"""
from __future__ import annotations

import click

from . import core
from .core import fail as _fail

LOSSES = ("projection", "sum")


def _named(kind):
    def parse(ctx, param, values):
        out = {}
        for text in values:
            name, sep, rest = text.partition("=")
            if not sep or not name or not rest:
                raise click.BadParameter(f"{text!r} is not NAME={kind}")
            if name in out:
                raise click.BadParameter(f"{name!r} is given twice")
            if kind == "FILE.npy":
                out[name] = rest
                continue
            try:
                shape = tuple(int(p) for p in rest.replace("x", ",").split(",") if p.strip())
            except ValueError:
                raise click.BadParameter(f"{text!r} is not NAME=2,3,32,32") from None
            if not shape or any(d < 0 for d in shape):
                raise click.BadParameter(f"{text!r} is not NAME=2,3,32,32")
            out[name] = shape
        return out
    return parse


@click.command("import")
@click.argument("model", metavar="MODEL.onnx|PROGRAM.pt2", type=click.Path(dir_okay=False))
@click.option("--input", "input_files", multiple=True, callback=_named("FILE.npy"),
              metavar="NAME=FILE.npy", help="The array of graph input NAME; repeatable.")
@click.option("--input-shape", "input_shapes", multiple=True, callback=_named("N,C,H,W"),
              metavar="NAME=N,C,H,W", help="A seeded random input of this shape (standard "
              "normal; integer inputs are zeros); inputs of fixed shape need neither.")
@click.option("--loss", type=click.Choice(LOSSES), default="projection", show_default=True,
              help="projection: sum(out * R) with R a seeded standard-normal array per "
              "output; sum: the sum of every graph output.")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default=None,
              help="Cast every floating tensor (default: as in the file).")
@click.option("--requires-grad", "requires_grad", default="all", show_default=True,
              metavar="all|NAMES", help="The inputs and float initializers that require "
              "grad: all, or names separated by commas.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds the random inputs and the projection.")
@click.option("--name", default=None, help="The graph's name (default: the ONNX graph's).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write graph.yaml and weights.npz into.")
def import_(model, input_files, input_shapes, loss, dtype, requires_grad, seed, name, out_dir):
    """Import an ONNX model as a graph file of gradcli ops, one or more per ONNX node with
    the node's name as op id (needs the onnx extra: pip install 'gradcli[onnx]'). With
    onnxruntime installed, expect.forward holds its outputs, which `gradcli validate`
    checks. A torch.export.save file (PROGRAM.pt2, needs the torch extra) is traced into
    ATen ops as `gradcli export` traces a module, with PyTorch's gradients as expect.
    Example:

      gradcli import model.onnx --input-shape x=2,3,32,32 --dtype float64 -o out/
    """
    import numpy as np

    inputs = {}
    for key, path in input_files.items():
        try:
            inputs[key] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            _fail(f"{path}: cannot read input {key!r} as a .npy array: {exc}")
    both = sorted(set(inputs) & set(input_shapes))
    if both:
        _fail(f"input {both[0]!r} is given by both --input and --input-shape")
    if model.endswith(".pt2"):
        graph = _program(model, inputs, input_shapes, loss, dtype, requires_grad, seed, name)
    else:
        graph = _onnx(model, inputs, input_shapes, loss, dtype, requires_grad, seed, name)
    try:
        path = graph.write(out_dir)
    except OSError as exc:
        _fail(f"{out_dir}: cannot write: {exc.strerror or exc}")
    doc = graph.document
    if model.endswith(".pt2"):
        core.echo(f"wrote {path} ({len(doc['ops'])} ops, {len(doc['tensors'])} tensors, "
                  f"{len(doc['expect']['order'])} backward nodes) and its weights.npz")
        return
    forward = " with onnxruntime's forward as expect.forward" if "forward" in doc.get(
        "expect", {}) else ""
    core.echo(f"wrote {path} ({len(doc['ops'])} ops, {len(doc['tensors'])} tensors) and its "
              f"weights.npz{forward}")


def _onnx(model, inputs, input_shapes, loss, dtype, requires_grad, seed, name):
    try:
        import onnx  # noqa: F401
    except ImportError:
        _fail("gradcli import needs onnx: pip install 'gradcli[onnx]'")
    from ..bridges.onnx import OnnxError, from_onnx

    try:
        return from_onnx(model, inputs=inputs, input_shapes=input_shapes, loss=loss,
                         dtype=dtype, requires_grad=requires_grad, seed=seed, name=name)
    except OnnxError as exc:
        _fail(str(exc))
    except MemoryError:
        _fail(f"{model}: out of memory importing the model")


def _program(model, inputs, input_shapes, loss, dtype, requires_grad, seed, name):
    """A torch.export program (``.pt2``): traced as ``gradcli export`` traces a module."""
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail("gradcli import PROGRAM.pt2 needs PyTorch: pip install 'gradcli[torch]'")
    from ..bridges.torch import ExportError, ExportMismatch
    from ..bridges.torch.program import from_program

    if requires_grad != "all":
        _fail("--requires-grad is for ONNX files: a program's parameters all require grad")
    try:
        return from_program(model, inputs=inputs, input_shapes=input_shapes, loss=loss,
                            dtype=dtype, seed=seed, name=name)
    except ExportMismatch as exc:
        _fail(f"bug in gradcli import: {exc}", core.EXIT_INTERNAL)
    except ExportError as exc:
        _fail(str(exc))
