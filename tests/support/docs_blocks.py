"""Generated blocks in the docs: text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
that a renderer owns. A test compares each block with its renderer; ``scripts/render_docs.py``
rewrites them."""

from __future__ import annotations

import re


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {re.escape(name)}:begin -->\n```text\n)(.*?)(```\n<!-- {re.escape(name)}:end -->)", re.S)


def block(text: str, name: str) -> str:
    """The block ``name`` of ``text``; AssertionError when it is missing or not one fenced block."""
    found = _pattern(name).findall(text)
    assert len(found) == 1, f"expected one '{name}' block, found {len(found)}"
    return found[0][1]


def replace_block(text: str, name: str, body: str) -> str:
    block(text, name)
    return _pattern(name).sub(lambda m: m.group(1) + body + m.group(3), text)
