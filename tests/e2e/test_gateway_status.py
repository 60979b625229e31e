"""Finding an install's gateways (socket, state file, scan) and ``hermes gateway status|list|drain``,
against real gateway processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from shared import homes, ids
from shared.gateways import discovery, ops
from shared.identity import process_identity, read_cmdline
from shared.sync_client import SyncClient
from shared.version import code_sha
from tests.support.cli import hermes
from tests.support.processes import python_env, read_state, wait_for


def as_json(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def make_profile(root, name):
    (root / "profiles" / name).mkdir(parents=True)


def gateway_home(root, profile):
    return homes.profile_home(profile, root)


def by_pid(records):
    return {r.pid: r for r in records}


def test_status_lists_every_live_gateway_through_its_socket(root, gateways):
    make_profile(root, "coder")
    make_profile(root, "writer")
    started = {name: gateways(root, name) for name in ("writer", "default", "coder")}

    listed = as_json(hermes("gateway", "status", "--json", home=root))["gateways"]

    assert [g["profile"] for g in listed] == ["default", "coder", "writer"]
    install = ids.read_install_id(root)
    assert ids.is_id(install)  # made by the first gateway to start, shared by all of them
    assert len({g["instance_id"] for g in listed}) == 3 and all(ids.is_id(g["instance_id"]) for g in listed)
    for g in listed:
        assert g["install_id"] == install
        assert g["instance_id"] == read_state(gateway_home(root, g["profile"]))["instance_id"]
        gateway = started[g["profile"]]
        assert g["pid"] == gateway.pid
        assert g["start_time"] == process_identity(gateway.pid).start_time
        assert (g["source"], g["state"], g["supervisor"]) == ("socket", "running", "unmanaged")
        assert g["code_sha"] == code_sha()
        assert g["home"] == str(gateway.home)
        assert set(g) == {
            "profile",
            "pid",
            "start_time",
            "state",
            "code_sha",
            "code_version",
            "active_turns",
            "supervisor",
            "source",
            "home",
            "install_id",
            "instance_id",
        }


def test_a_gateway_that_cannot_answer_is_found_through_its_state_file(root, gateways):
    make_profile(root, "coder")
    awake = gateways(root, "default")
    stopped = gateways(root, "coder")
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        records = by_pid(discovery.discover(root, timeout=0.5))
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert set(records) == {awake.pid, stopped.pid}
    assert records[awake.pid].source == "socket"
    found = records[stopped.pid]
    assert (found.source, found.profile, found.state) == ("state_file", "coder", "running")
    assert found.code_sha == code_sha()


def test_a_gateway_without_socket_or_state_file_is_found_by_the_scan(root, gateways):
    make_profile(root, "coder")
    orphan = gateways(root, "coder")
    os.unlink(orphan.endpoint.control.removeprefix("ipc://"))
    os.unlink(orphan.home / "gateway_state.json")

    records = discovery.discover(root)
    assert [(r.pid, r.profile, r.source, r.state) for r in records] == [(orphan.pid, "coder", "scan", "unknown")]
    assert records[0].supervisor == "unmanaged"
    assert records[0].start_time == process_identity(orphan.pid).start_time
    assert discovery.discover(root, scan=False) == []


def test_a_scanned_gateway_takes_its_fields_from_a_state_file_naming_it(root, gateways):
    gateway = gateways(root, "default")
    os.unlink(gateway.endpoint.control.removeprefix("ipc://"))  # only the socket is gone

    [record] = discovery.scan_gateways(root)
    assert (record.pid, record.profile, record.state, record.code_sha) == (
        gateway.pid,
        "default",
        "running",
        code_sha(),
    )
    assert record.source == "scan"
    [found] = discovery.discover(root, scan=True)
    assert (found.pid, found.source) == (gateway.pid, "state_file")  # listed once, by the better source


def test_a_killed_gateway_is_gone_at_once_though_its_files_remain(root, gateways, monkeypatch):
    gateway = gateways(root, "default")
    gateway.proc.kill()
    gateway.proc.wait(timeout=10)
    assert os.path.exists(gateway.endpoint.control.removeprefix("ipc://"))
    assert read_state(gateway.home)["gateway_state"] == "running"  # written by the dead process

    # Its socket file is not waited on for the whole timeout: the free endpoint lock tells, so
    # its address is never asked at all.
    asked: list[str] = []
    real_call_all = discovery.call_all
    monkeypatch.setattr(
        discovery, "call_all", lambda addresses, *a, **kw: asked.extend(addresses) or real_call_all(addresses, *a, **kw)
    )
    assert discovery.discover(root, timeout=30) == []
    assert asked == []


def test_gateways_of_another_install_are_never_listed(short_dir, gateways):
    ours, theirs = short_dir / "hermes", short_dir / "hermes2"  # a shared prefix, on purpose
    make_profile(ours, "coder")
    make_profile(theirs, "coder")
    mine = {gateways(ours, "default").pid, gateways(ours, "coder").pid}
    foreign = [gateways(theirs, "default"), gateways(theirs, "coder")]
    # Leave the foreign coder to the scan alone: no socket, no state file.
    os.unlink(foreign[1].endpoint.control.removeprefix("ipc://"))
    os.unlink(foreign[1].home / "gateway_state.json")

    assert {r.pid for r in discovery.discover(ours)} == mine
    assert {r.pid for r in discovery.scan_gateways(ours)} == mine
    listed = as_json(hermes("gateway", "status", "--json", home=ours))["gateways"]
    assert {g["pid"] for g in listed} == mine
    assert {r.pid for r in discovery.discover(theirs)} == {g.pid for g in foreign}


def test_processes_that_merely_mention_the_gateway_are_not_listed(root, gateways):
    make_profile(root, "coder")
    gateway = gateways(root, "coder")
    env = python_env(HERMES_HOME=str(root / "profiles" / "coder"))
    program = "import time; time.sleep(60)"
    argvs = [
        [sys.executable, "-c", program, "gateway", "run"],
        [sys.executable, "-c", program, "hermes", "gateway", "run"],
        [sys.executable, "-c", program, "-m", "services.gateway"],
    ]
    impostors = [subprocess.Popen(argv, env=env) for argv in argvs]
    try:
        for proc, argv in zip(impostors, argvs, strict=True):  # Popen may return before the new argv is visible
            wait_for(
                lambda p=proc, a=argv: (read_cmdline(p.pid) or [])[1:] == a[1:], timeout=10, what="an impostor's argv"
            )
        assert {r.pid for r in discovery.discover(root)} == {gateway.pid}
        assert {r.pid for r in discovery.scan_gateways(root)} == {gateway.pid}
    finally:
        for proc in impostors:
            proc.kill()
            proc.wait(timeout=10)


def test_list_shows_profiles_with_and_without_a_gateway(root, gateways):
    make_profile(root, "coder")
    make_profile(root, "idle")
    default, coder = gateways(root, "default"), gateways(root, "coder")

    profiles = as_json(hermes("gateway", "list", "--json", home=root))["profiles"]

    assert [(p["profile"], p["home"]) for p in profiles] == [
        ("default", str(root)),
        ("coder", str(root / "profiles" / "coder")),
        ("idle", str(root / "profiles" / "idle")),
    ]
    assert [p["gateway"] and (p["gateway"]["pid"], p["gateway"]["source"]) for p in profiles] == [
        (default.pid, "socket"),
        (coder.pid, "socket"),
        None,
    ]
    text = hermes("gateway", "list", home=root)
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].split() == ["PROFILE", "HOME", "GATEWAY"]


def test_drain_drains_the_active_profiles_gateway_which_exits_75(root, gateways):
    make_profile(root, "coder")
    other = gateways(root, "default")
    coder = gateways(root, "coder")
    turn: dict = {}

    def run_turn():
        with SyncClient(coder.endpoint.control) as client:
            turn.update(client.call(ops.TURN, {"text": "hi", "seconds": 0.5}))

    worker = threading.Thread(target=run_turn)
    worker.start()
    wait_for(lambda: read_state(coder.home)["active_turns"] == 1, timeout=10, what="the turn in flight")
    result = as_json(hermes("-p", "coder", "gateway", "drain", "--json", "--deadline", "5", home=root))
    worker.join(timeout=10)

    assert (result["profile"], result["pid"]) == ("coder", coder.pid)
    assert (result["finished"], result["cut"]) == ([turn["turn_id"]], [])
    assert (result["exit_code"], result["exits"]) == (75, True)
    assert coder.wait_exit() == 75
    assert other.proc.poll() is None  # only the active profile's gateway was drained


def test_drain_without_a_gateway_is_a_typed_error(root):
    make_profile(root, "coder")
    result = hermes("-p", "coder", "gateway", "drain", "--json", "--deadline", "1", home=root)
    assert result.returncode == 2  # refused: there is nothing to drain
    assert json.loads(result.stdout)["error"]["code"] == "gateway_not_running"


def test_status_text_names_the_columns_and_an_empty_install(root, gateways):
    empty = hermes("gateway", "status", home=root)
    assert (empty.returncode, empty.stdout.strip()) == (0, f"no gateway is running for {root}")
    gateway = gateways(root, "default")
    lines = hermes("gateway", "status", home=root).stdout.splitlines()
    assert lines[0].split() == ["PROFILE", "PID", "STATE", "CODE", "VERSION", "TURNS", "SUPERVISOR", "SOURCE"]
    sha = code_sha()
    assert lines[1].split()[:4] == ["default", str(gateway.pid), "running", sha[:12] if sha else "-"]
