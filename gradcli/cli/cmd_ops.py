"""``gradcli ops``: the ops a graph file may use, from the op registry."""
from __future__ import annotations

import json

import click


@click.command("ops")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
def ops(fmt):
    """List the ops graph files may use: inputs, args with defaults, backward node, doc."""
    from ..ops import catalog  # noqa: PLC0415 - the op library loads only for this command

    rows = catalog.describe_ops()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(catalog.plain_table(rows), nl=False)
