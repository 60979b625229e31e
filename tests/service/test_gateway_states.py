"""A served profile's state, driven through the gateway's own steps (its sockets never opened):
each move on its paths is one the transition table has, together they are every move it has,
and a move the table lacks is refused loudly with nothing written."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

import pytest

from services.gateway import transitions
from services.gateway.app import Gateway
from shared.gateways import ops
from tests.support.served_gateway import served_gateway


@pytest.fixture
def gateway(tmp_path):
    """A served profile as its process makes it, its sockets never opened."""
    with served_gateway(tmp_path / "home", in_process=False) as served:
        yield served


def written(gateway: Gateway) -> str:
    return json.loads(gateway.state.path.read_text())["gateway_state"]


Step = Callable[[Gateway], Awaitable[object]]


def serving(gateway: Gateway) -> Awaitable[None]:
    return gateway.serving(())


def drain(gateway: Gateway) -> Awaitable[object]:
    return gateway.drain(0.0)


def withdraw(gateway: Gateway) -> Awaitable[None]:
    return gateway.withdraw("stopped (SIGTERM)")


def failed(gateway: Gateway) -> Awaitable[None]:  # what run does when it cannot serve
    return gateway._transition(ops.STARTUP_FAILED)


def closed(gateway: Gateway) -> Awaitable[None]:  # what run does once its sockets are closed
    return gateway._transition(ops.STOPPED)


# The paths a served profile takes, each step with the state it writes.
PATHS: dict[str, list[tuple[Step, str]]] = {
    "serves-then-stops": [
        (serving, ops.RUNNING),
        (drain, ops.DRAINING),
        (withdraw, ops.STOPPING),
        (closed, ops.STOPPED),
    ],
    "drained-while-starting-then-serves": [(drain, ops.STARTING), (serving, ops.DRAINING)],
    "let-go-while-starting": [(drain, ops.STARTING), (withdraw, ops.STOPPING), (closed, ops.STOPPED)],
    "cannot-serve": [(failed, ops.STARTUP_FAILED)],
    "served-set-changes-while-draining": [(serving, ops.RUNNING), (drain, ops.DRAINING), (serving, ops.DRAINING)],
}


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
async def test_every_move_on_the_gateways_paths_is_taken(gateway, path):
    await gateway.starting()
    assert written(gateway) == transitions.START
    for step, state in path:
        await step(gateway)
        assert (gateway.state.state, written(gateway)) == (state, state), step.__name__


def test_the_paths_take_every_move_of_the_table():
    taken = set()
    for path in PATHS.values():
        previous = transitions.START
        for _, state in path:
            if state != previous:
                taken.add((previous, state))
            previous = state
    assert taken == set(transitions.TRANSITIONS)


# Steps taken in an order the gateway never takes them; the last one is the illegal move.
ILLEGAL: dict[str, list[Step]] = {
    "closed-while-running": [serving, closed],  # closed with no withdraw first
    "drained-after-failing-to-start": [failed, drain],
}


@pytest.mark.parametrize("steps", ILLEGAL.values(), ids=ILLEGAL.keys())
async def test_the_gateway_refuses_an_illegal_move_loudly_and_writes_nothing(gateway, caplog, steps):
    await gateway.starting()
    *before, illegal = steps
    for step in before:
        await step(gateway)
    state, file = gateway.state.state, gateway.state.path.read_bytes()
    with pytest.raises(transitions.IllegalTransition) as refused, caplog.at_level(logging.ERROR):
        await illegal(gateway)
    assert refused.value.code == "illegal_transition"
    assert (gateway.state.state, gateway.state.path.read_bytes()) == (state, file)
    assert f"gateway default: a gateway does not go from {state} to " in caplog.text
