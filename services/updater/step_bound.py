"""A bound on one step of the completion: past it, the step is stopped where it stands.

SIGALRM raises ``StepOverran`` in the main thread, which interrupts a blocking wait (a sleep, a
socket, a lock, a child process: ``subprocess.run`` kills its child on the way out). What does
not yield to a signal is stopped from outside: the updater kills the completion once its step is
past the bound by ``completion_contract.STEP_SLACK`` (or, with no updater left, its own heartbeat).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


# Not a HermesError: control flow inside the completion, caught around the step it stops.
class StepOverran(BaseException):
    """``step`` passed its ``bound``. A BaseException, as KeyboardInterrupt is: a step's own
    ``except Exception`` (one gateway's fault kept from the others) must not swallow the stop
    of the whole step."""

    def __init__(self, step: str, bound: float) -> None:
        super().__init__(f"{step} passed its bound of {bound:g} s")
        self.step, self.bound = step, bound

    @property
    def reason(self) -> str:
        return f"passed its bound of {self.bound:g} s (update.step_timeout) and was stopped"


@contextmanager
def bounded(step: str, bound: float) -> Iterator[None]:
    """Run the block for at most ``bound`` seconds, then raise ``StepOverran`` in it."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("a step bound is a signal: only the main thread can take it")
    armed = True

    def alarm(signum: int, frame: FrameType | None) -> None:
        if armed:  # not once the block has ended, in the moment before the timer is cleared
            raise StepOverran(step, bound)

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, bound)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
