"""The gateway's restart-storm breaker: how long a start waits after too many in the window."""

from __future__ import annotations

from services.gateway import storm
from shared import restart_storm
from shared.files import read_json


def test_storm_breaker_backs_off_after_five_starts_in_the_window(tmp_path):
    now = 1000.0
    assert restart_storm.delay_for([now - i for i in range(5)], now) == 0
    assert restart_storm.delay_for([now - i for i in range(6)], now) == 1
    assert restart_storm.delay_for([now - i for i in range(8)], now) == 4
    assert restart_storm.delay_for([now - i for i in range(40)], now) == restart_storm.MAX_DELAY
    assert restart_storm.delay_for([now - 200 - i for i in range(10)], now) == 0  # outside the window
    path = tmp_path / "starts.json"
    delays = [storm.record_start(path, now + i) for i in range(7)]
    assert delays == [0, 0, 0, 0, 0, 1, 2]
    assert storm.record_start(path, now + 500) == 0  # the storm has passed
    assert len(read_json(path)["starts"]) == 1


def test_a_start_after_a_planned_restart_is_not_counted_but_a_crash_loop_still_backs_off(tmp_path):
    now = 1000.0
    path = tmp_path / "starts.json"
    for i in range(5):  # a start, then four updates (an update and its repair, twice) in two minutes
        assert storm.record_start(path, now + i) == 0
        storm.record_planned_exit(path, now + i + 0.5)
    assert storm.record_start(path, now + 5) == 0
    assert read_json(path) == {"starts": [now]}  # the mark is spent by the start that follows it
    crashes = [storm.record_start(path, now + 6 + i) for i in range(6)]  # no mark: the process died
    assert crashes == [0, 0, 0, 0, 1, 2]
    storm.record_planned_exit(path, now + 20)
    assert storm.record_start(path, now + 21) == 0  # asked for, so not a storm, even inside one
    assert storm.record_start(path, now + 22) == 4  # the next crash carries on where the storm was


def test_a_hand_edited_record_is_neither_a_mark_nor_a_start(tmp_path):
    path = tmp_path / "starts.json"
    path.write_text('{"starts": 7, "planned": "yes"}')
    assert storm.record_start(path, 1000.0) == 0
    assert read_json(path) == {"starts": [1000.0]}
