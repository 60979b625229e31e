"""The plugin contract check (``tests.support.plugin_contract``) against the real Hermes Agent:
what it passes, a real Hermes passes, so the check asks what Hermes really does."""

from __future__ import annotations

from tests.support import hermes_contract, plugin_contract, real_hermes


def test_the_real_hermes_passes_the_plugin_contract_step_for_step(real_hermes_agent, tmp_path):
    contract = hermes_contract.lock()["plugin_contract"]
    states = plugin_contract.ListedStates(contract)
    failures = plugin_contract.run_contract(
        real_hermes_agent.bin,
        tmp_path,
        contract,
        prefix=tuple(real_hermes.offline_prefix()),
        on_step=states.read,
    )
    assert failures == []
    assert states.seen == plugin_contract.LISTED_STATES
