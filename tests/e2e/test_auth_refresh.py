"""The token refresh against the real portal simulator: rotation, reuse, revocation, faults,
and refreshers racing each other from several processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from nous import refresh, refresh_rules, store
from tests.support.processes import ROOT, python_env
from tests.support.sign_ins import account_from_grant


def signed_in(root, sim, email="ada@example.com", tier="plus"):
    record = account_from_grant(sim, email, tier)
    store.save_account(root, root, record)
    return record


def refreshes(sim):
    return [r for r in sim.requests("/api/oauth/token") if r["form"].get("grant_type") == "refresh_token"]


def test_a_refresh_rotates_and_stores_the_successor(sim, root):
    before = signed_in(root, sim)
    outcome = refresh.refresh_account(root, force=True)
    after = store.read_account(root)
    assert outcome.result == "refreshed"
    assert after["refresh_token"] != before["refresh_token"] and after["access_token"] != before["access_token"]
    assert after["refreshed_at"] >= before["refreshed_at"] and after["sub"] == before["sub"]
    assert refresh.refresh_account(root, force=True).result == "refreshed"  # the stored successor works


def test_a_fresh_token_is_left_alone_and_a_due_one_refreshed(sim, root):
    account = signed_in(root, sim)
    assert refresh.refresh_account(root).result == "fresh"
    assert refreshes(sim) == []
    due = refresh_rules.refresh_at(account) + 1
    assert refresh.refresh_account(root, now=due).result == "refreshed"
    assert len(refreshes(sim)) == 1


def test_a_reused_refresh_token_marks_the_account_for_sign_in(sim, root):
    stale = signed_in(root, sim)
    assert refresh.refresh_account(root, force=True).result == "refreshed"
    # A stale copy of the store comes back (a restored backup): its refresh token was spent.
    store.write_shared_nous_state(root, lambda s: {**s, "account": stale})
    outcome = refresh.refresh_account(root, force=True)
    assert (outcome.result, outcome.reason) == ("needs_sign_in", "refresh_token_reused")
    view = store.public_view(store.read_account(root))
    assert (view["signed_in"], view["email"], view["needs_sign_in_reason"]) == (
        False,
        "ada@example.com",
        "refresh_token_reused",
    )
    assert set(sim.accounts()[0]["families"].values()) == {"revoked"}  # the portal revoked the family
    count = len(refreshes(sim))
    assert refresh.refresh_account(root, force=True).result == "needs_sign_in"
    assert len(refreshes(sim)) == count  # nothing more is sent for an account that needs a sign-in


def test_a_revoked_account_needs_a_sign_in_and_nothing_raises(sim, root):
    signed_in(root, sim)
    sim.revoke("ada@example.com")
    outcome = refresh.refresh_account(root, force=True)
    assert (outcome.result, outcome.reason) == ("needs_sign_in", "invalid_grant")


@pytest.mark.parametrize("fault", [{"status": 503, "headers": {"Retry-After": "7"}}, {"drop": True}])
def test_a_portal_fault_leaves_the_account_as_it_was(sim, root, fault):
    before = signed_in(root, sim)
    sim.fault("/api/oauth/token", **fault)
    outcome = refresh.refresh_account(root, force=True)
    assert outcome.result == "failed"
    if "status" in fault:
        assert (outcome.reason, outcome.retry_after) == ("portal_busy", 7.0)
    else:
        assert outcome.reason == "portal_unreachable"
    assert store.read_account(root) == before
    assert refresh.refresh_account(root, force=True).result == "refreshed"


def test_a_signed_out_install_has_nothing_to_refresh(sim, root):
    assert refresh.refresh_account(root, force=True).result == "signed_out"
    assert refreshes(sim) == []


REFRESHER = """
import sys
from pathlib import Path
from nous.refresh import refresh_account
results = [refresh_account(Path(sys.argv[1]), force=True).result for _ in range(int(sys.argv[2]))]
print(" ".join(results))
"""


def test_concurrent_refreshers_never_lose_a_rotated_token(sim, root):
    signed_in(root, sim)
    rounds, workers = 4, 4
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", REFRESHER, str(root), str(rounds)],
            cwd=ROOT,
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    results = " ".join(out for out, _ in outputs).split()
    assert results == ["refreshed"] * (rounds * workers), outputs
    # Each refresh spent the token the one before it stored: no reuse, the family lives on.
    sent = [r["form"]["refresh_token"] for r in refreshes(sim)]
    assert len(sent) == len(set(sent)) == rounds * workers
    assert set(sim.accounts()[0]["families"].values()) == {"active"}
    assert refresh.refresh_account(root, force=True).result == "refreshed"


def test_refresh_timing_is_read_from_the_store_not_guessed(sim, root):
    sim.configure(access_ttl=2)
    account = signed_in(root, sim)
    assert account["expires_at"] - account["saved_at"] == pytest.approx(2, abs=0.1)
    time.sleep(max(0.0, refresh_rules.refresh_at(account) - time.time()) + 0.05)
    assert refresh.refresh_account(root).result == "refreshed"
