"""The CLI core: what every ``gradcli`` command shares.

Exit codes (each means one thing):

- 0 success;
- 1 a check failed (``validate``, ``stress``);
- 2 invalid input or usage (a bad graph file, a bad option, an unwritable
  output path);
- 3 the backward raised, or gradcli itself failed (an internal error);
- 130 interrupted (Ctrl-C), as shells report SIGINT.

Everything the commands print goes through this module: ``fail`` (one
``gradcli: error:`` line on stderr), ``echo`` and ``print_table`` (stdout),
so that control characters in names, ids and messages are escaped in one
place (``clean``) and no text is read as rich markup (the console is made
with ``markup=False``). ``dumps`` is the one JSON writer (see Note [JSON
numbers]); ``write_junit`` the one JUnit XML writer.

This module imports neither NumPy nor the engine: ``gradcli --help`` stays
light. Command modules import it; it never imports them.
"""
from __future__ import annotations

import math
import re
import sys

import click

from ..records import FrozenRecord, Record     # not dataclasses (Note [Record classes])

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_INVALID = 2
EXIT_BACKWARD = 3
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

#: The longest message one error line may carry; longer ones are cut (with a count).
MAX_MESSAGE_CHARS = 2000
#: Above this many rows a table is printed by ``_plain_table`` (rich is too slow).
RICH_TABLE_MAX_ROWS = 1000


