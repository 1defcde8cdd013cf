"""Start-up stays light: what `gradcli run` imports, the op
registry's deferred namespaces (Note [Deferred op namespaces]), the record classes
that replaced dataclasses (Note [Record classes]) and the install step's bytecode.
No timing here: the figures are scripts/bench_engine.py's (--only startup)."""
from __future__ import annotations

import importlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from gradcli.ops.core import OpRegistry

ROOT = pathlib.Path(__file__).resolve().parent.parent


# Variables that make rich draw as to a terminal, so that gradcli's plain tables hand
# over to rich (cli/core.py, _plain_is_rich); a runner may set them (COLUMNS).
TERMINAL_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARIABLES}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _python(code, *args, cwd=ROOT, env=None):
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, env=env or _env())
    assert proc.returncode == 0, proc.stderr
    return proc


def _tiny_json(path):
    """The bench's tiny graph: a version-1 chain with a ``normal`` init."""
    doc = {"version": 1, "name": "tiny", "seed": 0,
           "tensors": {"y0": {"shape": [8], "init": "normal", "requires_grad": True},
                       "c": {"shape": [8], "init": {"dist": "full", "fill": 0.999}}},
           "ops": [{"op": "mul", "inputs": ["y0", "c"], "output": "m"},
                   {"op": "sum", "inputs": ["m"], "output": "loss"}],
           "backward": {"roots": ["loss"]}}
    path.write_text(json.dumps(doc))
    return path


_RUN_AND_LIST = ("import sys\nfrom gradcli.cli import main\n"
                 "try:\n    main(sys.argv[1:], prog_name='gradcli')\nexcept SystemExit as e:\n"
                 "    assert e.code == 0, e.code\n"
                 "print('MODULES', ' '.join(sorted(sys.modules)))\n")


def _run_modules(*args):
    proc = _python(_RUN_AND_LIST, *args)
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("MODULES "), proc.stdout
    return proc.stdout, set(last.split()[1:])


# Never imported by `gradcli run` on a version-1 JSON graph printed to a pipe: the
# ATen ops and their kernels, the op catalog, rich (a terminal table only), yaml (a
# YAML file only), error-message and other commands' helpers, dataclasses (Note
# [Record classes]), the zip writer (--out FILE.npz only), torch.
NOT_FOR_A_TINY_RUN = ("gradcli.ops.aten", "gradcli.ops.aten_kernels", "gradcli.ops.catalog",
                      "gradcli.ops.custom", "gradcli.ops.higher", "gradcli.autograd.function",
                      "rich", "yaml", "difflib", "statistics", "dataclasses", "zipfile",
                      "traceback", "gradcli.validate", "gradcli.stress", "gradcli.gradcheck",
                      "gradcli.trace", "gradcli.cli.cmd_validate", "gradcli.cli.cmd_ops",
                      "torch")


def test_run_of_a_version_1_json_graph_imports_only_what_it_needs(tmp_path):
    out, mods = _run_modules("run", str(_tiny_json(tmp_path / "tiny.json")))
    assert "tiny" in out and "gradients" in out          # it ran and printed its table
    assert "gradcli.loader" in mods and "numpy.random" in mods     # (the normal init)
    loaded = sorted(m for m in mods for bad in NOT_FOR_A_TINY_RUN
                    if m == bad or m.startswith(bad + "."))
    assert loaded == []


def test_run_of_a_graph_with_aten_ops_loads_them(tmp_path):
    out, mods = _run_modules("run", "--format", "json",
                             str(ROOT / "graphs" / "models" / "mlp" / "graph.yaml"))
    assert "gradcli.ops.aten" in mods
    doc = json.loads(out.strip().splitlines()[-2])
    assert doc["graph"] == "mlp" and doc["grads"]


def test_ops_command_lists_the_deferred_aten_ops():
    out, mods = _run_modules("ops", "--format", "json")
    names = [row["name"] for row in json.loads(out[:out.rindex("MODULES")])]
    assert "mul" in names and "aten.mul.Tensor" in names and "aten.addmm.default" in names
    assert len([n for n in names if n.startswith("aten.")]) >= 70


@pytest.mark.parametrize("name, hint", [("aten.mul.Tensr", "aten.mul.Tensor"),
                                        ("mull", "mul"), ("aten.addm.default", "aten.addmm.default")])
