"""The ``gradcli`` command line: a thin layer over ``gradcli.load`` and ``Graph``.

``main`` is the click group; each command lives in its own module
(``cmd_run``, ``cmd_order``, ``cmd_validate``, ``cmd_stress``) and depends
only on the CLI core (``core``: options, exit codes, output, JSON, JUnit).
``GradcliGroup.main`` is the top-level guard: whatever a command raises ends
as one line on stderr and an exit code (see ``core`` for their meanings);
the traceback of an internal error is printed only with ``--debug``.
"""
from __future__ import annotations

import errno
import os
import sys
import warnings

import click

from .._version import __version__
from ..collector import paused
from . import core


class _State:
    debug = False


_state = _State()


# Each command's module, imported when the command is looked up (``gradcli run``
# imports cmd_run only; ``gradcli --help`` imports them all for their help lines).
_COMMANDS = {"run": "cmd_run", "order": "cmd_order", "validate": "cmd_validate",
             "stress": "cmd_stress", "ops": "cmd_ops", "export": "cmd_export",
             "import": "cmd_import"}


class GradcliGroup(click.Group):
    """A click group whose ``main`` never lets an exception or a multi-line
    usage message out: one ``gradcli: ...`` line and an exit code instead.
    Its commands load lazily (``_COMMANDS``): start-up imports only what runs."""

    def list_commands(self, ctx):
        return sorted(set(self.commands) | set(_COMMANDS))

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            import importlib  # noqa: PLC0415

            with paused():            # start-up (Note [Collector pauses])
                module = importlib.import_module(f".{_COMMANDS[cmd_name]}", __name__)
            self.add_command(getattr(module, cmd_name, None) or getattr(module, cmd_name + "_"))
        return self.commands.get(cmd_name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             windows_expand_args=True, **extra):
        args = sys.argv[1:] if args is None else list(args)
        sys.exit(_guarded(self, args, prog_name or "gradcli", extra))


def _guarded(group, args, prog_name, extra) -> int:
    _state.debug = False
    if sys.stdout is None:
        core.error_line("standard output is closed")
        return core.EXIT_INVALID
    with warnings.catch_warnings():
        # NumPy's "overflow encountered in exp" and friends: PyTorch does not
        # warn on IEEE results either; a NaN that matters is for --detect-anomaly.
        warnings.simplefilter("ignore", RuntimeWarning)
        code = _invoke(group, args, prog_name, extra)
    try:
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        return _stdout_failed(exc)
    return code


def _invoke(group, args, prog_name, extra) -> int:
    try:
        # Parsing the arguments imports the command and what its options need:
        # start-up work, with the collector paused (Note [Collector pauses]).
        with paused():
            ctx = group.make_context(prog_name, args, **extra)
        with ctx:
            group.invoke(ctx)
        return core.EXIT_OK
    except click.exceptions.Exit as exc:                # --help, --version
        return exc.exit_code
    except SystemExit as exc:                           # core.fail, a command's exit code
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except click.ClickException as exc:                 # usage errors, bad option values
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        core.error_line(exc.format_message() + hint)
        return core.EXIT_INVALID
    except (KeyboardInterrupt, click.exceptions.Abort):
        core._write_stderr("gradcli: interrupted\n")
        return core.EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno in _STDOUT_ERRNOS:
            return _stdout_failed(exc)
        return _internal_error(exc)
    except Exception as exc:  # noqa: BLE001 - the top-level guard
        from ..errors import BackwardError, GraphError, OpBugError

        if isinstance(exc, GraphError):
            core.error_line(str(exc))
            return core.EXIT_INVALID
        if isinstance(exc, (BackwardError, OpBugError)):
            core.error_line(str(exc))
            return core.EXIT_BACKWARD
        return _internal_error(exc)


# Files the commands write report their own OSErrors (core.write_text): a
# closed pipe or a full device that reaches the guard is standard output.
_STDOUT_ERRNOS = (errno.EPIPE, errno.ENOSPC)


def _stdout_failed(exc) -> int:
    """Standard output cannot be written (a closed pipe, /dev/full): say so once
    and point fd 1 at /dev/null so that the interpreter's exit does not complain
    again. A closed pipe (`gradcli run ... | head`) is quiet, as with SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    if getattr(exc, "errno", None) == errno.EPIPE:
        return 128 + 13
    core.error_line(f"cannot write to standard output: {getattr(exc, 'strerror', None) or exc}")
    return core.EXIT_INVALID


def _internal_error(exc) -> int:
    if _state.debug:
        import traceback  # noqa: PLC0415 - only for --debug

        core._write_stderr("".join(traceback.format_exception(exc)))
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    hint = "" if _state.debug else " (run with --debug for the traceback)"
    core._write_stderr(f"gradcli: internal error: {core.clean_line(message)}{hint}\n")
    return core.EXIT_INTERNAL


@click.group("gradcli", cls=GradcliGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gradcli")
@click.option("--debug", is_flag=True,
              help="Print the traceback of an internal error (a bug in gradcli).")
def main(debug):
    """Run and check backward passes of serialized computation graphs.

    Graph files (YAML or JSON) follow docs/graph-format.md. Exit status: 0
    success, 1 a check failed, 2 invalid input or usage, 3 the backward
    raised or an internal error, 130 interrupted.
    """
    _state.debug = debug


