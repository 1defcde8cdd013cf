"""The ``gradcli`` command line: a thin layer over ``gradcli.load`` and ``Graph``.

Exit codes: 0 success, 1 a check failed (validate), 2 invalid input or usage,
3 the backward raised.
"""
from __future__ import annotations

import json
import sys

import click

EXIT_OK, EXIT_CHECK_FAILED, EXIT_INVALID, EXIT_BACKWARD = 0, 1, 2, 3


def _error(message, code):
    click.echo(f"gradcli: error: {message}", err=True)
    sys.exit(code)


def _device_map(ctx, param, value):
    from .loader import parse_device_map

    try:
        return parse_device_map(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def load_options(fn):
    """Options every subcommand that reads graph files takes."""
    fn = click.option("--device-map", callback=_device_map, default="", metavar="SRC=DST",
                      help="Remap device types, e.g. cuda=sim to run CUDA graphs on simulated devices.")(fn)
    fn = click.option("--allow-code", is_flag=True, help="Allow `custom` ops to run user code (not supported yet: such graphs are refused).")(fn)
    fn = click.option("--allow-outside-paths", is_flag=True,
                      help="Allow `file:` paths outside the graph file's folder.")(fn)
    fn = click.option("--max-tensor-bytes", type=click.IntRange(min=1), default=None,
                      help="Refuse tensors larger than this (default: a quarter of RAM).")(fn)
    return fn


def _load(path, opts):
    from . import loader
    from .errors import GraphError

    try:
        return loader.load(path, device_map=opts["device_map"], allow_code=opts["allow_code"],
                           allow_outside_paths=opts["allow_outside_paths"],
                           max_tensor_bytes=opts["max_tensor_bytes"])
    except GraphError as exc:
        _error(str(exc), EXIT_INVALID)


def _run_graph(graph, *, inputs, retain_graph, repeat, multithreading, deterministic=False,
               anomaly=None):
    """Run ``graph`` ``repeat`` times; returns the last Result with the median backward time."""
    import statistics

    from .errors import BackwardError, GraphError

    try:
        if retain_graph and repeat > 1:
            # One forward, N backwards on the retained graph: gradients add up.
            result = graph.run(inputs=inputs, retain_graph=True, multithreading=multithreading,
                               deterministic=deterministic, anomaly=anomaly)
            times = [result.backward_s]
            for _ in range(repeat - 1):
                grads, order, elapsed = graph.backward(
                    inputs=inputs, retain_graph=True, multithreading=multithreading,
                    deterministic=deterministic, anomaly=anomaly)
                times.append(elapsed)
                result.grads, result.order = grads, order
        else:
            times, fwd = [], []
            for _ in range(repeat):
                result = graph.run(inputs=inputs, retain_graph=retain_graph or None,
                                   multithreading=multithreading, deterministic=deterministic,
                                   anomaly=anomaly)
                times.append(result.backward_s)
                fwd.append(result.forward_s)
            result.forward_s = statistics.median(fwd)
        result.backward_s = statistics.median(times)
        return result
    except GraphError as exc:
        _error(str(exc), EXIT_INVALID)
    except BackwardError as exc:
        _error(str(exc), EXIT_BACKWARD)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gradcli")
def main():
    """Run and check backward passes of serialized computation graphs.

    Graph files (YAML or JSON) follow docs/graph-format.md.
    """


@main.command()
@click.argument("graphs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write gradients to FILE.npz or FILE.json.")
@click.option("--inputs", default=None, metavar="A,B",
              help="Differentiate w.r.t. these tensors only (overrides backward.inputs).")
@click.option("--retain-graph", is_flag=True, help="Keep the graph; with --repeat, gradients add up.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run N times; timings are medians.")
@click.option("--no-multithreading", is_flag=True,
              help="Run every node on the calling thread (no device threads).")
@click.option("--deterministic", is_flag=True,
              help="Sum gradient contributions in a fixed order (bit-identical runs).")
@click.option("--detect-anomaly", is_flag=True, help="Fail on the first node that returns NaN.")
@click.option("--check-inf", is_flag=True, help="With --detect-anomaly, also fail on Inf.")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False),
              help="Write a Chrome trace (Perfetto, chrome://tracing) of the backward.")
