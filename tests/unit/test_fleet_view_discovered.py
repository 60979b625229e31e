"""Rows the fleet view takes from discovery for a profile whose watch says ``down``: what the
survey found shows while the watch says down, and what the watch says otherwise wins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet import discovery
from hermes_cli.fleet_view import discovered, rows


def record(**changes) -> discovery.GatewayRecord:
    found = discovery.GatewayRecord(
        profile="coder",
        pid=4242,
        start_time=99,
        state="running",
        code_sha=None,
        code_version=None,
        active_turns=2,
        supervisor="unknown",
        source="state_file",
        home=Path("/nowhere/profiles/coder"),
    )
    return found._replace(**changes)


def down() -> dict:
    return {**rows.gone(rows.blank("coder", rows.LOCAL), rows.DOWN), "restarts_last_hour": 3}


def test_a_found_gateway_is_a_row_of_what_its_record_says():
    row = discovered.found_row(down(), record())
    assert (row["profile"], row["host"], row["pid"], row["state"], row["active_turns"]) == (
        "coder",
        rows.LOCAL,
        4242,
        "running",
        2,
    )
    assert row["health"]["state"] == "unknown" and "state file" in row["health"]["why"]
    assert row["restarts_last_hour"] == 3 and row["error"] is None
    assert set(row) == set(rows.blank("coder", rows.LOCAL))  # the same fields as every row


@pytest.fixture
def shown(monkeypatch):
    """A ``Discovered`` whose survey finds what the test says, and the rows it passed on."""
    passed: list[dict] = []
    stop_read, stop_write = os.pipe()
    view = discovered.Discovered(Path("/nowhere"), passed.append, stop_read)
    found: list[discovery.GatewayRecord] = []
    monkeypatch.setattr(discovered.discovery, "survey", lambda root, **kw: discovery.Survey(list(found), []))
    yield view, passed, found
    view.close()
    os.close(stop_read)
    os.close(stop_write)


def test_a_down_row_shows_what_the_survey_found_until_the_watch_hears_its_gateway(shown):
    view, passed, found = shown
    view.report(down())
    assert passed[-1]["state"] == rows.DOWN
    found.append(record())
    view._survey([(rows.LOCAL, "coder")])
    assert (passed[-1]["state"], passed[-1]["pid"]) == ("running", 4242)
    count = len(passed)
    view._survey([(rows.LOCAL, "coder")])  # nothing changed: nothing passed on
    assert len(passed) == count
    view.report(down())  # the watch says down again: the found gateway still shows
    assert (passed[-1]["state"], passed[-1]["pid"]) == ("running", 4242)
    heard = {**rows.blank("coder", rows.LOCAL), "state": "starting", "pid": 77}
    view.report(heard)  # the watch's own gateway: it wins
    assert passed[-1] == heard
    view._survey([(rows.LOCAL, "coder")])  # a survey begun while it was down changes nothing now
    assert passed[-1] == heard


def test_a_found_gateway_that_is_gone_shows_down_again(shown):
    view, passed, found = shown
    view.report(down())
    found.append(record())
    view._survey([(rows.LOCAL, "coder")])
    found.clear()
    view._survey([(rows.LOCAL, "coder")])
    assert passed[-1]["state"] == rows.DOWN and passed[-1]["pid"] is None


def test_another_hosts_row_is_never_surveyed_here_nor_mixed_with_a_local_one(shown):
    view, passed, found = shown
    found.append(record())
    remote = {**rows.gone(rows.blank("coder", "east"), rows.DOWN), "restarts_last_hour": 0}
    view.report(remote)
    view.report(down())
    view._survey([(rows.LOCAL, "coder")])
    assert [(row["host"], row["state"]) for row in passed[-2:]] == [("local", rows.DOWN), ("local", "running")]
    assert view._shown(("east", "coder"))["state"] == rows.DOWN  # its own row, untouched by this host's survey
