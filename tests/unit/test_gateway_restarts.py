"""A profile's restart record: carried from one gateway process to the next through its state
file, and the count of the last hour; a torn or foreign file starts the count afresh."""

from __future__ import annotations

import json
import logging

import pytest

from services.gateway import restarts
from services.gateway.restarts import HOUR, KEPT, Restarts, after_start, from_record, last_hour
from services.gateway.state import restarts_at_start
from shared.layout import GATEWAY_STATE_FILE

NOW = 1_800_000_000.0


def test_the_last_hour_counts_the_restarts_in_the_hour_up_to_now():
    times = [NOW - HOUR - 1, NOW - HOUR, NOW - HOUR + 1, NOW - 10, NOW]
    assert last_hour(times, NOW) == 3  # the hour's start itself is outside it, now inside


def test_a_restart_ahead_of_the_clock_is_not_in_the_last_hour():
    assert last_hour([NOW + 5, NOW - 5], NOW) == 1


def test_a_first_start_is_no_restart_and_each_start_after_it_is_one():
    first = after_start(None, NOW)
    assert first == Restarts(0, ())
    second = after_start(first, NOW + 1)
    third = after_start(second, NOW + 2)
    assert third == Restarts(2, (NOW + 1, NOW + 2))
    assert third.summary(NOW + 2) == {"total": 2, "last_hour": 2}
    assert third.summary(NOW + 2 + HOUR) == {"total": 2, "last_hour": 0}  # the total stays


def test_the_record_keeps_the_newest_restarts_and_the_whole_total():
    record = Restarts()
    for n in range(KEPT + 10):
        record = after_start(record, NOW + n)
    assert record.total == KEPT + 10
    assert record.times == tuple(NOW + n for n in range(10, KEPT + 10))
    assert from_record(json.loads(json.dumps(record.to_dict()))) == record


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        "3",
        {"total": -1, "times": []},
        {"total": 1.5, "times": []},
        {"total": True, "times": []},
        {"total": 1},
        {"total": 1, "times": ["x"]},
        {"total": 1, "times": [float("nan")]},
    ],
)
def test_a_record_of_another_shape_is_unreadable(value):
    with pytest.raises(restarts.Unreadable):
        from_record(value)


def write_state(home, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / GATEWAY_STATE_FILE).write_text(text)


def test_a_start_carries_its_predecessors_record_on(tmp_path):
    assert restarts_at_start(tmp_path, NOW) == Restarts(0, ())  # no state file: the first start
    write_state(tmp_path, json.dumps({"gateway_state": "stopped", "restarts": {"total": 4, "times": [NOW - 7200]}}))
    carried = restarts_at_start(tmp_path, NOW)
    assert carried == Restarts(5, (NOW - 7200, NOW))
    assert carried.summary(NOW) == {"total": 5, "last_hour": 1}


def test_a_predecessor_that_kept_no_record_counts_this_start_alone(tmp_path, caplog):
    write_state(tmp_path, json.dumps({"kind": "hermes-gateway", "gateway_state": "stopped"}))  # the Hermes Agent's
    with caplog.at_level(logging.WARNING):
        assert restarts_at_start(tmp_path, NOW) == Restarts(1, (NOW,))
    assert caplog.records == []


@pytest.mark.parametrize(
    "text",
    ['{"gateway_state": "runn', "[1, 2]", '{"restarts": {"total": "many", "times": []}}', ""],
    ids=["torn", "not an object", "foreign record", "empty"],
)
def test_a_torn_or_foreign_state_file_starts_the_count_afresh_and_says_so(tmp_path, caplog, text):
    write_state(tmp_path, text)
    with caplog.at_level(logging.WARNING):
        assert restarts_at_start(tmp_path, NOW) == Restarts(1, (NOW,))
    assert any("counting restarts afresh" in r.getMessage() for r in caplog.records)
