"""`custom` ops in graph files: user code shaped like torch.autograd.Function.

The ctx API itself (save_for_backward, needs_input_grad, non-differentiable
outputs, materialize grads, reentrant functions) is mirrored from PyTorch's
test_autograd.py in tests/test_function.py; here: what a graph file adds
(--allow-code, resolving the module, args, the node name, errors with the
file's line and op, device threads, validate --numeric).
"""
from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import gradcli
from gradcli.cli import main
from gradcli.errors import BackwardError, GraphError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "graphs" / "custom_op" / "graph.yaml"
_ids = itertools.count()


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def one_line(result, code, *fragments):
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradcli: error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def unique(name):
    """A module name no other test has imported (sys.modules keeps modules)."""
    return f"{name}_{next(_ids)}"


def write(folder, module, code, ops, tensors=None, backward="roots: [loss]", extra=""):
    """A module ``module.py`` and a graph ``g.yaml`` using it, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(code))
    tensors = tensors or "x: {value: [0.5, -1.0, 2.0], requires_grad: true}"
    text = (f"version: 1\ntensors:\n  {tensors}\nops:\n"
            + "".join(f"  - {op}\n" for op in ops)
            + f"backward:\n  {backward}\n{extra}")
    (folder / "g.yaml").write_text(text.replace("MOD", module))
    return folder / "g.yaml"


SQUARE = """
    import numpy as np

    class Square:
        @staticmethod
        def forward(ctx, x, scale=1.0):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return scale * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * ctx.scale * x
