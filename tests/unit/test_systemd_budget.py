"""The blunt restart's client budget: systemd's spans read as systemd writes them (checked
against real systemd 252 output), a bounded fallback for unusable limits, and the cap."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.supervisors import systemd
from services.updater.restart import systemd_budget
from services.updater.restart.systemd_budget import MAX_BUDGET, PHASE_FALLBACK, parse_span, restart_budget
from tests.support.systemd_captures import CAPTURES

SLACK = systemd.CLIENT_SLACK
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7us", 7e-6),
        ("7usec", 7e-6),
        ("7µs", 7e-6),
        ("7μs", 7e-6),
        ("250ms", 0.25),
        ("250msec", 0.25),
        ("3s", 3.0),
        ("3sec", 3.0),
        ("1second", 1.0),
        ("3seconds", 3.0),
        ("2m", 2 * MINUTE),
        ("2min", 2 * MINUTE),
        ("1minute", MINUTE),
        ("2minutes", 2 * MINUTE),
        ("2h", 2 * HOUR),
        ("2hr", 2 * HOUR),
        ("1hour", HOUR),
        ("2hours", 2 * HOUR),
        ("2d", 2 * DAY),
        ("1day", DAY),
        ("2days", 2 * DAY),
        ("2w", 14 * DAY),
        ("1week", 7 * DAY),
        ("2weeks", 14 * DAY),
        ("1M", 30.44 * DAY),
        ("1month", 30.44 * DAY),
        ("2months", 60.88 * DAY),
        ("1y", 365.25 * DAY),
        ("1year", 365.25 * DAY),
        ("2years", 730.5 * DAY),
    ],
)
def test_every_unit_systemd_knows(text, seconds):
    assert parse_span(text) == pytest.approx(seconds, rel=1e-4)


def test_minutes_and_months_differ_by_case():
    assert parse_span("1m") == MINUTE
    assert parse_span("1M") == 2629800.0  # systemd's USEC_PER_MONTH


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1min 30s", 90.0),
        ("1min 10s", 70.0),
        ("1d 6h", 30 * HOUR),
        ("2.500000s", 2.5),
        ("2500ms", 2.5),
        ("1h 2min 3s", HOUR + 2 * MINUTE + 3),
        ("1min30s", 90.0),  # systemd reads parts without blanks too
        ("5 min", 5 * MINUTE),
        ("1y 1month", 365.25 * DAY + 2629800.0),
        (" 1w ", 7 * DAY),
        (".5s", 0.5),
    ],
)
def test_combined_spans(text, seconds):
    assert parse_span(text) == pytest.approx(seconds)


def _captured_spans() -> set[str]:
    spans = set()
    for line in (CAPTURES / "systemd-252-capture.txt").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name in ("TimeoutStartUSec", "TimeoutStopUSec"):
            spans.add(value)
    return spans


CAPTURED = {
    "1min 30s": 90.0,
    "1min 10s": 70.0,
    "infinity": math.inf,
    "1d 6h": 30 * HOUR,
    "1w": 7 * DAY,
    "2.500000s": 2.5,
}


def test_every_span_systemd_252_printed():
    assert _captured_spans() == set(CAPTURED)
    assert {text: parse_span(text) for text in CAPTURED} == CAPTURED


def test_raw_numbers_are_microseconds():
    assert parse_span(90_000_000) == 90.0
    assert parse_span("90000000") == 90.0
    assert parse_span(2_500_000) == 2.5
    assert parse_span(0) == 0
    assert parse_span("1") == 1e-6
    assert parse_span("0") == 0
    assert parse_span(2**64 - 1) == math.inf  # USEC_INFINITY, as D-Bus carries it
    assert parse_span(str(2**64 - 1)) == math.inf


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        "   ",
        "junk",
        "s",
        "1.5",
        "-5s",
        "1min -30s",
        "1 min 30",
        "1x",
        "1sec2",
        "1e3s",
        "12 34s",
        "infinity s",
        "Infinity",
        "1,5s",
        "1min, 30s",
        "٣s",
        "²s",
        2**64,
        -1,
        str(2**64),
        "9" * 5000,
        True,
        1.5,
        b"90s",
        ["90s"],
        "99999999999999y",  # beyond what systemd can hold
    ],
)
def test_junk_is_none(junk):
    assert parse_span(junk) is None


def test_budget_is_stop_plus_start_plus_slack():
    assert restart_budget("1min 10s", "1min 30s") == 70 + 90 + SLACK
    assert restart_budget(70_000_000, "2.500000s") == 70 + 2.5 + SLACK
    assert restart_budget("1d 6h", "1w") == 30 * HOUR + 7 * DAY + SLACK


def test_a_start_after_a_drain_waits_for_the_start_only():
    assert restart_budget("1w", "2.500000s", start_only=True) == 2.5 + SLACK
    assert restart_budget("1min 10s", "1min 30s", start_only=True) == 90 + SLACK
    assert restart_budget(None, None, start_only=True) == PHASE_FALLBACK + SLACK


@pytest.mark.parametrize("unusable", [None, "", "junk", "infinity", "0", 0, 2**64 - 1])
def test_a_phase_without_a_usable_limit_counts_90_seconds(unusable):
    assert restart_budget(unusable, "1min") == PHASE_FALLBACK + 60 + SLACK
    assert restart_budget("1min", unusable) == 60 + PHASE_FALLBACK + SLACK
    assert restart_budget(unusable, unusable) == 2 * PHASE_FALLBACK + SLACK


def test_the_captured_units_budgets():
    # hermes-gateway-workbench: TimeoutStopSec=0 is shown as infinity; -ops: start infinity.
    assert restart_budget("infinity", "1min 30s") == PHASE_FALLBACK + 90 + SLACK
    assert restart_budget("1d 6h", "infinity") == 30 * HOUR + PHASE_FALLBACK + SLACK
    assert restart_budget("1w", "2.500000s") == 7 * DAY + 2.5 + SLACK


def test_the_budget_is_capped_below_the_millisecond_poll_limit():
    assert MAX_BUDGET < (2**31 - 1) / 1000
    assert MAX_BUDGET * 1000 + 1000 <= 2**31 - 1  # a second of headroom once in milliseconds
    assert restart_budget("1y", "1y") == MAX_BUDGET
    assert restart_budget("1w", "1w") == 14 * DAY + SLACK  # under the cap (24.8 days): exact
    assert restart_budget("1w", "1M") == MAX_BUDGET
    assert restart_budget("99999y", "1y", start_only=True) == restart_budget("1y", "1y", start_only=True)


def test_the_slack_is_read_when_the_budget_is_computed(monkeypatch):
    monkeypatch.setattr(systemd_budget, "CLIENT_SLACK", 0.0)
    assert restart_budget("1s", "1s", start_only=True) == 1.0


_SPAN_UNITS = st.sampled_from(["us", "ms", "s", "min", "h", "d", "w", "M", "y", "sec", "minutes", "years"])
spans = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10**9), _SPAN_UNITS).map(lambda part: f"{part[0]}{part[1]}"),
    min_size=1,
    max_size=4,
).map(" ".join)
limits = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=2**70).map(str),
    st.just("infinity"),
    spans,
    st.text(max_size=30),
)


@given(stop=limits, start=limits, start_only=st.booleans())
def test_every_budget_is_finite_and_bounded(stop, start, start_only):
    budget = restart_budget(stop, start, start_only=start_only)
    assert math.isfinite(budget)
    assert SLACK <= budget <= MAX_BUDGET < (2**31 - 1) / 1000


@given(spans)
def test_every_well_formed_span_parses(text):
    seconds = parse_span(text)
    assert seconds is None or 0 <= seconds < 2**64 / 1e6  # None only past systemd's range
