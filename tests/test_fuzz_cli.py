"""scripts/fuzz_cli.py, the CLI's mutation fuzzer: what it counts as a finding, that
its mutants and synthetic cases are made from a seed, and that a hang is caught."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import fuzz_cli as F  # noqa: E402

P = "/g/case.yaml"


@pytest.mark.parametrize("code, err, expected", [
    (2, f"gradcli: error: {P}:3: ops[0] (sum): unknown op\n", None),
    (0, "", None),
    (3, f"gradcli: error: {P}:5: backward failed in FailBackward0: boom\n", None),
    (3, "gradcli: internal error: KeyError: 'x' (run with --debug for the traceback)\n",
     ("internal", "KeyError")),
    (3, f"gradcli: error: {P}:4: ops[0] 'e' (aten.embedding.default): internal error in op "
        "'aten.embedding.default' (a bug in gradcli, please report it): AttributeError: no\n",
     ("opbug", "aten.embedding.default:AttributeError")),
    (3, f"gradcli: error: {P}:4: backward failed in MmBackward0: shapes (2,3) and (2,3) not "
        "aligned\n", ("backward", "MmBackward0:shapes (")),
    (2, f"gradcli: error: {P}:3: ops[0] (sum\u2028): unknown op\n", ("multiline", "2")),
    (2, "gradcli: error: other.yaml:3: oops\n", ("unnamed-file", "gradcli: error: other.yaml:")),
    (2, f"gradcli: error: {P}:3: ops[0] (expand): operands could not be broadcast together\n",
     ("leaky-message", "expand:operands could not be broadcast")),
    (2, "Traceback (most recent call last):\n", ("traceback", "")),
    (7, "", ("exit-code", "7")),
])
def test_classify(code, err, expected):
    assert F.classify(["run"], P, code, "", err, None, "") == expected


def test_escaped_exception_and_hang_are_findings():
    tb = 'Traceback:\n  File "/r/gradcli/loader.py", line 12, in load\n'
    assert F.classify(["run"], P, None, "", "", ValueError("x"), tb) == \
        ("escaped", "ValueError@loader.py:12:load")
    assert F.classify(["run"], P, None, "", "", F.CaseTimeout(), "")[0] == "hang"


def test_mutants_and_synthetic_cases_follow_the_seed():
    seeds = F.seed_files()
    assert any(s.name == "mlp.yaml" for s in seeds)
    ops = F.registered_ops()
    assert "sum" in ops and any(o.startswith("aten.") for o in ops) and "delay" not in ops
    specs = F.op_specs()

    def make(seed):
        rng = random.Random(seed)
        mut, synth = F.Mutator(rng, ops, seeds), F.Synth(rng, specs)
        return [mut.mutate(rng.choice(seeds)) for _ in range(20)] + [synth.case() for _ in range(20)]
    # compared as text: a synthetic case may hold a NaN argument (a hostile value on
    # purpose), and NaN != NaN would fail the comparison of equal cases
    assert repr(make(5)) == repr(make(5)) and repr(make(5)) != repr(make(6))


@pytest.mark.timeout(60)
def test_a_case_past_its_time_limit_is_a_hang(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text("version: 1\ntensors:\n  x: {shape: [2], requires_grad: true}\nops:\n"
                    "  - {op: delay, inputs: [x], output: y, args: {ms: 8000}}\n"
                    "  - {op: sum, inputs: [y], output: loss}\nbackward: {roots: [loss]}\n")
    code, out, err, exc, tb = F.invoke(["run", "--no-multithreading", str(path)], 1)
    assert isinstance(exc, F.CaseTimeout) and code is None
    code, out, err, exc, tb = F.invoke(["run", str(tmp_path / "missing.yaml")], 20)
    assert exc is None and code == 2 and F.classify(["run"], str(tmp_path / "missing.yaml"),
                                                   code, out, err, exc, tb) is None
