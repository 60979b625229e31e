"""A completion step's bound: a signal that stops the step where it stands, which the step's own
``except Exception`` cannot swallow, and which never fires once the step has ended."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from services.updater.step_bound import StepOverran, bounded


def test_a_step_past_its_bound_is_stopped_even_where_it_catches_every_exception():
    swallowed = []
    with pytest.raises(StepOverran) as caught:
        with bounded("migrations", 0.2):
            try:
                time.sleep(30)
            except Exception as exc:  # one home's fault kept from the others: not the bound
                swallowed.append(exc)
    assert swallowed == []
    assert (caught.value.step, caught.value.bound) == ("migrations", 0.2)
    assert caught.value.reason == "passed its bound of 0.2 s (update.step_timeout) and was stopped"


def test_a_step_that_ends_in_time_leaves_no_alarm_and_the_handler_it_found():
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        with bounded("bytecode", 0.3):
            pass
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert signal.getsignal(signal.SIGALRM) is mine
        time.sleep(0.5)  # past where the bound would have been: nothing fires
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_bound_is_refused_off_the_main_thread():
    found: list[BaseException] = []

    def elsewhere() -> None:
        try:
            with bounded("restart", 1):
                pass
        except RuntimeError as exc:
            found.append(exc)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join(5)
    assert len(found) == 1 and "main thread" in str(found[0])
