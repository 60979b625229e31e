"""The embedded mesh supervisor: a real supervisord running real gateways
(``python -m services.gateway``) in temporary installs.

Every wait is bounded, and every test that starts anything brings the mesh down in its
fixture's teardown, so no supervisord or gateway outlives the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from fleet.supervisors import supervisord as sv
from fleet.supervisors.errors import SupervisorUnavailable
from shared import homes
from shared.files import read_json, write_json_atomic
from shared.gateways import ops
from shared.identity import ProcessIdentity, is_alive, process_identity, read_cmdline
from shared.layout import GATEWAY_STARTS_FILE
from shared.transport.sync_client import connect
from tests.support import mesh_roots, processes
from tests.support.cli import hermes
from tests.support.homes import make_profile
from tests.support.processes import ROOT, python_env

pytestmark = pytest.mark.slow

WAIT = 30.0  # generous: a gateway restart under supervisord takes about a second


def wait_for(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    return processes.wait_for(check, timeout=timeout, what=what)


def gone(ident: ProcessIdentity) -> bool:
    """Not running: the pid is free, or what holds it is a zombie or another process."""
    if not psutil.pid_exists(ident.pid):
        return True
    return not is_alive(ident)


def gateway_ready(home: Path, pid: int) -> dict | None:
    """The gateway's own word that it serves: its state file says running, with this pid."""
    state = read_json(home / "gateway_state.json", default=None)
    if state and state.get("gateway_state") == "running" and state.get("pid") == pid:
        if (home / "run" / "gateway.ctl").exists() or homes.endpoint(home, "gateway", create=False).fallback:
            return state
    return None


def running_pid(root: Path, profile: str, *, not_pid: int | None = None) -> int | None:
    program = sv.status(root).program(sv.unit_name(profile))
    if program and program.state == "RUNNING" and program.pid and program.pid != not_pid:
        return program.pid
    return None


def supervisords_of(config: Path) -> list[int]:
    """Live processes running supervisord with this config (argv compared token by token)."""
    pids = []
    for pid in psutil.pids():
        argv = read_cmdline(pid) or []
        ident = process_identity(pid)
        runs_supervisord = any(Path(a).name == "supervisord" or a == "supervisor.supervisord" for a in argv[:3])
        if runs_supervisord and str(config) in argv and ident and is_alive(ident):
            pids.append(pid)
    return pids


@pytest.fixture
def mesh_root() -> Iterator[Path]:
    """A fresh install with profiles a and b; the mesh, and the workers ``hermes mesh up``
    starts beside it, are brought down whatever happens."""
    with mesh_roots.mesh_root("a", "b") as root:
        yield root


# --- a real mesh ------------------------------------------------------------------------------


def test_up_runs_every_gateway_and_again_is_idempotent(mesh_root):
    status = sv.up(mesh_root, ["a", "b"])
    assert status.running and is_alive(status.supervisor)
    recorded = read_json(mesh_root / "mesh" / "supervisord.json")
    assert ProcessIdentity.from_dict(recorded) == status.supervisor
    pids = {}
    for profile in ("a", "b"):
        program = status.program(sv.unit_name(profile))
        assert program is not None and program.state == "RUNNING" and program.profile == profile
        home = homes.profile_home(profile, mesh_root)
        state = wait_for(lambda h=home, pid=program.pid: gateway_ready(h, pid), f"gateway {profile} to serve")
        assert state["supervisor"] == "supervisord" and state["hermes_home"] == str(home)
        pids[profile] = program.pid

    listed = sv.status(mesh_root)
    assert [(p.name, p.state, p.pid) for p in listed.programs] == [
        ("hermes-gateway-a", "RUNNING", pids["a"]),
        ("hermes-gateway-b", "RUNNING", pids["b"]),
    ]
    assert listed.supervisor == status.supervisor

    again = sv.up(mesh_root, ["a", "b"])
    assert again.supervisor == status.supervisor  # no second supervisord
    assert {p.profile: p.pid for p in again.programs} == pids  # nothing restarted
    assert supervisords_of(mesh_root / "mesh" / "supervisord.conf") == [status.supervisor.pid]


