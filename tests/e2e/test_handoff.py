"""The guest handoff against the real portal simulator: a sign-in over a free-tier identity
moves its apps once, to that account, through faults, crashes and racing drains."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import trio

from nous import store
from nous.guest_handoff import attempts, records, rules
from services.auth_worker.signin import CancelFlag, SignInRequest, run_sign_in
from tests.support.processes import ROOT, python_env
from tests.support.sign_ins import account_from_grant

pytestmark = pytest.mark.root(profiles=("a", "b"))


async def sign_in(root, sim, email="ada@example.com", home=None):
    async def emit(state) -> None:
        if state.name == "Code":
            await trio.to_thread.run_sync(lambda: sim.approve(state.user_code, email))

    request = SignInRequest("s1", root, home or root, sim.url, None, replace_account=True)
    with trio.fail_after(60):
        return await run_sign_in(request, emit, CancelFlag())


def claims_sent(sim):
    return sim.requests("/api/anonymous/claim")


def account_apps(sim, email="ada@example.com"):
    return next(a["connectors"] for a in sim.accounts() if a["email"] == email)


def signed_in_record(root, sim, email="ada@example.com"):
    """An account saved directly over nothing, as another writer would: its record destination."""
    return account_from_grant(sim, email)


async def test_a_sign_in_over_a_guest_moves_its_apps_once(sim, root):
    anon = sim.guest("github", "slack")
    assert store.save_guest(root, anon, "guest_1")
    done = await sign_in(root, sim)

    assert done.name == "Completed"
    assert done.handoff == ("Moved your guest apps to ada@example.com: github, slack.",)
    assert done.handoff_status["state"] == "claimed" and done.handoff_status["connectors"] == ["github", "slack"]
    assert sorted(account_apps(sim)) == ["github", "slack"]
    assert len(claims_sent(sim)) == 1
    # The credential is kept only under its hash, in the 0600 store; the records never hold it.
    assert anon not in records.records_path(root).read_text()
    assert store.read_store(root).get("guest") is None
    # The claim carried the cohort: the account's token was refreshed after it.
    assert any(r["form"].get("grant_type") == "refresh_token" for r in sim.requests("/api/oauth/token"))
    # Nothing more is ever sent for it.
    assert attempts.drain(root, clock=lambda: time.time() + 20 * 86400).attempted == []
    assert len(claims_sent(sim)) == 1


async def test_a_flaky_claim_is_retried_on_the_ladder_until_it_lands(sim, root):
    anon = sim.guest("github")
    store.save_guest(root, anon, "guest_1")
    sim.fault("/api/anonymous/claim", status=503, headers={"Retry-After": "120"})
    done = await sign_in(root, sim)
    assert done.name == "Completed"  # the sign-in itself is not held up by the handoff
    assert done.handoff == (
        "Moving your guest apps to ada@example.com is taking longer than usual; it will keep trying.",
    )
    (record,) = records.read_records(root).values()
    assert record["next_attempt_at"] - record["updated_at"] == pytest.approx(120)  # Retry-After over the 30 s rung
    assert attempts.drain(root).attempted == []  # not due yet
    report = attempts.drain(root, clock=lambda: time.time() + 121)
    assert report.attempted == ["claimed"] and account_apps(sim) == ["github"]
    assert [r["time"] for r in claims_sent(sim)] and len(claims_sent(sim)) == 2


@pytest.mark.parametrize(
    ("fault", "state", "line"),
    [
        ({"status": 403, "body": {"error": "account_locked"}}, "failed", "could not be moved"),
        ({"status": 410, "body": {"error": "already_retired"}}, "gone", "probably already moved"),
        ({"status": 410, "body": {"error": "unknown_token"}}, "gone", "no apps left to move"),
        ({"status": 400, "body": {"error": "brand_new_code"}}, "pending", "taking longer than usual"),
    ],
)
async def test_each_answer_reads_as_the_rules_say(sim, root, fault, state, line):
    store.save_guest(root, sim.guest("github"), "guest_1")
    sim.fault("/api/anonymous/claim", **fault)
    done = await sign_in(root, sim)
    assert done.handoff_status["state"] == state
    assert line in done.handoff[0]
    assert fault["body"]["error"] not in " ".join(done.handoff) + done.copy + done.copy_terminal


async def test_a_401_refreshes_the_token_once_and_the_claim_goes_through(sim, root):
    store.save_guest(root, sim.guest("github"), "guest_1")
    sim.fault("/api/anonymous/claim", status=401, body={"error": "invalid_token"})
    done = await sign_in(root, sim)
    assert done.handoff_status["state"] == "claimed"
    assert len(claims_sent(sim)) == 2


async def test_a_token_of_another_account_sends_nothing(sim, root):
    anon = sim.guest("github")
    records.note_replacement(root, anon=anon, profile="default", destination="acct_someone_else", email="x@example.com")
    store.save_account(root, root, signed_in_record(root, sim))
    report = attempts.drain(root)
    assert report.attempted == ["wrong_account"]
    assert claims_sent(sim) == []
    assert account_apps(sim) == []


def test_two_profiles_sharing_one_identity_make_one_record_and_one_claim(sim, root):
    anon = sim.guest("github")
    homes = [root / "profiles" / "a", root / "profiles" / "b"]
    for home in homes:
        store.store_provider_state(home, store.PROVIDER, {"source": "guest", "anon": anon})
    account = signed_in_record(root, sim)
    for home in homes:  # each profile moves onto the account
        store.save_account(root, home, account)
    assert len(records.read_records(root)) == 1
    assert [attempts.drain(root).attempted, attempts.drain(root).attempted] == [["claimed"], []]
    assert len(claims_sent(sim)) == 1 and account_apps(sim) == ["github"]


RACER = """
import sys, time
from pathlib import Path
from nous.guest_handoff import attempts
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(" ".join(attempts.drain(Path(sys.argv[1])).attempted))
"""


def test_racing_drains_send_one_claim(sim, root):
    store.save_guest(root, sim.guest("github"), "guest_1")
    sim.fault("/api/anonymous/claim", delay=1.0)  # the winner's claim is in flight while the others look
    account = signed_in_record(root, sim)
    store.write_shared_nous_state(root, lambda s: {**s, "account": account})  # noted, not drained
    start = str(time.time() + 1.0)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(root), start],
            cwd=ROOT,
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outcomes = [r.communicate(timeout=60)[0].split() for r in racers]
    assert sorted(o for out in outcomes for o in out).count("claimed") == 1, outcomes
    assert len(claims_sent(sim)) == 1 and account_apps(sim) == ["github"]


CRASH_AFTER_SEND = """
import os, sys, time
from pathlib import Path
from nous.guest_handoff import attempts
attempts._record_answer = lambda *a, **k: os._exit(9)  # the process dies after the claim, before its answer is written
attempts.drain(Path(sys.argv[1]))
"""


def test_a_crash_between_the_claim_and_its_answer_reads_as_probably_moved(sim, root):
    store.save_guest(root, sim.guest("github"), "guest_1")
    account = signed_in_record(root, sim)
    store.write_shared_nous_state(root, lambda s: {**s, "account": account})
    crashed = subprocess.run(
        [sys.executable, "-c", CRASH_AFTER_SEND, str(root)], cwd=ROOT, env=python_env(), timeout=60
    )
    assert crashed.returncode == 9
    (record,) = records.read_records(root).values()
    assert record["state"] == "reserved" and account_apps(sim) == ["github"]  # it moved; nobody wrote it down
    assert attempts.drain(root).attempted == []  # the lease is live: nothing is sent twice at once
    later = attempts.drain(root, clock=lambda: time.time() + rules.LEASE + 1)
    assert later.attempted == ["gone"]
    assert later.lines == ["Your guest apps were probably already moved to ada@example.com."]
    assert len(claims_sent(sim)) == 2