"""
SQUARE_OPS = ['{op: custom, function: "MOD:Square", inputs: [x], outputs: [y], args: {scale: 3.0}, id: sq}',
              "{op: sum, inputs: [y], output: loss}"]


# -- the example ---------------------------------------------------------------------------
def test_example_runs_with_allow_code_and_names_its_nodes():
    result = cli("run", EXAMPLE, "--allow-code", "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {"ScaledTanhBackward", "ReentrantSquareBackward", "WeightedSumBackward"} <= set(doc["order"])
    np.testing.assert_allclose(doc["grads"]["c"]["data"], [2.0, 2.0])


def test_example_validates_with_numeric_check():
    result = cli("validate", EXAMPLE, "--allow-code", "--numeric", "--format", "json")
    assert result.exit_code == 0, result.stdout
    checks = json.loads(result.stdout)["files"][0]["checks"]
    assert {c["name"] for c in checks} >= {"numeric[loss/W]", "numeric[loss/c]", "grads[W]", "order"}
    assert all(c["status"] == "pass" for c in checks)


def test_example_is_refused_without_allow_code():
    one_line(cli("run", EXAMPLE), 2, "graph.yaml:", "ops[1] 'scaled_tanh' (custom)",
             "functions:ScaledTanh", "refused without --allow-code")
    one_line(cli("validate", EXAMPLE), 2, "refused without --allow-code")


# -- refused before anything is imported ------------------------------------------------------
def test_refusal_happens_before_the_module_is_imported(tmp_path):
    marker = tmp_path / "imported.txt"
    module = unique("marker_mod")
    code = f"open({str(marker)!r}, 'w').write('imported')\n" + textwrap.dedent(SQUARE)
    path = write(tmp_path, module, code, SQUARE_OPS)
    one_line(cli("run", path), 2, "refused without --allow-code")
    with pytest.raises(GraphError, match="refused without --allow-code"):
        gradcli.load(path)
    assert not marker.exists()
    assert cli("run", path, "--allow-code").exit_code == 0
    assert marker.read_text() == "imported"


def test_module_is_resolved_from_the_graph_folder_first_then_sys_path(tmp_path, monkeypatch):
    module = unique("shadowed")
    on_path = tmp_path / "site"
    on_path.mkdir()
    (on_path / f"{module}.py").write_text(textwrap.dedent(SQUARE).replace("scale * x * x", "0 * x"))
    monkeypatch.syspath_prepend(str(on_path))
    local = write(tmp_path / "local", module, SQUARE, SQUARE_OPS)
    result = gradcli.load(local, allow_code=True).run()
    np.testing.assert_allclose(result.grads["x"], 6.0 * np.array([0.5, -1.0, 2.0]))
    assert gradcli.load(local, allow_code=True).forward()["y"].data.tolist() == [0.75, 3.0, 12.0]
    # A graph in a folder without the module gets the one on sys.path.
    other = tmp_path / "other"
    other.mkdir()
    (other / "g.yaml").write_text(local.read_text())
    assert gradcli.load(other / "g.yaml", allow_code=True).forward()["y"].data.tolist() == [0, 0, 0]


def test_bad_function_names_and_missing_classes_are_invalid_input(tmp_path):
    module = unique("mod")
    path = write(tmp_path, module, SQUARE, SQUARE_OPS)
    text = path.read_text()
    for function, message in [(f"{module}:Nope", f"module '{module}' "),
                              ("no_such_module_xyz:F", "no module named 'no_such_module_xyz'"),
                              ("not a name", "function must be 'module:Name'")]:
        path.write_text(text.replace(f"{module}:Square", function))
        line = one_line(cli("run", path, "--allow-code"), 2, "g.yaml:5:", "ops[0] 'sq' (custom)")
        assert message in line
    path.write_text(text.replace('function: "' + module + ':Square", ', ""))
    one_line(cli("run", path, "--allow-code"), 2, "missing required key 'function'")
    path.write_text(text.replace(f"{module}:Square", "json:dumps"))
    one_line(cli("run", path, "--allow-code"), 2, "not shaped like torch.autograd.Function")


def test_function_key_on_other_ops_is_refused():
    text = ("version: 1\ntensors:\n  x: {value: 1.0, requires_grad: true}\nops:\n"
            "  - {op: neg, function: 'm:F', inputs: [x], output: loss}\nbackward: {roots: [loss]}\n")
    with pytest.raises(GraphError, match="key 'function' is only valid for op custom"):
        gradcli.loads(text, allow_code=True)


# -- args, node names, the number of gradients ------------------------------------------------
def test_args_are_keywords_of_forward_and_checked_at_load(tmp_path):
    module = unique("mod")
    path = write(tmp_path, module, SQUARE, SQUARE_OPS)
    result = gradcli.load(path, allow_code=True).run()
    np.testing.assert_allclose(result.grads["x"], 6.0 * np.array([0.5, -1.0, 2.0]))
    assert [r.node for r in result.order] == ["SumBackward0", "SquareBackward", "AccumulateGrad"]
    assert result.order[1].op == "sq"
    text = path.read_text()
    path.write_text(text.replace("scale: 3.0", "scael: 3.0"))
    one_line(cli("run", path, "--allow-code"), 2, "unknown arg 'scael'", "did you mean 'scale'?")
    path.write_text(text.replace("def forward(ctx, x, scale=1.0)", "def forward(ctx, x, *, scale)")
                    .replace("args: {scale: 3.0}", "args: {}"))
    module2 = unique("mod")
    (tmp_path / f"{module2}.py").write_text(textwrap.dedent(SQUARE).replace(
        "def forward(ctx, x, scale=1.0)", "def forward(ctx, x, *, scale)"))
    path.write_text(text.replace(module, module2).replace("args: {scale: 3.0}", "args: {}"))
    one_line(cli("run", path, "--allow-code"), 2, "missing required arg 'scale'")


def test_forward_with_kwargs_takes_any_arg(tmp_path):
    module = unique("mod")
    code = """
        class Scale:
            @staticmethod
            def forward(ctx, x, **args):
                ctx.k = args["k"] * args.get("m", 1)
                return x * ctx.k

            @staticmethod
            def backward(ctx, g):
                return g * ctx.k
    """
    path = write(tmp_path, module, code,
                 ['{op: custom, function: "MOD:Scale", inputs: [x], outputs: [y], args: {k: 2, m: 5}}',
                  "{op: sum, inputs: [y], output: loss}"])
    np.testing.assert_allclose(gradcli.load(path, allow_code=True).run().grads["x"], [10.0] * 3)


def test_args_do_not_count_as_inputs_but_extra_nones_are_accepted(tmp_path):
    """Note [custom op args]: one gradient per input tensor; PyTorch 2.13 counts
    apply's keyword arguments as inputs, so a backward returning (g, None) for
    (x, scale) works too (extra Nones are fine, as in PyTorch)."""
    module = unique("mod")
    path = write(tmp_path, module, SQUARE.replace("return g * 2 * ctx.scale * x",
                                                   "return g * 2 * ctx.scale * x, None"), SQUARE_OPS)
    np.testing.assert_allclose(gradcli.load(path, allow_code=True).run().grads["x"],
                               6.0 * np.array([0.5, -1.0, 2.0]))


def test_incorrect_number_of_gradients_is_pytorchs_error(tmp_path):
    module = unique("mod")
    code = """
        class Add:
            @staticmethod
            def forward(ctx, a, b):
                return a + b

            @staticmethod
            def backward(ctx, g):
                return g
    """
    path = write(tmp_path, module, code,
                 ['{op: custom, function: "MOD:Add", inputs: [x, x2], outputs: [y], id: add}',
                  "{op: sum, inputs: [y], output: loss}"],
                 tensors="x: {value: [1.0, 2.0], requires_grad: true}\n  x2: {value: [3.0, 4.0]}")
    line = one_line(cli("run", path, "--allow-code"), 3,
                    "function AddBackward returned an incorrect number of gradients (expected 2, got 1)",
                    "node created by op ops[0] 'add'", "g.yaml:6")
    assert line.startswith(f"gradcli: error: {path}:6: ")


# -- errors in user code ---------------------------------------------------------------------
RAISES = """
    class Bad:
        @staticmethod
        def forward(ctx, x, where="forward"):
            ctx.where = where
            if where == "forward":
                raise ValueError("forward went wrong")
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            raise KeyError("backward went wrong")
"""


def test_exception_in_forward_exits_3_naming_function_op_and_line(tmp_path):
    module = unique("mod")
    path = write(tmp_path, module, RAISES,
                 ["{op: neg, inputs: [x], output: nx}",
                  '{op: custom, function: "MOD:Bad", inputs: [nx], outputs: [y], id: bad}',
                  "{op: sum, inputs: [y], output: loss}"])
    line = one_line(cli("run", path, "--allow-code"), 3, f"{path}:6: ", "ops[1] 'bad' (custom)",
                    f"{module}:Bad.forward raised ValueError: forward went wrong")
    assert "internal error" not in line
    with pytest.raises(BackwardError, match="forward went wrong"):
        gradcli.load(path, allow_code=True).run()


def test_validate_reports_an_exception_in_forward_as_failed_checks(tmp_path):
    module = unique("mod")
    path = write(tmp_path, module, RAISES,
                 ['{op: custom, function: "MOD:Bad", inputs: [x], outputs: [y], id: bad}',
                  "{op: sum, inputs: [y], output: loss}"])
    result = cli("validate", path, "--allow-code", "--numeric", "--format", "json")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    checks = {c["name"]: c for c in json.loads(result.stdout)["files"][0]["checks"]}
    assert checks["backward"]["status"] == checks["numeric"]["status"] == "fail"
    assert f"{module}:Bad.forward raised ValueError" in checks["numeric"]["message"]


def test_exception_in_backward_exits_3_naming_function_op_and_line(tmp_path):
    module = unique("mod")
    path = write(tmp_path, module, RAISES,
                 ["{op: neg, inputs: [x], output: nx}",
                  '{op: custom, function: "MOD:Bad", inputs: [nx], outputs: [y], id: bad, args: {where: none}}',
                  "{op: sum, inputs: [y], output: loss}"])
    one_line(cli("run", path, "--allow-code"), 3, f"{path}:6: ", "backward failed in BadBackward",
             f"{module}:Bad.backward raised KeyError", "backward went wrong",
             "node created by op ops[1] 'bad'")


def test_exception_while_importing_exits_3(tmp_path):
    module = unique("mod")
    path = write(tmp_path, module, "raise RuntimeError('cannot import me')\n", SQUARE_OPS)
    one_line(cli("run", path, "--allow-code"), 3, "g.yaml:5:", "ops[0] 'sq' (custom)",
             "importing the module of", "RuntimeError: cannot import me")


def test_forward_returning_a_non_array_exits_3(tmp_path):
    module = unique("mod")
    code = SQUARE.replace("return scale * x * x", "return 'oops'")
    path = write(tmp_path, module, code, SQUARE_OPS)
    one_line(cli("run", path, "--allow-code"), 3, "Square.forward returned str as output 0")


# -- reentrant backwards on device threads ---------------------------------------------------
REENTRANT = """
    import threading
    import numpy as np
    from gradcli.autograd import Tensor, enable_grad, grad

    THREADS = []

    class Cube:
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            THREADS.append(threading.current_thread().name)
            (x,) = ctx.saved_tensors
            leaf = Tensor(x.copy(), requires_grad=True)
            with enable_grad():
                y = leaf * leaf * leaf
            (gx,) = grad([y], [leaf], [g])
            return gx
