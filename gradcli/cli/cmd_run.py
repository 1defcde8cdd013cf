"""``gradcli run``: run the backward pass of graph files and print the gradients."""
from __future__ import annotations

import click

from . import core
from .core import EXIT_INVALID, fail, run_graph
from .process_exit import keep_until_exit


@click.command()
@click.argument("graphs", nargs=-1, required=True, type=core.graph_path_type())
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True,
              help="Output format. JSON writes NaN and infinities as \"nan\", \"inf\", \"-inf\".")
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
@core.load_options
def run(graphs, fmt, out, inputs, retain_graph, repeat, no_multithreading, deterministic,
        detect_anomaly, check_inf, trace_file, load: core.LoadOptions):
    """Run the backward pass of GRAPHS and print the gradients."""
    if out and len(graphs) > 1:
        fail("--out takes a single graph file", EXIT_INVALID)
    if trace_file and len(graphs) > 1:
        fail("--trace takes a single graph file", EXIT_INVALID)
    if out and not out.lower().endswith((".npz", ".json")):
        fail(f"--out {out}: the file name must end in .npz or .json", EXIT_INVALID)
    core.check_writable("--out", out)
    core.check_writable("--trace", trace_file)
    input_list = [s.strip() for s in inputs.split(",") if s.strip()] if inputs else None
    docs = []
    for path in graphs:
        graph = load.load_or_exit(path)
        result = run_graph(graph, inputs=input_list, retain_graph=retain_graph, repeat=repeat,
                           multithreading=not no_multithreading, deterministic=deterministic,
                           anomaly=(True, check_inf) if detect_anomaly else None,
                           # records per node only for what prints or writes them
                           order=bool(fmt == "json" or trace_file
                                      or (out and out.lower().endswith(".json"))))
        if trace_file:
            from ..trace import chrome_trace

            core.write_text("--trace", trace_file, core.dumps(chrome_trace(result)))
        if out:
            write_out(out, result)
        if fmt == "json":
            docs.append(result.to_json())
        else:
            print_grads(result, path)
        if not load.allow_code:
            # freed by the process's end, not one object at a time (Note [Exit without
            # teardown]); not with user code, whose open files only teardown flushes
            keep_until_exit(graph, result)
    if fmt == "json":
        click.echo(core.dumps(docs[0] if len(docs) == 1 else docs))


def write_out(out, result):
    """--out: FILE.json (the Results document) or FILE.npz (one member per gradient)."""
    if out.lower().endswith(".json"):
        core.write_text("--out", out, core.dumps(result.to_json()))
        return
    from ..devices import to_host

    try:
        write_npz(out, {name: to_host(g) for name, g in result.grads.items() if g is not None})
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}", EXIT_INVALID)


def write_npz(path, arrays):
    """An .npz archive as numpy.savez writes it, for any tensor names: savez
    takes the names as keyword arguments, so a tensor named ``file`` or
    ``allow_pickle`` would clash with savez's own parameters."""
    import zipfile

    import numpy as np

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(arr), allow_pickle=False)


def print_grads(result, path):
    import numpy as np

    from ..devices import device_of, to_host

    rows = []
    for name, g in result.grads.items():
        if g is None:
            rows.append([name, "-", "-", "-", "none", "-", "-"])
            continue
        arr = to_host(g)
        if arr.size:
            with np.errstate(all="ignore"):
                stats = (f"{float(np.linalg.norm(arr.astype(np.float64).ravel())):.6g}",
                         f"{float(arr.min()):.6g}", f"{float(arr.max()):.6g}")
        else:
            stats = ("0", "-", "-")
        rows.append([name, str(list(arr.shape)), str(arr.dtype), str(device_of(g)), *stats])
    columns = ["tensor", "shape", "dtype", "device"] + [
        core.Column(c, "right") for c in ("norm", "min", "max")]
    core.print_table(f"{result.graph} ({path}): gradients", columns, rows)
    core.echo(f"{result.nodes_run} nodes ran; forward {result.forward_s * 1e3:.3f} ms, "
              f"backward {result.backward_s * 1e3:.3f} ms")
