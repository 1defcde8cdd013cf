"""``gradcli ops``: the ops a graph file may use, from the op registry."""
from __future__ import annotations

import json

import click


@click.command("ops")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--missing", is_flag=True,
              help="List the core ATen overloads (torch.Tag.core) that have no op yet: from the "
                   "installed torch, else from the list shipped with gradcli.")
def ops(fmt, missing):
    """List the ops graph files may use: inputs, args with defaults, backward node, doc."""
    if missing:
        _missing(fmt)
        return
    from ..ops import catalog  # noqa: PLC0415 - the op library loads only for this command

    rows = catalog.describe_ops()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(catalog.plain_table(rows), nl=False)


def _missing(fmt):
    from ..ops.aten import core_opset  # noqa: PLC0415

    core, source = core_opset.CORE_ATEN, f"the list shipped with gradcli (torch {core_opset.TORCH_VERSION})"
    try:
        from ..bridges.torch.opset import core_aten_overloads, torch_version  # noqa: PLC0415

        core, source = core_aten_overloads(), f"the installed torch {torch_version()}"
    except ImportError:
        pass
    absent = core_opset.missing(core)
    if fmt == "json":
        click.echo(json.dumps({"missing": absent, "missing_count": len(absent), "core_count": len(core),
                               "source": source}, indent=2))
        return
    for name in absent:
        click.echo(name)
    click.echo(f"{len(absent)} of {len(core)} core ATen overloads have no op (core opset from {source})")