@load_options
def run(graphs, fmt, out, inputs, retain_graph, repeat, no_multithreading, deterministic,
        detect_anomaly, check_inf, trace_file, **opts):
    """Run the backward pass of GRAPHS and print the gradients."""
    if out and len(graphs) > 1:
        _error("--out takes a single graph file", EXIT_INVALID)
    if trace_file and len(graphs) > 1:
        _error("--trace takes a single graph file", EXIT_INVALID)
    input_list = [s.strip() for s in inputs.split(",") if s.strip()] if inputs else None
    docs = []
    for path in graphs:
        graph = _load(path, opts)
        result = _run_graph(graph, inputs=input_list, retain_graph=retain_graph, repeat=repeat,
                            multithreading=not no_multithreading, deterministic=deterministic,
                            anomaly=(True, check_inf) if detect_anomaly else None)
        if trace_file:
            from .trace import write_chrome_trace

            write_chrome_trace(trace_file, result)
        if out:
            _write_out(out, result)
        if fmt == "json":
            docs.append(result.to_json())
        else:
            _print_grads(result, path)
    if fmt == "json":
        click.echo(json.dumps(docs[0] if len(docs) == 1 else docs))


def _write_out(out, result):
    lower = out.lower()
    try:
        if lower.endswith(".npz"):
            result.save_npz(out)
        elif lower.endswith(".json"):
            with open(out, "w") as fh:
                json.dump(result.to_json(), fh)
        else:
            _error(f"--out {out}: the file name must end in .npz or .json", EXIT_INVALID)
    except OSError as exc:
        _error(f"--out {out}: {exc.strerror or exc}", EXIT_INVALID)


def _console():
    from rich.console import Console

    # Piped output gets a wide fixed width so that columns are not cut.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def _print_grads(result, path):
    import numpy as np
    from rich.table import Table

    from .devices import to_host
    from .graph import _device_str

    table = Table(title=f"{result.graph} ({path}): gradients", title_justify="left")
    for col in ("tensor", "shape", "dtype", "device"):
        table.add_column(col)
    for col in ("norm", "min", "max"):
        table.add_column(col, justify="right")
    for name, g in result.grads.items():
        if g is None:
            table.add_row(name, "-", "-", "-", "none", "-", "-")
            continue
        arr = to_host(g)
        if arr.size:
            stats = (f"{float(np.linalg.norm(arr.astype(np.float64).ravel())):.6g}",
                     f"{float(arr.min()):.6g}", f"{float(arr.max()):.6g}")
        else:
            stats = ("0", "-", "-")
        table.add_row(name, str(list(arr.shape)), str(arr.dtype), _device_str(g), *stats)
    console = _console()
    console.print(table)
    console.print(f"{len(result.order)} nodes ran; forward {result.forward_s * 1e3:.3f} ms, "
                  f"backward {result.backward_s * 1e3:.3f} ms")


@main.command()
@click.argument("graph_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "dot"]), default="table",
              show_default=True, help="table, json (docs/graph-format.md, Results) or dot (Graphviz).")
@click.option("--no-multithreading", is_flag=True,
              help="Run every node on the calling thread: the order is then the predicted one.")
@click.option("--predicted", is_flag=True,
              help="Print the predicted single-threaded order without running the backward.")
@load_options
def order(graph_file, fmt, no_multithreading, predicted, **opts):
    """Print the order in which the backward ran the nodes of GRAPH_FILE."""
    from .errors import GraphError

    graph = _load(graph_file, opts)
    if predicted:
        try:
            nodes = graph.predicted_order()
        except GraphError as exc:
            _error(str(exc), EXIT_INVALID)
        records = [dict(node=n.name, op=n.metadata.get("op_id"), sequence_nr=n.sequence_nr,
                        topological_nr=n.topological_nr, device=str(n.device), thread="-")
                   for n in nodes]
    else:
        result = _run_graph(graph, inputs=None, retain_graph=True, repeat=1,
                            multithreading=not no_multithreading)
        records = [dict(r.to_json(), thread=r.thread) for r in result.order]
    if fmt == "json":
        click.echo(json.dumps([{k: v for k, v in r.items() if k != "thread"} for r in records]))
    elif fmt == "dot":
        click.echo(_dot(graph, records))
    else:
        from rich.table import Table

        table = Table(title=f"{graph.name}: backward execution order", title_justify="left")
        for col in ("#", "node", "op", "device", "sequence_nr", "topological_nr", "thread"):
            table.add_column(col, justify="right" if col in ("#", "sequence_nr", "topological_nr") else "left")
        for i, r in enumerate(records, 1):
            table.add_row(str(i), r["node"], str(r["op"] or ""), r["device"], str(r["sequence_nr"]),
                          str(r["topological_nr"]), r["thread"])
        _console().print(table)


