"""The portal simulator's server in this process: the device flow, refresh tokens and
bearer-protected answers."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from simulators.portal_sim import tokens
from tests.support.portal import PortalSim, SimControlError
from tests.support.portal_api import (
    CLIENT,
    DEVICE_CODE,
    DEVICE_GRANT,
    RECOMMENDED,
    TOKEN,
    bearer,
    claims,
    error,
    new_code,
    poll,
    refresh,
    sign_in,
)

# --- device flow ---------------------------------------------------------------------------------


def test_device_code_answer(sim: PortalSim, web: httpx.Client) -> None:
    sim.configure(interval=2, device_ttl=120)
    code = new_code(web, scope="inference")
    assert len(code["device_code"]) >= 32
    assert re.fullmatch(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}", code["user_code"])
    assert code["verification_uri"] == f"{sim.url}/device"
    assert code["verification_uri_complete"] == f"{sim.url}/device?user_code={code['user_code']}"
    assert (code["expires_in"], code["interval"]) == (120, 2)
    other = new_code(web)
    assert (other["device_code"], other["user_code"]) != (code["device_code"], code["user_code"])


def test_device_code_checks_the_client(sim: PortalSim, web: httpx.Client) -> None:
    answer = web.post(DEVICE_CODE, data={"client_id": "stranger"})
    assert (answer.status_code, error(answer)) == (400, "invalid_client")
    answer = web.post(DEVICE_CODE, data={"scope": "inference"})
    assert (answer.status_code, error(answer)) == (400, "invalid_request")
    sim.configure(clients=["stranger"])
    assert web.post(DEVICE_CODE, data={"client_id": "stranger"}).status_code == 200
    assert error(web.post(DEVICE_CODE, data={"client_id": CLIENT})) == "invalid_client"


def test_pending_then_approved_grants_tokens_exactly_once(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web, scope="inference")
    for _ in range(3):
        answer = poll(web, code)
        assert (answer.status_code, error(answer)) == (400, "authorization_pending")
    account = sim.approve(code["user_code"], "ada@example.com", tier="pro")
    assert account.startswith("acct_")

    answer = poll(web, code)
    assert answer.status_code == 200, answer.text
    grant = answer.json()
    assert set(grant) == {"access_token", "token_type", "expires_in", "refresh_token", "scope"}
    assert (grant["token_type"], grant["expires_in"], grant["scope"]) == ("Bearer", 3600, "inference")
    token = claims(grant["access_token"])
    assert (token["sub"], token["email"], token["tier"]) == (account, "ada@example.com", "pro")
    assert (token["host"], token["iss"]) == (f"{sim.url}/v1", sim.url)
    assert token["exp"] - token["iat"] == 3600
    assert token["jti"]
    [listed] = sim.accounts()
    assert listed["families"] == {token["fam"]: "active"}

    assert error(poll(web, code)) == "invalid_grant"  # exchanged: never a second grant


def test_approval_takes_a_typed_user_code_and_a_host(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web)
    typed = code["user_code"].replace("-", "").lower()
    sim.approve(typed, "ada@example.com", tier="plus", host="https://inference.example/v1")
    token = claims(poll(web, code).json()["access_token"])
    assert (token["tier"], token["host"]) == ("plus", "https://inference.example/v1")
    with pytest.raises(SimControlError, match="404"):
        sim.approve("AAAA-AAAA", "ada@example.com")  # vowels are never in a user code


def test_denied_code(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web)
    sim.deny(code["user_code"])
    for _ in range(2):
        answer = poll(web, code)
        assert (answer.status_code, error(answer)) == (400, "access_denied")
    with pytest.raises(SimControlError, match="409"):
        sim.approve(code["user_code"], "ada@example.com")


def test_unknown_code_and_wrong_client(sim: PortalSim, web: httpx.Client) -> None:
    assert error(poll(web, {"device_code": "no-such-code"})) == "invalid_grant"
    code = new_code(web)
    assert error(poll(web, code, client_id="stranger")) == "invalid_client"
    sim.configure(clients=[CLIENT, "other-cli"])
    assert error(poll(web, code, client_id="other-cli")) == "invalid_client"  # issued to hermes-cli
    answer = web.post(TOKEN, data={"grant_type": DEVICE_GRANT, "client_id": CLIENT})
    assert (answer.status_code, error(answer)) == (400, "invalid_request")
    answer = web.post(TOKEN, data={"grant_type": "password", "client_id": CLIENT})
    assert (answer.status_code, error(answer)) == (400, "unsupported_grant_type")


def test_expired_code(sim: PortalSim, web: httpx.Client) -> None:
    sim.configure(device_ttl=0)
    code = new_code(web)
    assert code["expires_in"] == 0
    answer = poll(web, code)
    assert (answer.status_code, error(answer)) == (400, "expired_token")
    with pytest.raises(SimControlError, match="409"):
        sim.approve(code["user_code"], "ada@example.com")


def test_polling_too_soon_is_told_to_slow_down(sim: PortalSim, web: httpx.Client) -> None:
    sim.configure(interval=60)
    code = new_code(web)
    assert error(poll(web, code)) == "authorization_pending"
    assert error(poll(web, code)) == "slow_down"
    assert error(poll(web, code)) == "slow_down"


def test_slow_down_grows_the_interval(sim: PortalSim, web: httpx.Client) -> None:
    sim.configure(interval=0.3, slow_down_step=600)
    code = new_code(web)
    assert error(poll(web, code)) == "authorization_pending"
    # Poll at once until told to slow down (a stalled machine may make a poll late enough to pass).
    answers = [error(poll(web, code)) for _ in range(20)]
    assert "slow_down" in answers
    time.sleep(0.5)  # past the first interval, far inside the grown one
    assert error(poll(web, code)) == "slow_down"


# --- refresh tokens ------------------------------------------------------------------------------


def test_refresh_rotates_and_reuse_revokes_the_family(sim: PortalSim, web: httpx.Client) -> None:
    first = sign_in(web, sim, "ada@example.com", tier="plus")
    answer = refresh(web, first["refresh_token"])
    assert answer.status_code == 200, answer.text
    second = answer.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert claims(second["access_token"])["fam"] == claims(first["access_token"])["fam"]
    assert claims(second["access_token"])["tier"] == "plus"
    assert web.get(RECOMMENDED, headers=bearer(second["access_token"])).status_code == 200
    third = refresh(web, second["refresh_token"]).json()

    answer = refresh(web, first["refresh_token"])  # used before: someone holds a copy
    assert (answer.status_code, error(answer)) == (400, "refresh_token_reused")
    assert error(refresh(web, third["refresh_token"])) == "invalid_grant"
    assert error(refresh(web, first["refresh_token"])) == "invalid_grant"  # the family is gone now
    for grant in (first, second, third):
        answer = web.get(RECOMMENDED, headers=bearer(grant["access_token"]))
        assert (answer.status_code, error(answer)) == (401, "invalid_token")
    [account] = sim.accounts()
    assert account["families"] == {claims(first["access_token"])["fam"]: "revoked"}

    again = sign_in(web, sim, "ada@example.com")  # a new sign-in is a new family
    assert web.get(RECOMMENDED, headers=bearer(again["access_token"])).status_code == 200


def test_refresh_rejects_unknown_tokens_and_clients(sim: PortalSim, web: httpx.Client) -> None:
    grant = sign_in(web, sim, "ada@example.com")
    assert error(refresh(web, "no-such-token")) == "invalid_grant"
    assert error(refresh(web, grant["refresh_token"], client_id="stranger")) == "invalid_client"
    answer = web.post(TOKEN, data={"grant_type": "refresh_token", "client_id": CLIENT})
    assert (answer.status_code, error(answer)) == (400, "invalid_request")
    assert refresh(web, grant["refresh_token"]).status_code == 200  # none of that used it up


def test_revoking_an_account_ends_every_family(sim: PortalSim, web: httpx.Client) -> None:
    grants = [sign_in(web, sim, "ada@example.com") for _ in range(2)]
    other = sign_in(web, sim, "bob@example.com")
    assert sorted(sim.revoke("ada@example.com")) == sorted(claims(g["access_token"])["fam"] for g in grants)
    for grant in grants:
        assert web.get(RECOMMENDED, headers=bearer(grant["access_token"])).status_code == 401
        assert error(refresh(web, grant["refresh_token"])) == "invalid_grant"
    assert web.get(RECOMMENDED, headers=bearer(other["access_token"])).status_code == 200
    families = {account["email"]: set(account["families"].values()) for account in sim.accounts()}
    assert families == {"ada@example.com": {"revoked"}, "bob@example.com": {"active"}}
    with pytest.raises(SimControlError, match="404"):
        sim.revoke("nobody@example.com")


# --- bearer-protected answers --------------------------------------------------------------------


def test_recommended_default_per_tier(sim: PortalSim, web: httpx.Client) -> None:
    for tier, model in (("free", "Hermes-4-14B"), ("plus", "Hermes-4-70B"), ("pro", "Hermes-4-405B")):
        grant = sign_in(web, sim, f"{tier}@example.com", tier=tier)
        assert web.get(RECOMMENDED, headers=bearer(grant["access_token"])).json() == {"model": model, "tier": tier}
        assert web.get(RECOMMENDED, params={"tier": tier}).json() == {"model": model, "tier": tier}
    assert web.get(RECOMMENDED).json() == {"model": "Hermes-4-14B", "tier": "free"}
    answer = web.get(RECOMMENDED, params={"tier": "gold"})
    assert (answer.status_code, error(answer)) == (400, "invalid_request")
    sim.configure(recommended={"pro": "Hermes-5"})
    assert web.get(RECOMMENDED, params={"tier": "pro"}).json() == {"model": "Hermes-5", "tier": "pro"}
    assert web.get(RECOMMENDED, params={"tier": "free"}).json()["model"] == "Hermes-4-14B"


def test_bad_bearer_tokens_are_401(sim: PortalSim, web: httpx.Client) -> None:
    good = sign_in(web, sim, "ada@example.com")["access_token"]
    forged = tokens.sign(claims(good), b"not the simulator's key")
    tampered = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    sim.configure(access_ttl=0)
    expired = sign_in(web, sim, "ada@example.com")["access_token"]
    for headers in (
        {"Authorization": "Basic YTpi"},
        bearer("garbage"),
        bearer(forged),
        bearer(tampered),
        bearer(expired),
        {"Authorization": "Bearer"},
    ):
        answer = web.get(RECOMMENDED, headers=headers)
        assert (answer.status_code, error(answer)) == (401, "invalid_token"), headers
        assert answer.headers["www-authenticate"].startswith("Bearer")
    assert web.get(RECOMMENDED, headers=bearer(good)).status_code == 200
