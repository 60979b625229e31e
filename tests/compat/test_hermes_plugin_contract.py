"""``hermes plugins`` meets the Hermes 0.20.0 plugin contract the operator's harness checks, step
for step as the harness runs it (``tests.support.plugin_contract``), and the list it prints
reads as the operator's installer reads it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support import hermes_contract, plugin_contract

HERMES_BIN = Path(sys.executable).parent / "hermes"  # the harness runs the hermes beside its Python


def installer_state(stdout: str, name: str) -> str:
    """The plugin's status as the operator's installer takes it from ``plugins list --json``:
    exactly one JSON array, exactly one record of the name, from the user's plugins."""
    records = json.loads(stdout)  # one document and nothing after it, or this raises
    assert isinstance(records, list)
    (record,) = [r for r in records if r["name"] == name]
    assert record["source"] == "user"
    assert record["status"] in ("enabled", "disabled", "not enabled")
    return record["status"]


def test_the_plugin_contract_passes_step_for_step(tmp_path):
    contract = hermes_contract.lock()["plugin_contract"]
    name = contract["lifecycle"]["plugin_name"]
    states: list[str] = []

    def read_list(check, done):
        if check.args[-len(contract["lifecycle"]["list_args"]) :] == tuple(contract["lifecycle"]["list_args"]):
            states.append(installer_state(done.stdout, name))

    failures = plugin_contract.run_contract(HERMES_BIN, tmp_path, contract, on_step=read_list)
    assert failures == []
    assert states == ["not enabled", "enabled", "disabled", "not enabled"]
    config = (tmp_path / "hermes-home" / "config.yaml").read_text()
    assert "operators/pohunek" in config and "allow_tool_override: false" in config
