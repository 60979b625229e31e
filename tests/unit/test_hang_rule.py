"""The hang rule: when a supervisor kills a gateway its health checks find hung (K unhealthy
checks in a row, a gateway still starting not judged), and the gateway host's settings of it."""

from __future__ import annotations

import pytest

from fleet import hang
from fleet.health import HEALTHY, UNHEALTHY, UNKNOWN
from fleet.supervisors.host import HangCheckInvalid
from services.gateway_host.main import hang_policy

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


def _policy(tmp_path, text: str) -> hang.Policy:
    (tmp_path / "config.yaml").write_text(text)
    return hang_policy(tmp_path)


def test_the_host_takes_the_defaults_and_zero_turns_the_checks_off(tmp_path):
    assert hang_policy(tmp_path) == hang.Policy() and hang.Policy().enabled
    assert not _policy(tmp_path, "gateway_host:\n  health_interval: 0\n").enabled
    tuned = _policy(tmp_path, "gateway_host: {health_interval: 1, health_failures: 2, health_start_grace: 4.5}\n")
    assert tuned == hang.Policy(1.0, 2, 4.5)


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ("gateway_host: 5", "gateway_host"),
        ("gateway_host: {health_interval: -1}", "health_interval"),
        ("gateway_host: {health_interval: '5'}", "health_interval"),
        ("gateway_host: {health_interval: .nan}", "health_interval"),
        ("gateway_host: {health_start_grace: true}", "health_start_grace"),
        ("gateway_host: {health_failures: 0}", "health_failures"),
        ("gateway_host: {health_failures: 2.5}", "health_failures"),
        (f"gateway_host: {{health_failures: {hang.MAX_FAILURES + 1}}}", "health_failures"),
    ],
)
def test_a_bad_setting_stops_the_host_naming_its_key(tmp_path, settings, field):
    with pytest.raises(HangCheckInvalid) as refused:
        _policy(tmp_path, settings + "\n")
    assert refused.value.detail == {"field": field}
    assert field in refused.value.message