def _dot(graph, records):
    """The backward graph in Graphviz, each node labelled with its run number."""
    roots = [graph.values[n] for n in graph.backward_spec.roots]
    runs = {}
    for i, r in enumerate(records, 1):
        runs.setdefault((r["node"], r["op"], r["sequence_nr"]), []).append(str(i))
    ids, lines, stack, seen = {}, [], [t.gradient_edge()[0] for t in roots if t.requires_grad], set()
    lines.append(f'digraph "{graph.name}" {{')
    lines.append('  rankdir=TB; node [shape=box, fontname="monospace"];')
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        ids[fn] = f"n{len(ids)}"
        run = ",".join(runs.get((fn.name, fn.metadata.get("op_id"), fn.sequence_nr), [])) or "-"
        label = f"#{run} {fn.name}\\n{fn.metadata.get('op_id') or ''}\\nseq={fn.sequence_nr} topo={fn.topological_nr}"
        lines.append(f'  {ids[fn]} [label="{label}"];')
        stack.extend(e[0] for e in fn.next_edges if e is not None)
    for fn in seen:
        for e in fn.next_edges:
            if e is not None:
                lines.append(f"  {ids[fn]} -> {ids[e[0]]};")
    lines.append("}")
    return "\n".join(lines)


@main.command()
@click.argument("graphs", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--scenario", "scenarios", multiple=True, default=["all"], show_default=True,
              type=click.Choice(["all", "reentrant", "concurrent", "errors", "shutdown", "chaos",
                                 "fork"]),
              help="Scenario to run (repeatable). Given GRAPHS, they are stressed instead.")
@click.option("--threads", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Threads calling backward at once.")
@click.option("--iterations", type=click.IntRange(min=1), default=3, show_default=True,
              help="Iterations per scenario (bounded by --duration).")
@click.option("--duration", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="Time budget in seconds for all scenarios together, checked between "
                   "iterations (--timeout is the hard limit).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the random choices (failure points, jitter).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Watchdog: on expiry dump every thread's stack and exit 1 (default: duration + 120 s).")
@click.option("--deterministic", is_flag=True, help="Chaos results must be bit-identical.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--junit", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")
@load_options
def stress(graphs, scenarios, threads, iterations, duration, seed, timeout, deterministic, fmt,
           junit, **opts):
    """Stress the engine (and GRAPHS, if given) under reentrancy, concurrency,
    errors, shutdown and jitter. Exit 0 only if every check passed."""
    import faulthandler
    import functools
    import time

    from . import stress as S

    watchdog = timeout or duration + 120
    faulthandler.dump_traceback_later(watchdog, exit=True)  # a hang must never hang CI
    try:
        loaded = []
        for path in graphs:
            _load(path, opts)  # fail fast, exit 2, on a bad file
            loaded.append((path, functools.partial(_load, path, opts)))
        names = ["graphs"] if graphs else (
            list(S.SCENARIOS) if "all" in scenarios else list(dict.fromkeys(scenarios)))
        ctx = S.Context(threads, iterations, time.monotonic() + duration, seed, deterministic, loaded)
        tty = sys.stderr.isatty() and fmt == "table"
        if tty:
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("stress", total=len(names))
                results = S.run_scenarios(names, ctx, lambda r: bar.advance(task))
        else:
            results = S.run_scenarios(names, ctx, lambda r: click.echo(
                f"stress: {r.name}: {'ok' if r.ok else 'FAILED'} ({r.iterations} iterations, "
                f"{r.seconds:.1f}s)", err=True))
    finally:
        faulthandler.cancel_dump_traceback_later()
    if junit:
        with open(junit, "w") as fh:
            fh.write(S.junit_xml(results))
    if fmt == "json":
        click.echo(json.dumps({"ok": all(r.ok for r in results),
                               "scenarios": [r.to_json() for r in results]}))
    else:
        _print_stress(results)
    sys.exit(EXIT_OK if all(r.ok for r in results) else EXIT_CHECK_FAILED)


def _print_stress(results):
    from rich.table import Table

    table = Table(title="gradcli stress", title_justify="left")
    for col in ("scenario", "iterations", "failures", "p50 backward", "p99 backward",
                "peak threads", "threads leaked", "result"):
        table.add_column(col, justify="left" if col in ("scenario", "result") else "right")

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.2f} ms"

    for r in results:
        table.add_row(r.name, str(r.iterations), str(len(r.failures)), ms(r.percentile(0.5)),
                      ms(r.percentile(0.99)), str(r.peak_threads), str(r.leaked_threads),
                      "ok" if r.ok else "FAILED")
    console = _console()
    console.print(table)
    for r in results:
        for f in r.failures[:10]:
            console.print(f"  {r.name}: {f}")


from .validate import add_validate_command  # noqa: E402 - registers `gradcli validate`

add_validate_command(main)

if __name__ == "__main__":  # pragma: no cover
    main()
