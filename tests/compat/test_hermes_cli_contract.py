"""The operator's Hermes 0.20.0 CLI checks, run against this install's ``hermes`` exactly as
its compatibility harness runs them: each check of the lock (``cli_checks``), in the harness's
environment and a fresh work directory, must exit 0 with every required text in its output.
The same checks run against the real Hermes Agent (``tests/real_peers``) prove them right."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.hermes_contract import lock, run_cli_check

# This install's ``hermes`` executable, as the harness is given one: its own interpreter, no
# working directory or PYTHONPATH of this checkout's.
HERMES_BIN = Path(sys.executable).parent / "hermes"
CHECKS = lock()["cli_checks"]


@pytest.mark.parametrize("check", CHECKS, ids=[check["id"] for check in CHECKS])
def test_hermes_passes_the_operators_cli_check(check, short_dir):
    assert HERMES_BIN.is_file(), f"{HERMES_BIN} is missing: run scripts/setup.sh"
    assert run_cli_check([str(HERMES_BIN)], check, short_dir) == []
