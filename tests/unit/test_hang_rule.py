"""The hang rule: when a supervisor kills a gateway its health checks find hung (K unhealthy
checks in a row, a gateway still starting not judged), and the settings that tune it."""

from __future__ import annotations

import pytest

from fleet import hang
from fleet.health import HEALTHY, UNHEALTHY, UNKNOWN

POLICY = hang.Policy(interval=5.0, failures=3, start_grace=30.0)
OLD = 100.0  # seconds since its start: past the start grace


def run(states: list[str], *, age: float = OLD) -> list[bool]:
    watch, kills = hang.Watch(), []
    for state in states:
        watch, kill = hang.after_check(watch, state, age, POLICY)
        kills.append(kill)
    return kills


def test_k_unhealthy_checks_in_a_row_kill_it_once_and_the_count_starts_again():
    assert run([UNHEALTHY] * 6) == [False, False, True, False, False, True]


@pytest.mark.parametrize("answered", [HEALTHY, UNKNOWN])
def test_an_answered_check_ends_the_run(answered):
    assert run([UNHEALTHY, UNHEALTHY, answered, UNHEALTHY, UNHEALTHY, UNHEALTHY]) == [False] * 5 + [True]


def test_a_gateway_still_starting_is_not_judged_until_its_grace_ends():
    assert run([UNHEALTHY] * 5, age=10.0) == [False] * 5
    assert run([UNHEALTHY] * 3, age=POLICY.start_grace) == [False, False, True]


def test_once_it_passed_a_check_it_is_judged_within_its_grace():
    assert run([HEALTHY, UNHEALTHY, UNHEALTHY, UNHEALTHY], age=5.0) == [False, False, False, True]
    # An unknown answer (draining, busy) does not end its start: only a healthy one does.
    assert run([UNKNOWN, UNHEALTHY, UNHEALTHY, UNHEALTHY], age=5.0) == [False] * 4


def test_a_watch_round_trips_and_anything_else_reads_as_a_fresh_one():
    watch = hang.Watch(2, True)
    assert hang.Watch.from_dict(watch.to_dict()) == watch
    for junk in (None, [], {"failures": -1, "passed": True}, {"failures": True, "passed": True}, {"failures": 1}):
        assert hang.Watch.from_dict(junk) == hang.Watch()


def test_settings_take_defaults_and_zero_turns_the_checks_off():
    assert hang.policy_from({}, "x") == hang.Policy()
    assert hang.Policy().enabled
    off = hang.policy_from({"health_interval": 0}, "x")
    assert not off.enabled
    tuned = hang.policy_from({"health_interval": 1, "health_failures": 2, "health_start_grace": 4.5}, "x")
    assert tuned == hang.Policy(1.0, 2, 4.5)


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"health_interval": -1}, "health_interval"),
        ({"health_interval": "5"}, "health_interval"),
        ({"health_interval": float("nan")}, "health_interval"),
        ({"health_start_grace": True}, "health_start_grace"),
        ({"health_failures": 0}, "health_failures"),
        ({"health_failures": 2.5}, "health_failures"),
        ({"health_failures": hang.MAX_FAILURES + 1}, "health_failures"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(settings, field):
    with pytest.raises(hang.HangCheckInvalid) as refused:
        hang.policy_from(settings, "config.yaml key gateway_host")
    assert refused.value.detail == {"field": field}
    assert f"gateway_host.{field}" in refused.value.message
