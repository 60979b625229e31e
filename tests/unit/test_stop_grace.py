"""The stop grace a service reads from its environment: a number of seconds in bounds, the
host default where none is set, and a typed error naming the field for anything else."""

from __future__ import annotations

import pytest

from shared.stop_grace import DEFAULT, ENV, StopGraceInvalid, stop_grace


def test_the_default_where_none_is_set():
    assert stop_grace({}) == DEFAULT == 5.0
    assert stop_grace({ENV: " "}) == DEFAULT


@pytest.mark.parametrize(("text", "seconds"), [("25", 25.0), ("0", 0.0), (" 7.5 ", 7.5), ("3600", 3600.0)])
def test_seconds_in_bounds(text, seconds):
    assert stop_grace({ENV: text}) == seconds


@pytest.mark.parametrize("text", ["30s", "-1", "nan", "inf", "3601", "1e9", "twenty"])
def test_anything_else_is_refused_naming_the_field(text):
    with pytest.raises(StopGraceInvalid) as refused:
        stop_grace({ENV: text})
    assert refused.value.code == "stop_grace_invalid"
    assert refused.value.detail == {"field": ENV, "value": text}
    assert ENV in refused.value.message
