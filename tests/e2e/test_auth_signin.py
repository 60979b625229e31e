"""The device-code sign-in in this process against the portal simulator as a real process:
every terminal state, cancels racing the save, the poll under faults, TLS, and what is saved."""

from __future__ import annotations

import os
import random
import stat

import pytest
import trio
import trustme

from nous import store
from services.auth_worker import device_flow, settle
from services.auth_worker.signin import CancelFlag
from services.auth_worker.states import Reason
from shared import config
from tests.support.portal import PortalSim, issue_tls
from tests.support.sign_ins import request, sign_in

pytestmark = pytest.mark.root(profiles=("work",))


def approve_as(sim, email, tier="free", **kw):
    return lambda code: sim.approve(code.user_code, email, tier=tier, **kw)


async def test_a_sign_in_completes_saves_the_account_and_settles_once(sim, root):
    work = root / "profiles" / "work"
    (work / "config.yaml").write_text("model:\n  route: welcome\n")
    seen, terminal = await sign_in(
        request(root, sim, profile_home=work), on_code=approve_as(sim, "ada@example.com", "pro")
    )

    assert [s.name for s in seen] == ["Code", "Waiting"]
    assert (
        seen[0].verification_uri_complete.startswith(sim.url) and seen[0].user_code in seen[0].verification_uri_complete
    )
    assert (terminal.name, terminal.email, terminal.tier, terminal.settled) == (
        "Completed",
        "ada@example.com",
        "pro",
        "moved",
    )
    account = store.read_account(root)
    assert (account["email"], account["tier"], account["portal"]) == ("ada@example.com", "pro", sim.url)
    assert stat.S_IMODE(os.stat(store.store_path(root)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.store_path(root).parent).st_mode) == 0o700
    assert store.profile_auth_path(work).exists()
    model = config.load_config(work)["model"]
    assert (model["base_url"], model["default"]) == (account["host"], "Hermes-4-405B")
    assert len(sim.requests("/api/model/recommended-default")) == 1  # settled exactly once
    assert not config.config_path(root).exists()  # only the signing-in profile's config moves


async def test_a_signed_in_install_is_told_so_before_any_network(sim, root):
    await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    before = len(sim.requests())
    seen, terminal = await sign_in(request(root, sim, sign_in_id="s2"))
    assert (seen, terminal.name, terminal.email) == ([], "AlreadySignedIn", "ada@example.com")
    assert len(sim.requests()) == before


async def test_replace_account_signs_in_again_with_another_account(sim, root):
    await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    _, terminal = await sign_in(request(root, sim, replace=True), on_code=approve_as(sim, "grace@example.com", "plus"))
    assert (terminal.name, terminal.email) == ("Completed", "grace@example.com")
    assert store.read_account(root)["email"] == "grace@example.com"


async def test_a_denied_code_fails_and_saves_nothing(sim, root):
    _, terminal = await sign_in(request(root, sim), on_code=lambda code: sim.deny(code.user_code))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.ACCESS_DENIED)
    assert store.read_account(root) is None


async def test_an_expired_code_times_out(sim, root):
    sim.configure(device_ttl=1)
    _, terminal = await sign_in(request(root, sim))
    assert terminal.name == "TimedOut"
    sim.configure(device_ttl=900)
    sim.fault("/api/oauth/token", status=400, body={"error": "expired_token"})
    _, terminal = await sign_in(request(root, sim))
    assert terminal.name == "TimedOut"  # the portal's own word for it
    assert store.read_account(root) is None


async def test_a_cancel_while_waiting_wins_and_saves_nothing(sim, root):
    flag = CancelFlag()
    seen, terminal = await sign_in(request(root, sim), on_code=lambda code: flag.cancel(), cancel=flag)
    assert terminal.name == "Cancelled"
    assert [s.name for s in seen] == ["Code", "Waiting"]
    assert store.read_account(root) is None


async def test_a_cancel_ends_a_poll_whose_request_hangs(sim, root):
    sim.fault("/api/oauth/token", delay=20)  # the first poll's answer would take 20 s
    flag = CancelFlag()

    def cancel_soon(code) -> None:
        import time

        time.sleep(0.5)
        flag.cancel()

    with trio.fail_after(10):  # not 20: the cancel is seen while the request is in flight
        _, terminal = await sign_in(request(root, sim), on_code=cancel_soon, cancel=flag)
    assert terminal.name == "Cancelled"


