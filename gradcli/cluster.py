"""``--scheduler tcp://HOST:PORT``: graph files as tasks on a Dask cluster
(``dask.distributed``, the ``gradcli[dask]`` extra, imported only here and only
when a scheduler is given).

``map_files(fn, paths, args, address)`` returns what ``parallel.map_ordered``
returns (one ``Outcome`` per path, in input order), with ``fn(path, *args)`` run
on the cluster's workers.

Note [Files travel with the task]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Workers need no shared filesystem: each task carries a ``Bundle``, the graph
file's bytes and those of the ``file:`` data it references (read here, with
the load options' limits: regular files only, no more than the graph's
memory budget in all, nothing outside the graph's folder without
``--allow-outside-paths``). The worker writes them into a fresh temporary
folder, in the same places relative to the graph file, runs ``fn`` on that
copy and deletes it. The loader then refuses and accepts exactly what it
would here. What the task returns names the copy; every string in it that
names the copy is rewritten to the original path (``relabel``), so the
verdicts, the messages and the file names are those of a local run. An
absolute ``file:`` path is not shipped: the worker reads it from its own
filesystem (and only with ``--allow-outside-paths``).

Note [A scheduler that does not answer]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``distributed.Client(address, timeout=T)`` gives up on a closed port after T,
but it waits forever on a socket that accepts and says nothing, and on a
server that is not Dask it reads the first bytes as a frame length (and may
try to allocate exabytes). So before the client, ``probe`` connects itself and
reads the scheduler's handshake within the deadline: a Dask comm sends a
little-endian 8-byte length, then a msgpack map naming ``pickle-protocol``.
Anything else is "not a Dask scheduler". The client itself then starts on a
daemon thread that is waited for no longer than the deadline.

Note [A lost worker is retried once]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
When a worker dies the scheduler first reschedules its tasks itself, up to
its ``distributed.scheduler.allowed-failures``; after that the task ends in
``KilledWorker``. gradcli then submits it once more, as a new task; a second
loss is that file's error (exit 3, as a crash of a local run), never a wait.
If every worker leaves, the run waits ``connect_timeout`` for one to join and
then fails the files still to run, so a dead cluster cannot hang a CI job.
"""
from __future__ import annotations

import os
import stat
import time

from .errors import GraphError
from .parallel import Outcome, unfreeze

#: How often the wait for results checks that the cluster still has workers.
POLL_S = 0.5
#: How often finished tasks are looked for.
TICK_S = 0.02
#: The size of a Dask handshake is a few dozen bytes; more is not a Dask comm.
_MAX_HANDSHAKE = 1 << 16


class ClusterError(RuntimeError):
    """The cluster cannot be used (one line: what, where, why)."""


class WorkerLostTwice(RuntimeError):
    """A file's task lost its worker, and lost it again when retried."""


class Bundle:
    """A graph file and the data it references, as bytes (Note [Files travel with the task]).
    ``files`` maps paths relative to the graph's folder to their bytes; ``depth`` is how
    many folders up (``..``) the furthest of them reaches."""
    __slots__ = ("path", "name", "graph", "files", "depth")

    def __init__(self, path, name, graph, files, depth):
        self.path, self.name, self.graph, self.files, self.depth = path, name, graph, files, depth

    def __getstate__(self):
        return (self.path, self.name, self.graph, self.files, self.depth)

    def __setstate__(self, state):
        self.path, self.name, self.graph, self.files, self.depth = state


