"""A home's ``.env``: the grammar, and refusals that never quote the line (it may be a secret)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gateway import dotenv


def test_the_common_forms_are_read():
    text = "\n".join(
        [
            "# a comment",
            "",
            "PLAIN=abc123",
            "  SPACED = value with spaces  ",
            "export EXPORTED=yes",
            "SINGLE='kept $AS \\n written' # trailing comment",
            'DOUBLE="line\\nbreak \\"quoted\\" back\\\\slash"',
            "BARE=before # after",
            "EMPTY=",
            "TWICE=first",
            "TWICE=second",
        ]
    )
    assert dotenv.parse(text) == {
        "PLAIN": "abc123",
        "SPACED": "value with spaces",
        "EXPORTED": "yes",
        "SINGLE": "kept $AS \\n written",
        "DOUBLE": 'line\nbreak "quoted" back\\slash',
        "BARE": "before",
        "EMPTY": "",
        "TWICE": "second",
    }


@pytest.mark.parametrize(
    "line",
    [
        "NO_EQUALS sk-secret-value",
        "1BAD=sk-secret-value",
        "BAD NAME=sk-secret-value",
        "OPEN='sk-secret-value",
        'OPEN="sk-secret-value',
        "AFTER='sk-secret-value' junk",
        'AFTER="sk-secret-value" junk',
    ],
)
def test_a_line_that_is_not_name_value_is_refused_by_its_number_alone(line):
    with pytest.raises(dotenv.DotenvInvalid) as caught:
        dotenv.parse(f"OK=1\n{line}\n", source="/h/.env")
    assert caught.value.message == "/h/.env, line 2: not a NAME=value line"
    assert "sk-secret" not in repr(caught.value.to_dict())


def test_an_oversized_file_is_refused():
    with pytest.raises(dotenv.DotenvInvalid, match="larger than"):
        dotenv.parse("A=" + "x" * dotenv.MAX_BYTES)


@given(st.text(max_size=400))
def test_any_text_is_read_or_refused_with_the_typed_error(text):
    try:
        found = dotenv.parse(text)
    except dotenv.DotenvInvalid as exc:
        assert exc.code == "dotenv_invalid"
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())