def test_supervisord_restarts_a_killed_gateway_and_a_planned_restart(mesh_root):
    sv.up(mesh_root, ["a", "b"])
    home_a, home_b = homes.profile_home("a", mesh_root), homes.profile_home("b", mesh_root)

    old_a = running_pid(mesh_root, "a")
    wait_for(lambda: gateway_ready(home_a, old_a), "gateway a to serve")
    os.kill(old_a, signal.SIGKILL)
    new_a = wait_for(lambda: running_pid(mesh_root, "a", not_pid=old_a), "supervisord to restart gateway a")
    wait_for(lambda: gateway_ready(home_a, new_a), "the restarted gateway a to serve")

    old_b = running_pid(mesh_root, "b")
    wait_for(lambda: gateway_ready(home_b, old_b), "gateway b to serve")
    os.kill(old_b, signal.SIGUSR1)  # drain, then exit 75: a planned restart
    new_b = wait_for(lambda: running_pid(mesh_root, "b", not_pid=old_b), "supervisord to restart gateway b")
    wait_for(lambda: gateway_ready(home_b, new_b), "the restarted gateway b to serve")
    log = (mesh_root / "logs" / "mesh" / "supervisord.log").read_text()
    assert "exited: hermes-gateway-b (exit status 75; not expected)" in log


def test_down_leaves_nothing_running(mesh_root):
    status = sv.up(mesh_root, ["a", "b"])
    gateways = [process_identity(p.pid) for p in status.programs]
    assert all(g is not None and is_alive(g) for g in gateways)

    report = sv.down(mesh_root)
    assert report.supervisor == status.supervisor
    assert report.programs == ("hermes-gateway-a", "hermes-gateway-b")
    assert report.killed == () and report.orphans == ()
    for ident in (status.supervisor, *gateways):
        assert gone(ident), ident
    assert not (mesh_root / "mesh" / "supervisord.json").exists()
    assert not (mesh_root / "mesh" / "supervisord.sock").exists()
    after = sv.status(mesh_root)
    assert not after.running and {p.state for p in after.programs} == {"STOPPED"}
    for profile in ("a", "b"):
        state = read_json(homes.profile_home(profile, mesh_root) / "gateway_state.json")
        assert state["gateway_state"] == "stopped"

    assert sv.down(mesh_root) == sv.DownReport(None, (), (), ())  # nothing to do, and says so


def _dead_identity() -> ProcessIdentity:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ident = process_identity(proc.pid)
    proc.kill()
    proc.wait(timeout=10)
    assert ident is not None and not is_alive(ident)
    return ident


@pytest.mark.parametrize("stale", ["dead pid", "recycled pid"])
def test_a_stale_record_is_recognised_and_replaced(mesh_root, stale):
    if stale == "dead pid":
        ident = _dead_identity()
    else:  # a live pid that is some other process now: same pid, other start time
        me = process_identity(os.getpid())
        ident = ProcessIdentity(me.pid, me.start_time + 1)
    (mesh_root / "mesh").mkdir()
    write_json_atomic(mesh_root / "mesh" / "supervisord.json", {**ident.to_dict(), "started_at": "then"})
    (mesh_root / "mesh" / "supervisord.pid").write_text(f"{ident.pid}\n")

    assert not sv.status(mesh_root).running
    status = sv.up(mesh_root, ["a"])
    assert status.supervisor is not None and status.supervisor != ident and is_alive(status.supervisor)
    assert ProcessIdentity.from_dict(read_json(mesh_root / "mesh" / "supervisord.json")) == status.supervisor