def _regular_bytes(path, limit):
    """The bytes of a regular file no larger than ``limit``; None otherwise (the
    loader on the worker then says what is wrong, as it would here)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)[:limit]
    except OSError:
        return None


def _file_refs(data, out):
    """Every ``file:`` string in a parsed graph document."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("file")
            if isinstance(ref, str) and ref and "\x00" not in ref:
                out.add(ref)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def make_bundle(path, load=None) -> Bundle:
    """Read ``path`` and the data it references for a cluster task.

    >>> b = make_bundle("graphs/models/mlp/graph.yaml")     # doctest: +SKIP
    >>> sorted(b.files)                                     # doctest: +SKIP
    ['weights.npz']
    """
    from .document import DEFAULT_MAX_DOCUMENT_BYTES, read_document

    allow_outside = bool(getattr(load, "allow_outside_paths", False))
    budget = getattr(load, "max_graph_bytes", None)
    if budget is None:
        from .loader import default_max_graph_bytes

        budget = default_max_graph_bytes()
    doc_limit = getattr(load, "max_document_bytes", None) or DEFAULT_MAX_DOCUMENT_BYTES
    path = os.fspath(path)
    graph = _regular_bytes(path, doc_limit)
    files, depth = {}, 0
    if graph is not None:
        try:
            refs = _file_refs(read_document(path, max_bytes=doc_limit).data, set())
        except (GraphError, MemoryError, RecursionError):
            refs = set()        # the worker's loader reports it, as a local run would
        base = os.path.dirname(os.path.abspath(path))
        used = 0
        for ref in sorted(refs):
            rel = os.path.normpath(ref)
            if os.path.isabs(rel):
                continue        # read on the worker (Note [Files travel with the task])
            full = os.path.join(base, rel)
            real_base = os.path.realpath(base)
            if not allow_outside and os.path.commonpath(
                    [real_base, os.path.realpath(full)]) != real_base:
                continue        # refused by the loader, here and there
            data = _regular_bytes(full, budget - used)
            if data is None:
                continue
            used += len(data)
            files[rel] = data
            ups = 0
            for part in rel.split(os.sep):
                if part != "..":
                    break
                ups += 1
            depth = max(depth, ups)
    return Bundle(path, os.path.basename(path) or "graph", graph, files, depth)


def relabel(value, old, new):
    """``value`` with ``old`` replaced by ``new`` in every string it holds (lists,
    tuples, dicts and the attributes of plain objects, recursively).

    >>> relabel(["/tmp/t/g/a.yaml:3: bad"], "/tmp/t/g/a.yaml", "a.yaml")
    ['a.yaml:3: bad']
    """
    if isinstance(value, str):
        return value.replace(old, new) if old in value else value
    if isinstance(value, list):
        return [relabel(v, old, new) for v in value]
    if isinstance(value, tuple):
        return tuple(relabel(v, old, new) for v in value)
    if isinstance(value, dict):
        return {relabel(k, old, new): relabel(v, old, new) for k, v in value.items()}
    if hasattr(value, "__dict__") and not isinstance(value, type):
        for k, v in vars(value).items():
            try:
                setattr(value, k, relabel(v, old, new))
            except AttributeError:
                pass
    return value


