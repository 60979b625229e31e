"""How a log level is named (``HERMES_LOG_LEVEL``): a name in any case, or a number."""

from __future__ import annotations

import logging

import pytest

from shared.logs import parse_level


@pytest.mark.parametrize(
    "value, level",
    [
        ("DEBUG", logging.DEBUG),
        ("debug", logging.DEBUG),
        (" warning ", logging.WARNING),
        ("25", 25),
        ("loud", None),
        ("", None),
        ("-10", None),
        (None, None),
    ],
)
def test_a_level_is_a_name_in_any_case_or_a_number(value, level):
    assert parse_level(value) == level
