"""Rewrite the op table of docs/graph-format.md from the op registry.

    python scripts/gen_op_docs.py          # rewrite the table in place
    python scripts/gen_op_docs.py --check  # exit 1 if the docs are out of date

tests/test_op_contract.py fails when the committed docs drift from the code.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gradcli.ops.catalog import replace_section  # noqa: E402

from docgen import regenerate  # noqa: E402

DOC = ROOT / "docs" / "graph-format.md"


def main(argv):
    return regenerate(DOC, replace_section, argv, "gen_op_docs.py")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
