"""A gateway told to stop (SIGTERM) gives the turns in flight the grace its supervisor sets
(``HERMES_STOP_GRACE``): an 8 s turn finishes with its answer, and the process exits 0; a grace
it cannot read is a configuration error (78) before it serves anything."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from shared import exit_codes
from shared.gateways import ops
from shared.transport.sync_client import SyncClient
from tests.support.processes import ROOT, parallel, python_env, read_state, wait_for

pytestmark = pytest.mark.root(run_dir=True)

TURN_SECONDS = 8.0


def test_a_sigterm_lets_a_turn_longer_than_the_old_grace_finish(root, gateways):
    gateway = gateways(root, env=python_env(HERMES_STOP_GRACE="20"))

    def turn():
        with SyncClient(gateway.endpoint.control) as client:
            return client.call(ops.TURN, {"text": "a long one", "seconds": TURN_SECONDS}, timeout=30)

    def stop_while_it_runs():
        wait_for(lambda: read_state(gateway.home)["active_turns"] == 1, timeout=10, what="the turn")
        gateway.proc.send_signal(signal.SIGTERM)

    answer, _ = parallel([turn, stop_while_it_runs])
    assert not isinstance(answer, Exception), answer
    assert answer["text"] == "a long one"
    assert gateway.wait_exit() == exit_codes.OK


def test_a_grace_it_cannot_read_exits_78_naming_the_field(root):
    done = subprocess.run(
        [sys.executable, "-m", "services.gateway"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root), HERMES_STOP_GRACE="30s"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == exit_codes.CONFIG
    assert "HERMES_STOP_GRACE" in done.stderr and "Traceback" not in done.stderr