def test_unknown_op_hints_consider_the_deferred_ops(tmp_path, name, hint):
    """A misspelt op, in a process where nothing loaded the aten ops yet."""
    doc = json.loads(_tiny_json(tmp_path / "t.json").read_text())
    doc["ops"][0]["op"] = name
    (tmp_path / "t.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "gradcli", "run", str(tmp_path / "t.json")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=_env())
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]       # one line
    assert f"unknown op {name!r} (did you mean {hint!r}?)" in proc.stderr


def test_the_op_registry_answers_for_the_aten_ops_before_they_are_loaded():
    code = ("import sys\nfrom gradcli.ops import OPS\n"
            "assert 'gradcli.ops.aten' not in sys.modules\n"
            "assert OPS.get('mul').name == 'mul' and 'mul' in OPS and OPS.get('nope') is None\n"
            "assert 'gradcli.ops.aten' not in sys.modules     # v1 names, unknown names\n"
            "assert 'aten.mul.Tensor' in OPS\n"
            "assert 'gradcli.ops.aten' in sys.modules\n"
            "from gradcli.ops.aten import ATEN_OPS\n"
            "assert set(ATEN_OPS) <= set(OPS) and len(OPS) == len(dict(OPS))\n"
            "print(len(ATEN_OPS))\n")
    assert int(_python(code).stdout) >= 70
    # each kind of question, in its own process, loads them
    for question in ("OPS['aten.mul.Tensor']", "OPS.get('aten.mul.Tensor')", "len(OPS)",
                     "list(OPS)", "OPS.items()", "OPS.keys()", "OPS.values()", "dict(OPS)",
                     "OPS.copy()", "sorted(OPS)", "OPS.pop('aten.mul.Tensor')", "OPS == {}",
                     "reversed(OPS)", "OPS | {}", "repr(OPS)"):
        code = ("import sys\nfrom gradcli.ops import OPS\n"
                f"r = {question}\n"
                "print('gradcli.ops.aten' in sys.modules, dict.__contains__(OPS, 'aten.add.Tensor'))\n")
        assert _python(code).stdout.split() == ["True", "True"], question


def _registry_with_fake_namespace(monkeypatch, tmp_path, body):
    """An OpRegistry whose ``fake.`` ops come from a module written to tmp_path."""
    module = f"fake_ops_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = OpRegistry()
    registry["plain"] = "P"
    monkeypatch.setitem(sys.modules, "fake_registry_holder", type(sys)("fake_registry_holder"))
    sys.modules["fake_registry_holder"].REGISTRY = registry
    registry.defer(module, prefix="fake.", names=("fake_named",))
    return registry, module


def test_a_deferred_namespace_loads_once_and_only_when_asked(monkeypatch, tmp_path):
    body = ("import fake_registry_holder as h\n"
            "h.REGISTRY['fake.one'] = 1\nh.REGISTRY['fake.two'] = 2\n")
    reg, module = _registry_with_fake_namespace(monkeypatch, tmp_path, body)
    assert reg.get("plain") == "P" and "plain" in reg and reg["plain"] == "P"
    assert "other" not in reg and reg.get("other") is None
    with pytest.raises(KeyError):
        reg["other"]
    assert module not in sys.modules                  # nothing asked about fake.*
    assert reg.get("fake.two") == 2
    assert module in sys.modules
    assert reg.get("fake.three") is None and "fake.three" not in reg
    assert sorted(reg) == ["fake.one", "fake.two", "plain"]


def test_a_deferred_name_loads_its_module(monkeypatch, tmp_path):
    reg, module = _registry_with_fake_namespace(
        monkeypatch, tmp_path, "import fake_registry_holder as h\nh.REGISTRY['fake_named'] = 7\n")
    assert reg.get("fake_name") is None and module not in sys.modules    # only that name
    assert "fake_named" in reg and reg["fake_named"] == 7 and module in sys.modules


@pytest.mark.parametrize("name, module", [("grad", "gradcli.ops.higher"),
                                          ("custom", "gradcli.ops.custom")])
def test_grad_and_custom_load_on_first_lookup(name, module):
    code = ("import sys\nfrom gradcli.ops import OPS\n"
            f"assert {module!r} not in sys.modules\n"
            f"op = OPS.get({name!r})\n"
            f"print(op.name, {module!r} in sys.modules, 'gradcli.ops.aten' in sys.modules)\n")
    assert _python(code).stdout.split() == [name, "True", "False"]


