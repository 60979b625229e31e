"""The gateway's restart-storm breaker: how long a start waits after too many in the window."""

from __future__ import annotations

from services.gateway import storm
from shared.files import read_json


def test_storm_breaker_backs_off_after_five_starts_in_the_window(tmp_path):
    now = 1000.0
    assert storm.delay_for([now - i for i in range(5)], now) == 0
    assert storm.delay_for([now - i for i in range(6)], now) == 1
    assert storm.delay_for([now - i for i in range(8)], now) == 4
    assert storm.delay_for([now - i for i in range(40)], now) == storm.MAX_DELAY
    assert storm.delay_for([now - 200 - i for i in range(10)], now) == 0  # outside the window
    path = tmp_path / "starts.json"
    delays = [storm.record_start(path, now + i) for i in range(7)]
    assert delays == [0, 0, 0, 0, 0, 1, 2]
    assert storm.record_start(path, now + 500) == 0  # the storm has passed
    assert len(read_json(path)["starts"]) == 1
