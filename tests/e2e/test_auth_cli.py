"""``hermes auth`` end to end: the CLI, the auth worker it starts, and the portal simulator,
all real processes. Also: the worker under junk frames and kill -9, and a scan proving no
token reaches a log, an output or a file other than the account store."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import zmq

from nous import store
from services.auth_worker import ops
from shared import homes
from shared.identity import all_pids, read_cmdline, read_environ
from shared.locks import probe
from shared.spawn import stop_service
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient, connect
from tests.support.cli import HERMES
from tests.support.cli import hermes as run_hermes
from tests.support.installs import release
from tests.support.logins import Hermes
from tests.support.portal import PortalSim
from tests.support.processes import python_env, wait_for
from tests.support.tcp import free_port_pair


@pytest.fixture
def hermes(root, sim):
    return Hermes(root, sim)


def test_login_status_relogin_and_logout(hermes, sim, root):
    login = hermes.login()
    code = login.until("Code")
    assert code["verification_uri_complete"].startswith(sim.url)
    assert login.next_state()["state"] == "Waiting"
    sim.approve(code["user_code"], "ada@example.com", tier="pro")
    rc, done = login.finish()
    assert (rc, done["state"], done["email"], done["tier"]) == (0, "Completed", "ada@example.com", "pro")
    assert done["copy"] == "Signed in to Nous as ada@example.com."

    status = json.loads(hermes.run("auth", "status", "nous", "--json").stdout)
    assert (status["signed_in"], status["email"], status["portal"]) == (True, "ada@example.com", sim.url)
    text = hermes.run("auth", "status", "nous").stdout
    assert "signed in as ada@example.com (pro tier)" in text

    again = hermes.login()
    rc, state = again.finish()
    assert (rc, state["state"]) == (2, "AlreadySignedIn")

    out = hermes.run("auth", "logout", "nous", "--json")
    assert json.loads(out.stdout) == {"signed_out": True, "email": "ada@example.com"}
    assert json.loads(hermes.run("auth", "status", "nous", "--json").stdout)["signed_in"] is False
    _assert_no_token_leaked(hermes, sim)


def test_ctrl_c_cancels_and_keeps_the_account_there_was(hermes, sim, root):
    first = hermes.login()
    sim.approve(first.until("Code")["user_code"], "ada@example.com")
    assert first.finish()[0] == 0
    before = store.read_account(root)

    login = hermes.login("--replace")
    code = login.until("Code")
    login.until("Waiting")
    login.proc.send_signal(signal.SIGINT)
    rc, state = login.finish()
    assert (rc, state["state"]) == (130, "Cancelled")
    sim.approve(code["user_code"], "mallory@example.com")  # too late: the sign-in is gone
    time.sleep(0.5)
    assert store.read_account(root) == before


def test_an_expired_code_times_out_with_exit_1(hermes, sim):
    sim.configure(device_ttl=1)
    rc, state = hermes.login().finish()
    assert (rc, state["state"]) == (1, "TimedOut")
    assert "hermes auth login nous" in state["copy_terminal"] and "hermes" not in state["copy"]


def test_the_worker_keeps_the_token_alive(hermes, sim, root):
    sim.configure(access_ttl=2)
    login = hermes.login()
    sim.approve(login.until("Code")["user_code"], "ada@example.com")
    assert login.finish()[0] == 0
    saved = store.read_account(root)
    fresh = wait_for(
        lambda: (a := store.read_account(root))["refreshed_at"] > saved["refreshed_at"] and a,
        timeout=30,
        what="a refresh",
    )
    assert fresh["refresh_token"] != saved["refresh_token"] and not fresh["needs_sign_in"]
    # The revoked account is noticed by the next refresh (asked for now: the keepalive's own
    # schedule backs off on a loaded machine) and the worker keeps serving.
    sim.revoke("ada@example.com")
    address = homes.endpoint(root, ops.SERVICE, create=False).control
    with SyncClient(address) as client:
        assert client.call(ops.REFRESH, {"force": True})["result"] == "needs_sign_in"
    lapsed = store.read_account(root)
    assert (lapsed["needs_sign_in"], lapsed["needs_sign_in_reason"]) == (True, "invalid_grant")
    with SyncClient(address) as client:
        status = client.call(ops.STATUS)
        assert (status["account"]["signed_in"], status["keepalive"]["last"]["result"]) == (False, "needs_sign_in")
        with pytest.raises(Exception) as info:
            client.call(ops.TOKEN)
        assert info.value.code == ops.NEEDS_SIGN_IN
    text = hermes.run("auth", "status", "nous").stdout
    assert "needs to sign in again: the sign-in was revoked or has expired." in text
    assert "invalid_grant" not in text  # the code is for scripts, in --json
    _assert_no_token_leaked(hermes, sim)


def test_the_worker_survives_junk_and_a_worker_killed_mid_sign_in_is_replaced(hermes, sim, root):
    login = hermes.login()
    login.until("Waiting")
    endpoint = homes.endpoint(root, ops.SERVICE, create=False)
    # Junk frames and bad arguments: typed answers, and the worker goes on serving.
    junk = zmq.Context.instance().socket(zmq.DEALER)
    junk.connect(endpoint.control)
    for frame in (b"\xc1", b"not msgpack", b"\x93\x01\x02\x03"):
        junk.send(frame)
    junk.close(linger=100)
    with SyncClient(endpoint.control, retry=NO_RETRY) as client:
        for args, code in (
            ({"sign_in_id": "x y", "profile": "default"}, "invalid_field"),
            ({"sign_in_id": "ok\n", "profile": "default"}, "invalid_field"),  # an id is an id whole
            ({"sign_in_id": "ok", "profile": "no-such-profile"}, "profile_not_found"),
        ):
            with pytest.raises(Exception) as info:
                client.call(ops.SIGN_IN, args, timeout=10)
            assert info.value.code == code
        assert client.call(ops.STATUS)["sign_ins"] == 1
    # kill -9 of the worker: the waiting CLI is told at once, not after the code's 15 minutes
    # (finish() waits at most a minute for the CLI to end), that the worker is gone and that
    # nothing was saved.
    os.kill(probe(endpoint.lock_path).holder.pid, signal.SIGKILL)
    rc, last = login.finish()
    assert (rc, last["state"], last["saved"], last["account"]) == (1, "WorkerLost", False, {"signed_in": False})
    # The next login starts a new worker over the dead one's lock and socket.
    again = hermes.login()
    sim.approve(again.until("Code")["user_code"], "ada@example.com")
    assert again.finish()[:1] == (0,)


def _assert_no_token_leaked(hermes: Hermes, sim: PortalSim) -> None:
    """Every token the portal issued in this test, searched for everywhere but the store."""
    secrets = set()
    for request in sim.requests("/api/oauth/token"):
        secrets.add(request["form"].get("refresh_token"))
        secrets.add(request["form"].get("device_code"))
    account = store.read_account(hermes.root)
    if account:
        secrets |= {account["access_token"], account["refresh_token"]}
    for request in sim.requests("/api/anonymous/claim"):
        secrets.add((request.get("json") or {}).get("token"))
    secrets.discard(None)
    assert secrets
    texts = list(hermes.outputs)
    for path in hermes.root.rglob("*"):
        if path.is_file() and path != store.store_path(hermes.root) and not path.name.endswith((".ctl", ".pub")):
            texts.append(path.read_text(errors="replace"))
    for text in texts:
        for secret in secrets:
            assert secret not in text


def test_the_worker_moves_onto_new_code_by_itself(code, sim, short_dir):
    """An update moves the tree under a running worker: it restarts onto the new commit (same
    pid: it exec's itself), rather than keeping old code running beside new."""
    root = short_dir / "clone-home"
    root.mkdir()
    env = {**python_env(HERMES_HOME=str(root), HERMES_PORTAL_URL=sim.url), "PYTHONPATH": str(code)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.auth_worker"],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = homes.endpoint(root, ops.SERVICE, create=False).control
    try:
        first = wait_for(lambda: _status(address), timeout=20, what="the worker")
        assert (
            first["code_sha"]
            == subprocess.check_output(["git", "-C", str(code), "rev-parse", "HEAD"], text=True).strip()
        )
        new = release(code)
        moved = wait_for(lambda: (s := _status(address)) and s["code_sha"] == new and s, timeout=30, what="the restart")
        assert moved["pid"] == first["pid"] == worker.pid
    finally:
        worker.terminate()
        assert worker.wait(timeout=15) == 0
        stop_service(root, "handoff_retry")  # the worker started it


def _status(address: str) -> dict | None:
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            return client.call(ops.STATUS, timeout=2)
    except Exception:
        return None


def test_a_guest_start_against_no_portal_says_so_in_words(root):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    env = python_env(HERMES_HOME=str(root), HERMES_PORTAL_URL=url)
    text = run_hermes("auth", "guest", "nous", env=env)
    assert text.returncode == 1
    assert text.stderr.strip() == f"hermes: the portal at {url} refused the connection (POST /api/anonymous/register)"
    scripted = run_hermes("auth", "guest", "nous", "--json", env=env)
    assert json.loads(scripted.stdout)["error"]["code"] == "portal_unreachable"
    assert "Error" not in text.stderr + scripted.stdout


def test_a_guest_who_signs_in_keeps_their_apps(hermes, sim, root):
    started = hermes.run("auth", "guest", "nous", "--json")
    assert json.loads(started.stdout)["started"] is True
    assert "free tier" in hermes.run("auth", "status", "nous").stdout
    anon = store.read_store(root)["guest"]["anon"]
    sim.connect_app(anon, "github")
    login = hermes.login()
    sim.approve(login.until("Code")["user_code"], "ada@example.com")
    rc, done = login.finish()
    assert (rc, done["handoff"]) == (0, ["Moved your guest apps to ada@example.com: github."])
    assert done["handoff_status"]["state"] == "claimed"
    status = hermes.run("auth", "status", "nous")
    assert "guest apps:    Moved your guest apps to ada@example.com: github." in status.stdout
    view = json.loads(hermes.run("auth", "status", "nous", "--json").stdout)
    assert [r["state"] for r in view["handoff"]] == ["claimed"]
    _assert_no_token_leaked(hermes, sim)  # the guest's credential included


def _auth_workers_of(home) -> list[int]:
    """Every auth worker process on this host that runs on ``home``."""
    return [
        pid
        for pid in all_pids()
        if "services.auth_worker" in (read_cmdline(pid) or [])
        and (read_environ(pid) or {}).get("HERMES_HOME") == str(home)
    ]


def test_login_never_starts_a_worker_in_place_of_a_containers_that_is_stopped(root, short_dir, sim):
    """The host names its container's auth worker by its published port; the container is
    stopped. Its lock is not in the host's home, so the login says so, and starts nothing that
    would keep the container from binding its port again."""
    container = short_dir / "container"  # the container's home, on its volume: out of the host's sight
    for home in (container, root):
        assert run_hermes("mesh", "keys", "init", home=home).returncode == 0
    document = run_hermes("mesh", "keys", "show", "--json", home=container).stdout
    trusted = subprocess.run(
        [*HERMES, "mesh", "keys", "authorize", "--server", "--from", "-"],
        input=document,
        env=python_env(HERMES_HOME=str(root)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert trusted.returncode == 0, trusted.stderr
    host_client = run_hermes("mesh", "keys", "show", "--client", home=root).stdout.strip()
    assert run_hermes("mesh", "keys", "authorize", "host", host_client, home=container).returncode == 0
    port = free_port_pair()
    host_env = python_env(
        HERMES_HOME=str(root), HERMES_PORTAL_URL=sim.url, HERMES_MESH_TCP=f"auth_worker=tcp://127.0.0.1:{port}"
    )
    scripted = run_hermes("auth", "login", "nous", "--no-browser", "--json", env=host_env)
    assert scripted.returncode == 1, scripted.stdout + scripted.stderr
    error = json.loads(scripted.stdout.splitlines()[-1])["error"]
    assert error["code"] == "service_not_local"
    assert (error["detail"]["service"], error["detail"]["control"]) == ("auth_worker", f"tcp://127.0.0.1:{port}")
    text = run_hermes("auth", "login", "nous", "--no-browser", env=host_env)
    assert text.returncode == 1
    assert "docker compose up" in text.stderr and "Traceback" not in text.stderr
    assert _auth_workers_of(root) == []
    assert not homes.endpoint(root, ops.SERVICE, create=False, env={}).lock_path.exists()
    assert not (root / "logs" / "auth_worker.log").exists()
    for taken in (port, port + 1):  # free: nothing of the host's holds the container's ports
        with socket.socket() as free:
            free.bind(("127.0.0.1", taken))
    worker = subprocess.Popen(
        [*HERMES[:2], "services.auth_worker"],
        env=python_env(HERMES_HOME=str(container), HERMES_MESH_TCP=f"auth_worker=tcp://0.0.0.0:{port}"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        lock = homes.endpoint(container, ops.SERVICE, create=False, env={}).lock_path
        wait_for(lambda: worker.poll() is not None or probe(lock).held, timeout=20, what="the container's worker")
        assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
        endpoint = homes.endpoint(root, ops.SERVICE, env={"HERMES_MESH_TCP": f"auth_worker=tcp://127.0.0.1:{port}"})
        with connect(endpoint, retry=NO_RETRY) as client:  # the host reaches the container's own worker
            assert client.call(ops.STATUS, timeout=10) is not None
        assert _auth_workers_of(root) == []
        retries = homes.endpoint(container, "handoff_retry", create=False, env={}).lock_path
        wait_for(lambda: probe(retries).held, timeout=20, what="the retries the worker starts, to stop them")
    finally:
        worker.kill()
        worker.wait(timeout=10)
        stop_service(container, "handoff_retry")  # the worker starts the retries of its home
