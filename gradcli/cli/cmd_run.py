"""``gradcli run``: run the backward pass of graph files and print the gradients."""
from __future__ import annotations

import threading

import click

from . import core
from ..records import Record
from .core import EXIT_INVALID, EXIT_OK, fail, run_graph
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
@core.distribute_options
def run(graphs, fmt, out, inputs, retain_graph, repeat, no_multithreading, deterministic,
        detect_anomaly, check_inf, trace_file, load: core.LoadOptions, dist: core.Distribute):
    """Run the backward pass of GRAPHS and print the gradients.

    With --jobs or --scheduler the files run elsewhere; the output and the exit
    status are those of the serial run (which stops at the first file that fails).
    """
    if out and len(graphs) > 1:
        fail("--out takes a single graph file", EXIT_INVALID)
    if trace_file and len(graphs) > 1:
        fail("--trace takes a single graph file", EXIT_INVALID)
    if out and not out.lower().endswith((".npz", ".json")):
        fail(f"--out {out}: the file name must end in .npz or .json", EXIT_INVALID)
    core.check_writable("--out", out)
    core.check_writable("--trace", trace_file)
    input_list = [s.strip() for s in inputs.split(",") if s.strip()] if inputs else None
    opts = RunOptions(fmt, out, input_list, retain_graph, repeat, not no_multithreading,
                      deterministic, detect_anomaly, check_inf, trace_file)
    docs = []
    if dist.serial:
        with core.progress_bar(len(graphs), "run") as advance:
            for k, path in enumerate(graphs):
                doc = run_one(path, opts, load, keep=not load.allow_code)
                if doc is not None:
                    docs.append(doc)
                advance(k + 1, len(graphs))
    else:
        if dist.scheduler is not None and (out or trace_file):
            fail("--out and --trace are not available with --scheduler (the file would be "
                 "written on the worker)", EXIT_INVALID)
        for path, outcome in zip(graphs, dist.map(run_captured, list(graphs), (opts, load),
                                                  load, label="run")):
            err, code, shown, doc = outcome.get()
            if code != EXIT_OK:     # the serial run stops here, with this file's error
                core._write_stderr(err)
                raise core.CliExit(code)
            if fmt == "json":
                docs.append(doc)
            else:
                print_grad_rows(path, *shown)
    if fmt == "json":
        click.echo(core.dumps(docs[0] if len(docs) == 1 else docs))


class RunOptions(Record):
    """The options of ``gradcli run`` that shape one file's run and output."""
    _fields = ("fmt", "out", "inputs", "retain_graph", "repeat", "multithreading",
               "deterministic", "detect_anomaly", "check_inf", "trace_file")

    def __init__(self, fmt, out, inputs, retain_graph, repeat, multithreading, deterministic,
                 detect_anomaly, check_inf, trace_file):
        self.fmt, self.out, self.inputs, self.retain_graph = fmt, out, inputs, retain_graph
        self.repeat, self.multithreading, self.deterministic = repeat, multithreading, deterministic
        self.detect_anomaly, self.check_inf, self.trace_file = detect_anomaly, check_inf, trace_file


def run_one(path, opts: RunOptions, load: core.LoadOptions, keep=False, show=None):
    """Run one file; print its gradients (or hand ``show`` what prints them), return its
    JSON document with ``--format json``. A failure exits."""
    fmt, out, trace_file = opts.fmt, opts.out, opts.trace_file
    graph = load.load_or_exit(path)
    result = run_graph(graph, inputs=opts.inputs, retain_graph=opts.retain_graph,
                       repeat=opts.repeat, multithreading=opts.multithreading,
                       deterministic=opts.deterministic,
                       anomaly=(True, opts.check_inf) if opts.detect_anomaly else None,
                       # records per node only for what prints or writes them
                       order=bool(fmt == "json" or trace_file
                                  or (out and out.lower().endswith(".json"))))
    if trace_file:
        from ..trace import chrome_trace

        core.write_text("--trace", trace_file, core.dumps(chrome_trace(result)))
    if out:
        write_out(out, result)
    doc = result.to_json() if fmt == "json" else None
    if fmt != "json":
        (show or print_grad_rows)(path, result.graph, grad_rows(result), footer(result))
    if keep:
        # freed by the process's end, not one object at a time (Note [Exit without
        # teardown]); not with user code, whose open files only teardown flushes
        keep_until_exit(graph, result)
    return doc


_CAPTURE_LOCK = threading.Lock()


def run_captured(path, opts: RunOptions, load: core.LoadOptions):
    """``run_one`` in a worker: (error text, exit code, (graph name, rows, footer), JSON
    document); the parent prints the table.

    Note [Worker output is printed by the parent]: a worker's prints would
    interleave with the others' on the shared terminal, and a table drawn in a
    worker is drawn for the worker's copy of the path (a cluster's temporary
    folder). So a worker returns the table's rows, and the parent draws each
    file's table in input order, as the serial run does. Only the error line of a
    failing file is captured (sys.stderr is one per process: a cluster worker that
    runs tasks on several threads captures one file at a time)."""
    import contextlib
    import io

    err, code, doc, shown = io.StringIO(), EXIT_OK, None, []
    with _CAPTURE_LOCK, contextlib.redirect_stderr(err):
        try:
            doc = run_one(path, opts, load, show=lambda *a: shown.extend(a[1:]))
        except core.CliExit as exc:
            code = exc.code
    return err.getvalue(), code, tuple(shown), doc


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


def grad_rows(result):
    """One row per gradient: tensor, shape, dtype, device, norm, min, max."""
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
    return rows


def footer(result):
    return (f"{result.nodes_run} nodes ran; forward {result.forward_s * 1e3:.3f} ms, "
            f"backward {result.backward_s * 1e3:.3f} ms")


def print_grad_rows(path, graph_name, rows, footer_line):
    columns = ["tensor", "shape", "dtype", "device"] + [
        core.Column(c, "right") for c in ("norm", "min", "max")]
    core.print_table(f"{graph_name} ({path}): gradients", columns, rows)
    core.echo(footer_line)


def print_grads(result, path):
    print_grad_rows(path, result.graph, grad_rows(result), footer(result))
