"""Rewrite the generated blocks of the docs from the tables they draw.

Each block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; the test suite fails
when one differs from its rendering. Run from the repository root: ``python scripts/render_docs.py``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (page, block, "module:function" that renders it)
BLOCKS = (("docs/architecture.md", "layers", "tests.unit.test_layers:render_arrows"),)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    docs_blocks = importlib.import_module("tests.support.docs_blocks")
    for page, name, renderer in BLOCKS:
        module, _, function = renderer.partition(":")
        body = getattr(importlib.import_module(module), function)()
        path = ROOT / page
        text = path.read_text()
        new = docs_blocks.replace_block(text, name, body)
        if new != text:
            path.write_text(new)
            print(f"{page}: {name} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
