"""The gateway host against real processes: ``hermes mesh up --host`` under a real supervisord,
its fork server forking every profile's gateway, the host supervising them, and the fork
server's pipe fed junk. Every wait is bounded; every test brings what it started down."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from fleet.supervisors import supervisord as sv
from fleet.supervisors.host import PREPARE, RESTART, ROLL, SERVICE, START, STATUS, STOP
from shared import homes
from shared.gateways import ops
from shared.identity import is_alive, process_identity
from shared.protocol import RemoteError
from shared.transport import NO_RETRY, SyncClient, connect
from tests.support import mesh_roots
from tests.support.cli import hermes
from tests.support.homes import make_profile
from tests.support.installs import git, start_update, updater_pid
from tests.support.processes import ROOT, python_env, read_state, wait_for
from tests.support.releases import hold_completion

pytestmark = pytest.mark.slow

WAIT = 30.0
PROFILES = ("default", "a", "b", "c")


def host_status(root: Path) -> dict[str, Any]:
    with connect(homes.endpoint(root, SERVICE, create=False), retry=NO_RETRY) as client:
        return client.call(STATUS, timeout=5)


def running(root: Path, profile: str, *, not_pid: int | None = None) -> dict[str, Any] | None:
    """The host's word on ``profile`` once a gateway other than ``not_pid`` runs it and says so
    in its own state file (None too while the host does not answer)."""
    try:
        child = host_status(root)["profiles"][profile]
    except RemoteError:
        return None
    state = read_state(homes.profile_home(profile, root))
    if child["state"] != "running" or child["pid"] == not_pid or not state:
        return None
    if state["pid"] != child["pid"] or state["gateway_state"] != "running":
        return None
    return child


@pytest.fixture
def mesh_root() -> Iterator[Path]:
    with mesh_roots.mesh_root(*PROFILES[1:]) as root:
        yield root


def test_the_host_runs_every_gateway_brings_a_killed_one_back_and_leaves_a_broken_one_down(mesh_root):
    up = hermes("mesh", "up", "--host", "--json", home=mesh_root, timeout=120)
    assert up.returncode == 0, up.stderr
    [program] = json.loads(up.stdout)["programs"]
    assert (program["name"], program["served_profiles"], program["state"]) == (
        sv.HOST_PROGRAM,
        list(PROFILES),
        "RUNNING",
    )
    status = host_status(mesh_root)
    assert status["pid"] == program["pid"]
    server = status["fork_server"]
    assert psutil.Process(server["pid"]).ppid() == status["pid"]
    for profile in PROFILES:
        child = wait_for(lambda p=profile: running(mesh_root, p), timeout=WAIT, what=f"{profile} to serve")
        assert child["fork_server"] == server["pid"] and psutil.Process(child["pid"]).ppid() == server["pid"]
        state = read_state(homes.profile_home(profile, mesh_root))
        assert (state["supervisor"], state["hermes_home"], state["code_sha"]) == (
            "gateway_host",
            str(homes.profile_home(profile, mesh_root)),
            server["code_sha"],
        )
    instances = {read_state(homes.profile_home(p, mesh_root))["instance_id"] for p in PROFILES}
    assert len(instances) == len(PROFILES)  # each forked gateway is an instance of its own

    # SIGKILL: a crash, started again from the same fork server.
    killed = status["profiles"]["a"]["pid"]
    os.kill(killed, signal.SIGKILL)
    back = wait_for(lambda: running(mesh_root, "a", not_pid=killed), timeout=WAIT, what="a back")
    assert back["fork_server"] == server["pid"] and back["crashes"] == 1 and back["starts"] == 2
    assert psutil.Process(back["pid"]).ppid() == server["pid"]

    # A gateway that exits 78 (its secrets cannot be read) stays down; the others serve on.
    (homes.profile_home("c", mesh_root) / ".env").write_text("NOT A NAME=value LINE\n")
    os.kill(status["profiles"]["c"]["pid"], signal.SIGKILL)
    down = wait_for(
        lambda: (c := host_status(mesh_root)["profiles"]["c"])["state"] == "down" and c,
        timeout=WAIT,
        what="c down",
    )
    assert (down["pid"], down["starts"], down["reason"]) == (None, 2, "its configuration is broken (exit 78)")
    assert host_status(mesh_root)["profiles"]["c"]["starts"] == 2
    assert all(running(mesh_root, p) for p in ("default", "a", "b"))

    # Down: the host, its fork server and every gateway are gone.
    everyone = [
        status["pid"],
        server["pid"],
        *(c["pid"] for c in host_status(mesh_root)["profiles"].values() if c["pid"]),
    ]
    idents = [process_identity(pid) for pid in everyone]
    assert all(ident is not None for ident in idents) and len(idents) == 5
    assert hermes("mesh", "down", home=mesh_root).returncode == 0
    assert [ident for ident in idents if ident is not None and is_alive(ident)] == []
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(mesh_root) in " ".join(p.info["cmdline"] or [])]
    assert left == []


class Pipe:
    """A fork server run as its host runs it, asked and read over its pipe."""

    def __init__(self, root: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.gateway_host.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=python_env(HERMES_HOME=str(root)),
            cwd=ROOT,
        )
        self._held = b""

    def ask(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def event(self, timeout: float = WAIT) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self._held:
            ready, _, _ = select.select([fd], [], [], timeout)
            assert ready, "no event from the fork server in time"
            data = os.read(fd, 4096)
            assert data, "the fork server closed its pipe"
            self._held += data
        line, self._held = self._held.split(b"\n", 1)
        return json.loads(line)


def test_a_malformed_frame_is_refused_and_the_fork_server_keeps_serving(tmp_path):
    root = tmp_path / "r"
    homes.create_profile(root, "a")
    pipe = Pipe(root)
    try:
        ready = pipe.event()
        assert (ready["event"], ready["pid"]) == ("ready", pipe.process.pid)
        junk = [
            (b"not json\n", "frame"),
            (b'{"op": "exec", "profile": "a"}\n', "op"),
            (b"x" * 3000 + b"\n", "frame"),
            (b'{"op": "fork", "profile": "../a"}\n', "profile"),
            (b'{"op": "fork", "profile": "a", "argv": ["sh"]}\n', "argv"),
        ]
        for frame, field in junk:
            pipe.ask(frame)
            refused = pipe.event()
            assert (refused["event"], refused["code"], refused["field"]) == ("refused", "fork_frame_invalid", field)
        pipe.ask(b'{"op": "fork", "profile": "a"}\n')
        forked = pipe.event()
        assert (forked["event"], forked["profile"]) == ("forked", "a")
        home = homes.profile_home("a", root)
        wait_for(
            lambda: (s := read_state(home)) and s["pid"] == forked["pid"] and s["gateway_state"] == "running",
            timeout=WAIT,
            what="a's gateway to serve",
        )
        os.kill(forked["pid"], signal.SIGKILL)
        assert pipe.event() == {"event": "exited", "profile": "a", "pid": forked["pid"], "code": -signal.SIGKILL}
        # A gateway dies with its fork server.
        pipe.ask(b'{"op": "fork", "profile": "a"}\n')
        second = pipe.event()
        gateway = process_identity(second["pid"])
        assert gateway is not None
        pipe.process.kill()
        pipe.process.wait(timeout=WAIT)
        wait_for(lambda: not is_alive(gateway), timeout=WAIT, what="the gateway to die with its fork server")
    finally:
        if pipe.process.poll() is None:
            pipe.process.kill()
            pipe.process.wait(timeout=WAIT)


def test_a_fork_server_whose_host_is_done_exits(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "services.gateway_host.forkserver"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=python_env(HERMES_HOME=str(tmp_path)),
        cwd=ROOT,
    )
    assert process.stdout is not None and process.stdin is not None
    assert json.loads(process.stdout.readline())["event"] == "ready"
    process.stdin.close()
    assert process.wait(timeout=WAIT) == 0
    process.stdout.close()


# --- an update of a host-run fleet ----------------------------------------------------------------


def ask(root: Path, profile: str, spec, args=None) -> dict:
    endpoint = homes.endpoint(homes.profile_home(profile, root), ops.SERVICE, create=False)
    with SyncClient(endpoint.control) as client:
        return client.call(spec, args or {})


def turn_in_flight(pool: ThreadPoolExecutor, root: Path, profile: str, seconds: float) -> Future[dict[str, Any]]:
    """A turn of ``seconds`` asked of ``profile``'s gateway, once its gateway says it runs it."""
    turn = pool.submit(ask, root, profile, ops.TURN, {"text": "hold on", "seconds": seconds})
    wait_for(
        lambda: read_state(homes.profile_home(profile, root))["active_turns"] == 1,
        timeout=WAIT,
        what=f"{profile}'s turn to start",
    )
    return turn


