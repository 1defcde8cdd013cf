"""The speed shortcuts keep behaviour: collector pauses, metadata stamps, the
loader's infer cache, shared CPU input metadata, the forward's precheck."""
from __future__ import annotations

import gc
import json
import pathlib
import threading

import numpy as np
import pytest

from gradcli import loader
from gradcli.autograd import Tensor, backward
from gradcli.autograd.node import _CPU_METAS, InputMetadata
from gradcli.collector import paused
from gradcli.errors import GraphError
import gradcli.ops as O


def test_paused_turns_the_collector_off_and_back_on():
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():                      # nested (a reentrant run)
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_never_turns_on_a_collector_the_application_turned_off():
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_paused_is_counted_across_threads():
    inside, release = threading.Event(), threading.Event()

    def other():
        with paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with paused():
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()               # the other thread still runs paused
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_paused_restores_on_error():
    with pytest.raises(KeyError):
        with paused():
            raise KeyError("x")
    assert gc.isenabled()


@pytest.mark.parametrize("which", ["chain", "models/tiny_gpt", "models/cnn_batchnorm"])
def test_a_run_leaves_no_cyclic_garbage(tmp_path, which):
    """What makes pausing safe for memory (Note [Collector pauses]): a run's graph is freed
    by reference counting alone (Note [The leaf holds its accumulator weakly])."""
    path = (_chain_file(tmp_path, 200) if which == "chain" else
            str(pathlib.Path(__file__).parent.parent / "graphs" / which / "graph.yaml"))
    graph = loader.load(path)
    graph.run(order=False)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        graph.run(order=False)
        graph.run(order=False)
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__.startswith("gradcli")
                or str(getattr(o, "__module__", "")).startswith("gradcli")   # closures
                or isinstance(o, np.ndarray)]
        assert ours == [], ours[:8]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _chain_file(tmp_path, n, shape=(8,)):
    ops = []
    y = "y0"
    for i in range(n // 2):
        ops.append({"op": "mul", "inputs": [y, "c"], "output": f"m{i}", "id": f"mul{i}"})
        ops.append({"op": "add", "inputs": [f"m{i}", "d"], "output": f"y{i + 1}"})
        y = f"y{i + 1}"
    ops.append({"op": "sum", "inputs": [y], "output": "loss"})
    doc = {"version": 1, "tensors": {
        "y0": {"shape": list(shape), "init": "normal", "requires_grad": True},
        "c": {"shape": list(shape), "init": {"dist": "full", "fill": 0.999}},
        "d": {"shape": list(shape), "init": {"dist": "full", "fill": 0.001}}},
        "ops": ops, "backward": {"roots": ["loss"]}}
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(doc))
    return path


def test_metadata_stamps_become_each_nodes_own_dict(tmp_path):
    graph = loader.load(_chain_file(tmp_path, 6))
    values = graph.forward()
    n1 = values["m0"].grad_fn
    assert n1.metadata == {"op_id": "mul0", "line": graph.ops[0].line}
    n1.metadata["extra"] = 1                 # a node's dict is its own
    values2 = graph.forward()
    assert "extra" not in values2["m0"].grad_fn.metadata
    assert repr(values2["m1"].grad_fn).startswith("<MulBackward0 mul1 ")
    # stamping over an existing dict updates it
    n1.stamp_metadata((("line", 99),))
    assert n1.metadata == {"op_id": "mul0", "line": 99, "extra": 1}


def test_infer_cache_infers_once_per_key_and_still_checks_each_op(tmp_path, monkeypatch):
    from gradcli.ops import OPS

    from gradcli.ops.core import Op

    calls = []
    mul = OPS["mul"]
    original = Op.infer_outputs

    def spy(self, shapes, dtypes, args):
        if self is mul:
            calls.append((tuple(shapes), tuple(dtypes)))
        return original(self, shapes, dtypes, args)

    monkeypatch.setattr(Op, "infer_outputs", spy)
    graph = loader.load(_chain_file(tmp_path, 40))
    assert len(calls) == 1                   # 20 muls of the same shapes and dtypes
    assert graph.ops[-2].op.checked is not None
    # a later op whose inputs do not fit is still refused, naming it
    doc = json.loads(_chain_file(tmp_path, 10).read_text())
    doc["tensors"]["e"] = {"shape": [3], "init": "zeros"}
    doc["ops"].insert(6, {"op": "mul", "inputs": ["m2", "e"], "output": "bad"})
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(GraphError, match=r"ops\[6\].*cannot be broadcast"):
        loader.load(tmp_path / "bad.json")


def test_cpu_input_metadata_is_shared_and_bounded():
    a = Tensor(np.ones(5), requires_grad=True)
    n1 = (a * a).grad_fn
    n2 = (a + a).grad_fn
    assert n1.input_metadata is n2.input_metadata
    assert n1.input_metadata[0].shape == (5,) and n1.input_metadata[0].dtype == np.float64
    f32 = (Tensor(np.ones(5, np.float32), requires_grad=True) * 2.0).grad_fn
    assert f32.input_metadata[0].dtype == np.float32
    for k in range(5000):
        InputMetadata.cpu(np.empty((k % 4100 + 1,)))
    assert len(_CPU_METAS) <= 4096


