"""Rewrite the generated blocks of the docs from the tables they draw (the layers, the update's
stages, the gateway's states, the test counts).

    python scripts/render_docs.py [--check]

Each block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; the test suite fails
when one differs from its rendering. ``--check`` only names the stale blocks (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="render_docs.py")
    parser.add_argument("--check", action="store_true", help="only name the stale blocks")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    docs_blocks = importlib.import_module("tests.support.docs_blocks")
    stale = 0
    for page, name, spec in docs_blocks.BLOCKS:
        path = ROOT / page
        text = path.read_text()
        new = docs_blocks.replace_block(text, name, docs_blocks.renderer(spec)())
        if new != text:
            stale += 1
            print(f"{page}: {name} {'stale' if args.check else 'rewritten'}")
            if not args.check:
                shared_files = importlib.import_module("shared.files")
                shared_files.write_bytes_atomic(path, new.encode())
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
