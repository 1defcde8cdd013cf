"""--scheduler: graph files as tasks on a Dask cluster give the verdicts of a local
run; files travel with the task; a lost worker is retried once; a scheduler that
refuses, never answers or is not Dask is one line and exit 2 within the deadline.

The cluster is a LocalCluster with two worker processes on 127.0.0.1."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading

import pytest

distributed = pytest.importorskip("distributed")

from gradcli import cluster  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def local_cluster():
    import dask

    # the scheduler's own retries off, so that gradcli's one retry is what a test sees
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=None,
                                      silence_logs=50) as lc:
            yield lc


def _gradcli(*args, cwd=ROOT, timeout=240):
    return subprocess.run([sys.executable, "-m", "gradcli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _verdicts(doc):
    return [(f["file"], f["status"], f["error"],
             [(c["name"], c["status"], c["message"], c["max_abs_err"]) for c in f["checks"]])
            for f in doc["files"]] + [doc["exit_code"]]


@pytest.mark.timeout(300)
def test_validate_on_the_cluster_gives_the_serial_verdicts(local_cluster, tmp_path):
    # run from the corpus folder with relative paths: the workers' cwd is not this
    # folder, so they find the files only in the bundles
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "graphs" / "models" / "mlp", corpus / "mlp")
    shutil.copy(ROOT / "graphs" / "diamond.yaml", corpus / "diamond.yaml")
    (corpus / "wrong.yaml").write_text((ROOT / "graphs" / "diamond.yaml").read_text().replace(
        "x: {value: [5.0, 7.0, 9.0]}", "x: {value: [5.0, 7.5, 9.0]}"))
    (corpus / "outside.yaml").write_text(
        "version: 1\nname: outside\ntensors:\n  w: {file: ../secret.npy, requires_grad: true}\n"
        "ops:\n  - {op: sum, inputs: [w], output: loss}\nbackward: {roots: [loss]}\n")
    files = ["mlp/graph.yaml", "diamond.yaml", "wrong.yaml", "outside.yaml", "missing.yaml"]
    serial = _gradcli("validate", "--format", "json", *files, cwd=corpus)
    dask_run = _gradcli("validate", "--format", "json", "--scheduler",
                        local_cluster.scheduler_address, *files, cwd=corpus)
    assert serial.returncode == dask_run.returncode == 2, dask_run.stderr
    assert _verdicts(json.loads(dask_run.stdout)) == _verdicts(json.loads(serial.stdout))
    assert dask_run.stderr == serial.stderr
    statuses = [f["status"] for f in json.loads(dask_run.stdout)["files"]]
    assert statuses == ["pass", "pass", "fail", "invalid", "invalid"]


@pytest.mark.timeout(300)
def test_run_and_stress_on_the_cluster(local_cluster):
    import re

    files = ["graphs/diamond.yaml", "graphs/models/mlp/graph.yaml"]
    untimed = lambda t: re.sub(r"forward [0-9.]+ ms, backward [0-9.]+ ms", "", t)  # noqa: E731
    serial = _gradcli("run", *files)
    dask_run = _gradcli("run", "--scheduler", local_cluster.scheduler_address, *files)
    assert serial.returncode == dask_run.returncode == 0, dask_run.stderr
    assert untimed(dask_run.stdout) == untimed(serial.stdout)
    stress = _gradcli("stress", "--scheduler", local_cluster.scheduler_address, "--threads", "2",
                      "--iterations", "1", "--duration", "4", "--format", "json", *files)
    assert stress.returncode == 0, stress.stderr
    [row] = json.loads(stress.stdout)["scenarios"]
    assert row["scenario"] == "graphs" and row["ok"] and row["iterations"] == 2


def test_a_bundle_carries_the_graph_and_its_data(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g.yaml").write_text(
        "version: 1\ntensors:\n  a: {file: a.npy}\n  b: {file: ../b.npy}\n  c: {file: /etc/c.npy}\n")
    import numpy as np

    np.save(tmp_path / "sub" / "a.npy", np.ones(3))
    np.save(tmp_path / "b.npy", np.ones(2))
    b = cluster.make_bundle(tmp_path / "sub" / "g.yaml")
    assert sorted(b.files) == ["a.npy"] and b.depth == 0       # ../ refused by default
    from gradcli.cli.core import LoadOptions

    b = cluster.make_bundle(tmp_path / "sub" / "g.yaml", LoadOptions(allow_outside_paths=True))
    assert sorted(b.files) == ["../b.npy", "a.npy"] and b.depth == 1   # absolute: never
    small = cluster.make_bundle(tmp_path / "sub" / "g.yaml",
                                LoadOptions(allow_outside_paths=True, max_graph_bytes=10))
    assert small.files == {}        # over the graph's memory budget: not shipped


def _kill_worker_first_time(path, marker):
    """Ends its worker process the first time it runs (the marker says whether it did)."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return os.path.basename(path)


def _always_kill_worker(path):
    os._exit(1)


@pytest.mark.timeout(300)
def test_a_lost_worker_is_retried_once_then_reported(local_cluster, tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        client = cluster.connect(local_cluster.scheduler_address, 30)
        try:
            marker = str(tmp_path / "killed-once")
            [out] = cluster.map_files(_kill_worker_first_time, ["graphs/diamond.yaml"],
                                      (marker,), local_cluster.scheduler_address,
                                      connection=client, connect_timeout=60)
            assert out.get() == "diamond.yaml" and os.path.exists(marker)
            [out] = cluster.map_files(_always_kill_worker, ["graphs/diamond.yaml"], (),
                                      local_cluster.scheduler_address, connection=client,
                                      connect_timeout=60)
            assert isinstance(out.error, cluster.WorkerLostTwice)
            assert "graphs/diamond.yaml: the worker running it was lost twice" in str(out.error)
        finally:
            client.close()
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


class _Server:
    """A local socket that accepts and says nothing, or answers like a web server."""

    def __init__(self, answer=None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.answer, self.conns = answer, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.answer:
                conn.sendall(self.answer)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["closed", "silent", "not-dask"])
def test_a_scheduler_that_refuses_never_answers_or_is_not_dask(kind):
    server = None
    if kind == "closed":
        port, want = _closed_port(), "cannot connect"
    elif kind == "silent":
        server, want = _Server(), "no answer within 2 s (--connect-timeout)"
    else:
        server, want = _Server(b"HTTP/1.0 200 OK\r\n\r\nhello\n"), "not a Dask scheduler"
    port = server.port if server else port
    try:
        proc = _gradcli("validate", "--scheduler", f"tcp://127.0.0.1:{port}",
                        "--connect-timeout", "2", "graphs/diamond.yaml", timeout=60)
    finally:
        if server:
            server.close()
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"gradcli: error: --scheduler tcp://127.0.0.1:{port}: ")
    assert want in line


def test_a_scheduler_address_must_be_host_and_port():
    with pytest.raises(cluster.ClusterError, match="expected tcp://HOST:PORT"):
        cluster.probe("tcp://nohost", 1)


def test_relabel_names_the_original_file():
    from gradcli.validate import Check, FileReport

    r = FileReport("/tmp/x/g/a.yaml", checks=[Check("b", "b", "fail", "/tmp/x/g/a.yaml:3: bad")])
    r = cluster.relabel(r, "/tmp/x/g/a.yaml", "graphs/a.yaml")
    assert r.path == "graphs/a.yaml" and r.checks[0].message == "graphs/a.yaml:3: bad"
    assert cluster.relabel(("/tmp/x/g/a.yaml", ["/tmp/x/g/a.yaml"]), "/tmp/x/g/a.yaml", "a") == (
        "a", ["a"])
