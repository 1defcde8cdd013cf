"""Checks for tests written by hand: ``assert_backward_matches(path)`` runs what
``gradcli validate PATH`` runs and fails the way it prints a failure.

>>> from gradcli.testing import assert_backward_matches
>>> report = assert_backward_matches("graphs/diamond.yaml")      # doctest: +SKIP
>>> report.status                                                # doctest: +SKIP
'pass'

The options are those of ``gradcli validate``, as keyword arguments:
``numeric``, ``fast``, ``eps``, ``atol``, ``rtol``, ``check_order``, ``repeat``,
``multithreading``, ``detect_anomaly``, ``check_inf``, and the load options
``device_map`` (``"cuda=sim"`` or a dict), ``allow_code``, ``allow_outside_paths``,
``max_tensor_bytes``, ``max_document_bytes``, ``max_graph_bytes``.
"""
from __future__ import annotations

import os

#: The options of ``gradcli.validate.Options`` a caller may give.
CHECK_OPTIONS = ("numeric", "fast", "eps", "atol", "rtol", "check_order", "repeat",
                 "multithreading", "detect_anomaly", "check_inf")
#: The load options (``gradcli validate --device-map ...``).
LOAD_OPTIONS = ("device_map", "allow_code", "allow_outside_paths", "max_tensor_bytes",
                "max_document_bytes", "max_graph_bytes")


class BackwardMismatch(AssertionError):
    """A graph file failed ``validate``; the message is what ``validate`` prints of it."""

    def __init__(self, message, report):
        super().__init__(message)
        self.report = report


def validate_path(path, **options):
    """``gradcli validate PATH`` in process: the FileReport (nothing raised for a
    failing or invalid file). Unknown options are a TypeError.

    >>> validate_path("graphs/diamond.yaml", device_map="cuda=sim").status  # doctest: +SKIP
    'pass'
    """
    from .validate import Options, validate_file

    unknown = sorted(set(options) - set(CHECK_OPTIONS) - set(LOAD_OPTIONS))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; the options are "
                        f"{', '.join(CHECK_OPTIONS + LOAD_OPTIONS)}")
    check = {k: v for k, v in options.items() if k in CHECK_OPTIONS}
    if check.get("fast"):
        check["numeric"] = True        # as validate --fast
    load = {k: v for k, v in options.items() if k in LOAD_OPTIONS}
    if isinstance(load.get("device_map"), str):
        from .loader import parse_device_map

        load["device_map"] = parse_device_map(load["device_map"])
    return validate_file(os.fspath(path), Options(**check), _loader(load))


def _loader(options):
    def load(path):
        from .collector import paused
        from .loader import load as load_graph

        with paused():
            return load_graph(path, **options)

    return load


def failure_text(report) -> str:
    """What ``gradcli validate`` prints of a file that did not pass: each failing check
    in full (its first difference), then the file's summary line."""
    from .cli.cmd_validate import FAIL, summary_line
    from .cli.core import clean_line

    lines = [clean_line(f"{c.name}: {c.message}") for c in report.checks if c.status == FAIL]
    lines.append(clean_line(summary_line(report)))
    return "\n".join(lines)


def assert_backward_matches(path, **options):
    """Validate the graph file ``path`` (its ``expect`` section, and the options of
    ``gradcli validate``); raise ``BackwardMismatch`` (an AssertionError) with the
    failing checks as ``validate`` prints them. Returns the FileReport when it passes.

    >>> assert_backward_matches("graphs/mlp.yaml", numeric=True)   # doctest: +SKIP
    """
    report = validate_path(path, **options)
    if report.status != "pass":
        raise BackwardMismatch(failure_text(report), report)
    return report
