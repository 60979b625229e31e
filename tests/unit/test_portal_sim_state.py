"""The portal simulator's state: its request log keeps the newest."""

from __future__ import annotations

from simulators.portal_sim.state import REQUEST_LOG_CAP, State


def test_request_log_keeps_the_newest() -> None:
    state = State("http://sim.invalid")
    for n in range(REQUEST_LOG_CAP + 5):
        state.record({"path": "/x", "n": n})
    entries = state.requests(None)
    assert len(entries) == REQUEST_LOG_CAP
    assert (entries[0]["n"], entries[-1]["n"]) == (5, REQUEST_LOG_CAP + 4)
