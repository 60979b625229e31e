"""What supervisord's account of a program (its ``getProcessInfo`` answer) means for a
restart: whether supervisord gave the program up, and, once the process a restart drained
has ended, what the restart does next. Pure: an answer in, a decision out; ``programs``
makes the calls.

Why the restart asks for the start itself: supervisord's main loop polls with a 1 s timeout
and runs its state transitions before it reaps, so an exited program is respawned by its
``autorestart`` only 1-2 s later unless a call wakes the loop. Any call does: the loop then
reaps the exit and lets ``autorestart`` respawn the program, often before it reads the call.
So the start is asked for at once, and ALREADY_STARTED is an answer to look into, not a
failure: either a new process runs, or the old one's exit was not reaped yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from fleet.supervisors.supervisord.config import EXPECTED_EXIT_CODES

START = "start"  # ask supervisord to start it (again)
LOOK = "look"  # ask again what supervisord has: it is not done with the old process yet
STARTED = "started"  # a new process runs or is on its way: nothing more to ask
FAILED = "failed"  # it will not be started: ``reason`` says why

ALIVE = ("STARTING", "RUNNING")


class Step(NamedTuple):
    action: str
    reason: str | None = None


def gave_up(info: Mapping[str, Any]) -> str | None:
    """Why supervisord will not start the program again on its own (its retries used up, or
    an exit with a code that means "do not restart"); None while a start may still come."""
    state = info.get("statename")
    if state == "FATAL" or (state == "EXITED" and info.get("exitstatus") in EXPECTED_EXIT_CODES):
        detail = info.get("spawnerr") or info.get("description") or "no detail"
        return f"supervisord gave up on it ({state}: {detail})"
    return None


def after_exit(info: Mapping[str, Any] | None, old_pid: int) -> Step:
    """What to do next for a program whose drained process ``old_pid`` has ended, after
    supervisord answered ALREADY_STARTED to a start; ``info`` is its ``getProcessInfo``
    answer (None: the program is not loaded). The restart asked for the exit, so an exit
    supervisord will not restart on its own is started all the same."""
    if info is None:
        return Step(FAILED, "supervisord has no such program loaded any more")
    state, pid = info.get("statename"), info.get("pid")
    if state == "FATAL":
        return Step(FAILED, gave_up(info))
    if (pid == old_pid and state in ALIVE) or state == "STOPPING":
        return Step(LOOK)  # an exit not reaped yet (the next call wakes the reaper), or a stop under way
    if state in (*ALIVE, "BACKOFF"):
        return Step(STARTED)  # a new process, or supervisord's own retries of one that died young
    if state in ("EXITED", "STOPPED"):
        return Step(START)
    return Step(FAILED, f"supervisord reports it {state}: {info.get('description') or 'no detail'}")