# -- text hygiene ------------------------------------------------------------------------------
# Note [Escaping what we print]
# Names, ids, the graph name and `fail` messages come from the graph file. A
# terminal acts on control characters (ESC starts colour codes and OSC
# sequences that set the window title; CR rewrites the line), so every C0 and
# C1 control character, DEL, the bidi overrides, lone surrogates (which
# cannot be encoded) and the line and paragraph separators U+2028/U+2029 (a
# line break to str.splitlines and to log readers) are shown as Python-style escapes (``\x1b``, ``\u202e``)
# instead. Applied to everything printed as text; JSON output is escaped by
# json.dumps itself (ensure_ascii).
# The pattern is compiled (and cached by ``re``) on the first text that needs it:
# printable ASCII, the common case, has nothing to escape.
_UNSAFE = "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _escape_char(m):
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text) -> str:
    """``text`` with every control character shown as an escape (Note [Escaping what we print])."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return re.sub(_UNSAFE, _escape_char, text)


def _clean_cell(text):
    text = str(text)
    return text if text.isprintable() and text.isascii() else clean(text)


def clean_line(text) -> str:
    """One line: escaped, newlines shown, and at most MAX_MESSAGE_CHARS long."""
    text = clean(text)
    if len(text) > MAX_MESSAGE_CHARS:
        cut = len(text) - MAX_MESSAGE_CHARS
        text = f"{text[:MAX_MESSAGE_CHARS]}... ({cut} more characters)"
    return text


def short_list(items, limit=10) -> str:
    """``a, b, c`` for the first ``limit`` items, then ``... and N more``."""
    items = [str(i) for i in items]
    head = ", ".join(items[:limit])
    return head if len(items) <= limit else f"{head}, ... and {len(items) - limit} more"


# -- output --------------------------------------------------------------------------------------
class CliExit(SystemExit):
    """Raised by ``fail``: the message has been printed; exit with ``code``."""


def error_line(message) -> None:
    """Print one ``gradcli: error:`` line on stderr (never raises)."""
    _write_stderr(f"gradcli: error: {clean_line(message)}\n")


def _write_stderr(text):
    try:
        if sys.stderr is not None:
            sys.stderr.write(text)
            sys.stderr.flush()
    except (OSError, ValueError):
        pass  # nowhere left to report to; the exit code still says it


def fail(message, code=EXIT_INVALID):
    """Print ``message`` as one error line and exit with ``code``."""
    error_line(message)
    raise CliExit(code)


def echo(text="", err=False) -> None:
    """Print text (lines of it), escaped (Note [Escaping what we print])."""
    click.echo("\n".join(clean(line) for line in str(text).split("\n")), err=err)


def progress(text) -> None:
    """A progress line on stderr."""
    echo(text, err=True)


def console(err=False):
    """The one rich console set-up (stdout, or stderr with ``err``): no markup,
    no highlighting, no emoji codes; piped output gets a wide fixed width so
    that columns are not cut."""
    from rich.console import Console

    file = sys.stderr if err else sys.stdout
    return Console(file=file, markup=False, highlight=False, emoji=False, soft_wrap=False,
                   width=None if file.isatty() else PIPE_WIDTH)


class Column(Record):
    _fields = ("name", "justify", "fold")

    def __init__(self, name: str, justify: str = "left", fold: bool = False):
        self.name = name
        self.justify = justify      # left or right
        self.fold = fold            # wrap long cells (rich only)


def print_table(title, columns, rows, *, styles=None) -> None:
    """Print a table: rich for up to RICH_TABLE_MAX_ROWS rows, a plain
    renderer with the same look above (rich takes minutes for 100,000 rows).
    Every cell is escaped; ``styles`` maps a row index to a {column: style}."""
    columns = [c if isinstance(c, Column) else Column(c) for c in columns]
    rows = [[_clean_cell(cell) for cell in row] for row in rows]
    title = clean(title)
    if len(rows) > RICH_TABLE_MAX_ROWS:
        click.echo(_plain_table(title, columns, rows))
        return
    if styles is None and _plain_is_rich(sys.stdout):
        # Not a terminal: the plain renderer draws what rich would (no colour, a
        # fixed width of 160), without importing rich, when the table fits.
        text = _plain_table(title, columns, rows)
        lines = text.split("\n")
        width = len(lines[1])
        if width <= PIPE_WIDTH and title.isascii():
            lines[0:1] = _title_lines(title, width)
            click.echo("\n".join(lines))
            return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for c in columns:
        table.add_column(c.name, justify=c.justify, overflow="fold" if c.fold else "ellipsis")
    for i, row in enumerate(rows):
        style = (styles or {}).get(i, {})
        table.add_row(*(Text(cell, style=style.get(c.name, "")) for c, cell in zip(columns, row)))
    console().print(table)


PIPE_WIDTH = 160      # console(): the width rich draws at when not writing to a terminal


def _plain_is_rich(file) -> bool:
    """True when rich would draw to ``file`` without colour or terminal width (not a
    terminal, and no environment variable that makes rich act as one)."""
    import os

    try:
        if file.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    return not any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE",
                                                "TTY_INTERACTIVE", "COLUMNS"))


def _title_lines(title, width) -> list:
    """A table's title (printable ASCII) as rich draws it left-justified over a table
    ``width`` cells wide: rich's words (spaces, a run of non-spaces, the spaces after
    it) fill each line; a word longer than the width is cut into pieces of the width
    (rich's "fold"); every line is cut or padded to the width; no title, no line."""
    if not title:
        return []
    breaks = []
    used = 0                         # cells taken on the current line
    for word in re.finditer(r" *[^ ]+ *", title):
        start, text = word.start(), word.group()
        length = len(text.rstrip())
        if width - used >= length:
            used += len(text)
        elif length > width:
            pieces = [text[k:k + width] for k in range(0, len(text), width)]
            for k, piece in enumerate(pieces):
                if start:
                    breaks.append(start)
                if k == len(pieces) - 1:
                    used = len(piece)
                else:
                    start += len(piece)
        elif used and start:
            breaks.append(start)
            used = len(text)
    bounds = [0, *breaks, len(title)]
    return [title[a:b][:width].ljust(width) for a, b in zip(bounds, bounds[1:])]


def _plain_table(title, columns, rows) -> str:
    """The table as rich draws it (heavy head rule, light box), without wrapping."""

    def width(cell):
        if cell.isascii():
            return len(cell)
        from rich.cells import cell_len  # noqa: PLC0415 - wide characters only
        return cell_len(cell)

    widths = [width(c.name) for c in columns]
    for row in rows:
        for k, cell in enumerate(row):
            n = width(cell)
            if n > widths[k]:
                widths[k] = n

    def line(cells):
        parts = []
        for c, cell, w in zip(columns, cells, widths):
            pad = " " * (w - width(cell))
            parts.append(f" {pad}{cell} " if c.justify == "right" else f" {cell}{pad} ")
        return "│" + "│".join(parts) + "│"

    rule = lambda left, mid, right, ch: left + mid.join(ch * (w + 2) for w in widths) + right  # noqa: E731
    out = [title, rule("┏", "┳", "┓", "━"),
           line([c.name for c in columns]).replace("│", "┃"), rule("┡", "╇", "┩", "━")]
    out.extend(line(row) for row in rows)
    out.append(rule("└", "┴", "┘", "─"))
    return "\n".join(out)


# -- JSON ------------------------------------------------------------------------------------------
# Note [JSON numbers]
# JSON has no NaN or Infinity: json.dumps would write the bare words NaN and
# Infinity, which strict readers (jq, JSON.parse) refuse. Every ``--format
# json`` document and ``--out FILE.json`` therefore writes non-finite floats as
# the strings "nan", "inf" and "-inf" (the spelling validate already used for
# its error figures), and json.dumps runs with allow_nan=False so that a
# non-finite float that slipped past is a bug, never invalid output.
def json_safe(obj):
    """``obj`` with every non-finite float replaced (Note [JSON numbers])."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def dumps(obj) -> str:
    """JSON text of ``obj`` (Note [JSON numbers]); the common all-finite case
    is written without a copy."""
    import json  # noqa: PLC0415 - only for JSON output (a YAML graph's table run needs none)

    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        return json.dumps(json_safe(obj), allow_nan=False)


# -- files we write ----------------------------------------------------------------------------------
def write_text(option, path, text) -> None:
    """Write an output file named by ``option`` (``--junit`` ...); an OS error is one line, exit 2."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        fail(f"{option} {path}: {exc.strerror or exc}", EXIT_INVALID)


def check_writable(option, path) -> None:
    """Refuse an output path whose folder is missing or read-only before any
    work is done (a long stress run must not end on a typo); write_text still
    reports what only writing can find out."""
    import os

    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        fail(f"{option} {path}: No such file or directory", EXIT_INVALID)
    if not os.access(folder, os.W_OK | os.X_OK) or (
            os.path.exists(path) and not os.access(path, os.W_OK)):
        fail(f"{option} {path}: Permission denied", EXIT_INVALID)


class JUnitCase(Record):
    """One testcase. At most one of failure, error or skipped is set."""
    _fields = ("classname", "name", "time_s", "failure", "failure_type", "error", "error_type",
               "skipped", "system_out")

    def __init__(self, classname: str, name: str, time_s: float = 0.0,
                 failure: str | None = None, failure_type: str = "", error: str | None = None,
                 error_type: str = "", skipped: str | None = None,
                 system_out: str | None = None):
        self.classname = classname
        self.name = name
        self.time_s = time_s
        self.failure = failure          # the failure's text (its first line is the message)
        self.failure_type = failure_type
        self.error = error
        self.error_type = error_type
        self.skipped = skipped
        self.system_out = system_out


class JUnitSuite(Record):
    _fields = ("name", "cases", "file")

    def __init__(self, name: str, cases: list, file: str | None = None):
        self.name = name
        self.cases = cases
        self.file = file


def junit_xml(name, suites) -> str:
    """JUnit XML: ``<testsuites>`` with one ``<testsuite>`` per suite, totals on both."""
    import xml.etree.ElementTree as ET

    def first_line(text):
        lines = str(text).splitlines()
        return lines[0] if lines else ""

    root = ET.Element("testsuites", name=name)
    totals = dict(tests=0, failures=0, errors=0, skipped=0)
    total_time = 0.0
    for s in suites:
        attrs = {"name": _xml_text(s.name)}
        if s.file is not None:
            attrs["file"] = _xml_text(s.file)
        suite = ET.SubElement(root, "testsuite", attrs)
        counts = dict(tests=0, failures=0, errors=0, skipped=0)
        suite_time = 0.0
        for c in s.cases:
            case = ET.SubElement(suite, "testcase", classname=_xml_text(c.classname),
                                 name=_xml_text(c.name), time=f"{c.time_s:.6f}")
            counts["tests"] += 1
            suite_time += c.time_s
            if c.failure is not None:
                el = ET.SubElement(case, "failure", message=_xml_text(first_line(c.failure)),
                                   type=c.failure_type)
                el.text = _xml_text(c.failure)
                counts["failures"] += 1
            elif c.error is not None:
                el = ET.SubElement(case, "error", message=_xml_text(first_line(c.error)),
                                   type=c.error_type)
                el.text = _xml_text(c.error)
                counts["errors"] += 1
            elif c.skipped is not None:
                ET.SubElement(case, "skipped", message=_xml_text(c.skipped))
                counts["skipped"] += 1
            if c.system_out is not None:
                ET.SubElement(case, "system-out").text = _xml_text(c.system_out)
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        suite.set("time", f"{suite_time:.6f}")
        total_time += suite_time
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{total_time:.6f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _xml_text(text):
    # XML 1.0 cannot hold most control characters at all, even escaped: they
    # are shown as escapes (Note [Escaping what we print]); line breaks stay.
    return "\n".join(clean(line) for line in str(text).split("\n"))


def write_junit(path, name, suites) -> None:
    write_text("--junit", path, junit_xml(name, suites))


# -- options -----------------------------------------------------------------------------------------
class FiniteFloat(click.ParamType):
    """A float in [lo, hi], refusing nan and inf (click.FloatRange lets nan through)."""
    name = "float"

    def __init__(self, lo=None, hi=None, lo_open=False):
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            x = value
        else:
            try:
                x = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.lo is not None and (x < self.lo or (self.lo_open and x == self.lo)):
            self.fail(f"{value!r} must be {'>' if self.lo_open else '>='} {self.lo:g}", param, ctx)
        if self.hi is not None and x > self.hi:
            self.fail(f"{value!r} must be <= {self.hi:g}", param, ctx)
        return x


class LoadOptions(FrozenRecord):
    """How graph files are read: the options every command that reads them takes."""
    __slots__ = _fields = ("device_map", "allow_code", "allow_outside_paths", "max_tensor_bytes",
                           "max_document_bytes", "max_graph_bytes")

    def __init__(self, device_map: dict | None = None, allow_code: bool = False,
                 allow_outside_paths: bool = False, max_tensor_bytes: int | None = None,
                 max_document_bytes: int | None = None, max_graph_bytes: int | None = None):
        init = object.__setattr__
        init(self, "device_map", {} if device_map is None else device_map)
        init(self, "allow_code", allow_code)
        init(self, "allow_outside_paths", allow_outside_paths)
        init(self, "max_tensor_bytes", max_tensor_bytes)
        init(self, "max_document_bytes", max_document_bytes)
        init(self, "max_graph_bytes", max_graph_bytes)

    def __reduce__(self):
        # To worker processes and cluster workers (--jobs, --scheduler): the frozen
        # record is rebuilt through __init__ (pickle's default would set each slot).
        return (type(self), tuple(getattr(self, f) for f in self._fields))

    def load(self, path):
        """``gradcli.loader.load`` with these options (GraphError propagates)."""
        from ..collector import paused

        # the imports and the load; the loaded graph lives as long as the command
        with paused(freeze=True), loading_status(path):     # (Note [Collector pauses])
            from .. import loader

            return loader.load(path, device_map=self.device_map, allow_code=self.allow_code,
                               allow_outside_paths=self.allow_outside_paths,
                               max_tensor_bytes=self.max_tensor_bytes,
                               max_document_bytes=self.max_document_bytes,
                               max_graph_bytes=self.max_graph_bytes)

    def load_or_exit(self, path):
        """Load ``path``; an invalid file is one error line and exit 2."""
        from ..errors import GraphError, OpBugError

        try:
            return self.load(path)
        except GraphError as exc:
            fail(str(exc), EXIT_INVALID)
        except OpBugError as exc:
            fail(str(exc), EXIT_BACKWARD)


def run_graph(graph, *, inputs, retain_graph, repeat, multithreading, deterministic=False,
              anomaly=None, order=True):
    """Run ``graph`` ``repeat`` times; returns the last Result with the median
    backward time (its ``order`` None with ``order=False``: only ``nodes_run``).
    Invalid input exits 2, a failing backward exits 3."""
    from ..errors import BackwardError, GraphError, OpBugError

    try:
        if retain_graph and repeat > 1:
            # One forward, N backwards on the retained graph: gradients add up.
            result = graph.run(inputs=inputs, retain_graph=True, multithreading=multithreading,
                               deterministic=deterministic, anomaly=anomaly, order=order)
            times = [result.backward_s]
            for _ in range(repeat - 1):
                grads, ran, elapsed = graph.backward(
                    inputs=inputs, retain_graph=True, multithreading=multithreading,
                    deterministic=deterministic, anomaly=anomaly, order=order)
                times.append(elapsed)
                result.grads = grads
                if order:
                    result.order, result.nodes_run = ran, len(ran)
                else:
                    result.nodes_run = ran
        else:
            from ..collector import paused

            times, fwd = [], []
            for k in range(repeat):
                # the last run's graph lives until the command ends (Note [Collector pauses])
                with paused(freeze=k == repeat - 1):
                    result = graph.run(inputs=inputs, retain_graph=retain_graph or None,
                                       multithreading=multithreading,
                                       deterministic=deterministic, anomaly=anomaly,
                                       order=order)
                times.append(result.backward_s)
                fwd.append(result.forward_s)
            result.forward_s = _median(fwd)
        result.backward_s = _median(times)
        return result
    except GraphError as exc:
        fail(str(exc), EXIT_INVALID)
    except (BackwardError, OpBugError) as exc:
        fail(str(exc), EXIT_BACKWARD)


def _median(values):
    """statistics.median, imported only when there is more than one value."""
    if len(values) == 1:
        return values[0]
    import statistics  # noqa: PLC0415

    return statistics.median(values)


def _device_map(ctx, param, value):
    from ..loader import parse_device_map

    try:
        return parse_device_map(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def load_options(fn):
    """Options every command that reads graph files takes, given to it as one
    ``load: LoadOptions`` argument."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, device_map, allow_code, allow_outside_paths, max_tensor_bytes,
                max_document_bytes, max_graph_bytes, **kwargs):
        return fn(*args, load=LoadOptions(device_map, allow_code, allow_outside_paths,
                                          max_tensor_bytes, max_document_bytes, max_graph_bytes),
                  **kwargs)

    wrapper = click.option("--device-map", callback=_device_map, default="", metavar="SRC=DST",
                           help="Remap device types, e.g. cuda=sim to run CUDA graphs on "
                                "simulated devices.")(wrapper)
    wrapper = click.option("--allow-code", is_flag=True,
                           help="Allow `custom` ops to run user code (imported from the graph's "
                                "folder, then sys.path); without it such graphs are refused "
                                "before anything is imported.")(wrapper)
    wrapper = click.option("--allow-outside-paths", is_flag=True,
                           help="Allow `file:` paths outside the graph file's folder.")(wrapper)
    wrapper = click.option("--max-tensor-bytes", type=click.IntRange(min=1), default=None,
                           help="Refuse tensors larger than this (default: a quarter of RAM).")(wrapper)
    wrapper = click.option("--max-document-bytes", type=click.IntRange(min=1), default=None,
                           help="Memory the parsed graph document may take (default 4 GiB; "
                                "a million-op graph needs about 2 GiB).")(wrapper)
    wrapper = click.option("--max-graph-bytes", type=click.IntRange(min=1), default=None,
                           help="Refuse graphs whose tensors add up to more than this "
                                "(default: half of RAM).")(wrapper)
    return wrapper


def graph_path_type():
    return click.Path(dir_okay=False)


# -- --jobs and --scheduler ------------------------------------------------------------------------
#: Seconds a --scheduler gets to answer before the command gives up (--connect-timeout).
DEFAULT_CONNECT_TIMEOUT_S = 10.0


def distribute_options(fn):
    """``--jobs N``, ``--scheduler tcp://HOST:PORT`` and ``--connect-timeout``, given to
    the command as one ``dist: Distribute`` argument."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, jobs, scheduler, connect_timeout, **kwargs):
        if jobs is not None and scheduler is not None:
            fail("--jobs and --scheduler cannot be given together", EXIT_INVALID)
        return fn(*args, dist=Distribute(jobs, scheduler, connect_timeout), **kwargs)

    wrapper = click.option(
        "--connect-timeout", type=FiniteFloat(0.1, 3600), default=DEFAULT_CONNECT_TIMEOUT_S,
        show_default=True, metavar="SECONDS",
        help="With --scheduler: give up (exit 2) when the scheduler has not answered, "
             "or no worker has joined, within this time.")(wrapper)
    wrapper = click.option(
        "--scheduler", default=None, metavar="tcp://HOST:PORT",
        help="Run each graph file as a task on this Dask cluster (the gradcli[dask] extra); "
             "files and their `file:` data travel with the task.")(wrapper)
    wrapper = click.option(
        "--jobs", "-j", type=click.IntRange(min=0), default=None, metavar="N",
        help="Run the graph files in N spawned worker processes (0: one per core); "
             "results keep the input order.")(wrapper)
    return wrapper


class Distribute(FrozenRecord):
    """Where the files of one command run: here (jobs None), in worker processes, on a cluster."""
    __slots__ = _fields = ("jobs", "scheduler", "connect_timeout")

    def __init__(self, jobs=None, scheduler=None, connect_timeout=DEFAULT_CONNECT_TIMEOUT_S):
        init = object.__setattr__
        init(self, "jobs", jobs)
        init(self, "scheduler", scheduler)
        init(self, "connect_timeout", connect_timeout)

    @property
    def serial(self):
        return self.jobs is None and self.scheduler is None

    def map(self, fn, paths, args, load: LoadOptions, *, label="files"):
        """``[Outcome of fn(path, *args)]`` for every path, in the order of ``paths``, on
        worker processes or the cluster; a progress bar on a terminal's stderr.
        A cluster that cannot be reached is one error line and exit 2.

        >>> Distribute(jobs=2).map(validate_file, ["a.yaml"], (Options(), load.load), load)
        ... # doctest: +SKIP
        """
        with progress_bar(len(paths), label) as advance:
            if self.scheduler is not None:
                from .. import cluster

                try:
                    return cluster.map_files(fn, paths, args, self.scheduler, load=load,
                                             connect_timeout=self.connect_timeout,
                                             on_done=advance)
                except cluster.ClusterError as exc:
                    fail(str(exc), EXIT_INVALID)
            from .. import parallel

            return parallel.map_ordered(fn, [(p, *args) for p in paths],
                                        parallel.resolve_jobs(self.jobs),
                                        on_done=advance, describe=lambda item: item[0])


#: A graph file at least this large shows a "loading" status on a terminal's stderr.
LOAD_STATUS_BYTES = 16 << 20


class loading_status:
    """While a large graph file loads: a transient spinner naming it on stderr, when
    stderr is a terminal (a million-op file takes tens of seconds); nothing otherwise."""

    def __init__(self, path):
        self.path, self._status = path, None

    def __enter__(self):
        import os

        try:
            size = os.stat(self.path).st_size
        except (OSError, TypeError, ValueError):
            return self
        if size >= LOAD_STATUS_BYTES and _is_terminal(sys.stderr):
            self._status = console(err=True).status(
                clean(f"loading {self.path} ({size / (1 << 20):.0f} MiB)"))
            self._status.__enter__()
        return self

    def __exit__(self, *exc):
        if self._status is not None:
            self._status.__exit__(*exc)
        return False


class progress_bar:
    """A context giving ``advance(done, total)``: a transient progress bar on stderr when
    it is a terminal, nothing at all when it is not (piped, CI logs).

    >>> with progress_bar(10, "validate") as advance:
    ...     advance(1, 10)
    """

    def __init__(self, total, label):
        self.total, self.label, self._bar = total, label, None

    def __enter__(self):
        if not _is_terminal(sys.stderr) or self.total < 2:
            return lambda done, total: None
        from rich.progress import Progress

        self._bar = Progress(console=console(err=True), transient=True)
        self._bar.__enter__()
        task = self._bar.add_task(clean(self.label), total=self.total)
        return lambda done, total: self._bar.update(task, completed=done)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False


def _is_terminal(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False