def head_moved_at(install) -> int:
    """When the update moved the install's HEAD (its reflog's last entry), in whole seconds."""
    entry = git(install.path, "log", "-g", "-1", "--date=unix", "--format=%gd")  # HEAD@{<seconds>}
    return int(entry.split("{")[1].rstrip("}"))


def started_at(pid: int) -> float:
    """When ``pid`` started, wall clock, to the clock tick: psutil's ``create_time`` adds the
    boot time in whole seconds, and can be up to a second early."""
    identity = process_identity(pid)
    assert identity is not None, f"pid {pid} is gone"
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + identity.start_time / os.sysconf("SC_CLK_TCK")


def hosting(install, *profiles: str) -> dict[str, Any]:
    """``mesh up --host`` in ``install`` with ``profiles`` made beside the default one; the
    host's status once every gateway serves."""
    for profile in profiles:
        make_profile(install.root, profile)
    code, up = install.hermes_json("mesh", "up", "--host", timeout=120)
    assert code == 0, up
    for profile in ("default", *profiles):
        wait_for(lambda p=profile: running(install.root, p), timeout=WAIT, what=f"{profile} to serve")
    return host_status(install.root)


def test_an_update_rolls_every_gateway_of_the_host_onto_one_new_fork_server(install):
    fleet = ("default", "a", "b")
    before = hosting(install, *fleet[1:])
    old_server = before["fork_server"]
    old_pids = {p: before["profiles"][p]["pid"] for p in fleet}

    new = install.release("release 2")
    with ThreadPoolExecutor(max_workers=1) as pool:
        # A turn in flight as the update starts: answered, never cut, whenever the drain comes.
        turn = turn_in_flight(pool, install.root, "a", 5.0)
        code, report = install.hermes_json("update", "--yes")
        answered = turn.result(timeout=WAIT)
    assert code == 0 and report["outcome"] == "success" and install.head() == new, report
    assert answered["profile"] == "a"
    assert {(row["profile"], row["verdict"]) for row in report["fleet"]} == {(p, "current") for p in fleet}
    restarts = {o["profile"]: o for o in json.loads(Path(report["receipt"]).read_text())["restart"]}
    assert sorted(restarts) == sorted(fleet)
    for profile in fleet:
        outcome = restarts[profile]
        assert (outcome["ok"], outcome["method"], outcome["old_pid"]) == (True, "roll", old_pids[profile]), outcome
    assert [restarts[p]["cut"] for p in fleet] == [0, 0, 0]  # no turn lost: a's was answered above

    after = host_status(install.root)
    server = after["fork_server"]
    assert after["pid"] == before["pid"]  # the host itself stays
    assert server["pid"] != old_server["pid"] and server["code_sha"] == new
    assert after["fork_servers"] == [server]  # the old fork server left with its last gateway
    assert not psutil.pid_exists(old_server["pid"]) or psutil.Process(old_server["pid"]).ppid() != before["pid"]
    # ONE new fork server, started after the commit, is the parent of every new gateway.
    assert started_at(server["pid"]) >= head_moved_at(install)
    for profile in fleet:
        child = after["profiles"][profile]
        state = read_state(homes.profile_home(profile, install.root))
        assert (state["pid"], state["code_sha"], child["fork_server"]) == (child["pid"], new, server["pid"])
        assert child["pid"] == restarts[profile]["new_pid"] != old_pids[profile]
        assert psutil.Process(child["pid"]).ppid() == server["pid"]