def run_bundle(fn, bundle: Bundle, args):
    """On a worker: write ``bundle`` to a temporary folder, return ``fn(copy, *args)``
    with the copy's path replaced by the original one.

    >>> run_bundle(os.path.basename, make_bundle("graphs/diamond.yaml"), ())   # doctest: +SKIP
    'graphs/diamond.yaml'
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gradcli-task-") as tmp:
        folder = os.path.join(tmp, *(["d"] * bundle.depth), "g")
        os.makedirs(folder)
        local = os.path.join(folder, bundle.name)
        if bundle.graph is not None:
            with open(local, "wb") as fh:
                fh.write(bundle.graph)
        for rel, data in bundle.files.items():
            target = os.path.normpath(os.path.join(folder, rel))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
        try:
            value = fn(local, *args)
        finally:
            unfreeze()
        value = relabel(value, local, bundle.path)
        return relabel(value, folder, os.path.dirname(os.path.abspath(bundle.path)))


def _host_port(address):
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterError(f"--scheduler {address}: expected tcp://HOST:PORT")
    return host.strip("[]"), int(port)


def probe(address, deadline_s):
    """Raise ClusterError unless a Dask scheduler answers at ``address`` within
    ``deadline_s`` (Note [A scheduler that does not answer]).

    >>> probe("tcp://127.0.0.1:1", 1.0)          # doctest: +SKIP
    Traceback (most recent call last):
    ClusterError: --scheduler tcp://127.0.0.1:1: cannot connect: Connection refused
    """
    import socket

    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme != "tcp":
        return                  # tls:// and others: the client's own deadline only
    host, port = _host_port(address)
    end = time.monotonic() + deadline_s
    try:
        sock = socket.create_connection((host, port), timeout=deadline_s)
    except OSError as exc:
        raise ClusterError(f"--scheduler {address}: cannot connect: "
                           f"{exc.strerror or exc}") from None
    try:
        data = b""
        while len(data) < 8 or len(data) < 8 + min(int.from_bytes(data[:8], "little"), 256):
            left = end - time.monotonic()
            if left <= 0:
                raise socket.timeout
            sock.settimeout(left)
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
            if len(data) >= 8 and not 0 < int.from_bytes(data[:8], "little") < _MAX_HANDSHAKE:
                break
    except (socket.timeout, TimeoutError):
        raise ClusterError(f"--scheduler {address}: no answer within {deadline_s:g} s "
                           "(--connect-timeout)") from None
    except OSError as exc:
        raise ClusterError(f"--scheduler {address}: {exc.strerror or exc}") from None
    finally:
        sock.close()
    if b"pickle-protocol" not in data:
        raise ClusterError(f"--scheduler {address}: not a Dask scheduler (it did not answer "
                           "with a Dask handshake)")


def connect(address, deadline_s):
    """A ``distributed.Client`` with at least one worker, or ClusterError within about
    ``deadline_s`` twice (the connection, then the first worker).

    >>> client = connect("tcp://127.0.0.1:8786", 10.0)     # doctest: +SKIP
    """
    import threading

    try:
        from distributed import Client
    except ImportError as exc:
        raise ClusterError(f"--scheduler needs dask.distributed, which is not installed "
                           f"({exc}); install the extra: pip install 'gradcli[dask]'") from None
    probe(address, deadline_s)
    box = {}

    def start():
        try:
            box["client"] = Client(address, timeout=deadline_s, set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 - reported below as one line
            box["error"] = exc

    t = threading.Thread(target=start, name="gradcli-dask-connect", daemon=True)
    t.start()
    t.join(deadline_s + 1.0)
    if "client" not in box:
        exc = box.get("error")
        why = f"{type(exc).__name__}: {exc}" if exc is not None else \
            f"no answer within {deadline_s:g} s (--connect-timeout)"
        raise ClusterError(f"--scheduler {address}: cannot connect: {why}".splitlines()[0])
    client = box["client"]
    try:
        client.wait_for_workers(1, timeout=deadline_s)
    except Exception:  # noqa: BLE001 - dask's TimeoutError, or the scheduler left
        client.close(timeout=2)
        raise ClusterError(f"--scheduler {address}: no worker joined within {deadline_s:g} s "
                           "(--connect-timeout)") from None
    return client


def _lost(exc):
    from distributed import KilledWorker

    return isinstance(exc, KilledWorker) or type(exc).__name__ in (
        "KilledWorker", "CommClosedError", "FutureCancelledError", "CancelledError")


def map_files(fn, paths, args, address, *, load=None, connect_timeout=10.0, on_done=None,
              connection=None):
    """``[Outcome of fn(path, *args)]`` for ``paths``, each run as a task on the cluster at
    ``address`` (Note [Files travel with the task]), in input order. A worker lost twice
    on one file is that file's ``WorkerLostTwice`` (Note [A lost worker is retried once]).

    >>> outs = map_files(validate_file, ["graphs/diamond.yaml"], (Options(), load),
    ...                  "tcp://127.0.0.1:8786")            # doctest: +SKIP
    """
    import uuid

    client = connection or connect(address, connect_timeout)
    run_id = uuid.uuid4().hex[:12]
    outcomes = [None] * len(paths)
    tries = [0] * len(paths)
    futures = {}

    def submit(i):
        tries[i] += 1
        future = client.submit(run_bundle, fn, make_bundle(paths[i], load), args,
                               key=f"gradcli-{run_id}-{i}-{tries[i]}", pure=False)
        futures[future] = i

    done = 0
    no_worker_since = None
    next_check = time.monotonic() + POLL_S
    try:
        for i in range(len(paths)):
            submit(i)
        while futures:
            finished = [f for f in futures if f.done()]
            if not finished:
                time.sleep(TICK_S)
            for future in finished:
                i = futures.pop(future)
                if future.status == "finished":
                    outcomes[i] = Outcome(future.result())
                else:
                    try:
                        exc = future.exception()
                    except BaseException as e:  # noqa: BLE001 - a cancelled future
                        exc = e
                    if _lost(exc) and tries[i] < 2:
                        submit(i)
                        continue
                    if _lost(exc):
                        exc = WorkerLostTwice(f"{paths[i]}: the worker running it was lost "
                                              "twice (the task was retried once)")
                    outcomes[i] = Outcome(error=exc)
                done += 1
                if on_done is not None:
                    on_done(done, len(paths))
            if futures and not finished and time.monotonic() >= next_check:
                next_check = time.monotonic() + POLL_S
                if client.nthreads():
                    no_worker_since = None
                elif no_worker_since is None:
                    no_worker_since = time.monotonic()
                elif time.monotonic() - no_worker_since > connect_timeout:
                    raise ClusterError(f"--scheduler {address}: every worker left and none "
                                       f"joined within {connect_timeout:g} s; "
                                       f"{len(futures)} file(s) did not run")
        return outcomes
    finally:
        for future in futures:
            future.cancel()
        if connection is None:
            client.close(timeout=5)