def test_recorded_nodes_match_the_general_recording():
    """The CPU branch of record makes the node the general code makes."""
    x = Tensor(np.linspace(1, 2, 6).reshape(2, 3), requires_grad=True)
    b = Tensor(np.linspace(1, 2, 3))
    y = O.div(x, b)
    node = y.grad_fn
    assert node.name == "DivBackward0" and node.op is O.div
    assert node.next_edges[0] == (x.grad_accumulator, 0) and node.next_edges[1] is None
    assert node.args == {} and node.input_devices is None
    d0, d1, ans, *inputs = node.saved          # Note [Saved layout]: one flat tuple
    assert d0 is x.data and d1 is b.data and ans is y.data and inputs == [x, b]
    # no grad needed: a plain Tensor
    z = O.mul(b, b)
    assert z.grad_fn is None and not z.requires_grad
    # integer results never require grad
    i = O.mul(Tensor(np.arange(3), requires_grad=False), Tensor(np.arange(3)))
    assert i.grad_fn is None
    backward(O.sum(y))
    assert np.array_equal(x.grad, np.broadcast_to(1 / b.data, (2, 3)))


def test_forward_precheck_still_refuses_other_shapes(tmp_path):
    graph = loader.load(_chain_file(tmp_path, 4))
    spec = graph.ops[0]
    good = [Tensor(np.ones(8)), Tensor(np.ones(8))]
    assert spec.op(*good).shape == (8,)
    with pytest.raises(GraphError, match="cannot be broadcast"):
        spec.op(Tensor(np.ones(8)), Tensor(np.ones(3)))
    # another dtype is checked again (and allowed)
    assert spec.op(Tensor(np.ones(8, np.float32)), Tensor(np.ones(8, np.float32))).dtype == np.float32


@pytest.mark.parametrize("title, rows", [
    ("mlp (graphs/mlp.yaml): gradients", [["W1", "[4, 16]", "float64", "1.01831"],
                                          ["b1", "[16]", "float64", "-0.06"]]),
    ("a title much longer than the table it sits on top of", [["x", "1", "2", "3"]]),
    ("wide cells", [["naïve ✓", "漢字", "x", "-"], ["y" * 60, "z" * 70, "w" * 40, "1"]]),
    ("t", []),
])
def test_tables_for_a_pipe_are_drawn_as_rich_draws_them(title, rows, capsys, monkeypatch):
    """Start-up: rich is not imported for a table written to a pipe; what is printed
    is what rich prints there (core.console(): no colour, 160 columns)."""
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from gradcli.cli import core

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    columns = ["tensor", "shape", "dtype", core.Column("norm", "right")]
    core.print_table(title, columns, rows)
    got = capsys.readouterr().out
    table = Table(title=title, title_justify="left")
    for c in [core.Column(c) if isinstance(c, str) else c for c in columns]:
        table.add_column(c.name, justify=c.justify, overflow="ellipsis")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    buf = io.StringIO()
    Console(file=buf, markup=False, highlight=False, emoji=False, soft_wrap=False,
            width=core.PIPE_WIDTH).print(table)
    assert got == buf.getvalue()


def test_gradcli_run_imports_only_what_it_needs(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from gradcli.cli import main\n"
            "try:\n    main(['run', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
            "mods = set(sys.modules)\n"
            "bad = [m for m in ('rich', 'difflib', 'statistics', 'traceback', 'torch',\n"
            "        'gradcli.cli.cmd_validate', 'gradcli.cli.cmd_stress', 'gradcli.cli.cmd_export',\n"
            "        'gradcli.validate', 'gradcli.stress') if m in mods]\n"
            "print(bad, file=sys.stderr)")
    root = pathlib.Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code, str(root / "graphs" / "mlp.yaml")],
                          capture_output=True, text=True, cwd=root, timeout=60,
                          env={**{k: v for k, v in __import__("os").environ.items()
                                  if k not in ("FORCE_COLOR", "TTY_COMPATIBLE",
                                               "TTY_INTERACTIVE", "COLUMNS")},
                               "PYTHONPATH": str(root)})     # a pipe, as rich sees it
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr
    assert "gradients" in proc.stdout


def test_paused_with_freeze_moves_what_is_alive_to_the_permanent_generation():
    gc.unfreeze()
    try:
        with paused(freeze=True):
            with paused(freeze=True):
                kept = [[i] for i in range(1000)]
            assert gc.get_freeze_count() == 0      # only the outermost resume freezes
        assert gc.get_freeze_count() >= 1000 and gc.isenabled()
        assert kept[999] == [999]
    finally:
        gc.unfreeze()