def test_the_function_api_loads_on_first_use():
    code = ("import sys\nimport gradcli.autograd as A\n"
            "assert 'gradcli.autograd.function' not in sys.modules\n"
            "from gradcli.autograd import Function, as_function, BackwardCFunction\n"
            "from gradcli.autograd.function import Function as F\n"
            "print(Function is F, callable(as_function), A.BackwardCFunction is BackwardCFunction)\n"
            "try:\n    A.no_such_name\nexcept AttributeError as e:\n    print('AttributeError')\n")
    assert _python(code).stdout.split() == ["True", "True", "True", "AttributeError"]


def test_iterating_loads_every_deferred_namespace(monkeypatch, tmp_path):
    reg, module = _registry_with_fake_namespace(
        monkeypatch, tmp_path, "import fake_registry_holder as h\nh.REGISTRY['fake.one'] = 1\n")
    assert dict(reg.items()) == {"plain": "P", "fake.one": 1}
    assert module in sys.modules


def test_a_namespace_that_fails_to_import_stays_deferred(monkeypatch, tmp_path):
    reg, module = _registry_with_fake_namespace(monkeypatch, tmp_path, "raise ImportError('broken')\n")
    for _ in range(2):                     # the error again, not a silently missing op
        with pytest.raises(ImportError, match="broken"):
            reg.get("fake.one")
    with pytest.raises(ImportError, match="broken"):
        len(reg)


def test_a_deferred_namespace_is_dotted():
    """Deferred names are never identifiers: gradcli.ops' functions come from loaded ops."""
    with pytest.raises(ValueError, match="dotted"):
        OpRegistry().defer("gradcli.ops.aten", prefix="aten")
    import gradcli.ops as O

    every = sorted(n for n, op in O.OPS.items()           # (loads every deferred module)
                   if op.public and op.fn is not None and n.isidentifier())
    assert every == O.OP_FUNCTIONS and "mul" in every and "reenter" in every
    assert all(hasattr(O, n) for n in every)


# -- records (Note [Record classes]) -----------------------------------------------------------
def test_graph_records_behave_as_the_dataclasses_they_replace():
    from gradcli.graph import BackwardSpec, ExpectSpec, LeafSpec, NodeRun, OpSpec, Result

    spec = OpSpec(0, "a", "ops[0]", None, ["x"], ["y"], {})
    assert spec == OpSpec(0, "a", "ops[0]", None, ["x"], ["y"], {}, False, None)
    assert spec != OpSpec(1, "a", "ops[0]", None, ["x"], ["y"], {})
    assert not hasattr(spec, "__dict__")                # one per op: slots
    assert tuple(spec.stamp) == (("op_id", "a"), ("line", None))
    assert spec == OpSpec(0, "a", "ops[0]", None, ["x"], ["y"], {})     # the stamp is not compared
    assert repr(spec) == ("OpSpec(index=0, id='a', label='ops[0]', op=None, inputs=['x'], "
                          "outputs=['y'], args={}, retain_grad=False, line=None)")
    moved = spec.replace(args={"k": 1})
    assert moved.args == {"k": 1} and moved.inputs is spec.inputs and spec.args == {}
    assert tuple(moved.stamp) == tuple(spec.stamp)
    leaf = LeafSpec("x", (2,), "float64", "cpu", True, make=None)
    assert leaf.line is None and leaf.replace(line=3).line == 3 and leaf.replace().name == "x"
    with pytest.raises(TypeError):
        hash(leaf)                                      # mutable: unhashable, as before
    assert BackwardSpec(["l"], {}, None).retain_graph is False
    expect = ExpectSpec(grads={})
    assert (expect.rtol, expect.atol, expect.numeric, expect.order, expect.error) == (
        1e-7, 0.0, False, None, None)
    run = NodeRun("MulBackward0", "m", 1, 2, "cpu", "main", 1, 0, 0.0, 1.0)
    assert not hasattr(run, "__dict__") and run.to_json()["topological_nr"] == 2
    assert Result("g", {}, None, 0.1, 0.2).nodes_run == 0
    with pytest.raises(TypeError):
        OpSpec(0, "a", "ops[0]", None, ["x"], ["y"])     # a required field missing


def test_cli_records_behave_as_the_dataclasses_they_replace():
    from gradcli.cli import core

    opts = core.LoadOptions()
    assert opts.device_map == {} and opts.device_map is not core.LoadOptions().device_map
    assert opts == core.LoadOptions({}, False, False, None, None, None)
    with pytest.raises(AttributeError):
        opts.allow_code = True                          # frozen
    assert opts.allow_code is False
    assert core.Column("n") == core.Column("n", "left", False)
    case = core.JUnitCase("c", "n", failure="f")
    assert (case.time_s, case.error, case.skipped, case.failure) == (0.0, None, None, "f")
    assert core.JUnitSuite("s", [case]).file is None


