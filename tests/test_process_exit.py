"""Note [Exit without teardown]: ``python -m gradcli run`` ends with os._exit once
everything is written, keeping what the normal exit does that anyone can see."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from gradcli import loader
from gradcli.cli import process_exit

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The CLI as `python -m gradcli` runs it, with two observers: an atexit callback, and
# an object held with what the command keeps that says when it is freed.
DRIVER = """\
import atexit, os, sys, threading
from gradcli.cli import process_exit

class Sentinel:
    def __del__(self):
        os.write(2, b"TORN DOWN\\n")

keep = process_exit.keep_until_exit
def keep_and_watch(*objects):
    os.write(2, b"KEPT\\n")
    keep(*objects, Sentinel())
process_exit.keep_until_exit = keep_and_watch
import gradcli.cli.cmd_run as cmd_run
cmd_run.keep_until_exit = keep_and_watch
atexit.register(lambda: os.write(2, b"ATEXIT RAN\\n"))
if os.environ.get("SLOW_THREAD_FILE"):
    def slow():
        import time
        time.sleep(0.3)
        with open(os.environ["SLOW_THREAD_FILE"], "w") as f:
            f.write("done")
    threading.Thread(target=slow).start()
sys.argv = ["gradcli", *sys.argv[1:]]
process_exit.main()
"""


def _chain(tmp_path, n_ops=40, name="chain.json"):
    ops, y = [], "y0"
    for i in range(n_ops // 2):
        ops.append({"op": "mul", "inputs": [y, "c"], "output": f"m{i}"})
        ops.append({"op": "add", "inputs": [f"m{i}", "d"], "output": f"y{i + 1}"})
        y = f"y{i + 1}"
    ops.append({"op": "sum", "inputs": [y], "output": "loss"})
    doc = {"version": 1, "seed": 0, "tensors": {
        "y0": {"shape": [8], "init": "normal", "requires_grad": True},
        "c": {"shape": [8], "init": {"dist": "full", "fill": 0.999}},
        "d": {"shape": [8], "init": {"dist": "full", "fill": 0.001}}},
        "ops": ops, "backward": {"roots": ["loss"]}}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _drive(*args, env=None):
    return subprocess.run([sys.executable, "-c", DRIVER, *[str(a) for a in args]],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_run_writes_everything_runs_atexit_and_skips_teardown(tmp_path):
    graph = _chain(tmp_path)
    want = loader.load(graph).run(order=False).grads["y0"]
    out_json, out_npz = tmp_path / "g.json", tmp_path / "g.npz"
    proc = _drive("run", graph, "--format", "json", "--out", out_json)
    assert proc.returncode == 0, proc.stderr
    assert "KEPT" in proc.stderr and "ATEXIT RAN" in proc.stderr
    assert "TORN DOWN" not in proc.stderr          # the process ended without freeing it
    printed = json.loads(proc.stdout)
    assert printed["grads"]["y0"]["data"] == want.tolist()
    assert len(printed["order"]) == 42
    assert json.loads(out_json.read_text())["grads"] == printed["grads"]
    proc = _drive("run", graph, "--out", out_npz)
    assert proc.returncode == 0, proc.stderr
    assert "TORN DOWN" not in proc.stderr and "y0" in proc.stdout
    assert proc.stdout.rstrip().endswith("ms")      # the table and the timing line, whole
    with np.load(out_npz) as z:
        assert np.array_equal(z["y0"], want)


def test_a_later_failing_graph_keeps_its_exit_code_and_message(tmp_path):
    good = _chain(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "tensors": {}, "ops": [], "backward": {"roots": ["x"]}}')
    proc = _drive("run", good, bad)
    assert proc.returncode == 2
    assert "KEPT" in proc.stderr and "TORN DOWN" not in proc.stderr
    assert "y0" in proc.stdout
    assert proc.stderr.rstrip().splitlines()[-2].startswith(f"gradcli: error: {bad}")
    assert "root 'x' is not defined" in proc.stderr


def test_a_running_thread_gets_the_normal_exit(tmp_path):
    done = tmp_path / "thread.txt"
    proc = _drive("run", _chain(tmp_path), env={"SLOW_THREAD_FILE": str(done)})
    assert proc.returncode == 0, proc.stderr
    assert done.read_text() == "done"
    assert "KEPT" in proc.stderr and "ATEXIT RAN" in proc.stderr


def test_nothing_is_kept_when_user_code_runs(tmp_path):
    proc = _drive("run", _chain(tmp_path), "--allow-code")
    assert proc.returncode == 0, proc.stderr
    assert "KEPT" not in proc.stderr and "y0" in proc.stdout


def test_the_click_entry_point_never_exits_the_process(tmp_path, gradcli_cli):
    result = gradcli_cli("run", str(_chain(tmp_path)))
    assert result.exit_code == 0
    assert process_exit._kept          # held, and this process goes on
    process_exit._kept.clear()
