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

from gradcli.ops.catalog import replace_section  # noqa: E402

DOC = ROOT / "docs" / "graph-format.md"


def main(argv):
    text = DOC.read_text(encoding="utf-8")
    new = replace_section(text)
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is out of date: run python scripts/gen_op_docs.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"rewrote the op table in {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
