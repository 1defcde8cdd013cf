"""``gradcli order``: the order in which a backward ran (or will run) the nodes."""
from __future__ import annotations

import json

import click

from . import core
from .core import EXIT_INVALID, fail, run_graph


@click.command()
@click.argument("graph_file", type=core.graph_path_type())
@click.option("--format", "fmt", type=click.Choice(["table", "json", "dot"]), default="table",
              show_default=True, help="table, json (docs/graph-format.md, Results) or dot (Graphviz).")
@click.option("--no-multithreading", is_flag=True,
              help="Run every node on the calling thread: the order is then the predicted one.")
@click.option("--predicted", is_flag=True,
              help="Print the predicted single-threaded order without running the backward.")
@core.load_options
def order(graph_file, fmt, no_multithreading, predicted, load: core.LoadOptions):
    """Print the order in which the backward ran the nodes of GRAPH_FILE."""
    from ..errors import GraphError

    graph = load.load_or_exit(graph_file)
    if predicted:
        try:
            nodes = graph.predicted_order()
            if graph.backward_spec.inputs:     # as a run would: every input must be used
                roots, _ = graph.root_grads()
                graph.check_inputs_reachable(roots, graph.backward_spec.inputs)
        except GraphError as exc:
            fail(str(exc), EXIT_INVALID)
        records = [dict(node=n.name, op=n.metadata.get("op_id"), sequence_nr=n.sequence_nr,
                        topological_nr=n.topological_nr, device=str(n.device), thread="-")
                   for n in nodes]
    else:
        result = run_graph(graph, inputs=None, retain_graph=True, repeat=1,
                           multithreading=not no_multithreading)
        records = [dict(r.to_json(), thread=r.thread) for r in result.order]
    if fmt == "json":
        click.echo(core.dumps([{k: v for k, v in r.items() if k != "thread"} for r in records]))
    elif fmt == "dot":
        click.echo(dot(graph, records))
    else:
        right = ("#", "sequence_nr", "topological_nr")
        columns = [core.Column(c, "right" if c in right else "left")
                   for c in ("#", "node", "op", "device", "sequence_nr", "topological_nr", "thread")]
        rows = [[str(i), r["node"], str(r["op"] or ""), r["device"], str(r["sequence_nr"]),
                 str(r["topological_nr"]), r["thread"]] for i, r in enumerate(records, 1)]
        core.print_table(f"{graph.name}: backward execution order", columns, rows)


def _dot_string(text):
    """A Graphviz double-quoted string: quotes and backslashes escaped, control
    characters shown as escapes (never raw in the output)."""
    return json.dumps(core.clean(text), ensure_ascii=False)[1:-1]


def dot(graph, records):
    """The backward graph in Graphviz, each node labelled with its run number."""
    roots = [graph.values[n] for n in graph.backward_spec.roots]
    runs = {}
    for i, r in enumerate(records, 1):
        runs.setdefault((r["node"], r["op"], r["sequence_nr"]), []).append(str(i))
    ids, lines, stack, seen = {}, [], [t.gradient_edge()[0] for t in roots if t.requires_grad], set()
    lines.append(f'digraph "{_dot_string(graph.name)}" {{')
    lines.append('  rankdir=TB; node [shape=box, fontname="monospace"];')
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        ids[fn] = f"n{len(ids)}"
        run = ",".join(runs.get((fn.name, fn.metadata.get("op_id"), fn.sequence_nr), [])) or "-"
        label = "\\n".join(_dot_string(part) for part in (
            f"#{run} {fn.name}", fn.metadata.get("op_id") or "", f"seq={fn.sequence_nr} topo={fn.topological_nr}"))
        lines.append(f'  {ids[fn]} [label="{label}"];')
        stack.extend(e[0] for e in fn.next_edges if e is not None)
    for fn in seen:
        for e in fn.next_edges:
            if e is not None:
                lines.append(f"  {ids[fn]} -> {ids[e[0]]};")
    lines.append("}")
    return "\n".join(lines)