"""


@pytest.mark.timeout(60)
def test_reentrant_backward_on_simulated_device_threads(tmp_path):
    module = unique("reent")
    path = write(tmp_path, module, REENTRANT,
                 ['{op: custom, function: "MOD:Cube", inputs: [xs], outputs: [y], id: cube}',
                  "{op: to, inputs: [y], output: yc, device: cpu}",
                  "{op: sum, inputs: [yc], output: loss}"],
                 tensors="xs: {value: [0.5, -1.0, 2.0], requires_grad: true, device: 'sim:1'}")
    graph = gradcli.load(path, allow_code=True)
    result = graph.run()
    np.testing.assert_allclose(np.asarray(result.grads["xs"]), 3 * np.array([0.5, -1.0, 2.0]) ** 2)
    from gradcli.devices import device_of

    assert str(device_of(result.grads["xs"])) == "sim:1"
    cube = [r for r in result.order if r.node == "CubeBackward"]
    assert cube and cube[0].device == "sim:1" and cube[0].depth == 0
    nested = [r for r in result.order if r.depth == 1]
    assert nested and all(r.thread == cube[0].thread for r in nested)
    import sys

    threads = sys.modules[module].THREADS
    assert threads and threads[0] == cube[0].thread and threads[0] != "MainThread"
    single = gradcli.load(path, allow_code=True).run(multithreading=False)
    np.testing.assert_allclose(np.asarray(single.grads["xs"]), np.asarray(result.grads["xs"]))


# -- validate --numeric checks custom functions like any op ------------------------------------
WRONG = """
    import numpy as np

    class Sin:
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return np.sin(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * np.sin(x)          # wrong: the derivative is cos
"""


def test_validate_numeric_catches_a_wrong_custom_gradient(tmp_path):
    module = unique("wrong")
    path = write(tmp_path, module, WRONG,
                 ['{op: custom, function: "MOD:Sin", inputs: [x], outputs: [y]}',
                  "{op: sum, inputs: [y], output: loss}"])
    result = cli("validate", path, "--allow-code", "--numeric", "--format", "json")
    assert result.exit_code == 1, result.stdout
    checks = {c["name"]: c for c in json.loads(result.stdout)["files"][0]["checks"]}
    assert checks["numeric[loss/x]"]["status"] == "fail"
    assert "Jacobian mismatch" in checks["numeric[loss/x]"]["message"]
    fixed = tmp_path / "fixed"
    module2 = unique("right")
    path2 = write(fixed, module2, WRONG.replace("g * np.sin(x)", "g * np.cos(x)"),
                  ['{op: custom, function: "MOD:Sin", inputs: [x], outputs: [y]}',
                   "{op: sum, inputs: [y], output: loss}"])
    assert cli("validate", path2, "--allow-code", "--numeric").exit_code == 0
    assert cli("validate", path2, "--allow-code", "--fast").exit_code == 0
