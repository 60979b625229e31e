"""Generated blocks in the docs: a fenced text block between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` that a renderer owns, so a drawing of a table cannot drift from it.
``tests/unit/test_docs_blocks.py`` compares every block with its renderer;
``scripts/render_docs.py`` rewrites them."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

# (page, block, "module:function" that renders it)
BLOCKS: tuple[tuple[str, str, str], ...] = (
    ("docs/architecture.md", "layers", "tests.unit.test_layers:render_arrows"),
    ("docs/updates.md", "stages", "services.updater.stages:timeline"),
    ("README.md", "stages", "services.updater.stages:short_timeline"),
    ("docs/gateways.md", "states", "services.gateway.transitions:render"),
    ("docs/tcp-and-curve.md", "ops", "hermes_cli.mesh_ops:render"),
    ("docs/gateways.md", "metrics", "hermes_cli.metrics.families:render_table"),
)


def renderer(spec: str) -> Callable[[], str]:
    module, _, function = spec.partition(":")
    render: Callable[[], str] = getattr(importlib.import_module(module), function)
    return render


def body(drawing: str) -> str:
    """A drawing as its block holds it: ending in exactly one newline."""
    return drawing.rstrip("\n") + "\n"


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {re.escape(name)}:begin -->\n```text\n)(.*?)(```\n<!-- {re.escape(name)}:end -->)", re.S)


def block(text: str, name: str) -> str:
    """The block ``name`` of ``text``; AssertionError when it is missing or not one fenced block."""
    found = _pattern(name).findall(text)
    assert len(found) == 1, f"expected one '{name}' block, found {len(found)}"
    return str(found[0][1])


def replace_block(text: str, name: str, drawing: str) -> str:
    block(text, name)
    return _pattern(name).sub(lambda m: m.group(1) + body(drawing) + m.group(3), text)
