"""``gradcli stress``: the command line of ``gradcli.stress``."""
from __future__ import annotations

import sys

import click

from . import core
from .core import EXIT_CHECK_FAILED, EXIT_INVALID, EXIT_OK, fail

#: The scenarios of gradcli.stress (kept here so that --help needs no NumPy;
#: a test checks that the two lists agree).
SCENARIOS = ("reentrant", "concurrent", "errors", "shutdown", "chaos", "fork", "inplace")
#: --duration and --timeout stop at a week: faulthandler's timer cannot hold 1e300 s.
MAX_SECONDS = 7 * 24 * 3600.0


@click.command()
@click.argument("graphs", nargs=-1, type=core.graph_path_type())
@click.option("--scenario", "scenarios", multiple=True, default=["all"], show_default=True,
              type=click.Choice(["all", *SCENARIOS]),
              help="Scenario to run (repeatable). Given GRAPHS, they are stressed instead.")
@click.option("--threads", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Threads calling backward at once (with GRAPHS, each runs its own "
                   "forward: N + 1 forwards count against --max-graph-bytes together).")
@click.option("--iterations", type=click.IntRange(min=1), default=3, show_default=True,
              help="Iterations per scenario (bounded by --duration; at least one always runs).")
@click.option("--duration", type=core.FiniteFloat(0.1, MAX_SECONDS), default=60.0,
              show_default=True,
              help="Time budget in seconds for all scenarios together, checked between "
                   "iterations (--timeout is the hard limit).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the random choices (failure points, jitter).")
@click.option("--timeout", type=core.FiniteFloat(1, MAX_SECONDS), default=None,
              help="Watchdog: on expiry dump every thread's stack and exit 1 (default: duration + 120 s).")
@click.option("--deterministic", is_flag=True, help="Chaos results must be bit-identical.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--junit", type=click.Path(dir_okay=False), help="Write a JUnit XML report.")
@core.load_options
@core.distribute_options
def stress(graphs, scenarios, threads, iterations, duration, seed, timeout, deterministic, fmt,
           junit, load: core.LoadOptions, dist: core.Distribute):
    """Stress the engine (and GRAPHS, if given) under reentrancy, concurrency,
    errors, shutdown and jitter. Exit 0 only if every check passed.

    With GRAPHS, --jobs N or --scheduler stresses each file where it is sent, with
    --duration x N / files of the time budget (x 1 / files on a cluster); the results
    merge into the one `graphs` row of the serial run."""
    import faulthandler
    import functools
    import time

    from .. import stress as S
    from ..errors import GraphError

    core.check_writable("--junit", junit)
    if not dist.serial and not graphs:
        fail("--jobs and --scheduler stress GRAPHS (the built-in scenarios run in one process)",
             EXIT_INVALID)
    if not dist.serial:
        raise core.CliExit(_stress_elsewhere(graphs, threads, iterations, duration, seed,
                                             timeout, deterministic, fmt, junit, load, dist))
    loaded = []
    for path in graphs:
        graph = load.load_or_exit(path)     # fail fast, exit 2, on a bad file
        try:
            S.check_concurrent_budget(graph, threads)   # ... or one too big to run N at once
            graph.forward()                 # ... or on a forward that fails
        except GraphError as exc:
            fail(str(exc), EXIT_INVALID)
        loaded.append((path, functools.partial(load.load, path)))
    names = ["graphs"] if graphs else (
        list(SCENARIOS) if "all" in scenarios else list(dict.fromkeys(scenarios)))
    watchdog = timeout or duration + 120
    started = time.monotonic()
    # A hang must never hang CI: dump every thread's stack and exit 1.
    faulthandler.dump_traceback_later(watchdog, exit=True, file=_fault_file())
    try:
        ctx = S.Context(threads, iterations, time.monotonic() + duration, seed, deterministic, loaded)
        if sys.stderr.isatty() and fmt == "table":
            from rich.progress import Progress

            with Progress(console=core.console(err=True), transient=True) as bar:
                task = bar.add_task("stress", total=len(names))
                results = S.run_scenarios(names, ctx, lambda r: bar.advance(task))
        else:
            results = S.run_scenarios(names, ctx, lambda r: core.progress(
                f"stress: {r.name}: {'ok' if r.ok else 'FAILED'} ({r.iterations} iterations, "
                f"{r.seconds:.1f}s)"))
    except GraphError as exc:               # a given graph that only fails when run
        fail(str(exc), EXIT_INVALID)
    finally:
        faulthandler.cancel_dump_traceback_later()
    elapsed = time.monotonic() - started
    for r in results:
        if r.iterations == 0 and r.ok:      # never "ok (0 iterations)"
            r.failures.append("no iteration completed")
    ok = all(r.ok for r in results)
    if junit:
        core.write_junit(junit, "gradcli stress", junit_suites(results))
    if fmt == "json":
        click.echo(core.dumps({"ok": ok, "seconds": elapsed, "duration": duration,
                               "scenarios": [r.to_json() for r in results]}))
    else:
        print_results(results)
        if elapsed > duration:
            core.echo(f"note: the run took {elapsed:.1f}s, over --duration {duration:g}s "
                      "(every scenario runs at least one iteration)")
    raise core.CliExit(EXIT_OK if ok else EXIT_CHECK_FAILED)


def _stress_elsewhere(graphs, threads, iterations, duration, seed, timeout, deterministic, fmt,
                      junit, load, dist) -> int:
    """stress GRAPHS, one file per worker process or cluster task; one merged result."""
    import time

    from .. import stress as S
    from ..parallel import resolve_jobs

    slots = 1 if dist.scheduler is not None else min(resolve_jobs(dist.jobs), len(graphs))
    budget = duration * slots / len(graphs)
    watchdog = (timeout or duration + 120)
    started = time.monotonic()
    outcomes = dist.map(S.stress_graph_file, list(graphs),
                        (load.load, threads, iterations, budget, seed, deterministic, watchdog),
                        load, label="stress")
    results = []
    for outcome in outcomes:
        kind, value = outcome.get()
        if kind == "invalid":       # as the serial run: the first bad file, exit 2
            fail(value, EXIT_INVALID)
        results.append(value)
    elapsed = time.monotonic() - started
    merged = S.merge_results("graphs", results, elapsed)
    if merged.iterations == 0 and merged.ok:
        merged.failures.append("no iteration completed")
    if junit:
        core.write_junit(junit, "gradcli stress", junit_suites([merged]))
    if fmt == "json":
        click.echo(core.dumps({"ok": merged.ok, "seconds": elapsed, "duration": duration,
                               "scenarios": [merged.to_json()]}))
    else:
        print_results([merged])
    return EXIT_OK if merged.ok else EXIT_CHECK_FAILED


def _fault_file():
    """faulthandler writes to a file descriptor: stderr's, or the process's own
    stderr when sys.stderr is a stand-in without one (click's CliRunner)."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


def print_results(results):
    def ms(v):
        return "-" if v is None else f"{v * 1e3:.2f} ms"

    columns = ["scenario"] + [core.Column(c, "right") for c in (
        "iterations", "failures", "p50 backward", "p99 backward", "peak threads",
        "threads leaked")] + ["result"]
    rows = [[r.name, str(r.iterations), str(len(r.failures)), ms(r.percentile(0.5)),
             ms(r.percentile(0.99)), str(r.peak_threads), str(r.leaked_threads),
             "ok" if r.ok else "FAILED"] for r in results]
    core.print_table("gradcli stress", columns, rows,
                     styles={i: {"result": "green" if r.ok else "bold red"}
                             for i, r in enumerate(results)})
    for r in results:
        for f in r.failures[:10]:
            core.echo(f"  {r.name}: {core.clean_line(f)}")
        if len(r.failures) > 10:
            core.echo(f"  {r.name}: ... and {len(r.failures) - 10} more failures")


def junit_suites(results):
    """One suite, one case per scenario."""
    cases = []
    for r in results:
        case = core.JUnitCase("gradcli.stress", r.name, r.seconds)
        if not r.ok:
            msgs = r.failures or [f"{r.leaked_threads} thread(s) leaked"]
            case.failure = "\n".join(msgs[:50])
        cases.append(case)
    return [core.JUnitSuite("gradcli.stress", cases)]
