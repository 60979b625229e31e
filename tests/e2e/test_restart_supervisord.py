"""The mesh supervisor's restart (``services.updater.restart.supervisord``) against a real
supervisord running real gateways: a drained gateway's program is started by the restart
the moment its process has ended, never left to supervisord's next wake-up; a program that
cannot start is that gateway's failure alone; every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.supervisors import supervisord as sv
from fleet.supervisors.errors import SupervisorFailed, SupervisorTimeout
from fleet.supervisors.supervisord.mesh import ProgramStatus
from services.updater.restart import restart_fleet
from shared import homes
from shared.errors import HermesError
from shared.identity import ProcessIdentity, process_identity
from shared.version import code_sha
from tests.support import mesh_roots
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow

ASKED = "asked supervisord to start {} once drained: "


@pytest.fixture
def mesh_root() -> Iterator[Path]:
    """A fresh install with profiles a, b and c; the mesh, and the workers ``hermes mesh up``
    starts beside it, are brought down whatever happens."""
    with mesh_roots.mesh_root("a", "b", "c") as root:
        yield root


def program(root: Path, profile: str) -> ProgramStatus:
    found = sv.status(root).program(sv.unit_name(profile))
    assert found is not None, profile
    return found


def spawns(root: Path, profile: str) -> int:
    """How many times supervisord's own log says it started ``profile``'s program."""
    log = (root / "logs" / "mesh" / "supervisord.log").read_text()
    return log.count(f"spawned: '{sv.unit_name(profile)}' with pid")


def test_the_restart_starts_each_drained_gateway_itself_once(mesh_root):
    sv.up(mesh_root, ["a", "b"])
    before = {p: program(mesh_root, p).pid for p in ("a", "b")}

    outcomes = {o.profile: o for o in restart_fleet(mesh_root, code_sha(ROOT))}

    assert sorted(outcomes) == ["a", "b"]
    for profile, outcome in outcomes.items():
        assert (outcome.ok, outcome.method, outcome.reason) == (True, "drain", None), outcome
        # Asked for the start, whichever of the restart and supervisord's autorestart got there first.
        assert (outcome.note or "").startswith(ASKED.format(sv.unit_name(profile))), outcome
        assert outcome.new_pid not in (None, before[profile])
        now = program(mesh_root, profile)  # RUNNING only once it has lived startsecs
        assert now.state in ("STARTING", "RUNNING") and now.pid == outcome.new_pid, now
        assert spawns(mesh_root, profile) == 2  # started once by `up`, once more by the restart: never twice
    log = (mesh_root / "logs" / "mesh" / "supervisord.log").read_text()
    assert "exited: hermes-gateway-a (exit status 75; not expected)" in log


def test_a_gateway_that_cannot_start_fails_alone(mesh_root):
    sv.up(mesh_root, ["a", "c"])
    before = program(mesh_root, "c").pid
    # c's run dir is made unsafe: the updater asks no socket in it (and a new c would exit 78).
    run = homes.profile_home("c", mesh_root) / "run"
    run.chmod(0o755)
    try:
        outcomes = {o.profile: o for o in restart_fleet(mesh_root, code_sha(ROOT))}
    finally:
        run.chmod(0o700)

    healthy, broken = outcomes["a"], outcomes["c"]
    assert healthy.ok and healthy.note.startswith(ASKED.format("hermes-gateway-a")), healthy
    assert not broken.ok and broken.old_pid == before, broken
    # Its run dir is not private: no socket in it is asked, and c alone fails, left as it ran.
    assert "refusing to use" in broken.reason and f"{run}" in broken.reason, broken
    assert program(mesh_root, "c").pid == before


def test_a_process_that_does_not_end_is_a_bounded_wait_and_nothing_is_started(mesh_root):
    sv.up(mesh_root, ["a"])
    running = program(mesh_root, "a").pid
    ident = process_identity(running)
    assert ident is not None
    with pytest.raises(SupervisorTimeout) as err:
        sv.start_drained(mesh_root, sv.unit_name("a"), ident, timeout=0.5)  # never drained: it keeps running
    assert "did not end within 0.5s" in err.value.message
    assert (program(mesh_root, "a").pid, spawns(mesh_root, "a")) == (running, 1)


def test_a_program_supervisord_does_not_have_is_a_typed_failure(mesh_root):
    sv.up(mesh_root, ["a"])
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = ProcessIdentity(int(ended.stdout), 1)  # a process that has ended
    with pytest.raises(SupervisorFailed) as err:
        sv.start_drained(mesh_root, sv.unit_name("b"), dead, timeout=5.0)  # b is not in this mesh
    assert err.value.detail["program"] == "hermes-gateway-b"


def test_a_supervisord_killed_meanwhile_is_reported_not_raised_past_the_gateway(mesh_root):
    sv.up(mesh_root, ["a"])
    daemon = sv.status(mesh_root).supervisor
    assert daemon is not None
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    os.kill(daemon.pid, signal.SIGKILL)
    with pytest.raises(HermesError) as err:
        sv.start_drained(mesh_root, sv.unit_name("a"), ProcessIdentity(int(ended.stdout), 1), timeout=5.0)
    assert err.value.code == "supervisor_unavailable"
