"""The fleet view's rows: what a gateway's status answer, its events and its going away make of
its row; a peer's field of the wrong shape keeps what the row knew."""

from __future__ import annotations

import pytest

from hermes_cli.fleet_view import rows

SHA, OTHER = "a" * 40, "b" * 40


def status(**changes) -> dict:
    answer = {
        "pid": 4242,
        "profile": "coder",
        "state": "running",
        "code_sha": SHA,
        "active_turns": 2,
        "turns": {"finished": 7, "last_seconds": 0.25},
        "restarts": {"total": 3, "last_hour": 1},
    }
    return {**answer, **changes}


def running() -> dict:
    return rows.answered(rows.blank("coder", rows.LOCAL), status())


def test_a_status_answer_fills_the_row():
    row = running()
    assert {
        k: row[k] for k in ("pid", "state", "code_sha", "active_turns", "last_turn_seconds", "restarts_last_hour")
    } == {
        "pid": 4242,
        "state": "running",
        "code_sha": SHA,
        "active_turns": 2,
        "last_turn_seconds": 0.25,
        "restarts_last_hour": 1,
    }
    assert rows.code(row, SHA) == rows.CURRENT and rows.code(row, OTHER) == rows.STALE
    assert rows.code(row, None) is None


@pytest.mark.parametrize(
    ("field", "value", "kept"),
    [
        ("state", "exploded", "starting"),  # no state of a gateway: the row's stays
        ("active_turns", -1, None),
        ("active_turns", True, None),
        ("pid", "4242", None),
        ("code_sha", 12, None),
    ],
)
def test_a_field_of_the_wrong_shape_is_not_taken(field, value, kept):
    before = {**rows.blank("coder", rows.LOCAL), "state": "starting"}
    row = rows.answered(before, status(**{field: value}))
    assert row[field] == kept


def test_turns_and_restarts_of_the_wrong_shape_keep_what_the_row_knew():
    row = rows.answered(running(), status(turns=[1], restarts={"last_hour": "many"}))
    assert row["last_turn_seconds"] == 0.25
    assert row["restarts_last_hour"] is None  # a map that says it wrongly says none


def test_another_process_answering_drops_what_the_last_one_said_of_itself():
    row = rows.judged(running(), 4242, {"state": "healthy", "why": None})
    assert row["health"]["state"] == "healthy"
    again = rows.answered(row, status(pid=5151, turns={"finished": 0, "last_seconds": None}))
    assert again["health"]["state"] == "unknown" and again["last_turn_seconds"] is None
    same = rows.answered(row, status())
    assert same["health"]["state"] == "healthy"


def test_a_verdict_on_a_process_gone_since_is_dropped():
    row = running()
    assert rows.judged(row, 9999, {"state": "healthy", "why": None})["health"]["state"] == "unknown"
    assert (
        rows.judged(rows.gone(row, rows.DOWN), None, {"state": "healthy", "why": None})["health"]["state"] == "unknown"
    )


def test_an_event_moves_the_state_and_turns_and_ignores_what_it_cannot_trust():
    row = rows.heard(running(), {"state": "draining", "active_turns": 1, "last_turn_seconds": 1.5})
    assert (row["state"], row["active_turns"], row["last_turn_seconds"]) == ("draining", 1, 1.5)
    for junk in (None, [1], {"state": "nonsense", "active_turns": "x", "last_turn_seconds": -3}):
        assert rows.heard(row, junk) == row


@pytest.mark.parametrize(("state", "why"), [(rows.DOWN, "no process"), (rows.OFFLINE, "not be reached")])
def test_a_gateway_gone_keeps_only_who_it_was_and_its_restarts(state, why):
    row = rows.gone(running(), state, {"code": "connection_lost"})
    assert (row["profile"], row["host"], row["state"], row["pid"], row["code_sha"]) == (
        "coder",
        rows.LOCAL,
        state,
        None,
        None,
    )
    assert row["restarts_last_hour"] == 1
    assert why in row["health"]["why"] and row["error"] == {"code": "connection_lost"}


def test_the_cells_say_the_state_its_error_the_code_and_what_is_owed():
    owed = {"coder": {"expected": SHA, "state": "down"}}
    assert rows.cells(running(), SHA, owed) == (
        "coder",
        "local",
        "4242",
        "running",
        "unknown",
        "aaaaaaaa current",
        "2",
        "0.25s",
        "1",
        "restart (down)",
    )
    gone = rows.cells(rows.gone(running(), rows.OFFLINE, {"code": "timeout"}), SHA, {})
    assert gone[2:6] == ("-", "offline: timeout", "unknown", "-") and gone[-1] == "-"
    assert len(rows.cells(running(), None, {})) == len(rows.HEADERS)


def test_the_tally_counts_rows_by_state():
    assert rows.tally([running(), running(), rows.gone(running(), rows.DOWN)]) == {"running": 2, "down": 1}


def test_a_gateway_here_that_does_not_answer_is_down_when_going_and_unresponsive_when_silent():
    assert rows.unanswered_here(running(), "connection_reset")["state"] == rows.DOWN
    assert rows.unanswered_here(running(), "connection_reset")["error"] is None
    silent = rows.unanswered_here(running(), "timeout")
    assert (silent["state"], silent["pid"], silent["error"]) == (rows.UNRESPONSIVE, 4242, {"code": "timeout"})


def test_another_installs_gateway_is_judged_by_neither_this_installs_code_nor_its_debts():
    sha = "a" * 40
    owed = {"coder": {"state": "owed"}}
    ours = {**running(), "code_sha": "b" * 40}
    theirs = {**rows.answered(rows.blank("coder", "east", own_install=False), status()), "code_sha": "b" * 40}
    assert rows.code(ours, sha) == rows.STALE
    assert rows.for_json(ours, sha, owed)["owed"] == {"state": "owed"}
    assert rows.code(theirs, sha) is None
    assert rows.for_json(theirs, sha, owed)["owed"] is None
    cells = rows.cells(theirs, sha, owed)
    assert cells[5] == "bbbbbbbb" and cells[-1] == "-"
