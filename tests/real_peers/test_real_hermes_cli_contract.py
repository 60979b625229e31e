"""The operator's Hermes 0.20.0 CLI checks (``tests/compat/test_hermes_cli_contract.py`` runs
them against this install) run against the real Hermes Agent, to prove the checks and the way
they are run right: every check but ``version`` passes as it is. Run against 0.19.0 each of
the seven help and usage checks passes unchanged (``profile rename`` and ``chat
--pass-session-id``, ``--tui`` and ``--cli`` are all there already); only ``version`` names
0.20.0's own release, so against an older release it is checked for the same shape instead."""

from __future__ import annotations

import re

import pytest

from tests.support.hermes_contract import lock, run_cli_check
from tests.support.real_hermes import offline_prefix

CHECKS = {check["id"]: check for check in lock()["cli_checks"]}
RELEASE_TEXT = CHECKS["version"]["required_text"][0]  # "Hermes Agent v0.20.0 (2026.8.3)"


@pytest.mark.parametrize("check_id", sorted(set(CHECKS) - {"version"}))
def test_the_real_hermes_agent_passes_the_check(real_hermes_agent, check_id, short_dir):
    argv = [*offline_prefix(), str(real_hermes_agent.bin)]
    assert run_cli_check(argv, CHECKS[check_id], short_dir) == []


def test_the_real_version_line_has_the_shape_the_version_check_requires(real_hermes_agent, short_dir):
    shape = re.sub(r"\d+", r"\\d+", re.escape(RELEASE_TEXT))  # any release, any date
    check = {"args": CHECKS["version"]["args"], "required_text": []}
    assert run_cli_check([*offline_prefix(), str(real_hermes_agent.bin)], check, short_dir) == []
    first = real_hermes_agent.run(["--version"], home=short_dir / "home").stdout.splitlines()[0]
    assert re.fullmatch(shape, first), first
    assert (first == RELEASE_TEXT) == (real_hermes_agent.version == "0.20.0")
