"""What supervisord's account of a program means for a restart (``supervisord.respawn``):
given up or not, and what to do once the drained process has ended. No processes."""

from __future__ import annotations

import pytest

from fleet.supervisors.supervisord.respawn import FAILED, LOOK, START, STARTED, after_exit, gave_up

OLD = 100


def info(state: str, pid: int = 0, exitstatus: int = 0, **more: str) -> dict:
    return {"statename": state, "pid": pid, "exitstatus": exitstatus, "description": "", "spawnerr": "", **more}


@pytest.mark.parametrize(
    ("seen", "action"),
    [
        (info("RUNNING", OLD), LOOK),  # the exit is not reaped yet: asking again wakes the reaper
        (info("STARTING", OLD), LOOK),
        (info("STOPPING", OLD), LOOK),  # someone stops it: a start is refused until it is down
        (info("STOPPING", 7), LOOK),
        (info("STARTING", 7), STARTED),  # its autorestart got there first
        (info("RUNNING", 7), STARTED),
        (info("BACKOFF"), STARTED),  # a new process died young: supervisord retries it itself
        (info("EXITED", exitstatus=75), START),  # reaped, not restarted yet
        (info("EXITED", exitstatus=0), START),  # an exit supervisord keeps down: the restart asked for it
        (info("STOPPED"), START),
        (info("FATAL", description="Exited too quickly"), FAILED),
        (info("UNKNOWN"), FAILED),
        (None, FAILED),  # not loaded
    ],
)
def test_what_follows_an_already_started_answer(seen, action):
    step = after_exit(seen, OLD)
    assert step.action == action
    assert (step.reason is not None) == (action == FAILED)


def test_a_fatal_program_fails_with_what_supervisord_says():
    step = after_exit(info("FATAL", spawnerr="can't find command"), OLD)
    assert step.reason == "supervisord gave up on it (FATAL: can't find command)"


@pytest.mark.parametrize(
    ("seen", "given_up"),
    [
        (info("FATAL", description="Exited too quickly (process log may have details)"), True),
        (info("EXITED", exitstatus=0), True),  # a clean stop: not restarted
        (info("EXITED", exitstatus=78), True),  # a broken config: a restart loop would not fix it
        (info("EXITED", exitstatus=75), False),  # a planned restart: supervisord starts it again
        (info("BACKOFF"), False),
        (info("RUNNING", 7), False),
        ({}, False),  # not loaded (yet): a start may still come
    ],
)
def test_when_supervisord_gave_a_program_up(seen, given_up):
    reason = gave_up(seen)
    assert (reason is not None) == given_up
    if given_up:
        assert reason.startswith(f"supervisord gave up on it ({seen['statename']}: ")
