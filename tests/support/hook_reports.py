"""Hook reports as the tests make and receive them: a managed session's environment, a
report naming a process, and what arrives at a reporter's intake."""

from __future__ import annotations

import time

import zmq

from shared.hook_reports import Report
from shared.hooks import HookClient
from shared.protocol import unpack

SESSION = "pohunek:s-1.a_b"
MANAGED = {"POHUNEK_SESSION_ID": SESSION}
SENTINEL_TRIES = 20
CONNECT_WAIT_MS = 10_000  # a client's connection to a bound intake, on however loaded a machine


def connected(client: HookClient) -> HookClient:
    """``client`` once its reporter's connection is up: its next report is accepted (a new
    client waits only a few milliseconds for it, which a loaded machine can outlast)."""
    assert client.prepare(CONNECT_WAIT_MS), "the client never connected to the intake"
    return client


def receive(pull: zmq.Socket) -> dict:
    assert pull.poll(10_000), "no report arrived"
    return unpack(pull.recv())


def first_received_is_the_sentinel(pull: zmq.Socket, root) -> bool:
    """Whether a fresh report from another client is the first frame ``pull`` gets.

    A new client waits only a few milliseconds for its connection, so on a loaded machine its
    first report may be not accepted (nothing is queued then): a few fresh clients try."""
    for _ in range(SENTINEL_TRIES):
        sentinel = HookClient(MANAGED, root)
        sent = sentinel.report_native_id("sentinel")
        sentinel.close()
        if sent:
            return receive(pull)["native_id"] == "sentinel"
    raise AssertionError(f"no sentinel report was accepted in {SENTINEL_TRIES} tries")


def counts(**nonzero: int) -> dict[str, int]:
    return {"sent": 0, "unmanaged": 0, "refused": 0, "not_accepted": 0, "error": 0, **nonzero}


def report_for(pid, start_time, launch=None):
    return Report("native_id" if launch else "activity", "s", pid, start_time, time.time(), {}, launch)