def test_gateways_left_by_a_killed_supervisord_are_stopped(mesh_root):
    first = sv.up(mesh_root, ["a", "b"])
    orphans = {p.profile: process_identity(p.pid) for p in first.programs}
    os.kill(first.supervisor.pid, signal.SIGKILL)
    wait_for(lambda: not is_alive(first.supervisor), "supervisord to die")
    assert all(is_alive(o) for o in orphans.values())  # its gateways live on, holding their endpoints
    assert not sv.status(mesh_root).running

    second = sv.up(mesh_root, ["a", "b"])  # stops the orphans, then runs fresh gateways
    assert second.supervisor != first.supervisor
    for profile, orphan in orphans.items():
        assert gone(orphan)
        pid = second.program(sv.unit_name(profile)).pid
        assert pid != orphan.pid
        home = homes.profile_home(profile, mesh_root)
        wait_for(lambda h=home, p=pid: gateway_ready(h, p), f"new gateway {profile}")

    left = [process_identity(p.pid) for p in second.programs]
    os.kill(second.supervisor.pid, signal.SIGKILL)
    wait_for(lambda: not is_alive(second.supervisor), "supervisord to die")
    report = sv.down(mesh_root)
    assert report.supervisor is None and sorted(report.orphans) == sorted(i.pid for i in left)
    assert all(gone(i) for i in left)


def test_kind_api_installs_starts_stops_and_restarts_one_gateway(mesh_root):
    sv.up(mesh_root, ["a"])
    home_b = homes.profile_home("b", mesh_root)
    unit = sv.install("b", home_b)  # the running mesh does not know b yet
    assert sv.find("b", home_b) == unit
    assert sv.status(mesh_root).program("hermes-gateway-b").state == "NOT_LOADED"

    sv.start(unit)
    pid = running_pid(mesh_root, "b")
    assert pid and wait_for(lambda: gateway_ready(home_b, pid), "gateway b to serve")
    sv.start(unit)  # already running: nothing happens
    assert running_pid(mesh_root, "b") == pid

    before = process_identity(pid)
    sv.restart(unit)
    new = running_pid(mesh_root, "b", not_pid=pid)
    assert new and gone(before)
    restarted = process_identity(new)

    sv.stop(unit)
    assert sv.status(mesh_root).program("hermes-gateway-b").state == "STOPPED"
    assert gone(restarted)
    sv.stop(unit)  # already stopped: nothing happens
    assert running_pid(mesh_root, "a")  # the other gateway was never touched

    sv.down(mesh_root)
    with pytest.raises(SupervisorUnavailable) as err:
        sv.start(unit)
    assert err.value.code == "supervisor_unavailable"


def test_a_gateway_that_cannot_start_is_reported_with_its_log(mesh_root):
    # A plain file where the run dir must be: the gateway refuses its endpoint and exits 78.
    bad = homes.profile_home("b", mesh_root) / "run"
    shutil.rmtree(bad)
    bad.write_text("not a directory\n")
    with pytest.raises(sv.GatewayStartFailed) as err:
        sv.up(mesh_root, ["a", "b"])
    assert err.value.code == "supervisor_failed"
    programs = err.value.detail["programs"]
    assert [p["name"] for p in programs] == ["hermes-gateway-b"]
    # FATAL when it died within startsecs; EXITED when a loaded machine started it slower, and
    # supervisord describes an EXITED program by the time it stopped: its log says why.
    failed = programs[0]
    assert failed["state"] in ("FATAL", "EXITED")
    assert "refusing to use" in failed["log_tail"]
    assert running_pid(mesh_root, "a")  # the healthy gateway runs regardless