def test_a_gateway_drained_after_the_tree_moved_is_forked_from_a_new_fork_server(install):
    before = hosting(install, "a")
    old = before["fork_server"]
    new = install.release("release 2")
    git(install.path, "pull", "-q", "--ff-only")  # the tree moves, no roll: as if the host had not answered

    drained = ask(install.root, "a", ops.DRAIN, {"deadline": 5.0})
    assert drained["exit_code"] == 75
    back = wait_for(lambda: running(install.root, "a", not_pid=before["profiles"]["a"]["pid"]), timeout=WAIT, what="a")
    after = host_status(install.root)
    assert back["fork_server"] == after["fork_server"]["pid"] != old["pid"]
    assert after["fork_server"]["code_sha"] == new == read_state(homes.profile_home("a", install.root))["code_sha"]
    # The old fork server still runs the gateway it forked, and forks nothing more.
    assert after["profiles"]["default"]["fork_server"] == old["pid"]
    assert [s["pid"] for s in after["fork_servers"]] == [old["pid"], after["fork_server"]["pid"]]


def test_a_fork_server_prepared_when_the_tree_moved_is_the_one_the_roll_forks_from(install):
    before = hosting(install, "a")
    old = before["fork_server"]
    new = install.release("release 2")
    git(install.path, "pull", "-q", "--ff-only")
    with connect(homes.endpoint(install.root, SERVICE, create=False), retry=NO_RETRY) as client:
        assert client.call(PREPARE, timeout=5)["fork_server"]["pid"] == old["pid"]  # answered before any import
        prepared = wait_for(
            lambda: (server := host_status(install.root)["fork_server"])["pid"] != old["pid"] and server,
            timeout=WAIT,
            what="the prepared fork server",
        )
        assert prepared["code_sha"] == new
        client.call(PREPARE, timeout=5)  # it runs the code on disk already: nothing more starts
        status = host_status(install.root)
        assert [s["pid"] for s in status["fork_servers"]] == [old["pid"], prepared["pid"]]
        for profile in ("default", "a"):  # nothing was drained: every gateway is the old one's
            assert (status["profiles"][profile]["pid"], status["profiles"][profile]["fork_server"]) == (
                before["profiles"][profile]["pid"],
                old["pid"],
            )
        rolled = client.call(ROLL, {"deadline": 5.0}, timeout=120)
    assert rolled["fork_server"]["pid"] == prepared["pid"]
    assert {p: r["new_pid"] is not None for p, r in rolled["profiles"].items()} == {"default": True, "a": True}


