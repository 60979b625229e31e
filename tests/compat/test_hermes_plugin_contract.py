"""``hermes plugins`` meets the Hermes 0.20.0 plugin contract the operator's harness checks, step
for step as the harness runs it (``tests.support.plugin_contract``), and the list it prints
reads as the operator's installer reads it."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support import hermes_contract, plugin_contract

HERMES_BIN = Path(sys.executable).parent / "hermes"  # the harness runs the hermes beside its Python


def test_the_plugin_contract_passes_step_for_step(tmp_path):
    contract = hermes_contract.lock()["plugin_contract"]
    states = plugin_contract.ListedStates(contract)
    failures = plugin_contract.run_contract(HERMES_BIN, tmp_path, contract, on_step=states.read)
    assert failures == []
    assert states.seen == plugin_contract.LISTED_STATES
    config = (tmp_path / "hermes-home" / "config.yaml").read_text()
    assert "operators/pohunek" in config and "allow_tool_override: false" in config
