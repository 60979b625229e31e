"""Kernel-checked identity, on this process alone (the unit tier starts none): a held process
is that very process, a wrong start time holds nothing, and an answer is its sender's only
when the kernel's pid for the sender is the process the answer names."""

from __future__ import annotations

import signal

from shared.identity import ProcessIdentity, current_identity, peer_is
from shared.process_signals import HeldProcess, signal_identified

ME = current_identity()


def test_a_process_is_held_only_by_its_pid_and_its_start_time():
    with HeldProcess.hold(ME) as held:
        assert held.alive() and not held.wait_gone(0.0)
        assert held.signal(0)  # the null signal: it reaches this very process
    assert HeldProcess.hold(ProcessIdentity(ME.pid, ME.start_time + 1)) is None
    assert not signal_identified(ProcessIdentity(ME.pid, ME.start_time + 1), signal.SIGKILL)  # or this test would end


def test_a_closed_hold_falls_back_to_the_identity_check():
    held = HeldProcess.hold(ME)
    assert held is not None
    held.close()
    assert held.alive() and held.signal(0)
    held.close()  # twice is harmless


def test_an_answer_is_its_senders_only_when_pid_and_start_time_both_match():
    assert not peer_is(ME.pid, ME.pid + 1, ME.start_time)
    assert not peer_is(ME.pid, ME.pid, ME.start_time + 1)
    assert not peer_is(ME.pid, str(ME.pid), ME.start_time)
    assert not peer_is(0, ME.pid, ME.start_time)  # a peer this pid namespace does not see
    assert not peer_is(None, ME.pid, ME.start_time)
