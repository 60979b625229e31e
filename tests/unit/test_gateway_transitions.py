"""The gateway's transition table: a move it lacks is refused with a typed error, every state of
the contract is in it and reachable from the start, and docs/gateways.md shows it as it is.
(The gateway's own steps against the table: tests/service/test_gateway_states.py.)"""

from __future__ import annotations

import pytest

from services.gateway import transitions
from shared.gateways import ops
from tests.support.docs_blocks import block, body
from tests.support.processes import ROOT


@pytest.mark.parametrize(
    "current, new",
    [
        (ops.STOPPED, ops.RUNNING),
        (ops.DRAINING, ops.RUNNING),
        (ops.RUNNING, ops.STARTING),
        (ops.RUNNING, ops.STOPPED),
        (ops.STARTUP_FAILED, ops.STOPPING),
        (ops.RUNNING, "paused"),
    ],
)
def test_a_move_the_table_lacks_is_refused_typed(current, new):
    with pytest.raises(transitions.IllegalTransition) as refused:
        transitions.check(current, new)
    assert refused.value.code == "illegal_transition"
    assert refused.value.detail == {"from": current, "to": new}


def test_every_state_is_reachable_from_the_start():
    reached, frontier = {transitions.START}, [transitions.START]
    while frontier:
        current = frontier.pop()
        for source, target in transitions.TRANSITIONS:
            if source == current and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(ops.STATES)


def test_the_table_names_every_state_of_the_contract_and_no_other():
    named = {state for move in transitions.TRANSITIONS for state in move}
    assert named == set(ops.STATES)
    assert transitions.final_states() == [ops.STOPPED, ops.STARTUP_FAILED]


# --- the diagram in docs/gateways.md (tests/unit/test_docs_blocks.py checks the page) ------


def test_a_changed_table_draws_another_diagram():
    assert body(transitions.render()) == block((ROOT / "docs" / "gateways.md").read_text(), "states")
    fewer = {move: why for move, why in transitions.TRANSITIONS.items() if move != (ops.STOPPING, ops.STOPPED)}
    assert body(transitions.render(fewer)) != body(transitions.render())
