"""The restart's wait for a fresh gateway, against a gateway's real sockets in this process:
the gateway's state events wake it, so it never waits out a poll to see a fresh one running,
and an answer counts only from the process it names (the kernel's word on the connection)."""

from __future__ import annotations

from dataclasses import replace

import trio

from fleet.discovery import GatewayRecord
from services.updater.restart.base import WAITS, control_endpoint, wait_for_fresh
from shared import homes
from shared.gateways import ops
from shared.identity import ProcessIdentity, current_identity
from shared.transport import Call, Service, open_publisher

NEW = "b" * 40
OLD_PID = 4001
ME = current_identity()  # the gateway's sockets are this process's
# Every wait of the restart: a wait that polls ends only after this long, and fails.
SLOW = 20.0


class FreshGateway:
    """A gateway's control and event sockets, answering ``status`` as a fresh process (by
    default this one, which holds the sockets) that says starting until it is told to run."""

    def __init__(self, says: ProcessIdentity = ME) -> None:
        self.state = ops.STARTING
        self.says = says
        self.asked = trio.Event()

    async def status(self, call: Call) -> dict:
        self.asked.set()
        return {"pid": self.says.pid, "start_time": self.says.start_time, "state": self.state, "code_sha": NEW}


def record(home) -> GatewayRecord:
    return GatewayRecord("default", OLD_PID, 1, ops.DRAINING, "a" * 40, "0.1", 0, "supervisord", "socket", home)


async def test_a_fresh_gateway_saying_running_ends_the_wait_at_once(short_dir):
    home = short_dir / "home"
    endpoint = homes.endpoint(home, ops.SERVICE)
    gateway = FreshGateway()
    service = Service(ops.SERVICE, endpoint.bind_control, lock_path=endpoint.lock_path)
    service.add(ops.STATUS, gateway.status)
    waits = replace(WAITS, come_back=SLOW, poll=SLOW, fallback=SLOW)
    done: list[tuple[int | None, str | None]] = []

    async def wait() -> None:
        done.append(
            await trio.to_thread.run_sync(
                lambda: wait_for_fresh(record(home), control_endpoint(home), NEW, waits, reexec=False)
            )
        )

    with trio.fail_after(3 * SLOW):
        async with open_publisher(endpoint.bind_events) as publisher, trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            nursery.start_soon(wait)
            await gateway.asked.wait()  # it found the gateway starting, and waits
            gateway.state = ops.RUNNING
            # Events are lossy and a subscription takes a moment to reach the publisher: it
            # is said again until heard.
            while not done:
                publisher.publish(ops.STATE_TOPIC, {"state": ops.RUNNING, "active_turns": 0})
                await trio.sleep(0.05)
            service.stop(grace=0)
    assert done == [(ME.pid, None)]


async def test_an_answer_naming_another_process_than_its_sender_is_never_taken(short_dir):
    home = short_dir / "home"
    endpoint = homes.endpoint(home, ops.SERVICE)
    gateway = FreshGateway(says=ProcessIdentity(ME.pid + 1, ME.start_time))  # a relay, or a stale copy
    gateway.state = ops.RUNNING
    service = Service(ops.SERVICE, endpoint.bind_control, lock_path=endpoint.lock_path)
    service.add(ops.STATUS, gateway.status)
    waits = replace(WAITS, come_back=1.0, poll=0.05, fallback=0.05)
    with trio.fail_after(SLOW):
        async with trio.open_nursery() as nursery:
            await nursery.start(service.serve)
            outcome = await trio.to_thread.run_sync(
                lambda: wait_for_fresh(record(home), control_endpoint(home), NEW, waits, reexec=False)
            )
            service.stop(grace=0)
    assert gateway.asked.is_set() and outcome == (None, "no gateway answered within 1s of the restart")