def test_a_roll_whose_fork_server_cannot_import_drains_nothing(install):
    code, up = install.hermes_json("mesh", "up", "--host", timeout=120)
    assert code == 0, up
    before = wait_for(lambda: running(install.root, "default"), timeout=WAIT, what="default to serve")
    old = host_status(install.root)["fork_server"]

    def broken(tree: Path) -> None:
        app = tree / "services" / "gateway" / "app.py"
        app.write_text(app.read_text() + "\nraise ImportError('this release cannot be imported')\n")

    for junk in (["nope"], [{"a": 1}]):  # refused before anything starts
        with pytest.raises(RemoteError) as refused:
            with connect(homes.endpoint(install.root, SERVICE, create=False), retry=NO_RETRY) as client:
                client.call(ROLL, {"profiles": junk}, timeout=30)
        assert (refused.value.code, refused.value.detail) == ("roll_failed", {"field": "profiles"})
    install.release("a release that cannot be imported", broken)
    git(install.path, "pull", "-q", "--ff-only")
    with pytest.raises(RemoteError) as refused:
        with connect(homes.endpoint(install.root, SERVICE, create=False), retry=NO_RETRY) as client:
            client.call(ROLL, {"deadline": 5.0}, timeout=120)
    assert refused.value.code == "roll_failed" and "serve on" in refused.value.message
    after = host_status(install.root)
    assert after["fork_server"] == old and after["profiles"]["default"]["pid"] == before["pid"]
    assert read_state(install.root)["gateway_state"] == "running"  # never drained
    assert [s["pid"] for s in after["fork_servers"]] == [old["pid"]]  # the failed one is gone


