"""Finding an install's gateways (socket, state file, scan) and ``hermes gateway status|list|drain``,
against real gateway processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest

from fleet import discovery
from fleet.supervisors import detect_supervisor
from shared import homes, ids, transport
from shared.gateways import ops
from shared.identity import process_identity, read_cmdline
from shared.locks import FileLock
from shared.transport.sync_client import SyncClient, call_all
from shared.version import code_sha
from tests.support.cli import hermes
from tests.support.processes import ROOT, python_env, read_state, wait_for


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
        # A gateway judges its own filesystem: "container" where the tests run in one.
        assert (g["source"], g["state"], g["supervisor"]) == ("socket", "running", detect_supervisor())
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
            "served_profiles",
            "multiplex",
            "host",  # "": this install's (another host's: tests/e2e/test_many_hosts.py)
            "error",  # None: it answered, or was found without a refused handshake
            "health",  # its probe turn's verdict: tests/e2e/test_gateway_health.py
        }
        assert (g["served_profiles"], g["multiplex"], g["host"], g["error"]) == ([g["profile"]], False, "", None)


def test_gateways_over_ipc_are_asked_without_pyzmq_and_say_what_they_say_to_pyzmq(root, gateways):
    make_profile(root, "coder")
    started = [gateways(root, "default"), gateways(root, "coder")]
    addresses = [gateway.endpoint.control for gateway in started]

    plain = transport.call_all_ipc(addresses, ops.STATUS, timeout=5)
    through_zmq = call_all(addresses, ops.STATUS, timeout=5)

    identity = ("pid", "start_time", "instance_id", "install_id", "profile", "home", "state")
    for address, gateway in zip(addresses, started, strict=True):
        assert plain[address]["pid"] == gateway.pid
        assert {k: plain[address][k] for k in identity} == {k: through_zmq[address][k] for k in identity}


def test_a_socket_whose_peer_breaks_the_wire_is_a_gateway_that_did_not_answer(root, gateways):
    make_profile(root, "coder")
    default = gateways(root, "default")
    endpoint = homes.endpoint(gateway_home(root, "coder"), ops.SERVICE)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(endpoint.control.removeprefix("ipc://"))
    listener.listen(1)
    listener.settimeout(30)

    def answer_in_another_protocol() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    peer = threading.Thread(target=answer_in_another_protocol)
    peer.start()
    try:
        with FileLock(endpoint.lock_path):  # held, as a live service holds it: the socket is asked
            listed = as_json(hermes("gateway", "status", "--json", home=root))["gateways"]
    finally:
        peer.join(30)
        listener.close()
    assert [(g["profile"], g["pid"], g["source"]) for g in listed] == [("default", default.pid, "socket")]


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
    assert records[0].supervisor == "unmanaged"  # from its environment alone: no container in it
    assert records[0].start_time == process_identity(orphan.pid).start_time
    assert discovery.discover(root, scan=False) == []


def test_no_process_scan_runs_when_every_profile_answered_from_a_process_seen_here(root, gateways, monkeypatch):
    make_profile(root, "coder")
    started = {gateways(root, "default").pid, gateways(root, "coder").pid}
    scans: list[object] = []
    scan = discovery._scan
    monkeypatch.setattr(discovery, "_scan", lambda root: scans.append(root) or scan(root))

    assert {(r.pid, r.source) for r in discovery.discover(root)} == {(pid, "socket") for pid in started}
    assert scans == []
    make_profile(root, "writer")  # a profile with nothing of a gateway: no socket, lock or state file
    assert {(r.pid, r.source) for r in discovery.discover(root)} == {(pid, "socket") for pid in started}
    assert scans == []
    # Its endpoint lock held, as a gateway holds it while it starts or hangs: the scan looks.
    lock = FileLock(homes.endpoint(gateway_home(root, "writer"), ops.SERVICE).lock_path)
    lock.acquire()
    try:
        assert {(r.pid, r.source) for r in discovery.discover(root)} == {(pid, "socket") for pid in started}
    finally:
        lock.release()
    assert scans == [root]


def test_a_discovery_looks_at_each_profiles_paths_once(root, gateways, monkeypatch):
    for name in ("coder", "writer"):
        make_profile(root, name)
        gateways(root, name)
    gateways(root, "default")
    looked: list[object] = []
    lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda path, **kw: looked.append(path) or lstat(path, **kw))

    assert len(discovery.discover(root, scan=False)) == 3
    # The run dir, judged as itself (a symlink is refused): never a whole path walked per record.
    assert sorted(map(str, looked)) == sorted(
        str(gateway_home(root, p) / "run") for p in ("default", "coder", "writer")
    )


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
    for name in ("call_all", "call_all_ipc"):
        real = getattr(transport, name)
        monkeypatch.setattr(
            transport, name, lambda addresses, *a, real=real, **kw: asked.extend(addresses) or real(addresses, *a, **kw)
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
    assert text.stdout.splitlines()[0].split() == ["PROFILE", "HOST", "HOME", "GATEWAY"]


def test_drain_drains_the_active_profiles_gateway_which_exits_75(root, gateways):
    make_profile(root, "coder")
    other = gateways(root, "default")
    coder = gateways(root, "coder")
    turn: dict = {}

    def run_turn():
        # Long enough to outlast the CLI's start on a loaded machine: the drain must find it running.
        with SyncClient(coder.endpoint.control) as client:
            turn.update(client.call(ops.TURN, {"text": "hi", "seconds": 4}, timeout=30))

    worker = threading.Thread(target=run_turn)
    worker.start()
    wait_for(lambda: read_state(coder.home)["active_turns"] == 1, timeout=10, what="the turn in flight")
    result = as_json(hermes("-p", "coder", "gateway", "drain", "--json", "--deadline", "20", home=root))
    worker.join(timeout=30)

    assert (result["profile"], result["pid"]) == ("coder", coder.pid)
    assert (result["finished"], result["cut"]) == ([turn["turn_id"]], [])
    assert (result["exit_code"], result["exits"]) == (75, True)
    assert coder.wait_exit() == 75
    assert other.proc.poll() is None  # only the active profile's gateway was drained


def test_status_text_names_the_columns_and_an_empty_install(root, gateways):
    empty = hermes("gateway", "status", home=root)
    assert (empty.returncode, empty.stdout.strip()) == (0, f"no gateway is running for {root}")
    gateway = gateways(root, "default")
    lines = hermes("gateway", "status", "--min-healthy", "3600", home=root).stdout.splitlines()
    header = ["PROFILE", "HOST", "PID", "STATE", "HEALTH", "CODE", "VERSION", "TURNS", "SUPERVISOR", "SOURCE"]
    assert lines[0].split() == header
    sha = code_sha()
    # Its health is unknown until it has run the window, and the line below says so.
    row = lines[1].split()
    assert row[:6] == ["default", "local", str(gateway.pid), "running", "unknown", sha[:12] if sha else "-"]
    assert lines[2:3] == [""] and lines[3].startswith(f"default (pid {gateway.pid}): unknown: up ")


# --- gateways that see their home elsewhere, or live in their own pid namespace ------------------
#
# A container stand-in built from real processes: the gateway runs in a private mount namespace
# in which the install's root is bind-mounted at another path (its home, as it reports it, is a
# path that on the host is an empty directory), and optionally in a new pid namespace (it is
# pid 1 there). Only unshare(1) and root are needed; without them these tests skip.

CONTAINED = 'mount --bind "$0" "$1" && exec "$2" -m services.gateway'


@pytest.fixture
def contained(short_dir):
    probe = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"unshare cannot make namespaces here: {probe.stderr.decode().strip()}")
    started: list[subprocess.Popen] = []

    def start(root, profile, *, pid_namespace: bool):
        home = homes.profile_home(profile, root)
        home.mkdir(parents=True, exist_ok=True)
        elsewhere = short_dir / f"mnt{len(started)}"  # the root, as the gateway sees it
        elsewhere.mkdir()
        isolate = ["--pid", "--fork", "--mount-proc", "--kill-child"] if pid_namespace else []
        proc = subprocess.Popen(
            ["unshare", "--mount", *isolate, "sh", "-c", CONTAINED, str(root), str(elsewhere), sys.executable],
            cwd=ROOT,
            env=python_env(HERMES_HOME=str(homes.profile_home(profile, elsewhere))),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        started.append(proc)

        def running():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            state = read_state(home)
            return state if state and state["gateway_state"] == "running" else None

        state = wait_for(running, timeout=20, what=f"contained gateway {profile}")
        host_pid = proc.pid if not pid_namespace else wait_for(lambda: _only_child(proc.pid), timeout=10, what="pid")
        return state, host_pid

    yield start
    for proc in started:
        for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
            child.kill()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _only_child(pid):
    children = psutil.Process(pid).children()
    return children[0].pid if len(children) == 1 else None


def test_a_gateway_that_sees_its_home_elsewhere_is_listed_by_what_it_says(root, contained):
    make_profile(root, "coder")
    state, host_pid = contained(root, "coder", pid_namespace=False)
    assert state["hermes_home"] != str(root / "profiles" / "coder")  # its own view of its home

    [record] = discovery.discover(root)
    assert (record.profile, record.pid, record.source, record.state) == ("coder", host_pid, "socket", "running")
    assert record.home == root / "profiles" / "coder"  # the home as this install names it
    assert (record.install_id, record.instance_id) == (ids.read_install_id(root), state["instance_id"])
    # A state file of ours names it: it is not another install's (whatever else runs here).
    assert host_pid not in {p["pid"] for p in discovery.scan_foreign(root)}
    [scanned] = discovery.scan_gateways(root)
    assert (scanned.pid, scanned.profile, scanned.instance_id) == (host_pid, "coder", state["instance_id"])


def test_a_gateway_in_its_own_pid_namespace_is_listed_once_under_its_host_pid(root, gateways, contained):
    mine = gateways(root, "default")
    make_profile(root, "coder")
    state, host_pid = contained(root, "coder", pid_namespace=True)
    assert state["pid"] == 1 and host_pid != 1  # what it says about itself is not the host's pid

    records = discovery.discover(root)
    assert [(r.profile, r.pid, r.source) for r in records] == [
        ("default", mine.pid, "socket"),
        ("coder", host_pid, "socket"),  # not again from the scan
    ]
    assert records[1].start_time == process_identity(host_pid).start_time == state["start_time"]
    # Without the scan nobody here can tell its host pid: it is listed as it reports itself.
    assert [(r.profile, r.pid) for r in discovery.discover(root, scan=False)] == [("default", mine.pid), ("coder", 1)]
    listed = as_json(hermes("gateway", "status", "--json", home=root))["gateways"]
    assert [(g["profile"], g["pid"], g["instance_id"]) for g in listed] == [
        ("default", mine.pid, read_state(mine.home)["instance_id"]),
        ("coder", host_pid, state["instance_id"]),
    ]


def test_a_contained_gateway_that_cannot_answer_is_found_once_by_the_scan(root, contained):
    make_profile(root, "coder")
    state, host_pid = contained(root, "coder", pid_namespace=True)
    os.kill(host_pid, signal.SIGSTOP)
    try:
        records = discovery.discover(root, timeout=0.5)
    finally:
        os.kill(host_pid, signal.SIGCONT)
    # Its state file names pid 1, which here is another process: the scan knows it by the pid
    # it has in its own namespace and its start time.
    assert [(r.profile, r.pid, r.source, r.state) for r in records] == [("coder", host_pid, "scan", "running")]
    assert records[0].instance_id == state["instance_id"]


def test_a_profile_reached_through_a_symlink_does_not_list_its_gateway_twice(root, gateways):
    make_profile(root, "coder")
    coder = gateways(root, "coder")
    (root / "profiles" / "alias").symlink_to(root / "profiles" / "coder")

    records = discovery.discover(root)
    assert [(r.profile, r.pid, r.source) for r in records] == [("coder", coder.pid, "socket")]


# A real service on a profile's gateway socket that answers STATUS as it is told to: a gateway
# from before the ids, or one of another install or profile.
IMPOSTOR = """
import json, sys, trio
from shared import homes
from shared.gateways import ops
from shared.identity import current_identity
from shared.transport.service import Service

