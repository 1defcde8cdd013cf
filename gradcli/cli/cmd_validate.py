"""``gradcli validate``: check graph files against their ``expect`` section
(the checks are ``gradcli.validate``; this module is their command line)."""
from __future__ import annotations

import click

from . import core
from .core import EXIT_CHECK_FAILED, EXIT_INVALID, EXIT_OK

# The status words of gradcli.validate (imported lazily there: it needs NumPy).
PASS, FAIL, INVALID, SKIPPED = "pass", "fail", "invalid", "skipped"
_EXIT_OF_STATUS = {PASS: EXIT_OK, FAIL: EXIT_CHECK_FAILED, INVALID: EXIT_INVALID}


def exit_code_of(report) -> int:
    """0 every check holds, 1 a check failed, 2 the file is invalid."""
    return _EXIT_OF_STATUS[report.status]


def exit_code(reports) -> int:
    return max((exit_code_of(r) for r in reports), default=EXIT_OK)


def to_json(reports):
    code = exit_code(reports)
    return {"status": {EXIT_OK: "pass", EXIT_CHECK_FAILED: "fail"}.get(code, "invalid"),
            "exit_code": code, "files": [r.to_json() for r in reports]}


@click.command("validate")
@click.argument("graphs", nargs=-1, required=True, type=core.graph_path_type())
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True,
              help="Output format. JSON writes NaN and infinities as \"nan\", \"inf\", \"-inf\".")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False), metavar="FILE.xml",
              help="Also write a JUnit XML report (one testcase per check).")
@click.option("--numeric", is_flag=True,
              help="Also check the Jacobians against central finite differences in float64.")
@click.option("--fast", is_flag=True,
              help="Numeric check on random projections v^T J u (cheap for large graphs); "
                   "implies --numeric.")
@click.option("--eps", type=core.FiniteFloat(0, lo_open=True), default=1e-6,
              show_default=True, help="Finite-difference step.")
@click.option("--atol", type=core.FiniteFloat(0), default=1e-5, show_default=True,
              help="Absolute tolerance of the numeric check.")
@click.option("--rtol", type=core.FiniteFloat(0), default=1e-3, show_default=True,
              help="Relative tolerance of the numeric check.")
@click.option("--check-order", is_flag=True,
              help="Check that a single-threaded run follows the predicted execution order.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Check that N backwards with retain_graph give N times the gradient.")
@click.option("--no-multithreading", is_flag=True,
              help="Run every node on the calling thread (no device threads).")
@click.option("--elementwise", is_flag=True,
              help="Compare every gradient element-wise with the file's rtol/atol, also those "
                   "computed below float64 (default there: norm-wise against the file's float64 "
                   "reference, within a factor of PyTorch's own distance).")
@click.option("--detect-anomaly", is_flag=True, help="Fail on the first node that returns NaN.")
@click.option("--check-inf", is_flag=True, help="With --detect-anomaly, also fail on Inf.")
@click.option("--against", type=click.Choice(["torch"]), default=None,
              help="Replay GRAPHS in PyTorch (the gradcli[torch] extra) and show its gradients "
                   "and node order beside gradcli's, the first difference highlighted.")
@core.load_options
@core.distribute_options
def validate(graphs, fmt, junit_file, numeric, fast, eps, atol, rtol, check_order, repeat,
             no_multithreading, elementwise, detect_anomaly, check_inf, against,
             load: core.LoadOptions, dist: core.Distribute):
    """Check GRAPHS against the format, run them and compare with their `expect`.

    With --against torch, compare them with PyTorch instead (tolerances: the file's
    expect rtol/atol, else rtol 1e-7, atol 0).

    Exit status: 0 when every check holds, 1 when a check fails, 2 for invalid input.
    """
    from ..validate import Options, validate_file

    if against == "torch":
        if not dist.serial:
            core.fail("--jobs and --scheduler are not available with --against torch", EXIT_INVALID)
        if junit_file:
            core.fail("--junit is not available with --against torch", EXIT_INVALID)
        raise core.CliExit(against_torch(graphs, fmt, load, not no_multithreading))
    core.check_writable("--junit", junit_file)
    opts = Options(numeric=numeric or fast, fast=fast, eps=eps, atol=atol, rtol=rtol,
                   check_order=check_order, repeat=repeat, detect_anomaly=detect_anomaly,
                   check_inf=check_inf, multithreading=not no_multithreading,
                   elementwise=elementwise)
    if dist.serial:
        reports = []
        with core.progress_bar(len(graphs), "validate") as advance:
            for path in graphs:
                reports.append(validate_file(path, opts, load.load))
                advance(len(reports), len(graphs))
    else:
        # the same reports, computed elsewhere and merged in input order
        reports = [o.get() for o in dist.map(validate_file, list(graphs), (opts, load.load), load,
                                             label="validate")]
    for report in reports:
        if report.invalid is not None:
            core.error_line(report.invalid)
    if fmt == "json":
        click.echo(core.dumps(to_json(reports)))
    else:
        print_reports(reports)
    if junit_file:
        core.write_junit(junit_file, "gradcli validate", junit_suites(reports))
    raise core.CliExit(exit_code(reports))


