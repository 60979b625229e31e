"""Rewrite the gateway's state diagram in docs/gateways.md from the transition table.

    python scripts/gateway_states_diagram.py

The diagram lies between ``<!-- states:begin -->`` and ``<!-- states:end -->``, as
``services.gateway.transitions.render`` draws it. A doc without the markers is one line on
stderr and exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

from services.gateway.transitions import render
from shared.files import write_bytes_atomic

ROOT = Path(__file__).resolve().parent.parent
DOC = "docs/gateways.md"
BEGIN, END = "<!-- states:begin -->", "<!-- states:end -->"


class MissingMarkers(ValueError):
    pass


def with_block(text: str, diagram: str) -> str:
    """``text`` with what lies between the markers replaced by ``diagram`` as a fenced block."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise MissingMarkers(f"wants one {BEGIN} followed by one {END}")
    return text[: text.index(BEGIN) + len(BEGIN)] + f"\n```text\n{diagram}\n```\n" + text[text.index(END) :]


def rewrite(path: Path) -> bool:
    """Put the table's diagram into the doc at ``path``; whether it was stale."""
    text = path.read_text()
    new = with_block(text, render())
    if new != text:
        write_bytes_atomic(path, new.encode())
    return new != text


def main() -> int:
    try:
        stale = rewrite(ROOT / DOC)
    except MissingMarkers as exc:
        print(f"gateway_states_diagram: {DOC} {exc}", file=sys.stderr)
        return 2
    print(f"{DOC}: {'rewritten' if stale else 'as it is'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
