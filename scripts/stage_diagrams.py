"""Rewrite the update's stage diagrams in the docs from the stage table.

    python scripts/stage_diagrams.py [--check]

docs/updates.md holds the full timeline and README.md the short one, each between
``<!-- stages:begin -->`` and ``<!-- stages:end -->``. ``--check`` only says whether a block
differs from the table (exit 1). A file without the markers is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from services.updater.stages import short_timeline, timeline
from shared.files import write_bytes_atomic

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- stages:begin -->", "<!-- stages:end -->"
DIAGRAMS: dict[str, Callable[[], str]] = {"docs/updates.md": timeline, "README.md": short_timeline}


class MissingMarkers(ValueError):
    pass


def block(diagram: str) -> str:
    """What lies between the markers: the diagram as a fenced text block."""
    return f"\n```text\n{diagram}\n```\n"


def between(text: str) -> str:
    """The text between the markers; MissingMarkers when they are not there once each, in order."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise MissingMarkers(f"wants one {BEGIN} followed by one {END}")
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)]


def with_block(text: str, diagram: str) -> str:
    """``text`` with the block between the markers replaced by ``diagram``'s."""
    old = between(text)
    start = text.index(BEGIN) + len(BEGIN)
    return text[:start] + block(diagram) + text[start + len(old) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stage_diagrams.py")
    parser.add_argument("--check", action="store_true", help="only say whether a block is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, render in DIAGRAMS.items():
        path = ROOT / name
        text = path.read_text()
        try:
            new = with_block(text, render())
        except MissingMarkers as exc:
            print(f"stage_diagrams: {name} {exc}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(name)
            if not args.check:
                write_bytes_atomic(path, new.encode())
    for name in stale:
        print(f"{name}: {'stale' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
