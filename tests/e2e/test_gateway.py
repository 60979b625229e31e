"""The gateway as a real process: its ops, drains, signals, state file and start rules."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest
import zmq

from fleet.supervisors import detect_supervisor
from shared import exit_codes, protocol
from shared.files import StateFileCorrupt, read_json
from shared.gateways import ops
from shared.identity import process_identity
from shared.protocol import Code, RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.service import CONCURRENCY
from shared.transport.sync_client import SyncClient
from shared.version import code_sha
from tests.support.cli import HERMES, hermes
from tests.support.processes import ROOT, GatewayProcess, parallel, python_env, read_state, wait_for


def call(gateway: GatewayProcess, spec, args=None, **kwargs):
    with SyncClient(gateway.endpoint.control) as client:
        return client.call(spec, args or {}, **kwargs)


def test_status_reports_the_process_and_the_code_it_imported(root, gateways):
    gateway = gateways(root, "coder")
    status = call(gateway, ops.STATUS)
    assert status["pid"] == gateway.pid
    assert status["start_time"] == process_identity(gateway.pid).start_time
    assert (status["profile"], status["home"], status["state"]) == ("coder", str(gateway.home), "running")
    assert status["code_sha"] == code_sha()
    assert status["supervisor"] == detect_supervisor()  # "container" where the tests run in one
    assert status["argv"][-2:] == ["-m", "services.gateway"]
    assert call(gateway, ops.PING) == {"pong": True, "pid": gateway.pid}
    state = read_state(gateway.home)
    assert (state["code_sha"], state["hermes_home"], state["profile"]) == (code_sha(), str(gateway.home), "coder")


def test_a_gateway_running_as_many_turns_as_it_takes_at_once_still_answers_status_at_once(root, gateways):
    gateway = gateways(root)
    with zmq.Context.instance().socket(zmq.DEALER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(gateway.endpoint.control)
        for i in range(CONCURRENCY):  # every call slot taken by a turn that outlasts the test
            sock.send(protocol.encode_request(f"t{i}", ops.TURN.name, {"text": "x", "seconds": 120.0}))
        assert wait_for(lambda: read_state(gateway.home)["active_turns"] == CONCURRENCY, timeout=30)
        status = call(gateway, ops.STATUS, timeout=5.0, retry=NO_RETRY)
        assert (status["state"], status["active_turns"]) == ("running", CONCURRENCY)
        assert call(gateway, ops.PING, timeout=5.0, retry=NO_RETRY) == {"pong": True, "pid": gateway.pid}


def test_turns_run_concurrently_and_are_counted(root, gateways):
    gateway = gateways(root)
    results = parallel([lambda i=i: call(gateway, ops.TURN, {"text": f"t{i}", "seconds": 0.5}) for i in range(4)])
    assert sorted(r["text"] for r in results) == ["t0", "t1", "t2", "t3"]
    assert len({r["turn_id"] for r in results}) == 4
    assert read_state(gateway.home)["active_turns"] == 0 or wait_for(
        lambda: read_state(gateway.home)["active_turns"] == 0, timeout=5
    )


def test_drain_waits_for_turns_in_flight_then_exits_75(root, gateways):
    gateway = gateways(root)
    turns = [lambda i=i: call(gateway, ops.TURN, {"text": f"t{i}", "seconds": 0.6}) for i in range(3)]

    def drain_when_busy():
        wait_for(lambda: read_state(gateway.home)["active_turns"] == 3, timeout=10, what="three active turns")
        return call(gateway, ops.DRAIN, {"deadline": 10.0})

    *turn_results, drained = parallel([*turns, drain_when_busy])
    assert all(isinstance(r, dict) and r["text"].startswith("t") for r in turn_results), turn_results
    assert sorted(drained["finished"]) == sorted(r["turn_id"] for r in turn_results)
    assert (drained["cut"], drained["exit_code"], drained["accepted"]) == ([], 75, 3)  # t1 to t3, and no more
    assert gateway.wait_exit() == 75
    final = read_state(gateway.home)
    assert (final["gateway_state"], final["restart_requested"]) == ("stopped", True)


def test_drain_cuts_turns_past_the_deadline_and_refuses_new_ones(root, gateways):
    gateway = gateways(root)

    def late_turn():
        with SyncClient(gateway.endpoint.control) as client:
            return client.call(ops.TURN, {"text": "new"}, retry=NO_RETRY)

    def drain_then_try_a_turn():
        wait_for(lambda: read_state(gateway.home)["active_turns"] == 1, timeout=10, what="the long turn")
        result = call(gateway, ops.DRAIN, {"deadline": 0.3, "stay": True})
        try:
            late_turn()
        except RemoteError as exc:
            return result, exc.code
        return result, None

    long_turn, (drained, late) = parallel(
        [lambda: call(gateway, ops.TURN, {"text": "long", "seconds": 60}), drain_then_try_a_turn]
    )
    assert isinstance(long_turn, RemoteError) and long_turn.code == "turn_cut"
    assert (drained["cut"], drained["accepted"]) == ([long_turn.detail["turn_id"]], 1)
    assert (drained["finished"], drained["exit_code"]) == ([], None)
    assert late == ops.DRAINING
    assert call(gateway, ops.STATUS)["state"] == "draining"  # asked to stay: still up, still refusing
    gateway.proc.send_signal(signal.SIGTERM)
    assert gateway.wait_exit() == 0


@pytest.mark.parametrize("signum, code, reason", [(signal.SIGUSR1, 75, "SIGUSR1"), (signal.SIGTERM, 0, "SIGTERM")])
def test_signals(root, gateways, signum, code, reason):
    gateway = gateways(root)
    gateway.proc.send_signal(signum)
    assert gateway.wait_exit() == code
    final = read_state(gateway.home)
    assert final["gateway_state"] == "stopped"
    assert reason in final["exit_reason"]
    assert final["restart_requested"] is (code == 75)


def test_a_second_gateway_for_the_profile_is_refused_and_touches_nothing(root, gateways):
    first = gateways(root, "coder")
    before = (first.home / "gateway_state.json").read_bytes()
    second = GatewayProcess(root, "coder")
    assert second.wait_exit() == 73
    assert b"already has a running gateway" in second.proc.stderr.read()
    assert (first.home / "gateway_state.json").read_bytes() == before
    assert call(first, ops.PING)["pid"] == first.pid


def test_missing_profile_is_a_config_error(root):
    env = python_env(HERMES_HOME=str(root))
    result = subprocess.run(
        [sys.executable, "-m", "services.gateway", "--profile", "ghost"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == exit_codes.CONFIG
    assert b"no profile named 'ghost'" in result.stderr


def test_state_file_is_never_torn_under_a_concurrent_reader(root, gateways):
    gateway = gateways(root)
    stop = threading.Event()
    saw_stopped = threading.Event()
    seen: set[tuple[str, int]] = set()
    errors: list[str] = []

    def reader():
        while not stop.is_set():
            try:
                state = read_json(gateway.home / "gateway_state.json")
                seen.add((state["gateway_state"], state["active_turns"]))
                if state["gateway_state"] == "stopped":
                    saw_stopped.set()
            except StateFileCorrupt as exc:
                errors.append(exc.reason)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        parallel([lambda i=i: call(gateway, ops.TURN, {"text": "x", "seconds": 0.05 * (i % 4)}) for i in range(30)])
        call(gateway, ops.DRAIN, {"deadline": 5.0})
        # A write still in its thread when the tasks are cancelled must publish on a live socket.
        assert gateway.wait_exit() == exit_codes.PLANNED_RESTART
        saw_stopped.wait(5)  # a loaded machine may not have run the reader since the last write
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert {s for s, _ in seen} >= {"running", "stopped"}
    assert any(n > 0 for _, n in seen)  # the reader really saw turns come and go


def test_junk_on_the_control_socket_gets_typed_errors(root, gateways):
    gateway = gateways(root)
    with zmq.Context.instance().socket(zmq.DEALER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(gateway.endpoint.control)
        for junk in (b"\xc1", b"", protocol.pack([1]), protocol.pack({"v": 1, "id": "j", "op": "turn", "args": {}})):
            sock.send(junk)
            assert sock.poll(5000)
            reply = protocol.decode_reply(sock.recv())
            assert reply.kind == "error"
    assert call(gateway, ops.TURN, {"text": "fine"})["text"] == "fine"
    with pytest.raises(RemoteError) as info:
        call(gateway, ops.TURN, {"text": "x", "seconds": ops.MAX_TURN_SECONDS + 1})
    assert info.value.code == Code.INVALID_FIELD


def test_sd_notify_ready_and_stopping(root, gateways, short_dir):
    path = str(short_dir / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(20)
        gateway = gateways(root, env=python_env(NOTIFY_SOCKET=path))
        # Its start's steps first, each extending systemd's start timeout, then READY.
        messages = [sock.recv(4096).decode()]
        while "READY=1" not in messages[-1] and len(messages) < 20:
            assert messages[-1].startswith("EXTEND_TIMEOUT_USEC=30000000\nSTATUS=starting: "), messages
            messages.append(sock.recv(4096).decode())
        assert "READY=1" in messages[-1] and len(messages) > 4, messages
        assert call(gateway, ops.STATUS)["supervisor"] == "systemd"
        gateway.proc.send_signal(signal.SIGTERM)
        messages.append(sock.recv(4096).decode())
        assert "STOPPING=1" in messages[-1]
    assert gateway.wait_exit() == 0


def _clone(tmp_path):
    clone = tmp_path / "install"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    return clone


def _commit(clone, message):
    (clone / "NOTES").write_text(message)
    subprocess.run(["git", "add", "NOTES"], cwd=clone, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", message],
        cwd=clone,
        check=True,
    )
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()


def test_code_identity_is_what_was_imported_and_reexec_picks_up_the_new_tree(root, gateways, tmp_path):
    clone = _clone(tmp_path)
    old_sha = code_sha(clone)
    env = python_env()
    env["PYTHONPATH"] = str(clone)  # run the clone's code, not this checkout's
    gateway = gateways(root, env=env, cwd=clone)
    assert call(gateway, ops.STATUS)["code_sha"] == old_sha

    new_sha = _commit(clone, "a new release")
    assert call(gateway, ops.STATUS)["code_sha"] == old_sha  # the tree moved; the process did not
    assert read_state(gateway.home)["code_sha"] == old_sha

    answer = call(gateway, ops.REEXEC, {"deadline": 5.0})
    assert answer["exit_code"] is None
    wait_for(
        lambda: (s := read_state(gateway.home)) and s["code_sha"] == new_sha and s["gateway_state"] == "running",
        timeout=20,
        what="the re-executed gateway",
    )
    status = call(gateway, ops.STATUS)
    assert (status["pid"], status["code_sha"]) == (gateway.pid, new_sha)  # same process, new code
    assert gateway.proc.poll() is None


def test_restart_storm_delays_the_start_and_says_so(root):
    home = root
    home.mkdir(parents=True, exist_ok=True)
    now = __import__("time").time()
    (home / "gateway_starts.json").write_text(json.dumps({"starts": [now - i for i in range(6)]}))
    gateway = GatewayProcess(root, "default")
    try:
        state = wait_for(lambda: read_state(home), timeout=10, what="state file")
        assert state["gateway_state"] == "starting"
        assert "restarting too often" in state["status_message"]
        gateway.wait_running(timeout=30)
    finally:
        gateway.kill()


def test_planned_restarts_are_not_a_storm_but_a_crash_loop_is(root):
    """Restarts that were asked for (a drain, SIGUSR1, a re-exec) are not counted; a kill is."""
    root.mkdir(parents=True, exist_ok=True)
    record = root / "gateway_starts.json"
    now = __import__("time").time()
    record.write_text(json.dumps({"starts": [now - i for i in range(4)]}))  # one start short of the breaker

    def life(end) -> str:
        gateway = GatewayProcess(root, "default")
        try:
            gateway.wait_running(timeout=30)
            end(gateway)
        finally:
            gateway.kill()
        assert gateway.proc.stderr is not None
        return gateway.proc.stderr.read().decode()

    def drain(gateway):
        call(gateway, ops.DRAIN, {"deadline": 5.0})
        assert gateway.wait_exit() == exit_codes.PLANNED_RESTART

    def sigusr1(gateway):
        gateway.proc.send_signal(signal.SIGUSR1)
        assert gateway.wait_exit() == exit_codes.PLANNED_RESTART

    def reexec_then_drain(gateway):
        before = read_state(root)["instance_id"]
        call(gateway, ops.REEXEC, {"deadline": 5.0})
        wait_for(
            lambda: (s := read_state(root)) and s["instance_id"] != before and s["gateway_state"] == "running",
            timeout=30,
            what="the re-executed gateway",
        )
        assert gateway.proc.poll() is None  # the same process, in a new interpreter
        drain(gateway)

    said = [life(drain), life(sigusr1), life(reexec_then_drain), life(lambda gateway: None)]
    assert not any("restarting too often" in s for s in said)
    assert len(read_json(record)["starts"]) == 5  # the first start alone was counted
    # The last life was killed: a crash, so the next start is the sixth in the window.
    assert "restarting too often; waiting 1s" in life(drain)
    assert len(read_json(record)["starts"]) == 6


def test_hermes_gateway_run_is_the_same_gateway(root):
    env = python_env(HERMES_HOME=str(root))
    created = hermes("profile", "create", "coder", env=env)
    assert created.returncode == 0, created.stderr
    proc = subprocess.Popen(
        [*HERMES, "-p", "coder", "gateway", "run"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        home = root / "profiles" / "coder"
        state = wait_for(lambda: (s := read_state(home)) and s["gateway_state"] == "running" and s, timeout=20)
        assert state["pid"] == proc.pid and state["profile"] == "coder"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _run_until_running(argv: list[str], env: dict[str, str], home, profile: str) -> int:
    """Start ``argv``, wait for the gateway of ``home`` to say it runs, SIGTERM it: its exit code."""
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stderr=subprocess.PIPE)

    def running() -> dict | None:
        state = read_state(home)
        return state if state and state["pid"] == proc.pid and state["gateway_state"] == "running" else None

    try:
        assert wait_for(running, timeout=20)["profile"] == profile
        with SyncClient(f"ipc://{home / 'run' / 'gateway.ctl'}") as client:
            assert client.call(ops.PING, timeout=10)["pid"] == proc.pid
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_gateway_run_with_create_profile_makes_the_home_of_a_fresh_root(short_dir):
    root = short_dir / "fresh"  # not even the root home exists: a container's empty volume
    env = python_env(HERMES_HOME=str(root))
    home = root / "profiles" / "coder"
    without = hermes("-p", "coder", "gateway", "run", env=env)
    assert without.returncode == 2 and "no profile named 'coder'" in without.stderr  # as before the flag
    inside = hermes("gateway", "run", env=python_env(HERMES_HOME=str(home)))
    assert inside.returncode == exit_codes.CONFIG and "no profile named 'coder'" in inside.stderr
    assert not home.exists()

    assert _run_until_running([*HERMES, "-p", "coder", "gateway", "run", "--create-profile"], env, home, "coder") == 0
    assert sorted(p.name for p in (root / "profiles").iterdir()) == ["coder"]
    assert {"run", "logs"} <= {p.name for p in home.iterdir()}
    assert os.stat(home / "run").st_mode & 0o777 == 0o700
    listed = hermes("profile", "list", "--json", env=env)
    assert [p["name"] for p in json.loads(listed.stdout)["profiles"]] == ["default", "coder"]
    # An existing profile is simply used; so is the default one, which needs nothing.
    again = [sys.executable, "-m", "services.gateway", "--profile", "coder", "--create-profile"]
    assert _run_until_running(again, env, home, "coder") == 0


def test_gateway_run_with_create_profile_for_the_default_profile_creates_nothing(short_dir):
    root = short_dir / "fresh"
    env = python_env(HERMES_HOME=str(root))
    assert _run_until_running([*HERMES, "gateway", "run", "--create-profile"], env, root, "default") == 0
    assert not (root / "profiles").exists()
