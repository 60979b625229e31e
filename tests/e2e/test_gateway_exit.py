"""How a gateway process ends: every exit duty done (its state file's last write, a hook report
still queued, every ``atexit`` handler), then gone without the interpreter's teardown, with the
exit code its supervisor reads: 75 for a drain, 0 for a stop."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from shared.gateways import ops
from shared.protocol import unpack
from shared.transport.sync_client import SyncClient
from tests.support.hook_reports import MANAGED
from tests.support.processes import ROOT, GatewayProcess, parallel, python_env, read_state, wait_for

pytestmark = pytest.mark.root(run_dir=True)

# Put first on the gateway's path: an exit handler, and an object whose finalizer runs only
# when the interpreter tears its modules down; each leaves a mark in EXIT_MARKS.
SITECUSTOMIZE = """
import atexit, os

MARKS = os.environ["EXIT_MARKS"]

def _mark(what, _open=open, _join=os.path.join, _marks=MARKS):  # bound now: teardown clears globals
    with _open(_join(_marks, what), "w"):
        pass

atexit.register(_mark, "atexit")

class _Finalized:
    def __del__(self, _mark=_mark):
        _mark("teardown")

_finalized = _Finalized()
"""


def call(gateway: GatewayProcess, spec, args=None):
    with SyncClient(gateway.endpoint.control) as client:
        return client.call(spec, args or {})


def activity(pull) -> list[str]:
    """The activity states a gateway reported, up to the idle after its turn's working."""
    states: list[str] = []
    while states[-2:] != ["working", "idle"] and pull.poll(10_000):
        report = unpack(pull.recv())
        if report["kind"] == "activity":
            states.append(report["state"])
    return states


def watched_gateway(root: Path, tmp_path: Path, gateways) -> tuple[GatewayProcess, Path]:
    hooks_dir, marks = tmp_path / "site", tmp_path / "marks"
    hooks_dir.mkdir()
    marks.mkdir()
    (hooks_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = python_env(HERMES_HOME=str(root), EXIT_MARKS=str(marks), **MANAGED)
    env["PYTHONPATH"] = os.pathsep.join([str(hooks_dir), str(ROOT)])
    return gateways(root, env=env), marks


def test_a_drained_gateway_leaves_after_every_exit_duty_and_without_teardown(
    root, tmp_path, gateways, intake, bind_pull
):
    pull = bind_pull(intake)
    gateway, marks = watched_gateway(root, tmp_path, gateways)

    def drain_while_the_turn_runs():
        wait_for(lambda: read_state(gateway.home)["active_turns"] == 1, timeout=10, what="the turn")
        return call(gateway, ops.DRAIN, {"deadline": 10.0})

    turn, drained = parallel(
        [lambda: call(gateway, ops.TURN, {"text": "t", "seconds": 0.5}), drain_while_the_turn_runs]
    )
    assert drained["finished"] == [turn["turn_id"]]
    assert gateway.wait_exit() == 75
    final = read_state(gateway.home)
    assert (final["gateway_state"], final["restart_requested"], final["pid"]) == ("stopped", True, gateway.pid)
    # The idle report the turn's end queued, moments before the exit, still left the process.
    assert activity(pull)[-2:] == ["working", "idle"]
    assert sorted(p.name for p in marks.iterdir()) == ["atexit"]


def test_a_stopped_gateway_exits_0_after_every_exit_duty_and_without_teardown(root, tmp_path, gateways):
    gateway, marks = watched_gateway(root, tmp_path, gateways)
    gateway.proc.send_signal(signal.SIGTERM)
    assert gateway.wait_exit() == 0
    final = read_state(gateway.home)
    assert (final["gateway_state"], final["restart_requested"]) == ("stopped", False)
    assert sorted(p.name for p in marks.iterdir()) == ["atexit"]
