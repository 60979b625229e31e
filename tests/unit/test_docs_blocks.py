"""Every generated block of the docs is what its renderer draws today."""

from __future__ import annotations

import pytest

from tests.support.docs_blocks import BLOCKS, block, body, renderer, replace_block
from tests.support.processes import ROOT


@pytest.mark.parametrize(("page", "name", "spec"), BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_the_block_is_its_renderers_drawing(page, name, spec):
    assert block((ROOT / page).read_text(), name) == body(renderer(spec)()), (
        f"{page}'s '{name}' block is stale: run python scripts/render_docs.py"
    )


def test_a_block_is_found_once_and_replaced_whole():
    text = "a\n<!-- x:begin -->\n```text\nold\n```\n<!-- x:end -->\nb\n"
    assert block(text, "x") == "old\n"
    assert replace_block(text, "x", "new\nlines") == text.replace("old\n", "new\nlines\n")
    with pytest.raises(AssertionError):
        block(text + text, "x")
    with pytest.raises(AssertionError):
        block("no block here", "x")