home, said = sys.argv[1], json.loads(sys.argv[2])
endpoint = homes.endpoint(home, ops.SERVICE)
service = Service(ops.SERVICE, endpoint.control, lock_path=endpoint.lock_path)

async def status(call):
    return {**current_identity().to_dict(), "state": "running", "supervisor": "unmanaged", **said}

service.add(ops.STATUS, status)

async def main():
    async with trio.open_nursery() as nursery:
        await nursery.start(service.serve)
        print("ready", flush=True)

trio.run(main)
"""


@pytest.mark.parametrize(
    ("said", "listed"),
    [
        ({"home": "{coder}", "profile": "coder"}, True),  # from before the ids: its home says
        ({"home": "/elsewhere", "profile": "coder"}, False),
        ({"install_id": "{ours}", "profile": "coder", "home": "/elsewhere"}, True),
        ({"install_id": "0" * 32, "profile": "coder", "home": "{coder}"}, False),  # another install's
        ({"install_id": "{ours}", "profile": "writer", "home": "{coder}"}, False),  # another profile's
        ({"install_id": "not an id", "profile": "coder", "home": "{coder}"}, False),
    ],
)
def test_an_answer_is_taken_only_from_this_installs_gateway_of_that_profile(root, spawn, said, listed):
    make_profile(root, "coder")
    coder = root / "profiles" / "coder"
    ours = ids.ensure_install_id(root)
    said = {k: v.format(coder=coder, ours=ours) for k, v in said.items()}
    impostor = spawn("-c", IMPOSTOR, str(coder), json.dumps(said), env=python_env())

    found = [(r.profile, r.pid, r.source, r.install_id) for r in discovery.discover(root, scan=False)]
    expected_id = said.get("install_id") if listed else None
    assert found == ([("coder", impostor.pid, "socket", expected_id)] if listed else [])


def test_the_connections_of_a_discovery_are_kept_for_the_next_call_and_a_dead_one_dropped(root, gateways):
    make_profile(root, "coder")
    default, coder = gateways(root, "default"), gateways(root, "coder")
    pool: dict = {}
    try:
        assert {r.pid for r in discovery.discover(root, scan=False, sockets=pool)} == {default.pid, coder.pid}
        kept = dict(pool)
        assert set(kept) == {default.endpoint.control, coder.endpoint.control}

        pongs = call_all(list(kept), ops.PING, timeout=5, sockets=pool)
        assert {a: p["pid"] for a, p in pongs.items()} == {
            default.endpoint.control: default.pid,
            coder.endpoint.control: coder.pid,
        }
        assert all(pool[a] is kept[a] for a in kept)  # the same connected sockets: no reconnect

        os.kill(coder.pid, signal.SIGSTOP)
        try:
            assert {r.source for r in discovery.discover(root, timeout=0.3, scan=False, sockets=pool)} == {
                "socket",
                "state_file",
            }
        finally:
            os.kill(coder.pid, signal.SIGCONT)
        # The one that timed out is closed (its request may still be queued), the other kept.
        assert (
            list(pool) == [default.endpoint.control]
            and pool[default.endpoint.control] is kept[default.endpoint.control]
        )
    finally:
        for sock in pool.values():
            sock.close(linger=0)


def test_an_unreadable_install_id_falls_back_to_the_home_the_gateway_reports(root, gateways):
    gateway = gateways(root, "default")
    (root / ids.INSTALL_ID_FILE).write_text("junk\n")

    result = hermes("gateway", "status", "--json", home=root)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    listed = json.loads(result.stdout)["gateways"]
    assert [(g["pid"], g["source"]) for g in listed] == [(gateway.pid, "socket")]
