"""Commit-confirm's rules: the duration a command line gives, the obligation's transitions (a
confirm only before the deadline, a rollback only after it), what a timer does, and
supervisord's event protocol as the timer speaks it."""

from __future__ import annotations

import io
import json
import os

import pytest

from fleet.cli_grammar import UsageError, build_top_level_parser, quiet_usage_errors
from services.updater import confirm_timer
from services.updater.confirm import (
    ConfirmTooLate,
    NothingToConfirm,
    arm,
    claim,
    clear,
    confirm_update,
    mark_failed,
    owed_confirm,
    pending_line,
    read_confirm,
    settled,
    withdraw,
)
from services.updater.confirm_timer import decide, listen, lock_path, settle_confirm
from services.updater.obligations import confirm_path
from shared.files import StateFileCorrupt
from shared.locks import probe

OLD, NEW = "a" * 40, "b" * 40
NOW = 1_800_000_000.0


def parse(*words: str):
    with quiet_usage_errors():
        return build_top_level_parser().parse_args(["update", *words])


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("1d", 86400.0), ("5", 5.0)]
)
def test_a_duration_is_read_as_an_operator_writes_it(text, seconds):
    assert parse("--confirm-within", text).confirm_within == seconds


@pytest.mark.parametrize("text", ["4", "8d", "nan", "inf", "-5m", "", "5x", "m", "1e400"])
def test_a_duration_out_of_bounds_or_unreadable_is_a_usage_error(text):
    with pytest.raises(UsageError) as refused:
        parse(f"--confirm-within={text}")
    assert "expected a duration from 5s to 7d" in refused.value.message


@pytest.mark.parametrize(
    "words",
    [("--confirm", "--rollback"), ("--confirm-within", "1m", "--rollback"), ("--confirm", "--confirm-within", "1m")],
)
def test_the_confirm_and_the_rollback_exclude_each_other(words):
    with pytest.raises(UsageError) as refused:
        parse(*words)
    assert "not allowed with" in refused.value.message


def armed(root, within: float = 60.0, update_id: str = "u1") -> dict:
    arm(root, update_id=update_id, before=OLD, after=NEW, within=within, now=NOW)
    record = read_confirm(root)
    assert record is not None
    return record


def test_an_armed_confirm_names_its_update_commits_and_deadline(tmp_path):
    record = armed(tmp_path)
    assert (record["update_id"], record["before"], record["after"]) == ("u1", OLD, NEW)
    assert (record["deadline"], record["state"]) == (NOW + 60.0, "armed")


def test_a_confirm_before_the_deadline_keeps_the_update_and_ends_the_obligation(tmp_path):
    armed(tmp_path)
    assert confirm_update(tmp_path, now=NOW + 59.0)["update_id"] == "u1"
    assert read_confirm(tmp_path) is None
    assert claim(tmp_path, "u1", now=NOW + 61.0) is None  # no rollback is owed any more
    with pytest.raises(NothingToConfirm):
        confirm_update(tmp_path, now=NOW + 61.0)


def test_after_the_deadline_a_confirm_is_refused_and_the_rollback_takes_it(tmp_path):
    armed(tmp_path)
    assert claim(tmp_path, "u1", now=NOW + 59.9) is None  # not yet due
    with pytest.raises(ConfirmTooLate) as refused:
        confirm_update(tmp_path, now=NOW + 60.0)
    assert refused.value.code == "confirm_too_late" and refused.value.detail["before"] == OLD
    assert read_confirm(tmp_path) is not None
    assert claim(tmp_path, "u1", now=NOW + 60.0)["before"] == OLD
    assert claim(tmp_path, "u2", now=NOW + 60.0) is None  # another update's rollback takes nothing


def test_a_failed_rollback_is_not_started_again_and_the_operator_may_still_keep_the_update(tmp_path):
    armed(tmp_path)
    mark_failed(tmp_path, "u2", "not this one")
    assert read_confirm(tmp_path)["state"] == "armed"
    mark_failed(tmp_path, "u1", "update r1 refused: dirty tree")
    record = read_confirm(tmp_path)
    assert (record["state"], record["reason"]) == ("failed", "update r1 refused: dirty tree")
    assert claim(tmp_path, "u1", now=NOW + 600.0) is None
    assert "rollback failed (update r1 refused: dirty tree)" in pending_line(record, NOW + 600.0)
    assert confirm_update(tmp_path, now=NOW + 600.0)["state"] == "failed"
    assert read_confirm(tmp_path) is None


