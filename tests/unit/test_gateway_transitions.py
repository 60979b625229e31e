"""The gateway's transition table: a move it lacks is refused with a typed error, every state of
the contract is in it and reachable from the start, and docs/gateways.md shows it as it is.
(The gateway's own steps against the table: tests/service/test_gateway_states.py.)"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from services.gateway import transitions
from shared.gateways import ops
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


# --- the diagram in docs/gateways.md -------------------------------------------------------


def diagram_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gateway_states_diagram", ROOT / "scripts" / "gateway_states_diagram.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_show_the_table_as_it_is():
    script = diagram_script()
    doc = (ROOT / script.DOC).read_text()
    assert script.with_block(doc, transitions.render()) == doc, (
        f"{script.DOC}'s state diagram is stale: run scripts/gateway_states_diagram.py"
    )


def test_a_diagram_that_differs_from_the_table_is_rewritten(tmp_path):
    script = diagram_script()
    stale = f"before\n{script.BEGIN}\n```text\nstarting ──► stopped\n```\n{script.END}\nafter\n"
    path = tmp_path / "gateways.md"
    path.write_text(stale)
    assert script.rewrite(path) is True
    text = path.read_text()
    assert text.startswith("before\n") and text.endswith("after\n")
    assert transitions.render() in text and "starting ──► stopped" not in text
    assert script.rewrite(path) is False


def test_a_doc_without_its_markers_is_refused(tmp_path):
    script = diagram_script()
    path = tmp_path / "gateways.md"
    path.write_text(f"no block here\n{script.END}\n")
    with pytest.raises(script.MissingMarkers):
        script.rewrite(path)
