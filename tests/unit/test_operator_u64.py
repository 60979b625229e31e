"""Offsets on the operator daemon's wire: canonical u64 decimal strings, one spelling per value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.operator import u64
from shared.protocol import RemoteError


@pytest.mark.parametrize("text,value", [("0", 0), ("1", 1), ("10", 10), ("18446744073709551615", u64.MAX)])
def test_canonical_strings_parse(text, value):
    assert u64.parse(text, "after_offset") == value


@pytest.mark.parametrize(
    "junk",
    ["", "01", "00", "-0", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "18446744073709551616", "9" * 21, "١"],
)
def test_other_spellings_are_refused_naming_the_field(junk):
    with pytest.raises(RemoteError) as caught:
        u64.parse(junk, "after_offset")
    assert caught.value.code == "invalid_field"
    assert caught.value.detail == {"field": "after_offset"}
    assert "after_offset" in caught.value.message


@pytest.mark.parametrize("junk", [0, 1, True, None, 1.0, b"1", ["1"]])
def test_a_value_that_is_not_a_string_is_refused(junk):
    with pytest.raises(RemoteError) as caught:
        u64.parse(junk, "runtime_generation")
    assert caught.value.detail == {"field": "runtime_generation"}


@given(st.integers(min_value=0, max_value=u64.MAX))
def test_every_value_round_trips(value):
    assert u64.parse(u64.to_wire(value), "x") == value


@pytest.mark.parametrize("bug", [-1, u64.MAX + 1, True])
def test_formatting_an_out_of_range_int_is_a_bug(bug):
    with pytest.raises(ValueError):
        u64.to_wire(bug)
