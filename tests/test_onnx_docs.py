"""docs/onnx.md is generated from the ONNX mapping table and must not drift from it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("gen_onnx_docs",
                                                  ROOT / "scripts" / "gen_onnx_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_onnx_docs_match_the_mapping_table():
    gen = _script()
    text = (ROOT / "docs" / "onnx.md").read_text(encoding="utf-8")
    assert gen.replace_section(text) == text, \
        "docs/onnx.md drifted: run python scripts/gen_onnx_docs.py"


def test_every_mapped_operator_has_a_row():
    from gradcli.bridges.onnx.table import OPERATORS

    rows = {line.split("|")[1].strip() for line in _script().render().splitlines()
            if line.startswith("| ") and not line.startswith("| ONNX")}
    assert set(OPERATORS) <= rows
