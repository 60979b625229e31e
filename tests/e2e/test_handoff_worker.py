"""The handoff retry worker as a real process: it finishes what a sign-in left to retry,
answers the long-poll as soon as the record changes, and drains on request."""

from __future__ import annotations

import subprocess
import sys
import time

from nous import store
from nous.guest_handoff import records
from services.handoff_retry import ops
from shared import homes
from shared.call_rules import NO_RETRY
from shared.sync_client import SyncClient
from tests.support.processes import ROOT, python_env, wait_for
from tests.support.sign_ins import account_from_grant


def guest_replaced_by_account(root, sim, *apps):
    """A guest with ``apps``, then an account saved over it (as any writer would): the record is pending."""
    store.save_guest(root, sim.guest(*apps), "guest_1")
    account = account_from_grant(sim)
    store.write_shared_nous_state(root, lambda s: {**s, "account": account})
    (key,) = records.read_records(root)
    return key


def start_worker(root):
    worker = subprocess.Popen(
        [sys.executable, "-m", "services.handoff_retry"],
        cwd=ROOT,
        env=python_env(HERMES_HOME=str(root)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
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