# -- --against torch ---------------------------------------------------------------------------
def against_torch(graphs, fmt, load: core.LoadOptions, multithreading) -> int:
    """Run each graph in gradcli and replay it in PyTorch (``gradcli.bridges.torch.compare``);
    print both side by side. Returns the exit code: 1 when any graph differs."""
    try:
        import torch
    except ImportError as exc:
        core.fail(f"validate --against torch needs PyTorch, which is not installed ({exc}); "
                  "install the extra: pip install 'gradcli[torch]'", EXIT_INVALID)
    from ..bridges.torch.compare import compare, replay
    from ..bridges.torch.versions import untested_warning
    from ..devices import to_host

    warning = untested_warning(torch.__version__)
    if warning:
        core.echo(f"gradcli: warning: {warning}", err=True)
    from ..errors import GraphError

    docs, code = [], EXIT_OK
    for path in graphs:
        graph = load.load_or_exit(path)
        # the leaves as loaded (random inits included), before a forward updates any in place
        leaves = {name: leaf.make(leaf.shape) for name, leaf in graph.leaves.items()}
        result = core.run_graph(graph, inputs=None, retain_graph=False, repeat=1,
                                multithreading=multithreading)
        try:
            theirs = replay(path, leaves=leaves)
        except GraphError as exc:
            core.fail(str(exc), EXIT_INVALID)
        expect = graph.expect
        tol = dict(rtol=expect.rtol, atol=expect.atol) if expect else dict(rtol=1e-7, atol=0.0)
        grads = {n: to_host(g) for n, g in result.grads.items() if g is not None}
        cmp = compare(grads, [r.node for r in result.order], theirs, **tol)
        if not cmp.ok:
            code = EXIT_CHECK_FAILED
        if fmt == "json":
            docs.append(comparison_json(path, cmp, tol))
        else:
            print_comparison(path, result.graph, cmp, tol)
    if fmt == "json":
        click.echo(core.dumps(docs[0] if len(docs) == 1 else docs))
    return code


def comparison_json(path, cmp, tol):
    return {"path": str(path), "status": "pass" if cmp.ok else "fail", **tol,
            "grads": [{"tensor": n, "status": "pass" if st == "ok" else "fail", "max_abs_err": err,
                       "detail": detail} for n, st, err, detail in cmp.grad_rows],
            "order": [{"index": i, "gradcli": g, "torch": t, "same": same}
                      for i, g, t, same in cmp.order_rows],
            "first_difference": cmp.first_difference}


def print_comparison(path, name, cmp, tol):
    from rich.text import Text

    rows, styles = [], {}
    for i, (n, st, err, detail) in enumerate(cmp.grad_rows):
        rows.append([n, "pass" if st == "ok" else "DIFF", _num(err), detail])
        styles[i] = {"status": _STYLES["pass" if st == "ok" else "fail"]}
    core.print_table(f"{name} ({path}): gradients, gradcli vs torch",
                     ["tensor", "status", core.Column("max abs diff", "right"),
                      core.Column("detail", fold=True)], rows, styles=styles)
    rows, styles = [], {}
    first = next((i for i, *_, same in cmp.order_rows if not same), None)
    for i, g, t, same in cmp.order_rows:
        rows.append([str(i), g or "(ended)", t or "(ended)", "" if same else "differs"])
        if not same:
            styles[i] = {c: "bold red" if i == first else "red"
                         for c in ("#", "gradcli", "torch", "")}
    core.print_table(f"{name}: backward node order, gradcli vs torch", [
        core.Column("#", "right"), "gradcli", "torch", ""], rows, styles=styles)
    out = core.console()
    if cmp.ok:
        out.print(Text(core.clean_line(f"{path}: SAME AS TORCH: {len(cmp.grad_rows)} gradients "
                                       f"within rtol={tol['rtol']:g}, atol={tol['atol']:g}, "
                                       f"{len(cmp.order_rows)} nodes in the same order"),
                       style="green"), soft_wrap=True)
    else:
        out.print(Text(core.clean_line(f"{path}: DIFFERS FROM TORCH: first difference: "
                                       f"{cmp.first_difference}"), style="bold red"), soft_wrap=True)


