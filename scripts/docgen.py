"""The shared main of the scripts that generate a part of a doc from the code
(gen_op_docs.py, gen_onnx_docs.py): rewrite the part in place, or with --check exit 1
where the committed doc is out of date."""
from __future__ import annotations

import sys


def regenerate(doc, rewrite, argv, script):
    """``rewrite(text) -> text`` applied to ``doc``; ``script`` is named in the --check message."""
    text = doc.read_text(encoding="utf-8")
    new = rewrite(text)
    if "--check" in argv:
        if new != text:
            print(f"{doc} is out of date: run python scripts/{script}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        doc.write_text(new, encoding="utf-8")
        print(f"rewrote {doc}")
    return 0