def test_a_withdrawal_takes_only_its_own_update_and_a_clear_takes_any(tmp_path):
    armed(tmp_path)
    withdraw(tmp_path, "u2")
    assert read_confirm(tmp_path) is not None
    withdraw(tmp_path, "u1")
    assert read_confirm(tmp_path) is None
    armed(tmp_path)
    assert clear(tmp_path)["update_id"] == "u1" and read_confirm(tmp_path) is None
    assert clear(tmp_path) is None


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        json.dumps({"schema": 1}),
        json.dumps(
            {
                "schema": 1,
                "update_id": "--backup",
                "before": OLD,
                "after": NEW,
                "deadline": 1,
                "within": 1,
                "state": "armed",
            }
        ),
        json.dumps({"schema": 1, "update_id": "u", "before": OLD, "after": "HEAD", "deadline": 1, "within": 1}),
        json.dumps(
            {"schema": 1, "update_id": "u", "before": OLD, "after": NEW, "deadline": 1, "within": 1, "state": "armed"}
        ).replace('"deadline": 1,', '"deadline": 1e999,'),
        json.dumps(
            {"schema": 1, "update_id": "u", "before": OLD, "after": NEW, "deadline": 1, "within": 1, "state": "maybe"}
        ),
    ],
)
def test_a_record_of_another_shape_is_corrupt_never_a_rollback(tmp_path, text):
    path = confirm_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(StateFileCorrupt):
        read_confirm(tmp_path)
    line = settle_confirm(tmp_path)  # a command says so, names the way out, and starts nothing
    assert line is not None and "corrupt" in line and "--confirm` removes it" in line and "--rollback" in line
    assert owed_confirm(tmp_path)["state"] == "unreadable"


def test_a_rollback_removes_an_unreadable_confirm_and_says_so(tmp_path):
    path = confirm_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, "update_id": "torn')
    voided = clear(tmp_path)
    assert voided is not None and voided["state"] == "unreadable" and voided["update_id"] is None
    assert "confirm-pending.json" in voided["reason"] and not path.exists()
    assert clear(tmp_path) is None  # nothing left to remove


def test_a_confirm_removes_an_unreadable_record_and_keeps_the_code(tmp_path):
    path = confirm_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    record = confirm_update(tmp_path, now=NOW)
    assert (record["state"], record["update_id"], record["after"]) == ("unreadable", None, None)
    assert not path.exists() and owed_confirm(tmp_path) is None
    with pytest.raises(NothingToConfirm):
        confirm_update(tmp_path, now=NOW)


def test_arming_replaces_a_planted_link_and_writes_nothing_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path = confirm_path(tmp_path / "root")
    path.parent.mkdir(parents=True)
    os.symlink(victim, path)
    armed(tmp_path / "root")
    assert victim.read_text() == "keep" and not path.is_symlink()


@pytest.mark.parametrize(
    ("state", "offset", "running", "action"),
    [
        (None, 0.0, False, "done"),
        ("failed", 10.0, False, "done"),
        ("armed", -1.0, False, "wait"),
        ("armed", 0.0, True, "wait"),
        ("armed", 0.0, False, "fire"),
        ("armed", 3600.0, False, "fire"),
    ],
)
def test_a_timer_fires_only_past_the_deadline_and_while_no_update_runs(state, offset, running, action):
    record = None if state is None else {"state": state, "deadline": NOW}
    assert decide(record, NOW + offset, update_running=running) == action


TICK = b"ver:3.0 server:supervisor serial:%d pool:hermes-confirm-timer poolserial:%d eventname:TICK_5 len:%d\n"


def tick(serial: int, payload: bytes = b"when:1800000000") -> bytes:
    return TICK % (serial, serial, len(payload)) + payload


def test_the_listener_answers_every_event_and_ends_when_supervisord_closes_its_pipe(tmp_path):
    armed(tmp_path, within=3600.0)  # owed, not due: each tick looks and starts nothing
    hostile = b"ver:3.0 eventname:TICK_5 len:lots\n" + b"ver:3.0 len:-3\n" + b"no fields at all\n"
    stdin = io.BytesIO(tick(1) + hostile + tick(2))
    stdout = io.BytesIO()
    assert listen(tmp_path, stdin, stdout) == 0
    answers = stdout.getvalue()
    assert answers == b"READY\n" + b"RESULT 2\nOKREADY\n" * 5
    assert read_confirm(tmp_path)["state"] == "armed"
    assert not probe(lock_path(tmp_path)).held  # released at the end


def test_the_listener_holds_the_timer_lock_while_it_lives(tmp_path):
    seen: list[bool] = []

    class Stdin(io.BytesIO):
        def readline(self, size=-1):  # supervisord's next event: look at the lock meanwhile
            seen.append(probe(lock_path(tmp_path)).held)
            return super().readline(size)

    assert listen(tmp_path, Stdin(tick(1)), io.BytesIO()) == 0
    assert seen == [True, True]


def test_a_tree_back_where_the_rollback_would_take_it_owes_nothing(tmp_path):
    record = armed(tmp_path)
    assert settled(record, OLD)  # the arming update died before its move, or a rollback after its own
    assert not settled(record, NEW) and not settled(record, "c" * 40) and not settled(record, None)
    assert not settled({**record, "after": OLD}, OLD)


def test_a_timer_that_cannot_be_started_is_said_and_the_command_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(confirm_timer, "systemd_booted", lambda: False)  # the waiter's path, on any host
    armed(tmp_path, within=10 * 86400.0)  # owed, not due, and no timer holds the lock
    (tmp_path / "logs").write_text("a file where the logs directory should be")
    line = settle_confirm(tmp_path)
    assert line is not None and "no timer could be started" in line
    assert read_confirm(tmp_path)["state"] == "armed"
