"""``gradcli export``: trace a PyTorch module into DIR/graph.yaml + DIR/weights.safetensors
(or DIR/weights.npz with ``--weights npz``).

Only click and the standard library at import time: torch, NumPy and the
tracer are imported inside the command's body, so ``gradcli --help`` stays
light. Exit codes: 0 written, 2 invalid input (a module, shape, file or op
the exporter cannot use), 3 the written graph does not replay as the module
(a bug in the exporter), with a one-line message.
"""
from __future__ import annotations

import click

from ..errors import first_line as _first_line
from . import core
from ..bridges.torch import CROSS_ENTROPY, LOSSES
from .core import EXIT_INTERNAL, fail as _fail


def _shape(ctx, param, values):
    shapes = []
    for text in values:
        try:
            shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
        except ValueError:
            raise click.BadParameter(f"{text!r} is not a shape such as 2,3,64,64") from None
        if not shape or any(d < 0 for d in shape):
            raise click.BadParameter(f"{text!r} is not a shape such as 2,3,64,64")
        shapes.append(shape)
    return shapes


def _allocation_failed(exc):
    """A MemoryError, or torch's allocator refusing (a RuntimeError naming it)."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "DefaultCPUAllocator" in text or \
        "not enough memory" in text or "out of memory" in text.lower()


@click.command("export")
@click.argument("model", metavar="MODULE.py:FUNCTION")
@click.option("--input-shape", "input_shapes", multiple=True, callback=_shape, metavar="N,C,H,W",
              help="Shape of a random (seeded, standard normal) input; repeat for several inputs.")
@click.option("--input", "input_files", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input array (e.g. int64 token ids); repeatable. FILE.npy is passed "
              "by position (file inputs come before --input-shape ones), NAME=FILE.npy by "
              "keyword: --input input_ids=ids.npy --input attention_mask=mask.npy.")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default=None,
              help="Cast the module and its floating inputs (default: as built).")
@click.option("--train/--eval", "train", default=True, show_default=True,
              help="The module's mode (batch norm statistics, dropout).")
@click.option("--loss", type=click.Choice(LOSSES), default="projection",
              show_default=True, help="projection: sum(out * R) with R a seeded standard-normal "
              "array per floating output (integer outputs such as indices are not projected); "
              "cross_entropy: against --target.")
@click.option("--target", type=click.Path(dir_okay=False), metavar="FILE.npy",
              help="Class labels for --loss cross_entropy (an integer .npy array).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seeds the random inputs, the projection and random ops such as dropout.")
@click.option("--name", default=None, help="The graph's name (default: the module's class).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write graph.yaml and its weights file into.")
@click.option("--weights", "weights", type=click.Choice(["safetensors", "npz"]),
              default="safetensors", show_default=True,
              help="The weights file: weights.safetensors, or an uncompressed weights.npz.")
def export(model, input_shapes, input_files, dtype, train, loss, target, seed, name,
                   out_dir, weights):
    """Trace a PyTorch module into a graph file of ATen ops, with PyTorch's gradients and
    node order as its `expect` section (needs the torch extra: pip install 'gradcli[torch]').

    MODULE is FILE.py:FUNCTION (or package.module:FUNCTION); FUNCTION() returns the
    torch.nn.Module. Example:

      gradcli export model.py:build_model --input-shape 2,3,64,64 --dtype float64 -o out/
    """
    try:
        import torch
    except ImportError:
        _fail("gradcli export needs PyTorch: pip install 'gradcli[torch]'")
    import numpy as np

    from ..bridges.torch import ExportError, ExportMismatch, from_module
    from ..bridges.torch.builder import load_builder
    from ..bridges.torch.versions import untested_warning

    warning = untested_warning(torch.__version__)
    if warning:
        core.echo(f"gradcli: warning: {warning}", err=True)

    if not input_shapes and not input_files:
        _fail("give the inputs: --input-shape N,C,H,W or --input FILE.npy")
    if loss == CROSS_ENTROPY and target is None:
        _fail("--loss cross_entropy needs --target FILE.npy (integer class labels)")
    if target is not None and loss != CROSS_ENTROPY:
        _fail("--target is only used with --loss cross_entropy")
    try:
        build = load_builder(model)
    except ValueError as exc:
        _fail(str(exc))
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        _fail(f"{model}: importing it raised {type(exc).__name__}: {exc}")
    try:
        module = build()
    except Exception as exc:  # noqa: BLE001 - the user's builder failed
        _fail(f"{model}: calling it raised {type(exc).__name__}: {exc}")
    if not isinstance(module, torch.nn.Module):
        _fail(f"{model} returned {type(module).__name__}, not a torch.nn.Module")

    def read(path, what):
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            _fail(f"{path}: cannot read {what} as a .npy array: {exc}")

    from ..loader import default_max_tensor_bytes

    budget = default_max_tensor_bytes()
    itemsize = 8 if dtype == "float64" else 4      # torch.randn's float32, or the cast
    for s in input_shapes:
        nbytes = itemsize * int(np.prod(s, dtype=object))
        if nbytes > budget:
            _fail(f"--input-shape {','.join(map(str, s))}: the input needs {nbytes} bytes, over "
                  f"the tensor budget of {budget} bytes (a quarter of memory)")
    inputs, keyword_inputs = [], {}
    for text in input_files:
        key, sep, path = text.partition("=")
        if sep and key.isidentifier():
            if key in keyword_inputs:
                _fail(f"--input {text}: the keyword {key} is given twice")
            keyword_inputs[key] = torch.as_tensor(read(path, f"the input {key}"))
        else:
            inputs.append(torch.as_tensor(read(text, "an input")))
    gen = torch.Generator().manual_seed(seed)
    try:
        inputs += [torch.randn(s, generator=gen) for s in input_shapes]
    except (MemoryError, RuntimeError) as exc:
        if not _allocation_failed(exc):
            raise
        _fail(f"--input-shape: cannot allocate the inputs: {_first_line(exc)}")
    target_arr = read(target, "the target") if target is not None else None
    try:
        graph = from_module(module, tuple(inputs), loss=loss, target=target_arr, dtype=dtype,
                            train=train, seed=seed, name=name, keyword_inputs=keyword_inputs)
    except ExportMismatch as exc:
        _fail(f"bug in gradcli export: {exc}", EXIT_INTERNAL)
    except ExportError as exc:
        _fail(str(exc))
    except (MemoryError, RuntimeError) as exc:
        if not _allocation_failed(exc):
            raise
        _fail(f"{model}: out of memory tracing the module on these inputs: {_first_line(exc)}")
    try:
        path = graph.write(out_dir, weights=weights)
    except ExportError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{out_dir}: cannot write: {exc.strerror or exc}")
    doc = graph.document
    core.echo(f"wrote {path} ({len(doc['ops'])} ops, {len(doc['tensors'])} tensors, "
               f"{len(doc['expect']['order'])} backward nodes) and its weights.{weights}")