def test_clean_escapes_without_its_pattern_and_with_it():
    from gradcli.cli.core import clean

    assert clean("plain text, 1.5 [x]") == "plain text, 1.5 [x]"
    assert clean("a\x1b[31mb\u202ec\ud800") == "a\\x1b[31mb\\u202ec\\ud800"
    assert clean("caf\u00e9") == "caf\u00e9"             # printable non-ASCII is kept
    assert clean(3) == "3"


# -- bytecode from the install step ---------------------------------------------------------------
def _recipe_commands(makefile, target_pattern):
    """The commands of the Makefile rule whose target line matches ``target_pattern``."""
    lines = makefile.splitlines()
    for i, line in enumerate(lines):
        if re.match(target_pattern, line):
            out = []
            for rule_line in lines[i + 1:]:
                if not rule_line.startswith("\t"):
                    break
                out.append(rule_line.strip())
            return out
    raise AssertionError(f"no rule {target_pattern!r} in the Makefile")


def test_after_the_install_step_a_run_without_bytecode_compiles_no_module(tmp_path):
    """The Makefile's install step compiles the package; a later run with
    PYTHONDONTWRITEBYTECODE=1 then reads every gradcli module from its .pyc
    (``python -v`` says "X.pyc matches X.py") and compiles none from source."""
    makefile = (ROOT / "Makefile").read_text()
    compile_cmds = [c for c in _recipe_commands(makefile, r"^\$\(STAMP\):") if "compileall" in c]
    assert compile_cmds == ["$(BIN)/python -m compileall -q gradcli"]
    copy = tmp_path / "installed"
    shutil.copytree(ROOT / "gradcli", copy / "gradcli",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", "gradcli"], cwd=copy, check=True,
                   timeout=300)
    tiny = _tiny_json(tmp_path / "tiny.json")
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-v", "-m", "gradcli", "run", str(tiny)],
                          capture_output=True, text=True, cwd=copy, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    package = str(copy / "gradcli")
    from_pyc = re.findall(r"# (\S+\.pyc) matches (\S+\.py)", proc.stderr)
    read = {src for _, src in from_pyc if src.startswith(package)}
    sources = {m for m in re.findall(r"# code object from '?([^'\s]+\.py)'?$", proc.stderr, re.M)
               if m.startswith(package)}
    assert len(read) > 20 and str(copy / "gradcli" / "loader" / "__init__.py") in read
    assert sources == set()                    # no gradcli module compiled from source
    assert not list(copy.rglob("*.cpython-*.opt-*.pyc"))  # (and nothing else written)


def _rich_table(title, columns, rows):
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from gradcli.cli import core

    table = Table(title=title, title_justify="left")
    for c in [core.Column(c) if isinstance(c, str) else c for c in columns]:
        table.add_column(c.name, justify=c.justify, overflow="ellipsis")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    buf = io.StringIO()
    Console(file=buf, markup=False, highlight=False, emoji=False, soft_wrap=False,
            width=core.PIPE_WIDTH).print(table)
    return buf.getvalue()


def test_titles_longer_than_their_table_are_wrapped_as_rich_wraps_them(capsys, monkeypatch):
    """A pipe gets the plain renderer (no rich import) whatever the title's length
    (a long graph path): the title lines are rich's, word for word."""
    import random

    from gradcli.cli import core

    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)
    rng = random.Random(12)
    pieces = ["a", "bb", "ccc", "/tmp/pytest-of-root/pytest-286/test_x/tiny.json", "x" * 30,
              "y" * 75, ":", "(", "gradients", "mlp"]
    titles = ["", " ", "   ", "t", " lead", "trail ", "a  b", "w" * 200,
              "mlp (/home/someone/projects/graphs/models/mlp/graph.yaml): gradients"]
    for _ in range(150):
        words = [rng.choice(pieces) for _ in range(rng.randint(1, 8))]
        titles.append("".join(w + " " * rng.choice([0, 1, 1, 1, 2, 3]) for w in words))
    for title in titles:
        for rows in ([["x", "1"]], [["y0", "[8]", "float64", "2.8256"]], [["z" * 40, "w" * 30]]):
            columns = ["tensor", core.Column("value", "right")] + (
                ["dtype", "norm"] if len(rows[0]) == 4 else [])
            core.print_table(title, columns, rows)
            got = capsys.readouterr().out
            assert got == _rich_table(title, columns, rows), repr(title)
