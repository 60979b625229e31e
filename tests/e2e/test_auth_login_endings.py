"""How ``hermes auth login nous`` ends when a Ctrl-C, a dead worker or an unreachable portal
gets in the way: the CLI reports the worker's own terminal state, or, when the worker is gone,
what the account store holds. Real processes: the CLI, the auth worker it starts, the portal
simulator. Races are run several times; nothing here asserts a duration."""

from __future__ import annotations

import os
import random
import signal
import socket
import time

import pytest

from nous import store
from services.auth_worker import TERMINAL_STATES, ops, settle
from shared import config, homes
from shared.locks import probe
from shared.protocol import RemoteError
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient
from tests.support.logins import Hermes
from tests.support.processes import wait_for

TRIES = 10


@pytest.fixture
def hermes(root, sim):
    return Hermes(root, sim)


def _worker_pid(root) -> int:
    return probe(homes.endpoint(root, ops.SERVICE, create=False).lock_path).holder.pid


def test_ctrl_c_after_the_worker_finished_reports_the_completed_sign_in(hermes, sim, root):
    login = hermes.login()
    code = login.until("Code")
    login.until("Waiting")
    login.proc.send_signal(signal.SIGSTOP)  # the CLI misses the answer; the worker does not wait
    try:
        sim.approve(code["user_code"], "ada@example.com")
        wait_for(lambda: hermes.worker_status()["sign_ins"] == 0, timeout=30, what="the sign-in's end")
        assert hermes.email() == "ada@example.com"
        login.proc.send_signal(signal.SIGINT)
    finally:
        login.proc.send_signal(signal.SIGCONT)
    rc, state = login.finish()
    assert (rc, state["state"], state["email"]) == (0, "Completed", "ada@example.com")


def test_ctrl_c_after_the_save_began_reports_what_settle_did(hermes, sim, root):
    sim.fault("/api/model/recommended-default", method="GET", delay=4)  # settle waits on it
    login = hermes.login()
    sim.approve(login.until("Code")["user_code"], "ada@example.com", tier="pro")
    wait_for(lambda: hermes.email() == "ada@example.com", timeout=30, what="the save")
    login.proc.send_signal(signal.SIGINT)  # too late: the sign-in completes, settle included
    rc, state = login.finish()
    assert (rc, state["state"], state["settled"]) == (0, "Completed", "moved")
    model = config.load_config(root)["model"]
    assert (model["route"], model["default"]) == ("account", settle.recommended_nous_default_model("pro"))


def test_ctrl_c_racing_the_approval_reports_what_happened(hermes, sim, root):
    endings = set()
    for attempt in range(TRIES):
        before = hermes.email()
        email = f"user{attempt}@example.com"
        login = hermes.login("--replace")
        code = login.until("Code")
        login.until("Waiting")
        sim.approve(code["user_code"], email)
        time.sleep(random.uniform(0, 0.4))  # around the poll that gets the token and the save
        login.proc.send_signal(signal.SIGINT)
        rc, state = login.finish()
        if state["state"] == "Completed":
            assert (rc, state["email"], hermes.email()) == (0, email, email), attempt
        else:
            assert (rc, state["state"], hermes.email()) == (130, "Cancelled", before), (attempt, state)
        endings.add(state["state"])
    assert endings <= {"Completed", "Cancelled"}


