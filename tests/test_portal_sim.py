"""The portal simulator itself, through real HTTP against the real ``python -m services.portal_sim``.

Most tests share one simulator process (reset before each test); restarts, TLS and the command
line get their own. Nothing asserts on durations: a fault's delay is shown by a client timeout
that must fire, slow_down by polls that are certainly too soon.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from services.portal_sim import routes, tokens
from services.portal_sim.server import PortalServer
from services.portal_sim.state import REQUEST_LOG_CAP, State
from tests.support.portal import PortalSim, SimControlError, issue_tls
from tests.support.processes import ROOT, python_env

CLIENT = "hermes-cli"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEVICE_CODE = "/api/oauth/device/code"
TOKEN = "/api/oauth/token"
RECOMMENDED = "/api/model/recommended-default"
CLAIM = "/api/anonymous/claim"
DEFAULTS = {
    "interval": 0,
    "slow_down_step": 5,
    "device_ttl": 900,
    "access_ttl": 3600,
    "recommended": {"free": "Hermes-4-14B", "plus": "Hermes-4-70B", "pro": "Hermes-4-405B"},
    "clients": [CLIENT],
}


@pytest.fixture(scope="module")
def portal(tmp_path_factory: pytest.TempPathFactory):
    with PortalSim(tmp_path_factory.mktemp("portal")) as sim:
        yield sim


@pytest.fixture
def sim(portal: PortalSim) -> PortalSim:
    portal.reset()
    portal.configure(**DEFAULTS)  # interval 0: tests poll as fast as they like unless they say otherwise
    return portal


@pytest.fixture
def web(sim: PortalSim):
    with httpx.Client(base_url=sim.url, timeout=10) as client:
        yield client


# --- helpers -------------------------------------------------------------------------------------


def error(answer: httpx.Response) -> str:
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert isinstance(body.get("error_description"), str)
    return body["error"]


def new_code(web: httpx.Client, **form: str) -> dict[str, Any]:
    answer = web.post(DEVICE_CODE, data={"client_id": CLIENT, **form})
    assert answer.status_code == 200, answer.text
    return answer.json()


def poll(web: httpx.Client, code: dict[str, Any], client_id: str = CLIENT) -> httpx.Response:
    form = {"grant_type": DEVICE_GRANT, "device_code": code["device_code"], "client_id": client_id}
    return web.post(TOKEN, data=form)


def refresh(web: httpx.Client, refresh_token: str, client_id: str = CLIENT) -> httpx.Response:
    return web.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id})


def sign_in(web: httpx.Client, sim: PortalSim, email: str, tier: str = "free", **approve: str) -> dict[str, Any]:
    """The whole device flow: a code, its approval, the token answer."""
    code = new_code(web)
    sim.approve(code["user_code"], email, tier=tier, **approve)
    answer = poll(web, code)
    assert answer.status_code == 200, answer.text
    return answer.json()


def claims(access_token: str) -> dict[str, Any]:
    payload = access_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(web: httpx.Client) -> dict[str, Any]:
    answer = web.post("/api/anonymous/register")
    assert answer.status_code == 200, answer.text
    return answer.json()


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


# --- guest identities ----------------------------------------------------------------------------


def test_anonymous_register_and_me(sim: PortalSim, web: httpx.Client) -> None:
    guest = register(web)
    assert guest["token"].startswith("anon_") and guest["tier"] == "free"
    assert re.fullmatch(r"guest_[0-9a-f]+", guest["id"])
    assert register(web)["id"] != guest["id"]
    me = web.get("/api/anonymous/me", headers=bearer(guest["token"]))
    assert me.json() == {"id": guest["id"], "connectors": [], "retired": False}
    assert sim.connect_app(guest["token"], "github") == ["github"]
    assert sim.connect_app(guest["token"], "github") == ["github"]
    assert web.get("/api/anonymous/me", headers=bearer(guest["token"])).json()["connectors"] == ["github"]
    for headers in ({}, bearer("anon_unknown")):
        answer = web.get("/api/anonymous/me", headers=headers)
        assert (answer.status_code, error(answer)) == (401, "invalid_token")


def test_claim_moves_connectors_and_retires_the_guest(sim: PortalSim, web: httpx.Client) -> None:
    guest = register(web)
    sim.connect_app(guest["token"], "github")
    sim.connect_app(guest["token"], "slack")
    account = sign_in(web, sim, "ada@example.com")["access_token"]

    answer = web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "claimed", "connectors": ["github", "slack"], "cohort_carried": True}
    me = web.get("/api/anonymous/me", headers=bearer(guest["token"])).json()
    assert (me["retired"], me["connectors"]) == (True, [])
    [listed] = sim.accounts()
    assert listed["connectors"] == ["github", "slack"]

    answer = web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account))
    assert (answer.status_code, error(answer)) == (410, "already_retired")
    with pytest.raises(SimControlError, match="409"):
        sim.connect_app(guest["token"], "linear")


def test_claim_errors(sim: PortalSim, web: httpx.Client) -> None:
    account = sign_in(web, sim, "ada@example.com")["access_token"]
    empty = register(web)
    answer = web.post(CLAIM, json={"token": empty["token"]}, headers=bearer(account))
    assert answer.json() == {"status": "claimed", "connectors": [], "cohort_carried": False}

    guest = register(web)
    cases = [
        ({"token": "anon_nobody"}, bearer(account), 410, "unknown_token"),
        ({}, bearer(account), 400, "invalid_request"),
        ({"token": 7}, bearer(account), 400, "invalid_request"),
        ({"token": guest["token"]}, bearer("forged"), 401, "invalid_token"),
        ({"token": guest["token"]}, {}, 401, "invalid_token"),
    ]
    for body, headers, status, code in cases:
        answer = web.post(CLAIM, json=body, headers=headers)
        assert (answer.status_code, error(answer)) == (status, code), body

    sim.fault(CLAIM, status=403, body={"error": "account_locked", "error_description": "locked"})
    answer = web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account))
    assert (answer.status_code, error(answer)) == (403, "account_locked")
    assert web.post(CLAIM, json={"token": guest["token"]}, headers=bearer(account)).status_code == 200


# --- faults --------------------------------------------------------------------------------------


def test_fault_status_with_retry_after(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web)
    assert sim.fault(TOKEN, status=503, headers={"Retry-After": "7"}, count=2) == 2
    for _ in range(2):
        answer = poll(web, code)
        assert (answer.status_code, answer.headers["retry-after"]) == (503, "7")
        assert answer.json() == {"error": "simulated"}
    assert error(poll(web, code)) == "authorization_pending"


def test_fault_matches_method_and_path(sim: PortalSim, web: httpx.Client) -> None:
    sim.fault(RECOMMENDED, method="GET", status=429, body={"error": "rate_limited"})
    assert web.post(DEVICE_CODE, data={"client_id": CLIENT}).status_code == 200
    assert web.post(RECOMMENDED).status_code == 405  # a POST does not take the GET's fault
    answer = web.get(RECOMMENDED)
    assert (answer.status_code, answer.json()) == (429, {"error": "rate_limited"})
    assert web.get(RECOMMENDED).status_code == 200


def test_fault_delay_then_normal_answer(sim: PortalSim, web: httpx.Client) -> None:
    sim.fault(RECOMMENDED, method="GET", delay=2.0)
    with pytest.raises(httpx.ReadTimeout):
        web.get(RECOMMENDED, timeout=0.2)  # the answer is certainly later than this
    sim.fault(RECOMMENDED, method="GET", delay=0.2)
    answer = web.get(RECOMMENDED)
    assert (answer.status_code, answer.json()["model"]) == (200, "Hermes-4-14B")


def test_fault_drops_the_connection(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web)
    sim.fault(TOKEN, drop=True)
    sim.fault(TOKEN, drop=True, delay=0.1)
    for _ in range(2):
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            poll(web, code)
    assert error(poll(web, code)) == "authorization_pending"
    assert len(sim.requests(TOKEN)) == 3  # dropped requests are still recorded


def test_faults_can_be_cleared_and_are_validated(sim: PortalSim, web: httpx.Client) -> None:
    sim.fault(DEVICE_CODE, status=500, count=3)
    sim.clear_faults()
    assert web.post(DEVICE_CODE, data={"client_id": CLIENT}).status_code == 200
    bad = [
        {"path": TOKEN, "delay": 31},
        {"path": TOKEN, "status": 503, "count": 0},
        {"path": "/_sim/config", "status": 503},
        {"path": TOKEN, "status": 503, "drop": True},
        {"path": TOKEN},
        {"path": TOKEN, "status": "503"},
        {"path": TOKEN, "status": 503, "headers": {"Content-Length": "0"}},
        {"path": TOKEN, "status": 503, "headers": {"X-Bad": "a\r\nb"}},
        {"path": TOKEN, "status": 503, "headers": {"X-Bad": "caf\u00e9"}},
        {"path": TOKEN, "status": 503, "bogus": 1},
        {"path": TOKEN, "headers": {"Retry-After": "1"}},
    ]
    for spec in bad:
        answer = web.post("/_sim/faults", json=spec)
        assert (answer.status_code, error(answer)) == (400, "invalid_request"), spec
    assert web.post(DEVICE_CODE, data={"client_id": CLIENT}).status_code == 200


# --- request log ---------------------------------------------------------------------------------


def test_request_log(sim: PortalSim, web: httpx.Client) -> None:
    code = new_code(web, scope="inference")
    poll(web, code)
    web.get(RECOMMENDED, headers=bearer("whatever"))
    web.post(CLAIM, json={"token": "anon_x"})
    web.get("/nowhere")
    sim.approve(code["user_code"], "ada@example.com")  # control calls are not recorded

    log = sim.requests()
    assert [(entry["method"], entry["path"]) for entry in log] == [
        ("POST", DEVICE_CODE),
        ("POST", TOKEN),
        ("GET", RECOMMENDED),
        ("POST", CLAIM),
        ("GET", "/nowhere"),
    ]
    assert log[0]["form"] == {"client_id": CLIENT, "scope": "inference"}
    assert log[1]["form"]["device_code"] == code["device_code"]
    assert log[3]["json"] == {"token": "anon_x"}
    assert [entry["authorization"] for entry in log] == [False, False, True, False, False]
    assert all(isinstance(entry["time"], float) for entry in log)
    assert [entry["path"] for entry in sim.requests(TOKEN)] == [TOKEN]
    sim.reset()
    assert sim.requests() == []


def test_request_log_keeps_the_newest() -> None:
    state = State("http://sim.invalid")
    for n in range(REQUEST_LOG_CAP + 5):
        state.record({"path": "/x", "n": n})
    entries = state.requests(None)
    assert len(entries) == REQUEST_LOG_CAP
    assert (entries[0]["n"], entries[-1]["n"]) == (5, REQUEST_LOG_CAP + 4)


# --- robustness ----------------------------------------------------------------------------------


def test_malformed_input_answers_400_and_the_server_keeps_serving(sim: PortalSim, web: httpx.Client) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    account = sign_in(web, sim, "ada@example.com")["access_token"]
    cases = [
        (TOKEN, b"grant_type=%ff", form),
        (TOKEN, b"client_id=a&client_id=b&grant_type=refresh_token&refresh_token=x", form),
        (TOKEN, b"no-equals-sign", form),
        (TOKEN, json.dumps({"grant_type": "refresh_token"}).encode(), {"Content-Type": "application/json"}),
        (DEVICE_CODE, b"client_id=hermes-cli", {"Content-Type": "text/plain"}),
        (CLAIM, b"{not json", {**bearer(account), "Content-Type": "application/json"}),
        (CLAIM, b"[1, 2]", bearer(account)),
        (CLAIM, b"\xff\xfe", bearer(account)),
        ("/_sim/config", b'{"interval": NaN}', {}),
        ("/_sim/config", b'{"interval": "fast"}', {}),
        ("/_sim/config", b'{"interval": -1}', {}),
        ("/_sim/config", b'{"interval": true}', {}),
        ("/_sim/config", b'{"recommended": {"gold": "x"}}', {}),
        ("/_sim/config", b'{"clients": "hermes-cli"}', {}),
        ("/_sim/config", b'{"bogus": 1}', {}),
        ("/_sim/device/approve", b'{"user_code": 5, "email": "a@b.c"}', {}),
        ("/_sim/device/approve", b'{"user_code": "BCDF-GHJK", "email": "not-an-email"}', {}),
        ("/_sim/device/approve", b'{"user_code": "BCDF-GHJK", "email": "a@b.c", "tier": "gold"}', {}),
        ("/_sim/device/approve", b'{"user_code": "BCDF-GHJK", "email": "a@b.c\\ud800"}', {}),
        ("/_sim/anonymous/connect", b'{"token": "anon_x"}', {}),
        ("/_sim/faults", b"[" * 100_000, {}),
    ]
    for path, body, headers in cases:
        answer = web.post(path, content=body[: 60 * 1024], headers=headers)
        assert (answer.status_code, error(answer)) == (400, "invalid_request"), (path, body[:40])
    assert web.get(RECOMMENDED, headers=bearer(account)).status_code == 200
    assert sim.configure() == DEFAULTS  # no bad update changed anything


def test_framing_errors(sim: PortalSim, web: httpx.Client) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = web.post(TOKEN, content=b"a" * (64 * 1024 + 1), headers=form)
    assert (answer.status_code, error(answer)) == (413, "request_too_large")
    answer = web.get("/api/nothing")
    assert (answer.status_code, error(answer)) == (404, "not_found")
    answer = web.put(TOKEN)
    assert (answer.status_code, error(answer), answer.headers["allow"]) == (405, "method_not_allowed", "POST")

    host, port = web.base_url.host, web.base_url.port
    for raw in (
        b"POST /api/oauth/token HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n",
        b"POST /api/oauth/token HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"\x16\x03\x01 not http at all\r\n\r\n",
        b"POST /api/oauth/token HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial",
    ):
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass  # whatever the answer, the server ends this connection
    assert web.get(RECOMMENDED).status_code == 200


def test_keep_alive_survives_error_answers(sim: PortalSim) -> None:
    host, port = httpx.URL(sim.url).host, httpx.URL(sim.url).port
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", f"{RECOMMENDED}?tier=plus")
        first = conn.getresponse()
        assert (first.status, json.loads(first.read())["model"]) == (200, "Hermes-4-70B")
        sock = conn.sock
        for method, path, status in (
            ("GET", "/missing", 404),
            ("HEAD", RECOMMENDED, 405),
            ("POST", DEVICE_CODE, 400),
            ("GET", RECOMMENDED, 200),
        ):
            conn.request(method, path)
            answer = conn.getresponse()
            body = answer.read()
            assert answer.status == status and (body == b"") == (method == "HEAD")
            assert conn.sock is sock  # the same connection all along
    finally:
        conn.close()


def test_a_handler_bug_answers_500_and_the_server_keeps_serving(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = f"anon_{secrets.token_hex(8)}"

    def broken(state: State, request: routes.Request) -> dict[str, Any]:
        raise KeyError(secret)

    monkeypatch.setitem(routes.ROUTES, "/api/anonymous/register", {"POST": (broken, routes.NO_BODY)})
    server = PortalServer("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=server.base, timeout=10) as client:
            answer = client.post("/api/anonymous/register")
            assert (answer.status_code, error(answer)) == (500, "server_error")
            assert client.get(RECOMMENDED).status_code == 200
    finally:
        server.shutdown()
        server.server_close()
    logged = capsys.readouterr().err
    assert "KeyError" in logged and secret not in logged


# --- the process ---------------------------------------------------------------------------------


def test_state_survives_a_restart(tmp_path: Path) -> None:
    with PortalSim(tmp_path) as sim:
        sim.configure(interval=0)
        with httpx.Client(base_url=sim.url, timeout=10) as web:
            grant = sign_in(web, sim, "ada@example.com", tier="pro")
            reused = sign_in(web, sim, "ada@example.com", tier="pro")
            refresh(web, reused["refresh_token"])
            refresh(web, reused["refresh_token"])  # revokes that family
            guest = register(web)
            sim.connect_app(guest["token"], "github")
        before = sim.accounts()

        sim.restart()
        with httpx.Client(base_url=sim.url, timeout=10) as web:
            answer = web.get(RECOMMENDED, headers=bearer(grant["access_token"]))
            assert answer.json() == {"model": "Hermes-4-405B", "tier": "pro"}
            assert web.get(RECOMMENDED, headers=bearer(reused["access_token"])).status_code == 401
            assert refresh(web, grant["refresh_token"]).status_code == 200
            me = web.get("/api/anonymous/me", headers=bearer(guest["token"])).json()
            assert me == {"id": guest["id"], "connectors": ["github"], "retired": False}
        after = sim.accounts()
        assert [(a["id"], a["email"], a["tier"], a["families"]) for a in after] == [
            (a["id"], a["email"], a["tier"], a["families"]) for a in before
        ]

    assert sim.state_file.stat().st_mode & 0o777 == 0o600
    text = sim.state_file.read_text()
    assert grant["refresh_token"] not in text and guest["token"] not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["portal_sim.log", "portal_state.json"]  # no temp left


def test_tls_with_a_test_ca(tmp_path: Path) -> None:
    cert, key, trusted = issue_tls(trustme.CA(), tmp_path)

    with PortalSim(tmp_path / "sim", tls=(cert, key), verify=trusted) as sim:
        assert sim.url.startswith("https://127.0.0.1:")
        sim.configure(interval=0)
        with httpx.Client(base_url=sim.url, verify=trusted, timeout=10) as web:
            grant = sign_in(web, sim, "ada@example.com", tier="plus")
            assert claims(grant["access_token"])["host"] == f"{sim.url}/v1"

            with pytest.raises(httpx.ConnectError):  # a client that does not trust the test CA
                httpx.get(f"{sim.url}{RECOMMENDED}", verify=ssl.create_default_context(), timeout=10)
            url = httpx.URL(sim.url)
            with socket.create_connection((url.host, url.port), timeout=10) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP on the TLS port
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(4096):
                    pass
            answer = web.get(RECOMMENDED, headers=bearer(grant["access_token"]))
            assert answer.json() == {"model": "Hermes-4-70B", "tier": "plus"}


def _run_sim(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.portal_sim", *argv],
        cwd=ROOT,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_command_line(tmp_path: Path) -> None:
    for argv in (["--port", "http"], ["--port", "70000"], ["--bogus"], ["--tls-cert", "cert.pem"]):
        done = _run_sim(*argv)
        assert (done.returncode, done.stdout) == (2, ""), argv
        assert "usage:" in done.stderr
    corrupt = tmp_path / "state.json"
    corrupt.write_text("{")
    done = _run_sim("--state", str(corrupt))
    assert (done.returncode, done.stdout) == (1, "") and "corrupt" in done.stderr


def test_sigterm_and_sigint_exit_cleanly(tmp_path: Path) -> None:
    sim = PortalSim(tmp_path / "term", state=False)
    assert sim.stop() == 0
    sim = PortalSim(tmp_path / "int")
    try:
        assert sim.proc is not None
        sim.proc.send_signal(signal.SIGINT)
        assert sim.proc.wait(timeout=10) == 0
    finally:
        sim.stop()
