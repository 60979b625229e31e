"""Fault points for crash tests: a real process stops at a named step, or kills itself before a
counted one, so a test can see what kill -9 leaves there.

``HERMES_FAULT_PAUSE_AT=<name>`` makes ``pause_at(name)`` write ``paused <name>`` to stderr and
wait until the process gets SIGUSR1 (a test holding it inside a transaction lets it go on) or a
bounded time passes, so a forgotten variable cannot hang a process forever; every other call is
a no-op.

``HERMES_FAULT_KILL_AT_STEP=<n>`` makes the n-th call of ``step()`` in a process SIGKILL that
process before the step is taken. A transaction calls ``step()`` just before each change it
makes, so a test can crash it at every one of them; without the variable a step only counts.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "HERMES_FAULT_PAUSE_AT"
KILL_ENV = "HERMES_FAULT_KILL_AT_STEP"
PAUSE_SECONDS = 60.0
RESUME_SIGNAL = signal.SIGUSR1

_steps_taken = 0


def pause_at(name: str) -> None:
    if os.environ.get(ENV) != name:
        return
    # Blocked before the line is written, so a resume sent as soon as it is read is not lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {RESUME_SIGNAL})
    try:
        sys.stderr.write(f"paused {name}\n")
        sys.stderr.flush()
        signal.sigtimedwait({RESUME_SIGNAL}, PAUSE_SECONDS)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {RESUME_SIGNAL})


def step() -> None:
    """One change is about to be made: count it, and die here if this is the step to crash at."""
    global _steps_taken
    _steps_taken += 1
    if os.environ.get(KILL_ENV) == str(_steps_taken):
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