def test_a_killed_host_takes_its_fork_server_and_gateways_with_it(mesh_root):
    assert hermes("mesh", "up", "--host", "--profiles", "a", home=mesh_root, timeout=120).returncode == 0
    before = wait_for(lambda: running(mesh_root, "a"), timeout=WAIT, what="a to serve")
    status = host_status(mesh_root)
    idents = [process_identity(pid) for pid in (status["pid"], status["fork_server"]["pid"], before["pid"])]
    os.kill(status["pid"], signal.SIGKILL)
    wait_for(
        lambda: not any(ident is not None and is_alive(ident) for ident in idents),
        timeout=WAIT,
        what="the fork server and its gateway to die with their host",
    )
    # supervisord starts the host again, and with it a gateway of a.
    again = wait_for(lambda: running(mesh_root, "a", not_pid=before["pid"]), timeout=WAIT, what="a back")
    assert host_status(mesh_root)["pid"] not in (status["pid"], None) and again["pid"] != before["pid"]


def test_gateways_of_a_host_that_does_not_answer_are_drained_and_come_back_on_the_new_code(install):
    from services.updater.restart import restart_fleet

    before = hosting(install, "a")
    new = install.release("release 2")
    git(install.path, "pull", "-q", "--ff-only")
    old = [process_identity(before["profiles"][p]["pid"]) for p in ("default", "a")]
    os.kill(before["pid"], signal.SIGSTOP)  # its socket takes calls, nothing answers
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            restarting = pool.submit(restart_fleet, install.root, new)
            wait_for(
                lambda: not any(ident is not None and is_alive(ident) for ident in old),
                timeout=WAIT,
                what="both gateways drained over their own sockets",
            )
            os.kill(before["pid"], signal.SIGCONT)
            outcomes = {o.profile: o for o in restarting.result(timeout=120)}
    finally:
        os.kill(before["pid"], signal.SIGCONT)
    after = host_status(install.root)
    server = after["fork_server"]
    assert server["pid"] != before["fork_server"]["pid"] and server["code_sha"] == new
    for profile in ("default", "a"):
        outcome = outcomes[profile]
        assert (outcome.ok, outcome.method, outcome.new_pid) == (True, "drain", after["profiles"][profile]["pid"])
        assert "the gateway host did not answer (timeout)" in (outcome.note or ""), outcome
        assert after["profiles"][profile]["fork_server"] == server["pid"]


# --- one hosted gateway at a time ----------------------------------------------------------------


def host_call(root: Path, spec, profile: object) -> dict[str, Any]:
    with connect(homes.endpoint(root, SERVICE, create=False), retry=NO_RETRY) as client:
        return client.call(spec, {"profile": profile}, timeout=120)