# -- output ----------------------------------------------------------------------------------
_STYLES = {"pass": "green", "fail": "bold red", "nondiff": "yellow", "skipped": "dim"}


def _num(x):
    if x is None:
        return "-"
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)


def _index(worst):
    if worst is None:
        return "-"
    if isinstance(worst, dict):
        return f"out {worst.get('output')} in {worst.get('input')}"
    return str(list(worst))


def summary_line(report):
    if report.invalid is not None:
        return f"{report.path}: INVALID: {report.invalid}"
    c = report.counts()
    verdict = "PASS" if report.status == PASS else "FAIL"
    extra = f", {c['nondiff']} non-differentiable" if c["nondiff"] else ""
    extra += f", {c['skipped']} skipped" if c["skipped"] else ""
    return (f"{report.path}: {verdict}: {c['checks']} check{'s' if c['checks'] != 1 else ''}, "
            f"{c['pass']} passed, {c['fail']} failed{extra}")


def print_reports(reports):
    from rich.text import Text

    out = core.console()
    for report in reports:
        if report.invalid is not None:
            out.print(Text(core.clean_line(summary_line(report)), style="bold red"))
            continue
        # the norm-wise distances (gradcli.verdict) get columns when some check has them
        normwise = any(c.distance is not None for c in report.checks)
        columns = ["check", "status", core.Column("max abs err", "right"),
                   core.Column("max rel err", "right"), "worst index"]
        if normwise:
            columns += [core.Column("dist. gradcli", "right"), core.Column("dist. torch", "right")]
        columns.append(core.Column("detail", fold=True))
        rows, styles = [], {}
        for i, c in enumerate(report.checks):
            detail = c.message.splitlines()[0] if c.message else ""
            row = [c.name, c.status, _num(c.max_abs_err), _num(c.max_rel_err),
                   _index(c.worst_index)]
            if normwise:
                row += [_num(c.distance), _num(c.torch_distance)]
            rows.append(row + [detail])
            styles[i] = {"status": _STYLES[c.status]}
        core.print_table(f"{report.graph} ({report.path}): validate", columns, rows, styles=styles)
        for c in report.checks:
            if c.status == FAIL:       # in full, unwrapped: paths and values stay whole
                out.print(Text(core.clean_line(f"{c.name}: {c.message}")), soft_wrap=True)
        out.print(Text(core.clean_line(summary_line(report)),
                       style="green" if report.status == PASS else "bold red"))
    if len(reports) > 1:
        n_fail = sum(r.status == FAIL for r in reports)
        n_inv = sum(r.status == INVALID for r in reports)
        out.print(f"{len(reports)} files: {len(reports) - n_fail - n_inv} passed, "
                  f"{n_fail} failed, {n_inv} invalid")


def junit_suites(reports):
    """One suite per file, one case per check; an invalid file is one ``load`` error."""
    suites = []
    for report in reports:
        classname = report.graph or report.path
        cases = []
        if report.invalid is not None:
            cases.append(core.JUnitCase(report.path, "load", error=report.invalid,
                                        error_type="GraphError"))
        for c in report.checks:
            case = core.JUnitCase(classname, c.name, c.time_s)
            if c.status == FAIL:
                case.failure, case.failure_type = c.message or "check failed", c.kind
            elif c.status == SKIPPED:
                case.skipped = c.message
            elif c.message:
                case.system_out = f"{c.status}: {c.message}"
            cases.append(case)
        suites.append(core.JUnitSuite(classname, cases, file=report.path))
    return suites
