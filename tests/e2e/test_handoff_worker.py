"""The handoff retry worker as a real process: it finishes what a sign-in left to retry,
answers the long-poll as soon as the record changes, and drains on request; a record waiting
for its account is parked (no wake-ups, no log flood) until that account is back; a sign-in
that finds the worker's claim in flight shows its outcome."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import trio

from nous import store
from nous.guest_handoff import records
from services.handoff_retry import ops
from services.handoff_retry.app import TICK_MIN
from shared import homes
from shared.transport.call_rules import NO_RETRY
from shared.transport.sync_client import SyncClient
from tests.support.cli import hermes
from tests.support.processes import ROOT, python_env, wait_for
from tests.support.sign_ins import account_from_grant, request, sign_in


def guest_replaced_by_account(root, sim, *apps):
    """A guest with ``apps``, then an account saved over it (as any writer would): the record is pending."""
    store.save_guest(root, sim.guest(*apps), "guest_1")
    account = account_from_grant(sim)
    store.write_shared_nous_state(root, lambda s: {**s, "account": account})
    (key,) = records.read_records(root)
    return key


def start_worker(root, log=subprocess.PIPE):
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.handoff_retry"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    address = homes.endpoint(root, ops.SERVICE, create=False).control
    wait_for(lambda: _answers(address), timeout=20, what="the handoff worker")
    return worker, address


def _answers(address):
    try:
        with SyncClient(address, retry=NO_RETRY) as client:
            return client.call(ops.STATUS, timeout=2)
    except Exception:
        return None


def test_the_worker_claims_when_due_and_the_long_poll_answers_at_the_change(sim, root):
    key = guest_replaced_by_account(root, sim, "github")
    due = time.time() + 2.0
    records.change_records(root, lambda rs: {**rs, key: {**rs[key], "next_attempt_at": due}})
    worker, address = start_worker(root)
    with SyncClient(address, retry=NO_RETRY) as client:
        before = client.call(ops.STATUS)
        assert [r["state"] for r in before["records"]] == ["pending"] and "key" not in before["records"][0]
        since, seen = before["records"][0]["updated_at"], []
        while not seen or seen[-1] != "claimed":  # each change answers: reserved, then claimed
            answer = client.call(ops.HANDOFF_STATUS, {"since": since, "wait": 50.0})
            since = answer["updated_at"]
            seen.append(answer["records"][0]["state"])
    # Answered at the changes, not at the end of a wait: a wait that ran out would have
    # answered the state it started from, pending or reserved again.
    assert seen in (["reserved", "claimed"], ["claimed"])
    assert time.time() >= due - 0.5  # and not before the record was due
    assert [a["connectors"] for a in sim.accounts() if a["email"] == "ada@example.com"] == [["github"]]
    assert len(sim.requests("/api/anonymous/claim")) == 1
    worker.terminate()
    assert worker.wait(timeout=15) == 0


def test_a_drain_call_runs_due_records_now_and_the_long_poll_times_out_quietly(sim, root):
    worker, address = start_worker(root)
    with SyncClient(address, retry=NO_RETRY) as client:
        quiet = client.call(ops.HANDOFF_STATUS, {"since": 0.0, "wait": 0.5})
        assert quiet == {"records": [], "updated_at": 0.0}
        sim.fault("/api/anonymous/claim", status=503, count=5)  # the worker's own tick may take the first
        guest_replaced_by_account(root, sim, "slack")
        outcome = client.call(ops.DRAIN)
        assert [r["state"] for r in outcome["records"]] in (["pending"], ["claimed"])
        assert all(code not in str(outcome) for code in ("http_503", "simulated"))
    worker.terminate()
    assert worker.wait(timeout=15) == 0


def state_of(root, key):
    return records.read_records(root)[key]["state"]


async def sign_in_as(root, sim, email):
    def approve(code):
        sim.approve(code.user_code, email)

    _, done = await sign_in(request(root, sim, replace=True), on_code=approve)
    return done


@pytest.mark.parametrize("elsewhere", ["another_account", "no_account"])
async def test_a_record_waiting_for_its_account_is_parked_until_a_sign_in_brings_it_back(
    sim, root, short_dir, elsewhere
):
    key = guest_replaced_by_account(root, sim, "github")
    if elsewhere == "another_account":  # bob signs in over ada: the apps stay bound to ada
        bob = account_from_grant(sim, "bob@example.com")
        store.write_shared_nous_state(root, lambda s: {**s, "account": bob})
    else:  # ada signs out
        store.forget_account(root, root)
    log_path = short_dir / "handoff_retry.log"
    with open(log_path, "wb") as log:
        worker, _ = start_worker(root, log)
    try:
        await trio.to_thread.run_sync(
            lambda: wait_for(lambda: state_of(root, key) == "parked", timeout=30, what="the record parked")
        )
        await trio.sleep(12 * TICK_MIN)  # a dozen wake-ups' worth at the shortest tick: it stays asleep
        ticks = [line for line in log_path.read_text().splitlines() if "handoff tick" in line]
        assert len(ticks) == 1, ticks  # the attempt that parked it, and nothing since
        assert claims(sim) == []

        status = hermes("auth", "status", "nous", env=python_env(HERMES_HOME=str(root)))
        line = "Moving your guest apps to ada@example.com waits until ada@example.com is signed in here again."
        assert f"guest apps:    {line}" in status.stdout
        for code in ("wrong_account", "no_account", "parked"):
            assert code not in status.stdout + status.stderr
        view = json.loads(hermes("auth", "status", "nous", "--json", env=python_env(HERMES_HOME=str(root))).stdout)
        assert [r["state"] for r in view["handoff"]] == ["parked"]

        # Signing in as another account leaves it parked; signing in as ada claims the apps.
        if elsewhere == "no_account":
            assert (await sign_in_as(root, sim, "carol@example.com")).name == "Completed"
            assert state_of(root, key) == "parked" and claims(sim) == []
        done = await sign_in_as(root, sim, "ada@example.com")
        assert done.name == "Completed"
        assert done.handoff == ("Moved your guest apps to ada@example.com: github.",)
        assert state_of(root, key) == "claimed" and len(claims(sim)) == 1
        assert [a["connectors"] for a in sim.accounts() if a["email"] == "ada@example.com"] == [["github"]]
    finally:
        worker.terminate()
        assert worker.wait(timeout=15) == 0


def claims(sim):
    return sim.requests("/api/anonymous/claim")


async def test_a_sign_in_that_finds_the_workers_claim_in_flight_shows_its_outcome(sim, root):
    key = guest_replaced_by_account(root, sim, "github", "slack")
    sim.fault("/api/anonymous/claim", delay=4.0)  # the worker's claim is slow to answer
    worker, _ = start_worker(root)
    try:
        await trio.to_thread.run_sync(
            lambda: wait_for(lambda: state_of(root, key) == "reserved", timeout=30, what="the worker's reservation")
        )
        done = await sign_in_as(root, sim, "ada@example.com")
        assert done.name == "Completed"
        assert done.handoff == ("Moved your guest apps to ada@example.com: github, slack.",)
        assert done.handoff_status["state"] == "claimed"
        assert "Moved your guest apps" in done.copy and "hermes" not in done.copy
        assert len(claims(sim)) == 1  # the sign-in waited for the worker's claim, and sent none of its own
    finally:
        worker.terminate()
        assert worker.wait(timeout=15) == 0