def gateway_cli(root: Path, action: str, profile: str, *flags: str) -> subprocess.CompletedProcess[str]:
    done = hermes("-p", profile, "gateway", action, *flags, home=root, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def listed(root: Path, profile: str) -> list[dict[str, Any]]:
    """``hermes gateway status``'s rows for ``profile``."""
    status = hermes("gateway", "status", "--json", home=root, timeout=60)
    assert status.returncode == 0, status.stderr
    return [row for row in json.loads(status.stdout)["gateways"] if row["profile"] == profile]


def test_a_hosted_gateway_is_stopped_started_and_restarted_alone(mesh_root):
    assert hermes("mesh", "up", "--host", "--profiles", "a,b", home=mesh_root, timeout=120).returncode == 0
    first = wait_for(lambda: running(mesh_root, "a"), timeout=WAIT, what="a to serve")
    wait_for(lambda: running(mesh_root, "b"), timeout=WAIT, what="b to serve")
    gateway = process_identity(first["pid"])

    stopped = gateway_cli(mesh_root, "stop", "a", "--json")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    report = json.loads(stopped.stdout)
    assert (report["supervisor"], report["unit"], report["profile"]) == ("gateway_host", f"{sv.HOST_PROGRAM}:a", "a")
    assert gateway is not None and not is_alive(gateway)
    down = host_status(mesh_root)["profiles"]["a"]
    assert (down["state"], down["reason"], down["pid"]) == ("down", "stopped", None)
    # A crash window passes (b killed and started again): nothing starts a.
    killed = host_status(mesh_root)["profiles"]["b"]["pid"]
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: running(mesh_root, "b", not_pid=killed), timeout=WAIT, what="b back")
    assert host_status(mesh_root)["profiles"]["a"] == down
    assert listed(mesh_root, "a") == []
    assert host_call(mesh_root, STOP, "a") == {"profile": "a", "pid": None, "state": "down", "reason": "stopped"}

    started = gateway_cli(mesh_root, "start", "a")
    assert started.returncode == 0, started.stdout + started.stderr
    assert started.stdout.strip() == f"started {sv.HOST_PROGRAM}:a through gateway_host (user scope)"
    back = wait_for(lambda: running(mesh_root, "a", not_pid=first["pid"]), timeout=WAIT, what="a back")
    assert (back["starts"], back["crashes"]) == (2, 0)
    assert [row["pid"] for row in listed(mesh_root, "a")] == [back["pid"]]
    assert host_call(mesh_root, START, "a") == {"profile": "a", "pid": back["pid"], "state": "running", "reason": ""}

    with ThreadPoolExecutor(max_workers=1) as pool:
        # A turn in flight as the restart drains it: answered.
        turn = turn_in_flight(pool, mesh_root, "a", 3.0)
        restarted = gateway_cli(mesh_root, "restart", "a", "--json")
        answered = turn.result(timeout=WAIT)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert json.loads(restarted.stdout)["unit"] == f"{sv.HOST_PROGRAM}:a"
    assert answered["profile"] == "a"
    after = host_status(mesh_root)
    rolled = after["profiles"]["a"]
    assert rolled["pid"] not in (None, back["pid"]) and rolled["fork_server"] == after["fork_server"]["pid"]
    assert psutil.Process(rolled["pid"]).ppid() == after["fork_server"]["pid"]
    assert wait_for(lambda: running(mesh_root, "a"), timeout=WAIT, what="a to serve")["pid"] == rolled["pid"]
    assert after["profiles"]["b"]["state"] == "running"  # the others serve on


def test_a_stopped_gateway_killed_before_it_exits_stays_down(mesh_root):
    assert hermes("mesh", "up", "--host", "--profiles", "a,b", home=mesh_root, timeout=120).returncode == 0
    a = wait_for(lambda: running(mesh_root, "a"), timeout=WAIT, what="a to serve")
    b = wait_for(lambda: running(mesh_root, "b"), timeout=WAIT, what="b to serve")

    # Stopped, then killed before it could exit on its own: a crash code, and still down.
    os.kill(a["pid"], signal.SIGSTOP)  # it cannot act on the SIGTERM the stop sends
    with ThreadPoolExecutor(max_workers=2) as pool:
        stops = [pool.submit(host_call, mesh_root, STOP, "a") for _ in range(2)]  # two at once: both answer
        wait_for(lambda: host_status(mesh_root)["profiles"]["a"]["state"] == "stopping", timeout=WAIT, what="the stop")
        os.kill(a["pid"], signal.SIGKILL)
        os.kill(b["pid"], signal.SIGKILL)
        answers = [stop.result(timeout=WAIT) for stop in stops]
    assert answers == [{"profile": "a", "pid": None, "state": "down", "reason": "stopped"}] * 2
    wait_for(lambda: running(mesh_root, "b", not_pid=b["pid"]), timeout=WAIT, what="b back after its crash")
    status = host_status(mesh_root)["profiles"]["a"]
    assert (status["state"], status["reason"], status["pid"], status["starts"]) == ("down", "stopped", None, 1)


