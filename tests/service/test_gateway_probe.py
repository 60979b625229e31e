"""A probe turn, driven through a served profile's own handler (its sockets never opened): the
agent's work as a caller's turn does it, outside the turn accounting a drain answers with and
with nothing reported to the operator; refused, as every turn is, once the gateway drains."""

from __future__ import annotations

import pytest
import trio

from services.gateway import app
from services.gateway import process as gateway_process
from services.gateway.app import Draining, Gateway
from services.gateway.state import IMPORTED_CODE_SHA
from shared.gateways import ops
from shared.transport.service import Call
from tests.support.served_gateway import served_gateway

PROBE = {"text": "health probe", "probe": True}


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    """A served profile inside its process, its sockets never opened; what it reports to the
    operator is kept in ``gateway.reported``."""
    reported: list[str] = []
    monkeypatch.setattr(gateway_process.hooks, "report_activity", reported.append)
    with served_gateway(tmp_path / "home") as served:
        served.reported = reported  # type: ignore[attr-defined]
        yield served


async def turn(gateway: Gateway, args: dict) -> dict:
    """``args``'s turn, through the handler the gateway's socket calls (its profile bound)."""

    async def no_events(event: object) -> None:
        raise AssertionError("a turn streams nothing")

    call = Call("r1", ops.TURN, ops.TURN.check_args(args), trio.current_time() + 10, no_events)
    return await gateway._in_scope(gateway._turn)(call)


async def test_a_probe_turn_answers_as_a_turn_does_and_stays_out_of_the_turn_accounting(gateway):
    probe = await turn(gateway, PROBE)
    hello = await turn(gateway, {"text": "hello"})
    again = await turn(gateway, PROBE)

    assert (probe["turn_id"], hello["turn_id"], again["turn_id"]) == ("p1", "t1", "p2")
    assert probe["probe"] is True and "probe" not in hello
    assert probe["code_sha"] == IMPORTED_CODE_SHA
    assert 0 <= probe["up_for"] <= again["up_for"]
    # What it ran with is what a caller's turn runs with.
    ran_with = ("profile", "home", "model", "provider_key")
    assert {k: probe[k] for k in ran_with} == {k: hello[k] for k in ran_with}
    # The caller's turn alone reported activity, and a drain counts it alone.
    assert gateway.reported == ["working", "idle"]
    assert (await gateway.process.drain(0.0))["accepted"] == 1


async def test_the_agent_work_of_a_probe_runs_with_no_turn_in_flight_and_nothing_reported(gateway, monkeypatch):
    seen: list[tuple[int, list[str]]] = []
    agent_turn = app._agent_turn

    async def watched(seconds: float) -> dict:
        seen.append((gateway.state.active_turns, list(gateway.reported)))
        return await agent_turn(seconds)

    monkeypatch.setattr(app, "_agent_turn", watched)
    await turn(gateway, {"text": "hello"})
    await turn(gateway, PROBE)
    assert seen == [(1, ["working"]), (0, ["working", "idle"])]


async def test_a_draining_gateway_refuses_a_probe_turn_as_it_refuses_every_turn(gateway):
    await gateway.drain(0.0)
    with pytest.raises(Draining):
        await turn(gateway, PROBE)
    assert gateway.reported == []