def test_mesh_runs_in_a_long_home_with_space_and_percent():
    base = Path(tempfile.mkdtemp(prefix="hm-"))
    root = base / ("with space 100%" + "-" * 80)
    make_profile(root, "default")
    try:
        paths = sv.mesh_paths(root)
        assert paths.socket.parent != paths.directory  # too long for a socket: the short private dir
        status = sv.up(root)
        assert [p.name for p in status.programs] == ["hermes-gateway"]
        pid = status.programs[0].pid
        wait_for(lambda: gateway_ready(root, pid), "the default gateway to serve")
        assert read_json(root / "gateway_state.json")["hermes_home"] == str(root)
        assert oct(paths.socket.stat().st_mode & 0o777) == "0o700"
    finally:
        report = sv.down(root)
        gateway_dir = homes.endpoint(root, "gateway", create=False)
        if gateway_dir.fallback:  # the gateway's own short ipc dir, as `hermes profile delete` removes it
            shutil.rmtree(gateway_dir.directory, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    assert report.killed == () and gone(status.supervisor)
    assert not paths.socket.parent.exists()  # the short private dir goes with the mesh


# --- the command --------------------------------------------------------------------------------


def test_cli_concurrent_up_starts_one_supervisord_then_status_and_down(mesh_root):
    argv = [sys.executable, "-m", "hermes_cli.main", "mesh", "up", "--programs", "--profiles", "a,b", "--json"]
    env = python_env(HERMES_HOME=str(mesh_root))
    procs = [
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    docs = [json.loads(out) for out, _ in outputs]
    assert docs[0]["supervisord"]["pid"] == docs[1]["supervisord"]["pid"]
    assert supervisords_of(mesh_root / "mesh" / "supervisord.conf") == [docs[0]["supervisord"]["pid"]]
    # Not a terminal: progress comes as plain lines on stderr, never on stdout.
    assert any(line.startswith("hermes-gateway-a: RUNNING") for _, err in outputs for line in err.splitlines())
    assert all("\r" not in err and "\033" not in err for _, err in outputs)

    missing = hermes("mesh", "up", "--profiles", "a,nope", "--json", home=mesh_root)
    assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["code"] == "profile_not_found"
    invalid = hermes("mesh", "up", "--profiles", "A", home=mesh_root)
    assert invalid.returncode == 2 and "invalid profile name" in invalid.stderr

    shown = hermes("mesh", "status", home=mesh_root)
    assert shown.returncode == 0
    rows = {line.split()[0]: line.split()[1:4] for line in shown.stdout.splitlines() if line.startswith("hermes-")}
    assert shown.stdout.startswith("supervisord: running")
    assert rows["hermes-gateway-b"][:2] == ["b", "RUNNING"] and rows["hermes-gateway-a"][:2] == ["a", "RUNNING"]
    doc = json.loads(hermes("mesh", "status", "--json", home=mesh_root).stdout)
    assert [(p["name"], p["state"]) for p in doc["programs"]] == [
        ("hermes-gateway-a", "RUNNING"),
        ("hermes-gateway-b", "RUNNING"),
    ]

    down = hermes("mesh", "down", "--json", home=mesh_root)
    assert down.returncode == 0
    assert json.loads(down.stdout)["programs"] == ["hermes-gateway-a", "hermes-gateway-b"]
    assert not is_alive(ProcessIdentity.from_dict(doc["supervisord"]))
    assert hermes("mesh", "down", home=mesh_root).stdout.strip() == "the mesh was not running"


def test_cli_up_returns_only_once_a_gateway_that_binds_late_answers(mesh_root):
    # b looks like it is in a restart storm: it owes 8s before it binds, long after supervisord
    # has called it RUNNING (startsecs 1).
    now = time.time()
    write_json_atomic(homes.profile_home("b", mesh_root) / GATEWAY_STARTS_FILE, {"starts": [now - i for i in range(8)]})
    up = hermes("mesh", "up", "--programs", "--profiles", "a,b", "--json", home=mesh_root, timeout=90)
    assert up.returncode == 0, up.stderr
    assert [p["state"] for p in json.loads(up.stdout)["programs"]] == ["RUNNING", "RUNNING"]
    for profile in ("a", "b"):
        with connect(homes.endpoint(homes.profile_home(profile, mesh_root), ops.SERVICE, create=False)) as client:
            assert client.call(ops.PING)["pong"] is True
    listed = json.loads(hermes("gateway", "status", "--json", home=mesh_root).stdout)["gateways"]
    assert sorted((g["profile"], g["source"]) for g in listed) == [("a", "socket"), ("b", "socket")]
    progress = up.stderr.splitlines()  # not a terminal: a plain line per state change
    assert any(line.startswith("hermes-gateway-b: RUNNING, not answering yet") for line in progress)
    assert any(line.startswith("hermes-gateway-b: RUNNING, answering") for line in progress)


def test_a_gateway_that_never_answers_is_named_within_the_deadline(mesh_root):
    now = time.time()  # b owes 60s before it binds: far past the deadline
    write_json_atomic(
        homes.profile_home("b", mesh_root) / GATEWAY_STARTS_FILE, {"starts": [now - i for i in range(12)]}
    )
    with pytest.raises(sv.GatewayStartFailed) as err:
        sv.up(mesh_root, ["a", "b"], timeout=5.0)
    assert "hermes-gateway-b" in err.value.message and "answer ping" in err.value.message
    assert [(p["name"], p["state"]) for p in err.value.detail["programs"]] == [("hermes-gateway-b", "RUNNING")]
    assert running_pid(mesh_root, "a")


def test_cli_up_refuses_an_unsafe_run_dir_with_exit_2(mesh_root):
    (mesh_root / "run").mkdir(mode=0o755)
    (mesh_root / "run").chmod(0o755)
    refused = hermes("mesh", "up", "--programs", "--profiles", "a", "--json", home=mesh_root)
    assert refused.returncode == 2, refused.stdout
    assert json.loads(refused.stdout)["error"]["code"] == "unsafe_run_dir"
    (mesh_root / "run").chmod(0o700)  # so that the teardown's clients may look in it again


def test_a_hung_gateway_is_restarted_through_supervisord_and_the_others_drain(mesh_root):
    from services.updater.restart import restart_fleet
    from shared.version import code_sha

    sv.up(mesh_root, ["a", "b"])
    old = {p: running_pid(mesh_root, p) for p in ("a", "b")}
    for profile, pid in old.items():
        wait_for(
            lambda p=profile, i=pid: gateway_ready(homes.profile_home(p, mesh_root), i), f"gateway {profile} to serve"
        )
    os.kill(old["a"], signal.SIGSTOP)  # hung: its socket takes requests but nothing answers
    try:
        outcomes = {o.profile: o for o in restart_fleet(mesh_root, code_sha(ROOT))}
    finally:
        try:
            os.kill(old["a"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    hung, healthy = outcomes["a"], outcomes["b"]
    assert hung.ok and hung.fallback == "blunt" and hung.new_pid not in (None, old["a"]), hung
    assert "did not answer" in (hung.note or ""), hung
    assert healthy.ok and (healthy.method, healthy.fallback) == ("drain", None), healthy
    assert healthy.new_pid not in (None, old["b"])


def test_the_multiplex_program_serves_its_set_follows_a_new_one_and_goes_down():
    with mesh_roots.mesh_root("a", "b", "c") as root:
        first = sv.up(root, served=["b", "a"])  # every profile not served gets its own program
        assert [p.name for p in first.programs] == ["hermes-gateway", "hermes-gateway-c", "hermes-multiplex"]
        mx = first.program(sv.MULTIPLEX_PROGRAM)
        assert (mx.profile, mx.served, mx.state) == (None, ("a", "b"), "RUNNING")
        assert read_cmdline(mx.pid)[-2:] == ["--serve", "a,b"]
        for profile in ("a", "b"):
            state = wait_for(lambda p=profile: gateway_ready(homes.profile_home(p, root), mx.pid), profile)
            assert state["served_profiles"] == ["a", "b"]

        # c moves into the set: the config is rewritten and supervisord applies it.
        old = process_identity(mx.pid)
        second = sv.up(root, ["default"], served=["a", "b", "c"])
        assert [p.name for p in second.programs] == ["hermes-gateway", "hermes-multiplex"]
        now = second.program(sv.MULTIPLEX_PROGRAM)
        assert now.served == ("a", "b", "c") and now.pid != mx.pid and gone(old)
        for profile in ("a", "b", "c"):
            wait_for(lambda p=profile: gateway_ready(homes.profile_home(p, root), now.pid), profile)

        # Left by a killed supervisord, the one process holding three locks is one orphan.
        ident = process_identity(now.pid)
        os.kill(second.supervisor.pid, signal.SIGKILL)
        wait_for(lambda: not is_alive(second.supervisor), "supervisord to die")
        report = sv.down(root)
        assert now.pid in report.orphans and report.orphans.count(now.pid) == 1 and gone(ident)