def test_a_stop_during_a_roll_holds_and_a_restart_waits_for_the_roll(mesh_root):
    assert hermes("mesh", "up", "--host", "--profiles", "a,b", home=mesh_root, timeout=120).returncode == 0
    started = wait_for(lambda: running(mesh_root, "a"), timeout=WAIT, what="a to serve")
    b = wait_for(lambda: running(mesh_root, "b"), timeout=WAIT, what="b to serve")
    with ThreadPoolExecutor(max_workers=3) as pool:
        turn = turn_in_flight(pool, mesh_root, "a", 3.0)
        with connect(homes.endpoint(mesh_root, SERVICE, create=False), retry=NO_RETRY) as client:
            roll = pool.submit(client.call, ROLL, {"deadline": 10.0}, timeout=180)
            wait_for(
                lambda: read_state(homes.profile_home("a", mesh_root))["gateway_state"] == "draining",
                timeout=WAIT,
                what="the roll to drain a",
            )
            restart = pool.submit(host_call, mesh_root, RESTART, "b")  # waits for the roll, then rolls b again
            assert host_call(mesh_root, STOP, "a")["state"] == "down"
            rolled = roll.result(timeout=180)
        assert turn.result(timeout=WAIT)["profile"] == "a"
        restarted = restart.result(timeout=180)
    assert rolled["profiles"]["a"]["new_pid"] is None and rolled["profiles"]["b"]["new_pid"] is not None
    assert restarted["pid"] not in (None, b["pid"], rolled["profiles"]["b"]["new_pid"])
    assert host_status(mesh_root)["profiles"]["b"]["pid"] == restarted["pid"]
    after = host_status(mesh_root)
    assert (after["profiles"]["a"]["state"], after["profiles"]["a"]["pid"]) == ("down", None)
    assert not psutil.pid_exists(started["pid"]) or psutil.Process(started["pid"]).status() == psutil.STATUS_ZOMBIE
    serving = wait_for(lambda: running(mesh_root, "b", not_pid=b["pid"]), timeout=WAIT, what="b's new gateway to serve")
    assert serving["pid"] == restarted["pid"]


def test_hostile_profiles_are_refused_by_name_and_the_host_serves_on(mesh_root):
    assert hermes("mesh", "up", "--host", "--profiles", "a", home=mesh_root, timeout=120).returncode == 0
    a = wait_for(lambda: running(mesh_root, "a"), timeout=WAIT, what="a to serve")
    for spec in (STOP, START, RESTART):
        for profile, code in (
            ("b", "profile_not_hosted"),
            ("../a", "profile_not_hosted"),
            (5, "invalid_field"),
            (["a"], "invalid_field"),
            ("a" * 65, "invalid_field"),
        ):
            with pytest.raises(RemoteError) as refused:
                host_call(mesh_root, spec, profile)
            assert (refused.value.code, refused.value.detail["field"]) == (code, "profile"), (spec.name, profile)
    assert running(mesh_root, "a")["pid"] == a["pid"]  # nothing was stopped

    # A profile the host does not run has no owner here; a host that does not answer is named.
    outside = gateway_cli(mesh_root, "stop", "b")
    assert outside.returncode != 0 and "no supervisor runs the gateway of profile b" in outside.stderr
    host = host_status(mesh_root)["pid"]
    os.kill(host, signal.SIGSTOP)
    try:
        unanswered = gateway_cli(mesh_root, "stop", "a", "--json")
    finally:
        os.kill(host, signal.SIGCONT)
    error = json.loads(unanswered.stdout)["error"]
    socket = homes.endpoint(mesh_root, SERVICE, create=False).control
    assert unanswered.returncode != 0 and error["code"] == "supervisor_unavailable"
    assert socket in error["message"]
    assert running(mesh_root, "a")["pid"] == a["pid"]


def test_an_owed_restart_of_a_hosted_gateway_is_cleared_by_restarting_it(install):
    from services.updater import obligations

    before = hosting(install, "a")
    new = install.release("release 2", edit=hold_completion)
    hold = install.root / "hold-completion"
    hold.touch()
    update = start_update(install)
    wait_for((install.root / "completion-holding").exists, timeout=120, what="the completion to start")
    os.kill(updater_pid(install), signal.SIGINT)  # after the commit point: the restarts stay owed
    out, err = update.communicate(timeout=120)
    hold.unlink()
    assert update.returncode == 130, out + err
    assert set(obligations.read_fleet(install.root)) == {"default", "a"}

    restarted = install.hermes("-p", "a", "gateway", "restart", "--json")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    report = json.loads(restarted.stdout)
    assert report["supervisor"] == "gateway_host"
    assert report["owed_restart"] == {"cleared": True, "expected": new, "running": new}
    assert set(obligations.read_fleet(install.root)) == {"default"}  # the other is still owed
    after = host_status(install.root)
    assert after["fork_server"]["code_sha"] == new
    assert after["profiles"]["a"]["fork_server"] == after["fork_server"]["pid"]
    assert after["profiles"]["default"]["pid"] == before["profiles"]["default"]["pid"]