async def test_a_cancel_racing_the_save_either_wins_or_loses_whole(sim, root):
    outcomes = set()
    for attempt in range(30):
        flag = CancelFlag()
        answer = {}

        def approve_then_cancel(code, flag=flag, answer=answer, attempt=attempt) -> None:
            import time

            sim.approve(code.user_code, f"user{attempt}@example.com")
            time.sleep(random.uniform(0, 0.3))  # around the poll that gets the token and the save
            answer["cancel_won"] = flag.cancel()

        _, terminal = await sign_in(
            request(root, sim, replace=True, sign_in_id=f"s{attempt}"),
            on_code=approve_then_cancel,
            cancel=flag,
            guard=flag.commit,
        )
        saved = (store.read_account(root) or {}).get("email") == f"user{attempt}@example.com"
        if answer["cancel_won"]:
            assert (terminal.name, saved) == ("Cancelled", False), attempt
        else:
            assert (terminal.name, saved) == ("Completed", True), attempt
        outcomes.add(terminal.name)
    assert outcomes  # which side wins each time is up to the scheduler; neither may be half-done


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 429, "headers": {"Retry-After": "1"}},
        {"status": 503},
        {"status": 500, "body": "not json"},
        {"drop": True},
    ],
    ids=["429", "503", "500", "dropped"],
)
async def test_the_poll_rides_out_portal_faults(sim, root, fault):
    sim.fault("/api/oauth/token", count=2, **fault)
    _, terminal = await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    assert terminal.name == "Completed"
    polls = sim.requests("/api/oauth/token")
    assert len(polls) >= 3
    if fault.get("status") == 429:
        assert polls[1]["time"] - polls[0]["time"] >= 1.0  # Retry-After was honoured


async def test_slow_down_widens_the_poll_interval(sim, root, monkeypatch):
    monkeypatch.setattr(device_flow, "SLOW_DOWN_STEP", 1.0)
    sim.fault("/api/oauth/token", status=400, body={"error": "slow_down"})
    _, terminal = await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    assert terminal.name == "Completed"
    polls = sim.requests("/api/oauth/token")
    assert polls[1]["time"] - polls[0]["time"] >= 1.0 + device_flow.MIN_INTERVAL


async def test_device_code_faults_are_retried_then_fail_typed(sim, root, monkeypatch):
    sim.fault("/api/oauth/device/code", status=503)
    _, terminal = await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    assert terminal.name == "Completed"
    monkeypatch.setattr(device_flow, "DEVICE_CODE_BUDGET", 1.5)
    sim.fault("/api/oauth/device/code", drop=True, count=50)
    _, terminal = await sign_in(request(root, sim, replace=True))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.PORTAL_UNREACHABLE)
    sim.clear_faults()
    sim.fault("/api/oauth/device/code", status=400, body={"error": "invalid_client"})
    _, terminal = await sign_in(request(root, sim, replace=True))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.PORTAL_REFUSED)


async def test_a_save_that_fails_is_failed_and_saves_nothing(sim, root):
    store.profile_auth_path(root).mkdir()  # the profile's auth file cannot be written
    _, terminal = await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.SAVE_FAILED)
    assert store.read_account(root) is None


async def test_a_settle_that_fails_is_failed_with_the_account_saved(sim, root):
    (root / "config.yaml").write_text("model: [unclosed\n")
    _, terminal = await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com"))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.SETTLE_FAILED)
    assert store.read_account(root)["email"] == "ada@example.com"
    assert "You are signed in" in terminal.copy


async def test_a_corrupt_store_stops_the_sign_in_before_any_network(sim, root):
    store.store_path(root).parent.mkdir(parents=True)
    store.store_path(root).write_text("{not json")
    _, terminal = await sign_in(request(root, sim))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.STORE_UNREADABLE)
    assert sim.requests() == []
    assert store.store_path(root).read_text() == "{not json"


async def test_the_recommended_model_falls_back_to_the_tier_table(sim, root):
    sim.fault("/api/model/recommended-default", method="GET", status=503)
    _, terminal = await sign_in(request(root, sim), on_code=approve_as(sim, "ada@example.com", "plus"))
    assert terminal.name == "Completed"
    assert config.load_config(root)["model"]["default"] == settle.recommended_nous_default_model("plus")


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture
def tls_sim(tmp_path, ca):
    cert, key, trusted = issue_tls(ca, tmp_path)
    with PortalSim(tmp_path / "tls-portal", tls=(cert, key), verify=trusted) as sim:
        sim.configure(interval=0)
        yield sim


async def test_tls_is_verified_against_the_configured_ca(tls_sim, root, tmp_path, ca):
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    assert tls_sim.url.startswith("https://")
    _, terminal = await sign_in(
        request(root, tls_sim, ca_bundle=str(bundle)), on_code=approve_as(tls_sim, "ada@example.com")
    )
    assert terminal.name == "Completed"

    wrong = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(wrong))
    _, terminal = await sign_in(request(root, tls_sim, ca_bundle=str(wrong), replace=True))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.TLS_FAILED)
    _, terminal = await sign_in(request(root, tls_sim, ca_bundle=str(tmp_path / "missing.pem"), replace=True))
    assert (terminal.name, terminal.reason) == ("Failed", Reason.TLS_FAILED)
