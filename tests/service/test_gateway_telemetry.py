"""A served profile's telemetry, through its own handlers (its sockets never opened): the turns
``status`` counts and times, the state event that says so, and its restart record."""

from __future__ import annotations

import pytest
import trio

from services.gateway.app import Gateway, TurnCut
from services.gateway.restarts import Restarts
from services.gateway.state import restarts_at_start
from shared.gateways import ops
from shared.transport.service import Call
from tests.support.served_gateway import served_gateway


@pytest.fixture
def gateway(tmp_path):
    with served_gateway(tmp_path / "home") as served:
        yield served


async def no_events(event: object) -> None:
    raise AssertionError("nothing streams here")


def call(spec, args: dict) -> Call:
    return Call("r1", spec, spec.check_args(args), trio.current_time() + 10, no_events)


async def turn(gateway: Gateway, args: dict) -> dict:
    return await gateway._in_scope(gateway._turn)(call(ops.TURN, args))


def status(gateway: Gateway) -> dict:
    return gateway._status(call(ops.STATUS, {}))


class Published:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def publish(self, topic: str, payload: dict) -> None:
        self.events.append((topic, payload))


async def test_finished_turns_are_counted_and_timed_and_probes_are_not(gateway):
    before = status(gateway)["turns"]
    assert before["finished"] == 0 and before["last_seconds"] is None
    await turn(gateway, {"text": "one"})
    await turn(gateway, {"text": "two", "seconds": 0.03})
    await turn(gateway, {"text": "health probe", "probe": True})
    turns = status(gateway)["turns"]
    assert turns["finished"] == 2
    latency = turns["latency"]
    assert latency["le"] == [*ops.TURN_LATENCY_BUCKETS, "+Inf"] and latency["counts"][-1] == 2
    assert latency["counts"] == sorted(latency["counts"])
    # the turn of 30 ms is above the 25 ms bound: at most one turn is at or below it
    assert latency["counts"][ops.TURN_LATENCY_BUCKETS.index(0.025)] <= 1
    assert turns["last_seconds"] >= 0.03 and latency["sum"] >= turns["last_seconds"]


async def test_a_cut_turn_is_not_counted(gateway):
    async with trio.open_nursery() as nursery:
        outcome: list[BaseException] = []

        async def long_turn() -> None:
            try:
                await turn(gateway, {"text": "slow", "seconds": 60})
            except TurnCut as exc:
                outcome.append(exc)

        nursery.start_soon(long_turn)
        while gateway.state.active_turns == 0:
            await trio.sleep(0.01)
        assert status(gateway)["active_turns"] == 1
        await gateway.drain(0.0)
    assert len(outcome) == 1
    assert status(gateway)["turns"]["finished"] == 0 and status(gateway)["active_turns"] == 0


async def test_the_state_event_says_how_many_turns_finished_and_the_last_ones_time(gateway):
    gateway._publisher = Published()  # type: ignore[assignment]
    await turn(gateway, {"text": "one", "seconds": 0.01})
    await gateway._write_state()
    topic, payload = gateway._publisher.events[-1]  # type: ignore[union-attr]
    assert topic == ops.STATE_TOPIC
    assert set(payload) == {"state", "active_turns", "turns_finished", "last_turn_seconds"}
    assert payload["turns_finished"] == 1 and payload["last_turn_seconds"] >= 0.01


async def test_the_restart_record_is_answered_and_written_for_the_next_start(gateway):
    assert status(gateway)["restarts"] == {"total": 0, "last_hour": 0}
    gateway.state.restarts = Restarts(3, (1.0, 2.0))  # three restarts long ago
    assert status(gateway)["restarts"] == {"total": 3, "last_hour": 0}
    await gateway.starting()
    next_start = restarts_at_start(gateway.state.home, 1_800_000_000.0)
    assert next_start == Restarts(4, (1.0, 2.0, 1_800_000_000.0))
