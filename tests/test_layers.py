"""The package's imports read as layers with one-way arrows, and have no cycle.

cli -> (validate, stress: the click-free command cores) -> (loader, graph,
gradcheck, document, trace) -> ops -> autograd -> (devices, errors). Imports
inside functions count: a lazy import is still a dependency. Read from the source with ``ast``, so the test
sees every import, not only those a run happens to execute.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import gradcli

ROOT = Path(gradcli.__file__).parent

# Lower numbers are lower layers; a module may import its own layer or lower.
LAYERS = {
    "gradcli.devices": 0,
    "gradcli.errors": 0,
    "gradcli._version": 0,
    "gradcli.collector": 0,     # the cyclic collector paused (Note [Collector pauses])
    "gradcli.records": 0,      # record classes without dataclasses (Note [Record classes])
    "gradcli.autograd": 1,
    "gradcli.ops": 2,
    "gradcli.graph": 3,
    "gradcli.loader": 3,        # check.py, then build.py: a file -> a Graph
    "gradcli.gradcheck": 3,
    "gradcli.document": 3,
    "gradcli.trace": 3,
    "gradcli.precision": 3,    # the lowest floating dtype on each gradient path
    "gradcli.branches": 3,     # a graph replayed at float64 on a float32 run's branches
    "gradcli.bridges": 3,       # other formats <-> graph files (each imports its framework lazily)
    "gradcli.validate": 4,  # the command cores: click-free, below the CLI that prints them
    "gradcli.stress": 4,
    "gradcli.verdict": 4,   # the float32 policy of validate (norm-wise, against float64)
    "gradcli.parallel": 4,  # --jobs: spawned worker processes, results in input order
    "gradcli.cluster": 4,   # --scheduler: graph files as Dask tasks (dask imported lazily)
    "gradcli.cli": 5,       # the CLI layer: how its modules call each other is its own design
    "gradcli.__main__": 6,
    "gradcli.testing": 6,        # front ends beside the CLI: print what `validate` prints
    "gradcli.pytest_plugin": 6,
    "gradcli": 6,       # the package's lazy __getattr__ may reach anything
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(module, path, node, known):
    """The gradcli modules an import statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "gradcli"]
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] != "gradcli":
        return []
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else base)
    return out


@functools.lru_cache(maxsize=None)
def import_graph():
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(d for d in _resolve(name, path, node, mods) if d != name)
        graph[name] = deps
    return graph


def layer_of(module):
    best = None
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    assert best is not None, f"{module} has no layer in tests/test_layers.py"
    return best[1]


def test_every_module_has_a_layer():
    for module in _modules():
        layer_of(module)


def test_imports_only_go_down_the_layers():
    bad = []
    for module, deps in import_graph().items():
        for dep in deps:
            if layer_of(dep) > layer_of(module):
                bad.append(f"{module} imports {dep}")
    assert not bad, bad


CLI_LAYER = 5


def test_no_import_cycles():
    """No cycle below the CLI layer; the CLI layer counts as one node."""
    graph = {}
    for module, deps in import_graph().items():
        key = "<cli layer>" if layer_of(module) == CLI_LAYER else module
        graph.setdefault(key, set()).update(
            "<cli layer>" if layer_of(d) == CLI_LAYER else d for d in deps)
        graph[key].discard(key)
    cycles = _cycles(graph)
    assert not cycles, cycles


def _cycles(graph):
    state, cycles = {}, []

    def visit(module, stack):
        state[module] = 1
        stack.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    return cycles


def test_the_checker_sees_lazy_imports_and_cycles(tmp_path):
    """The walker counts an import inside a function, and the cycle check fails
    on a cycle (so the two tests above cannot pass vacuously)."""
    tree = ast.parse("def f():\n    from .autograd import engine\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    mods = _modules()
    assert _resolve("gradcli.errors", ROOT / "errors.py", node, mods) == ["gradcli.autograd.engine"]
    graph = import_graph()
    assert "gradcli.autograd.engine" in graph["gradcli.autograd.api"]
    assert layer_of("gradcli.autograd.engine") > layer_of("gradcli.errors")
    # A planted cycle is found.
    cycles = _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    assert cycles == ["a -> b -> c -> a"]


def test_autograd_api_does_not_import_tensor():
    assert "gradcli.autograd.tensor" not in import_graph()["gradcli.autograd.api"]


def test_errors_does_not_import_the_engine():
    assert import_graph()["gradcli.errors"] == set()


def test_tensor_operators_work_whichever_module_is_imported_first():
    """Tensor's operators are available once gradcli is imported, even when
    the user imports only gradcli.autograd; `import gradcli` alone loads no ops."""
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "import gradcli\n"
            "light = 'gradcli.ops' not in sys.modules\n"
            "from gradcli.autograd import Tensor\n"
            "a = Tensor(np.array([1.0, 2.0]), requires_grad=True)\n"
            "y = (a * a + 1.0).sum()\n"
            "y.backward()\n"
            "from gradcli.autograd.tensor import OPERATORS\n"
            "stand_ins = [n for n in OPERATORS if getattr(getattr(Tensor, n), 'stand_in', False)]\n"
            "print(light, y.grad_fn.name, a.grad.tolist(), stand_ins)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(None, 2)[:2] == ["True", "SumBackward0"], proc.stdout
    assert "[2.0, 4.0] []" in proc.stdout     # gradients right; every stand-in replaced


LOADER_CHECK = {"gradcli.loader.check", "gradcli.loader.check_ops",
                "gradcli.loader.check_tensors", "gradcli.loader.checker"}
LOADER_BUILD = {"gradcli.loader.build", "gradcli.loader.leaves", "gradcli.loader.bound_op"}


def test_the_loaders_two_steps_stay_apart():
    """The loader's check (what a bad file meets) does not reach into its build (what a
    run meets) but for ``bound_op.INPUT_ERRORS``, and the build imports no check module:
    ``gradcli.loader`` alone runs one after the other (docs/architecture.md)."""
    graph = import_graph()
    assert LOADER_CHECK | LOADER_BUILD <= set(graph)
    crossing = {(m, d) for m in LOADER_CHECK for d in graph[m] & LOADER_BUILD}
    assert crossing == {("gradcli.loader.check_ops", "gradcli.loader.bound_op")}
    assert not {(m, d) for m in LOADER_BUILD for d in graph[m] & LOADER_CHECK}
    assert {"gradcli.loader.check", "gradcli.loader.build"} <= graph["gradcli.loader"]