@pytest.mark.parametrize("json_lines", [True, False], ids=["json", "text"])
def test_a_ctrl_c_once_the_end_is_shown_changes_nothing(hermes, sim, root, json_lines):
    for attempt in range(TRIES // 2):
        login = hermes.login("--replace", json_lines=json_lines)
        if json_lines:
            sim.approve(login.until("Code")["user_code"], f"user{attempt}@example.com")
            login.until("Completed")
        else:
            sim.approve(login.until_line("confirm the code").split()[-1].rstrip("."), f"user{attempt}@example.com")
            login.until_line("Signed in to Nous as")
        login.proc.send_signal(signal.SIGINT)
        login.proc.send_signal(signal.SIGINT)
        rc, _ = login.finish()
        assert rc == 0, (attempt, login.stderr)


def test_a_worker_killed_after_the_save_is_reported_with_what_the_store_holds(hermes, sim, root):
    sim.fault("/api/model/recommended-default", method="GET", delay=8)
    login = hermes.login()
    sim.approve(login.until("Code")["user_code"], "ada@example.com", tier="plus")
    wait_for(lambda: hermes.email() == "ada@example.com", timeout=30, what="the save")
    os.kill(_worker_pid(root), signal.SIGKILL)
    rc, state = login.finish()
    assert (rc, state["state"], state["saved"]) == (1, "WorkerLost", True)
    assert (state["account"]["email"], state["account"]["tier"]) == ("ada@example.com", "plus")
    assert "ada@example.com" in state["copy_terminal"] and "hermes auth status nous" in state["copy_terminal"]
    assert "access_token" not in state["account"] and "refresh_token" not in state["account"]
    saved = store.read_account(root)
    assert saved["access_token"] not in str(state) and saved["refresh_token"] not in str(state)


def test_a_worker_killed_while_waiting_says_nothing_was_saved(hermes, sim, root):
    login = hermes.login(json_lines=False)
    login.until_stderr("Waiting for you to approve")
    os.kill(_worker_pid(root), signal.SIGKILL)
    rc, _ = login.finish()
    assert rc == 1
    assert "The auth worker stopped before the sign-in finished. Nothing was saved." in login.stderr
    assert "went away" not in login.stderr and store.read_account(root) is None


def _closed_port() -> int:
    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        return probe_socket.getsockname()[1]


def test_an_unreachable_portal_is_shown_retrying(root, sim):
    hermes = Hermes(root, sim, portal_url=f"http://127.0.0.1:{_closed_port()}")
    login = hermes.login()
    first, second = login.next_state(), login.next_state()
    assert (first["state"], first["reason"], first["attempt"]) == ("Retrying", "connection_refused", 1)
    assert (second["state"], second["attempt"]) == ("Retrying", 2)
    assert "the Nous portal refused the connection; trying again in" in first["copy_terminal"]
    assert first["retry_in"] > 0 and "Error" not in first["copy_terminal"]
    assert "Retrying" not in TERMINAL_STATES
    login.proc.send_signal(signal.SIGINT)
    rc, state = login.finish()
    assert (rc, state["state"]) == (130, "Cancelled")

    text = hermes.login(json_lines=False)
    assert "trying again in" in text.until_stderr("the Nous portal refused the connection")
    text.proc.send_signal(signal.SIGINT)
    assert text.finish()[0] == 130


def test_a_portal_that_drops_the_poll_is_shown_retrying_then_waiting_again(hermes, sim, root):
    sim.fault("/api/oauth/token", drop=True, count=2)
    login = hermes.login()
    code = login.until("Code")
    login.until("Waiting")
    retrying = login.until("Retrying")
    assert (retrying["reason"], retrying["attempt"]) == ("connection_dropped", 1)
    login.until("Waiting")  # the portal answers again
    sim.approve(code["user_code"], "ada@example.com")
    rc, state = login.finish()
    assert (rc, state["state"]) == (0, "Completed")


def test_the_worker_keeps_how_a_sign_in_ended_and_never_runs_its_id_again(hermes, sim, root):
    login = hermes.login()
    code = login.until("Code")
    sign_in_id = code["sign_in_id"]
    address = homes.endpoint(root, ops.SERVICE, create=False).control
    with SyncClient(address, retry=NO_RETRY) as client:
        assert client.call(ops.SIGN_IN_RESULT, {"sign_in_id": sign_in_id}) == {"known": True, "running": True}
        sim.approve(code["user_code"], "ada@example.com")
        ended = client.call(ops.SIGN_IN_RESULT, {"sign_in_id": sign_in_id, "wait": ops.RESULT_WAIT_MAX})
        rc, done = login.finish()
        assert (rc, ended) == (0, {"known": True, "running": False, "state": done})
        cancel = client.call(ops.CANCEL, {"sign_in_id": sign_in_id})
        assert cancel == {"known": True, "cancelled": False, "state": done}
        assert client.call(ops.SIGN_IN_RESULT, {"sign_in_id": "never"}) == {"known": False, "running": False}
        # A cancel of an id the worker never saw wins for good: a sign_in of it arriving late never starts.
        assert client.call(ops.CANCEL, {"sign_in_id": "late"}) == {"known": False, "cancelled": True}
        for refused in (sign_in_id, "late"):
            with pytest.raises(RemoteError) as info:
                client.call(ops.SIGN_IN, {"sign_in_id": refused, "profile": "default", "replace_account": True})
            assert info.value.code == ops.SIGN_IN_EXISTS
        for bad in ({"sign_in_id": "x", "wait": ops.RESULT_WAIT_MAX + 1}, {"sign_in_id": "x y"}):
            with pytest.raises(RemoteError) as info:
                client.call(ops.SIGN_IN_RESULT, bad)
            assert info.value.code == "invalid_field"
        assert client.call(ops.STATUS)["sign_ins"] == 0  # and it goes on serving
